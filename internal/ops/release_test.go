package ops

import (
	"fmt"
	"strings"
	"testing"
)

// TestReleaseTargets: an address with host bits in a CIDR (as a CNI result
// prints it) is the address; a CIDR whose address is its network address is
// first the delegated prefix, then that address; bad input is refused naming
// it.
func TestReleaseTargets(t *testing.T) {
	for in, want := range map[string]string{
		"10.110.2.169":          "[address 10.110.2.169]",
		"10.110.2.169/24":       "[address 10.110.2.169]",
		" 10.110.2.169/24 ":     "[address 10.110.2.169]",
		"10.110.2.169/32":       "[address 10.110.2.169]",
		"10.0.0.0/31":           "[delegated prefix 10.0.0.0/31 address 10.0.0.0]",
		"2001:db8:100::/56":     "[delegated prefix 2001:db8:100::/56 address 2001:db8:100::]",
		"2001:db8:100::5/64":    "[address 2001:db8:100::5]",
		"2001:db8:100::5/128":   "[address 2001:db8:100::5]",
		"::ffff:10.110.2.169":   "[address 10.110.2.169]",
		"::ffff:10.110.2.0/120": "[delegated prefix 10.110.2.0/24 address 10.110.2.0]",
	} {
		got, err := ReleaseTargets(in)
		if err != nil || fmt.Sprint(got) != want {
			t.Errorf("ReleaseTargets(%q) = %v, %v; want %s", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "10.110.2", "10.110.2.169/33", "fe80::1%eth0", "web-0"} {
		if got, err := ReleaseTargets(bad); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("%q", bad)) {
			t.Errorf("ReleaseTargets(%q) = %v, %v; want an error naming it", bad, got, err)
		}
	}
}
