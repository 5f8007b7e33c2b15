package importwa

import (
	"maps"
	"net/netip"
	"slices"
	"strings"
	"testing"

	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/reservation"
)

// The names whereabouts v0.9.4 gives its objects (IPPoolName, NormalizeIP
// in pkg/storage/kubernetes/ipam.go, and their tests).
func TestWhereaboutsNames(t *testing.T) {
	for _, tc := range []struct {
		network, item, want string
	}{
		{"", "10.0.0.0/24", "10.0.0.0-24"},
		{"", "192.168.2.200/29", "192.168.2.200-29"},
		{"san", "10.0.0.0/24", "san-10.0.0.0-24"},
		{"", "fd00:1::/64", "fd00-1---64"},
		{"vm", "2001:db8:0:0:1::/80", "vm-2001-db8-0-0-1---80"},
		// OverlappingRangeIPReservations: an address
		{"", "10.0.0.5", "10.0.0.5"},
		{"san", "10.0.0.5", "san-10.0.0.5"},
		{"", "fd00::5", "fd00--5"},
		{"san", "fd00::", "san-fd00--0"},
	} {
		if !strings.Contains(tc.item, "/") {
			a := netip.MustParseAddr(tc.item)
			got := OverlappingName(tc.network, a)
			if got != tc.want {
				t.Errorf("OverlappingName(%q, %s) = %q, want %q", tc.network, a, got, tc.want)
			}
			if back, ok := addrOfOverlapping(tc.network, got); !ok || back != a {
				t.Errorf("addrOfOverlapping(%q, %q) = %v, %v; want %s", tc.network, got, back, ok, a)
			}
		} else if got := PoolName(tc.network, netip.MustParsePrefix(tc.item)); got != tc.want {
			t.Errorf("PoolName(%q, %s) = %q, want %q", tc.network, tc.item, got, tc.want)
		}
	}
	if _, ok := addrOfOverlapping("", "san-10.0.0.5"); ok {
		t.Error("a named network's reservation read as the unnamed network's")
	}
}

func TestAddOffset(t *testing.T) {
	for _, tc := range []struct{ first, off, want string }{
		{"10.0.0.0", "5", "10.0.0.5"},
		{"10.0.0.0", "300", "10.0.1.44"},
		{"fd00::", "65537", "fd00::1:1"},
		{"fd00::ffff:ffff:ffff:ffff", "1", "fd00:0:0:1::"},
	} {
		got, err := addOffset(netip.MustParseAddr(tc.first), tc.off)
		if err != nil || got.String() != tc.want {
			t.Errorf("addOffset(%s, %s) = %v, %v; want %s", tc.first, tc.off, got, err, tc.want)
		}
	}
	if _, err := addOffset(netip.MustParseAddr("255.255.255.255"), "1"); err == nil {
		t.Error("an offset past the last IPv4 address was accepted")
	}
}

const (
	nadV4 = `{"cniVersion":"1.0.0","name":"v4net","type":"macvlan","ipam":{"type":"whereabouts","range":"10.10.0.0/24","kubernetes":{"kubeconfig":"/k"}}}`
	// a configuration list with a named IPv6 network, overlapping off
	nadV6 = `{"cniVersion":"1.0.0","name":"v6net","plugins":[{"type":"bridge","ipam":{"type":"whereabouts","network_name":"vm","range":"fd00:10::/120","enable_overlapping_ranges":false}}]}`
	// already switched: tenure reads it the same way
	nadSan   = `{"cniVersion":"1.0.0","name":"san","type":"macvlan","ipam":{"type":"tenure","network_name":"san","ipRanges":[{"range":"10.20.0.0/24"},{"range":"10.20.0.0/16","range_start":"10.20.1.0"}]}}`
	nadOther = `{"cniVersion":"1.0.0","name":"hl","type":"bridge","ipam":{"type":"host-local","subnet":"10.99.0.0/24"}}`
)

func nads() []NetworkConfig {
	return []NetworkConfig{
		{Namespace: "default", Name: "v4", Config: nadV4},
		{Namespace: "vms", Name: "v6", Config: nadV6},
		{Namespace: "storage", Name: "san", Config: nadSan},
		{Namespace: "default", Name: "hl", Config: nadOther},
		{Namespace: "default", Name: "broken", Config: `{"name":"x","type":"bridge","ipam":{"type":"whereabouts","range":"10.0.0.0/24","bogus_key":1}}`},
	}
}

func livePods(pods map[string]Pod) func(string) (Pod, bool, error) {
	return func(ref string) (Pod, bool, error) {
		p, ok := pods[ref]
		return p, ok, nil
	}
}

func TestPlan(t *testing.T) {
	pods := map[string]Pod{
		"default/a": {UID: "uid-a", Node: "node-1"},
		"default/b": {UID: "uid-b", Node: "node-2"},
		"vms/vm1":   {UID: "uid-vm1", Node: "node-1"},
		"storage/s": {UID: "uid-s", Node: "node-1"},
	}
	in := Inputs{
		NetworkConfigs: nads(),
		Pools: []Pool{
			{Namespace: "kube-system", Name: "10.10.0.0-24", Range: "10.10.0.0/24", Allocations: []Allocation{
				{Offset: "1", ContainerID: "ctr-a", PodRef: "default/a", IfName: "net1"},
				{Offset: "2", ContainerID: "ctr-gone", PodRef: "default/gone", IfName: "net1"},
				{Offset: "3", ContainerID: "ctr-b", PodRef: "default/b", IfName: "net1"},
				{Offset: "4", ContainerID: "ctr-b2", PodRef: "default/b", IfName: "net2"},
			}},
			{Namespace: "kube-system", Name: "vm-fd00-10---120", Range: "fd00:10::/120", Allocations: []Allocation{
				{Offset: "16", ContainerID: "ctr-vm1", PodRef: "vms/vm1", IfName: "net1"},
			}},
			{Namespace: "kube-system", Name: "san-10.20.0.0-24", Range: "10.20.0.0/24", Allocations: []Allocation{
				{Offset: "7", ContainerID: "ctr-s", PodRef: "storage/s", IfName: "san0"},
			}},
			{Namespace: "kube-system", Name: "10.77.0.0-24", Range: "10.77.0.0/24", Allocations: []Allocation{
				{Offset: "1", ContainerID: "x", PodRef: "default/a", IfName: "net9"},
			}},
		},
		Overlapping: []Overlapping{
			// the same allocation as the pool's: one entry, two sources
			{Namespace: "kube-system", Name: "10.10.0.1", PodRef: "default/a", IfName: "net1"},
			{Namespace: "kube-system", Name: "san-10.20.0.7", PodRef: "storage/s", IfName: "san0"},
			// recorded only here (its pool entry was lost): protected
			// all the same, without a container to match
			{Namespace: "kube-system", Name: "san-10.20.3.9", PodRef: "storage/s", IfName: "san1"},
			// no configuration names it
			{Namespace: "kube-system", Name: "other-10.1.1.1", PodRef: "default/a", IfName: "net1"},
		},
		Existing: map[string]tenurev1alpha1.ReservationOwner{
			// default/b's first address is imported already
			reservation.AddressName("default", netip.MustParseAddr("10.10.0.3")): {Kind: tenurev1alpha1.OwnerPod, Namespace: "default", Name: "b", UID: "uid-b"},
			// and its second is held by a tenure pod
			reservation.AddressName("default", netip.MustParseAddr("10.10.0.4")): {Kind: tenurev1alpha1.OwnerPod, Namespace: "default", Name: "new", UID: "uid-new"},
		},
	}
	var calls, last int
	rep, err := Plan(in, livePods(pods), func(done, total int) { calls, last = done, total })
	if err != nil {
		t.Fatal(err)
	}
	if calls != 11 || last != 11 {
		t.Errorf("progress ended at %d/%d, want 11/11 (7 allocations, 4 overlapping reservations)", calls, last)
	}
	type row struct {
		action           Action
		addr, network    string
		pod, ifName, ctr string
		node, rng        string
		sources          int
	}
	want := []row{
		{Create, "10.10.0.1", "default", "default/a", "net1", "ctr-a", "node-1", "10.10.0.0/24", 3},
		{PodGone, "10.10.0.2", "default", "default/gone", "net1", "ctr-gone", "", "10.10.0.0/24", 2},
		{Exists, "10.10.0.3", "default", "default/b", "net1", "ctr-b", "node-2", "10.10.0.0/24", 2},
		{Conflict, "10.10.0.4", "default", "default/b", "net2", "ctr-b2", "node-2", "10.10.0.0/24", 2},
		{Create, "10.20.0.7", "san", "storage/s", "san0", "ctr-s", "node-1", "10.20.0.0/24", 3},
		{Create, "fd00:10::10", "vm/fd00:10::/120", "vms/vm1", "net1", "ctr-vm1", "node-1", "fd00:10::/120", 2},
		{Create, "10.20.3.9", "san", "storage/s", "san1", "", "node-1", "10.20.1.0-10.20.255.254/16", 2},
	}
	if len(rep.Entries) != len(want) {
		for _, e := range rep.Entries {
			t.Logf("%+v", e)
		}
		t.Fatalf("%d entries, want %d", len(rep.Entries), len(want))
	}
	for i, w := range want {
		e := rep.Entries[i]
		got := row{e.Action, e.Address, e.Network, e.PodRef, e.Interface, e.ContainerID, e.Node, e.Range, len(e.Sources)}
		if got != w {
			t.Errorf("entry %d = %+v (%v), want %+v", i, got, e.Sources, w)
		}
	}
	if h := rep.Entries[3].Holder; h == nil || h.UID != "uid-new" || !strings.Contains(rep.Entries[3].Detail, "default/new") {
		t.Errorf("conflict names %+v (%q), want the holder default/new", h, rep.Entries[3].Detail)
	}
	if len(rep.Skipped) != 2 || !strings.HasPrefix(rep.Skipped[0], "IPPool kube-system/10.77.0.0-24: ") || !strings.HasPrefix(rep.Skipped[1], "OverlappingRangeIPReservation kube-system/other-10.1.1.1: ") {
		t.Errorf("skipped = %+v, want the pool 10.77.0.0-24 and the reservation other-10.1.1.1", rep.Skipped)
	}
	if len(rep.Notes) != 1 || !strings.Contains(rep.Notes[0], "default/broken") || !strings.Contains(rep.Notes[0], "bogus_key") {
		t.Errorf("notes = %q, want the broken configuration's unknown key", rep.Notes)
	}
	if n := rep.Count(Create); n != 4 {
		t.Errorf("Count(Create) = %d, want 4", n)
	}
}

// The imported object is what the agent writes for that attachment: its
// name, labels and owner are what addForPod matches an ADD's retry by.
func TestEntryObjectIsTheAgentsReservation(t *testing.T) {
	rep, err := Plan(Inputs{
		NetworkConfigs: nads(),
		Pools: []Pool{{Namespace: "kube-system", Name: "10.10.0.0-24", Range: "10.10.0.0/24", Allocations: []Allocation{
			{Offset: "9", ContainerID: "ctr-a", PodRef: "default/a", IfName: "net1"},
		}}},
	}, livePods(map[string]Pod{"default/a": {UID: "uid-a", Node: "node-1"}}), nil)
	if err != nil {
		t.Fatal(err)
	}
	got := rep.Entries[0].Object()
	want := reservation.New(reservation.Spec{
		Network: "default", Kind: tenurev1alpha1.KindAddress, Item: netip.MustParsePrefix("10.10.0.9/32"),
		Range: "10.10.0.0/24", CNINetwork: "v4net",
		Owner: tenurev1alpha1.ReservationOwner{Kind: tenurev1alpha1.OwnerPod, Namespace: "default", Name: "a", UID: "uid-a",
			PodName: "a", PodUID: "uid-a", ContainerID: "ctr-a", Interface: "net1", Node: "node-1"},
	})
	if got.Name != want.Name || got.Spec != want.Spec || len(got.Labels) != len(want.Labels) {
		t.Fatalf("object = %+v\nwant %+v", got, want)
	}
	for k, v := range want.Labels {
		if got.Labels[k] != v {
			t.Errorf("label %s = %q, want %q", k, got.Labels[k], v)
		}
	}
}

// Two whereabouts records of one tenure reservation for different pods
// (two pools of one network that overlap, overlapping protection on) are
// one import and one refusal, never two owners; a gone pod's record does
// not stand against a live pod's.
func TestPlanDuplicateRecords(t *testing.T) {
	nad := `{"cniVersion":"1.0.0","name":"n","type":"macvlan","ipam":{"type":"whereabouts","network_name":"dup","ipRanges":[{"range":"10.30.0.0/24"},{"range":"10.30.0.0/25"}]}}`
	live := livePods(map[string]Pod{"default/p1": {UID: "u1"}, "default/p2": {UID: "u2"}})
	for _, tc := range []struct {
		first string
		want  []Action
	}{
		{"default/p1", []Action{Create, Conflict}},
		{"default/gone", []Action{PodGone, Create}},
	} {
		rep, err := Plan(Inputs{
			NetworkConfigs: []NetworkConfig{{Namespace: "default", Name: "dup", Config: nad}},
			Pools: []Pool{
				{Namespace: "kube-system", Name: "dup-10.30.0.0-24", Range: "10.30.0.0/24", Allocations: []Allocation{{Offset: "5", ContainerID: "c1", PodRef: tc.first, IfName: "net1"}}},
				{Namespace: "kube-system", Name: "dup-10.30.0.0-25", Range: "10.30.0.0/25", Allocations: []Allocation{{Offset: "5", ContainerID: "c2", PodRef: "default/p2", IfName: "net1"}}},
			},
		}, live, nil)
		if err != nil {
			t.Fatal(err)
		}
		var got []Action
		for _, e := range rep.Entries {
			got = append(got, e.Action)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("first record %s: %v, want %v", tc.first, got, tc.want)
		}
	}
}

// A pod with allocations of two sandboxes on one interface (a DEL that
// never reached whereabouts): the pod's network-status says which address
// is the live one, the other is Stale; without network-status all are
// imported and a note names them (the controller keeps only the newest
// reservation of a slot, which the import cannot order).
func TestPlanEarlierSandboxes(t *testing.T) {
	pool := []Pool{{Namespace: "kube-system", Name: "10.10.0.0-24", Range: "10.10.0.0/24", Allocations: []Allocation{
		{Offset: "1", ContainerID: "old-sandbox", PodRef: "default/a", IfName: "net1"},
		{Offset: "2", ContainerID: "new-sandbox", PodRef: "default/a", IfName: "net1"},
		{Offset: "3", ContainerID: "new-sandbox", PodRef: "default/a", IfName: "net2"},
	}}}
	sandboxNotes := func(rep *Report) []string {
		var out []string
		for _, n := range rep.Notes {
			if strings.Contains(n, "sandboxes") {
				out = append(out, n)
			}
		}
		return out
	}

	rep, err := Plan(Inputs{NetworkConfigs: nads(), Pools: pool}, livePods(map[string]Pod{"default/a": {UID: "uid-a"}}), nil)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Count(Create) != 3 {
		t.Errorf("without network-status: Count(Create) = %d, want 3", rep.Count(Create))
	}
	if n := sandboxNotes(rep); len(n) != 1 || !strings.Contains(n[0], "interface net1") || !strings.Contains(n[0], "old-sandbox, new-sandbox") {
		t.Errorf("without network-status: notes = %q, want one naming net1's two sandboxes", rep.Notes)
	}

	status := map[string][]string{"net1": {"10.10.0.2"}, "net2": {"10.10.0.3"}}
	rep, err = Plan(Inputs{NetworkConfigs: nads(), Pools: pool}, livePods(map[string]Pod{"default/a": {UID: "uid-a", Addresses: status}}), nil)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]Action{}
	for _, e := range rep.Entries {
		got[e.Address] = e.Action
	}
	want := map[string]Action{"10.10.0.1": Stale, "10.10.0.2": Create, "10.10.0.3": Create}
	if !maps.Equal(got, want) {
		t.Errorf("with network-status: %v, want %v", got, want)
	}
	if n := sandboxNotes(rep); len(n) != 0 {
		t.Errorf("with network-status: notes %q", n)
	}
}
