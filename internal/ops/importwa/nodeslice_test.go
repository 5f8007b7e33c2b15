package importwa

import (
	"net/netip"
	"strings"
	"testing"
)

func TestSlicePoolNames(t *testing.T) {
	for _, tc := range []struct {
		network, node, slice, want string
	}{
		// whereabouts v0.9.4 IPPoolName with a NodeName.
		{"", "node-1", "10.0.0.64/26", "node-1-10.0.0.64-26"},
		{"san", "worker.a", "10.0.0.64/26", "san-worker.a-10.0.0.64-26"},
		{"san", "w1", "fd00::/120", "san-w1-fd00---120"},
	} {
		slice := netip.MustParsePrefix(tc.slice)
		if got := SlicePoolName(tc.network, tc.node, slice); got != tc.want {
			t.Errorf("SlicePoolName(%q, %q, %s) = %q, want %q", tc.network, tc.node, tc.slice, got, tc.want)
		}
		if !isSlicePool(tc.network, tc.want, slice) {
			t.Errorf("isSlicePool(%q, %q, %s) = false", tc.network, tc.want, tc.slice)
		}
	}
	for _, tc := range []struct{ network, name, slice string }{
		{"san", "other-w1-10.0.0.64-26", "10.0.0.64/26"}, // another network_name
		{"san", "san-10.0.0.64-26", "10.0.0.64/26"},      // no node
		{"san", "san-w1-10.0.0.0-26", "10.0.0.64/26"},    // another slice
	} {
		if isSlicePool(tc.network, tc.name, netip.MustParsePrefix(tc.slice)) {
			t.Errorf("isSlicePool(%q, %q, %s) = true", tc.network, tc.name, tc.slice)
		}
	}
}

// TestPlanImportsNodeSlicePools: the per-node pools of a range made with
// node_slice_size map to the configuration's range, each allocation to the
// address at its offset from the slice's first address; one whereabouts
// handed out on an excluded address (node slicing drops exclude) is
// OutOfRange, never recorded as tenure's.
func TestPlanImportsNodeSlicePools(t *testing.T) {
	nadSliced := `{"cniVersion":"0.3.1","name":"sliced","type":"macvlan","master":"eth0","ipam":{"type":"whereabouts",
		"range":"10.60.0.0/24","exclude":["10.60.0.70/32"],"node_slice_size":"/26","network_name":"sliced"}}`
	in := Inputs{
		NetworkConfigs: []NetworkConfig{{Namespace: "default", Name: "sliced", Config: nadSliced}},
		Pools: []Pool{
			{Namespace: "kube-system", Name: "sliced-node-1-10.60.0.0-26", Range: "10.60.0.0/26", Allocations: []Allocation{
				{Offset: "1", ContainerID: "ctr-a", PodRef: "default/a", IfName: "net1"},
			}},
			{Namespace: "kube-system", Name: "sliced-node-2-10.60.0.64-26", Range: "10.60.0.64/26", Allocations: []Allocation{
				{Offset: "1", ContainerID: "ctr-b", PodRef: "default/b", IfName: "net1"},
				{Offset: "6", ContainerID: "ctr-c", PodRef: "default/c", IfName: "net1"},
			}},
			// a slice pool of another network: not this configuration's
			{Namespace: "kube-system", Name: "other-node-1-10.60.0.0-26", Range: "10.60.0.0/26", Allocations: []Allocation{
				{Offset: "2", ContainerID: "ctr-x", PodRef: "default/a", IfName: "net2"},
			}},
		},
	}
	// whereabouts records each address in an OverlappingRangeIPReservation
	// too (enable_overlapping_ranges defaults to true): the excluded one
	// is out of range there as well.
	in.Overlapping = []Overlapping{
		{Namespace: "kube-system", Name: "sliced-10.60.0.65", ContainerID: "ctr-b", PodRef: "default/b", IfName: "net1"},
		{Namespace: "kube-system", Name: "sliced-10.60.0.70", ContainerID: "ctr-c", PodRef: "default/c", IfName: "net1"},
	}
	pods := map[string]Pod{"default/a": {UID: "ua", Node: "node-1"}, "default/b": {UID: "ub", Node: "node-2"}, "default/c": {UID: "uc", Node: "node-2"}}
	rep, err := Plan(in, livePods(pods), nil)
	if err != nil {
		t.Fatal(err)
	}
	type row struct {
		action             Action
		addr, network, rng string
		pod, node          string
	}
	want := []row{
		{Create, "10.60.0.1", "sliced", "10.60.0.0/24", "default/a", "node-1"},
		{Create, "10.60.0.65", "sliced", "10.60.0.0/24", "default/b", "node-2"},
		{OutOfRange, "10.60.0.70", "sliced", "", "default/c", ""},
		{OutOfRange, "10.60.0.70", "sliced", "", "default/c", ""},
	}
	if len(rep.Entries) != len(want) {
		for _, e := range rep.Entries {
			t.Logf("%+v", e)
		}
		t.Fatalf("%d entries, want %d", len(rep.Entries), len(want))
	}
	for i, w := range want {
		e := rep.Entries[i]
		got := row{e.Action, e.Address, e.Network, e.Range, e.PodRef, e.Node}
		if w.action == OutOfRange {
			got.node = ""
		}
		if got != w {
			t.Errorf("entry %d = %+v (%s), want %+v", i, got, e.Detail, w)
		}
		if w.action == OutOfRange && !strings.Contains(e.Detail, "not in range 10.60.0.0/24") {
			t.Errorf("entry %d detail %q, want it to name the range", i, e.Detail)
		}
	}
	if len(rep.Skipped) != 1 || rep.Skipped[0][:len("IPPool kube-system/other-node-1-10.60.0.0-26: ")] != "IPPool kube-system/other-node-1-10.60.0.0-26: " {
		t.Errorf("skipped %q, want the other network's slice pool", rep.Skipped)
	}
}
