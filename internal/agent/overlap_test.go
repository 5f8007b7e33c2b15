package agent

import (
	"slices"
	"strings"
	"testing"
)

// Two ranges sharing 10.36.0.1 and 10.36.0.2.
const overlapRanges = `"ipRanges":[{"range":"10.36.0.0/30"},{"range":"10.36.0.0/29","range_end":"10.36.0.2"}]`

func overlapNet(extra string) string {
	return `{"cniVersion":"1.1.0","name":"ov","type":"macvlan","ipam":{"type":"tenure","network_name":"ov",` + overlapRanges + extra + `}}`
}

// With enable_overlapping_ranges false each range is a scope of its own, so
// an ADD could take 10.36.0.1 from both: the agent refuses the config with
// code 7, naming both ranges, and writes nothing.
func TestOverlappingRangesRefusedWhenIndependent(t *testing.T) {
	h := startAgent(t, pod("p1", thisNode, nil))
	r := h.do(call{cmd: "ADD", ctr: "c1", pod: "p1", conf: overlapNet(`,"enable_overlapping_ranges":false`)})
	if r.Error == nil || r.Error.Code != 7 ||
		!strings.Contains(r.Error.Msg, `ipam.ipRanges[1].range: "10.36.0.0/29": overlaps ipam.ipRanges[0].range "10.36.0.0/30"`) {
		t.Fatalf("ADD answered %+v, want code 7 naming both ranges", r.Error)
	}
	if held := h.held(); len(held) != 0 {
		t.Fatalf("reservations after a refused config: %v", held)
	}
}

// With the default the two ranges share one scope: an attachment gets two
// different addresses, and once both shared addresses are held the next
// pod is told the range is full rather than given one of them again.
func TestOverlappingRangesShareOneScope(t *testing.T) {
	h := startAgent(t, pod("p1", thisNode, nil), pod("p2", thisNode, nil))
	conf := overlapNet("")
	got := ips(t, h.do(call{cmd: "ADD", ctr: "c1", pod: "p1", conf: conf}))
	sorted := slices.Sorted(slices.Values(got))
	if !slices.Equal(sorted, []string{"10.36.0.1", "10.36.0.2"}) {
		t.Fatalf("ADD gave %v, want 10.36.0.1 and 10.36.0.2, one from each range", got)
	}
	r := h.do(call{cmd: "ADD", ctr: "c2", pod: "p2", conf: conf})
	if r.Error == nil || r.Error.Code != CodeRangeFull {
		t.Fatalf("second pod's ADD answered %+v (result %s), want code %d", r.Error, r.Result, CodeRangeFull)
	}
	if held := h.held(); !slices.Equal(held, []string{"10.36.0.1=p1", "10.36.0.2=p1"}) {
		t.Fatalf("reservations: %v, want 10.36.0.1 and 10.36.0.2 held by p1", held)
	}
}
