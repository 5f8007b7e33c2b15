package testbed

import "testing"

type skipOrFailRecorder struct{ skipped, failed bool }

func (r *skipOrFailRecorder) Helper()      {}
func (r *skipOrFailRecorder) Skip(...any)  { r.skipped = true }
func (r *skipOrFailRecorder) Fatal(...any) { r.failed = true }

func TestSkipUnlessEverything(t *testing.T) {
	for _, tt := range []struct {
		env                   string
		wantSkipped, wantFail bool
	}{
		{"", true, false},
		{"0", true, false},
		{"1", false, true},
	} {
		t.Setenv(EnvTestEverything, tt.env)
		r := &skipOrFailRecorder{}
		SkipUnlessEverything(r, "a tool is missing")
		if r.skipped != tt.wantSkipped || r.failed != tt.wantFail {
			t.Errorf("%s=%q: skipped %v failed %v, want %v %v", EnvTestEverything, tt.env, r.skipped, r.failed, tt.wantSkipped, tt.wantFail)
		}
	}
}
