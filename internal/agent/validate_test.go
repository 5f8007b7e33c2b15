package agent

import (
	"fmt"
	"strings"
	"testing"

	"github.com/tenure-ipam/tenure/internal/cniwire"
	"github.com/tenure-ipam/tenure/internal/shim"
)

func TestValidateCallAppliesSkelsConfigChecks(t *testing.T) {
	cached := &headCache{}
	sent := map[string]bool{}
	for _, tc := range []struct {
		cmd, conf string
		code      uint // 0: accepted
		msgIn     string
	}{
		{"ADD", `{"cniVersion":"1.1.0","name":"san"}`, 0, ""},
		{"ADD", `{"cniVersion":"0.3.1","name":"san"}`, 0, ""},
		{"DEL", `{"cniVersion":"1.0.0","name":"san"}`, 0, ""},
		{"CHECK", `{"cniVersion":"0.4.0","name":"san"}`, 0, ""},
		{"GC", `{"cniVersion":"1.1.0","name":"san"}`, 0, ""},
		{"STATUS", `{"cniVersion":"1.1.0","name":"san"}`, 0, ""},
		{"FROB", `{"cniVersion":"1.1.0","name":"san"}`, 4, "unknown CNI_COMMAND: FROB"},
		{"ADD", `{"cniVersion":"1.1.0"`, 6, "error unmarshall network config"},
		{"ADD", `{"cniVersion":"1.1.0"}`, 7, "missing network name"},
		{"ADD", `{"cniVersion":"1.1.0","name":"bad name"}`, 7, "invalid characters found in network name"},
		{"ADD", `{"cniVersion":"9.9.9","name":"san"}`, 1, "incompatible CNI versions"},
		{"ADD", `{"cniVersion":"one","name":"san"}`, 1, "incompatible CNI versions"},
		{"ADD", `{"name":"san"}`, 1, "incompatible CNI versions"}, // no cniVersion is 0.1.0
		{"CHECK", `{"cniVersion":"0.3.1","name":"san"}`, 1, "config version does not allow CHECK"},
		{"GC", `{"cniVersion":"1.0.0","name":"san"}`, 1, "config version does not allow GC"},
		{"STATUS", `{"cniVersion":"0.4.0","name":"san"}`, 1, "config version does not allow STATUS"},
	} {
		if tc.cmd != "FROB" {
			sent[tc.conf] = true
		}
		// Uncached, then through a cache the earlier cases filled: one
		// configuration's calls of other commands have been checked.
		for _, heads := range []*headCache{nil, cached, cached} {
			err := validateCall(&cniwire.Request{Command: tc.cmd, StdinData: []byte(tc.conf)}, heads)
			switch {
			case tc.code == 0 && err != nil:
				t.Errorf("%s %s (cache %v): refused: %v", tc.cmd, tc.conf, heads != nil, err)
			case tc.code != 0 && (err == nil || err.Code != tc.code || !strings.Contains(err.Msg, tc.msgIn)):
				t.Errorf("%s %s (cache %v): got %v, want code %d with %q", tc.cmd, tc.conf, heads != nil, err, tc.code, tc.msgIn)
			}
		}
	}
	for conf := range sent {
		if _, ok := cached.m[conf]; !ok {
			t.Errorf("the cache does not hold %s, which a known command sent", conf)
		}
	}
	if len(cached.m) != len(sent) {
		t.Errorf("the cache holds %d configurations, the known commands sent %d", len(cached.m), len(sent))
	}
}

func TestShimAndAgentSpeakTheSameVersions(t *testing.T) {
	if got, want := strings.Join(shim.SupportedVersions, " "), strings.Join(Versions.SupportedVersions(), " "); got != want {
		t.Fatalf("the shim prints %s for VERSION, the agent accepts %s", got, want)
	}
}

// However many configurations a node's calls send, the cache keeps at
// most headCacheSize of them.
func TestHeadCacheIsBounded(t *testing.T) {
	c := &headCache{}
	for i := range 3 * headCacheSize {
		conf := fmt.Sprintf(`{"cniVersion":"1.1.0","name":"n%d"}`, i)
		if h := c.get([]byte(conf)); h.bad != nil || h.incompatible != nil {
			t.Fatalf("%s: %+v", conf, h)
		}
		if len(c.m) > headCacheSize {
			t.Fatalf("after %d configurations the cache holds %d, over %d", i+1, len(c.m), headCacheSize)
		}
	}
}

// BenchmarkValidateCall is an ADD's checks with and without the cache.
func BenchmarkValidateCall(b *testing.B) {
	req := &cniwire.Request{Command: "ADD", StdinData: []byte(`{"cniVersion":"1.1.0","name":"san","type":"macvlan","master":"eth0","mode":"bridge","ipam":{"type":"tenure","range":"10.0.0.0/24","network_name":"san","gateway":"10.0.0.1","routes":[{"dst":"0.0.0.0/0"}]}}`)}
	for _, heads := range []*headCache{{}, nil} {
		name := "cached"
		if heads == nil {
			name = "uncached"
		}
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_ = validateCall(req, heads)
			}
		})
	}
}
