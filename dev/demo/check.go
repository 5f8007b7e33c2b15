package demo

import (
	"fmt"
	"net/netip"
	"strings"
)

// SANProblems checks the SAN act of a report against what the demo printed
// (printed): every pod got a distinct usable address of the /29 and is shown
// with it, all six usable addresses went out, and the seventh pod's error
// names the full range and is shown. It returns one line per problem, none
// when the act told the truth. The tests of `tenurectl demo` and of `demo
// --node` both hold their reports to it.
func (r *Report) SANProblems(printed string) []string {
	var problems []string
	san := netip.MustParsePrefix(sanRange)
	first, last := san.Addr(), lastAddr(san)
	seen := map[netip.Addr]bool{}
	for _, a := range r.SAN {
		p, err := netip.ParsePrefix(a.Address)
		if err != nil {
			problems = append(problems, fmt.Sprintf("SAN allocation %+v: %v", a, err))
			continue
		}
		addr := p.Addr()
		if !san.Contains(addr) || addr == first || addr == last || seen[addr] {
			problems = append(problems, fmt.Sprintf("SAN allocation %+v is outside the usable %s or a duplicate", a, san))
		}
		seen[addr] = true
		if !strings.Contains(printed, a.Pod) || !strings.Contains(printed, addr.String()) {
			problems = append(problems, fmt.Sprintf("the output does not show %+v", a))
		}
	}
	usable := 1<<(32-san.Bits()) - 2
	if len(r.SAN) != usable {
		problems = append(problems, fmt.Sprintf("%d pods got SAN addresses, want %d", len(r.SAN), usable))
	}
	full := fmt.Sprintf("%s is full: all %d", san, usable)
	if !strings.Contains(r.ExhaustionError, full) || !strings.Contains(printed, r.ExhaustionError) {
		problems = append(problems, fmt.Sprintf("exhaustion error %q is not shown or does not say %q", r.ExhaustionError, full))
	}
	return problems
}

// lastAddr is the highest address of an IPv4 prefix (its broadcast address).
func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().As4()
	host := uint32(1)<<(32-p.Bits()) - 1
	v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3]) | host
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}
