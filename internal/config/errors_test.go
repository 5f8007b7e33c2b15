package config

import "testing"

func TestErrorFormat(t *testing.T) {
	e := &Error{Key: "ipam.range", Value: `"x"`, Reason: "bad"}
	if e.Error() != `ipam.range: "x": bad` {
		t.Errorf("Error = %q", e.Error())
	}
	e = &Error{Key: "ipam", Reason: "one of range, ipRanges or pool is required"}
	if e.Error() != "ipam: one of range, ipRanges or pool is required" {
		t.Errorf("Error = %q", e.Error())
	}
	long := show([]byte(`"` + string(make([]byte, 500)) + `"`))
	if len(long) > maxShown+len("…") {
		t.Errorf("show not truncated: %d bytes", len(long))
	}
}
