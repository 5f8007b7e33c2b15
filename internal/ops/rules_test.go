package ops

import (
	"errors"
	"net/netip"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ipamclaimsv1alpha1 "github.com/tenure-ipam/tenure/api/ipamclaims/v1alpha1"
	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/controller/repair"
	"github.com/tenure-ipam/tenure/internal/inventory"
)

// ruleCase is one table row of a rule over reservations alone.
type ruleCase struct {
	name string
	rs   []*tenurev1alpha1.IPReservation
	want []string // "RULE OBJECT" of each finding
	has  []string // what some finding's message says
}

func testRule(t *testing.T, rule func([]*tenurev1alpha1.IPReservation) []Finding, cases []ruleCase) {
	t.Helper()
	for _, tc := range cases {
		wantFindings(t, tc.name, rule(tc.rs), tc.want, tc.has...)
	}
}

func TestFindMalformed(t *testing.T) {
	good := podRes("san", "10.0.0.5", "ns", "a", "ua", "node-a")
	badAddr := podRes("san", "10.0.0.6", "ns", "a", "ua", "node-a")
	badAddr.Spec.Address = "10.0.0.300"
	kindMismatch := podRes("san", "10.0.0.7", "ns", "a", "ua", "node-a")
	kindMismatch.Spec.Kind = tenurev1alpha1.KindDelegatedPrefix
	hostBits := podRes("vm", "2001:db8:100::/56", "ns", "a", "ua", "node-a")
	hostBits.Spec.Address = "2001:db8:100::1/56"
	// Labels and summary as Check finds them before compaction drops
	// them.
	lying := good.DeepCopy()
	lying.Name = "san.10.0.0.8"
	lying.Spec.Address = "10.0.0.8"
	shapes := map[string]error{lying.Name: errors.New("annotation ipam.tenure.dev/spec-summary names another pod")}
	malformed := func(rs []*tenurev1alpha1.IPReservation) []Finding { return FindMalformed(rs, shapes) }
	testRule(t, malformed, []ruleCase{
		{"a summary that says other than the spec", []*tenurev1alpha1.IPReservation{lying}, []string{"Malformed IPReservation san.10.0.0.8"}, []string{"names another pod: readers"}},
		{"named as the agent names it", []*tenurev1alpha1.IPReservation{good, podRes("vm", "2001:db8:100::/56", "ns", "a", "ua", "node-a")}, nil, nil},
		{"unparsable address", []*tenurev1alpha1.IPReservation{badAddr}, []string{"Malformed IPReservation san.10.0.0.6"}, []string{`"10.0.0.300" is not a valid IP`}},
		{"address of kind DelegatedPrefix", []*tenurev1alpha1.IPReservation{kindMismatch}, []string{"Malformed IPReservation san.10.0.0.7"}, []string{"not a valid CIDR"}},
		{"prefix with host bits", []*tenurev1alpha1.IPReservation{hostBits}, []string{"Malformed IPReservation " + hostBits.Name}, []string{"host bits"}},
		{"name not derived from the spec", []*tenurev1alpha1.IPReservation{renamed(good, "san.10.0.0.99")}, []string{"Malformed IPReservation san.10.0.0.99"}, []string{"the name is not san.10.0.0.5"}},
		{"network changed under the name", []*tenurev1alpha1.IPReservation{func() *tenurev1alpha1.IPReservation {
			r := good.DeepCopy()
			r.Spec.Network = "other"
			return r
		}()}, []string{"Malformed IPReservation san.10.0.0.5"}, []string{"the name is not other.10.0.0.5"}},
	})
}

func TestFindDuplicates(t *testing.T) {
	a := podRes("san", "10.0.0.5", "ns", "a", "ua", "node-a")
	b := renamed(podRes("san", "10.0.0.5", "ns", "b", "ub", "node-b"), "hand-made")
	testRule(t, FindDuplicates, []ruleCase{
		{"one holder", []*tenurev1alpha1.IPReservation{a, podRes("san", "10.0.0.6", "ns", "b", "ub", "node-a")}, nil, nil},
		{"two holders in one scope", []*tenurev1alpha1.IPReservation{a, b},
			[]string{"Duplicate IPReservation hand-made"}, []string{"10.0.0.5 is held 2 times: by pod ns/b (reservation hand-made, network san), by pod ns/a"}},
		{"same address in two networks", []*tenurev1alpha1.IPReservation{a, podRes("storage", "10.0.0.5", "ns", "b", "ub", "node-a")}, nil, nil},
		{"two per-range scopes of one network (enable_overlapping_ranges false)", []*tenurev1alpha1.IPReservation{
			podRes("san/10.0.0.0/24", "10.0.0.5", "ns", "a", "ua", "node-a"), podRes("san/10.0.0.0/25", "10.0.0.5", "ns", "b", "ub", "node-a"),
		}, nil, nil},
		{"a network's shared scope and one of its per-range scopes", []*tenurev1alpha1.IPReservation{
			a, podRes("san/10.0.0.0/25", "10.0.0.5", "ns", "b", "ub", "node-a"),
		}, []string{"Duplicate IPReservation san-10-0-0-0-25--coge45jyiyxj.10.0.0.5"}, []string{"held 2 times"}},
		{"a delegated prefix held twice", []*tenurev1alpha1.IPReservation{
			podRes("vm", "2001:db8:100::/56", "ns", "a", "ua", "node-a"), renamed(podRes("vm", "2001:db8:100::/56", "ns", "b", "ub", "node-a"), "copy"),
		}, []string{"Duplicate IPReservation copy"}, nil},
	})
}

func TestFindOverlaps(t *testing.T) {
	pd := podRes("vm", "2001:db8:100::/56", "ns", "a", "ua", "node-a")
	testRule(t, FindOverlaps, []ruleCase{
		{"disjoint prefixes and addresses", []*tenurev1alpha1.IPReservation{
			pd, podRes("vm", "2001:db8:100:100::/56", "ns", "b", "ub", "node-a"), podRes("vm", "2001:db8::5", "ns", "c", "uc", "node-a"),
		}, nil, nil},
		{"an address inside a delegated prefix", []*tenurev1alpha1.IPReservation{pd, podRes("vm", "2001:db8:100::5", "ns", "c", "uc", "node-a")},
			[]string{"Overlap IPReservation vm.2001-0db8-0100-0000-0000-0000-0000-0005"},
			[]string{"2001:db8:100::5, held by pod ns/c", "lies inside delegated prefix 2001:db8:100::/56, held by pod ns/a"}},
		{"a prefix inside a shorter one, and an address after both", []*tenurev1alpha1.IPReservation{
			podRes("vm", "2001:db8:100::/48", "ns", "big", "ubig", "node-a"), pd, podRes("vm", "2001:db8:100:ff00::1", "ns", "c", "uc", "node-a"),
		}, []string{"Overlap IPReservation " + pd.Name, "Overlap IPReservation vm.2001-0db8-0100-ff00-0000-0000-0000-0001"},
			[]string{"2001:db8:100::/56, held by pod ns/a", "2001:db8:100:ff00::1, held by pod ns/c (reservation vm.2001-0db8-0100-ff00-0000-0000-0000-0001, network vm), lies inside delegated prefix 2001:db8:100::/48"}},
		{"another network's prefix", []*tenurev1alpha1.IPReservation{pd, podRes("other", "2001:db8:100::5", "ns", "c", "uc", "node-a")}, nil, nil},
		{"two per-range scopes", []*tenurev1alpha1.IPReservation{
			podRes("vm/2001:db8:100::/40 as /56", "2001:db8:100::/56", "ns", "a", "ua", "node-a"),
			podRes("vm/2001:db8::/32", "2001:db8:100::5", "ns", "c", "uc", "node-a"),
		}, nil, nil},
		{"equal items are duplicates, not overlaps", []*tenurev1alpha1.IPReservation{pd, renamed(pd, "copy")}, nil, nil},
	})
}

func TestFindOwnersGone(t *testing.T) {
	now := t0.Add(time.Hour)
	policy := repair.Policy{NodeGracePeriod: 5 * time.Minute}
	optIn := repair.Policy{NodeGracePeriod: 5 * time.Minute, ReleaseUnfenced: true}
	alive := podRes("san", "10.0.0.1", "ns", "alive", "u1", "node-a")
	gone := podRes("san", "10.0.0.2", "ns", "gone", "u2", "node-a")
	replaced := podRes("san", "10.0.0.3", "ns", "sts-0", "u3-old", "node-a")
	onLostNode := podRes("san", "10.0.0.4", "ns", "stuck", "u4", "node-lost")
	onNotReady := podRes("san", "10.0.0.5", "ns", "stuck2", "u5", "node-down")
	onFenced := podRes("san", "10.0.0.7", "ns", "stuck3", "u7", "node-fenced")
	earlier := podRes("san", "10.0.0.6", "ns", "alive", "u1", "node-a")
	earlier.Spec.Owner.ContainerID = "sandbox-old"
	earlier.CreationTimestamp = metav1.NewTime(t0.Add(-time.Minute))
	vm := claimRes("vm-net", "10.1.0.1", "ns", "vm", "c1", "virt-launcher-1", "node-a")
	vmGone := claimRes("vm-net", "10.1.0.2", "ns", "vm-gone", "c2", "virt-launcher-2", "node-a")
	vmDeleting := claimRes("vm-net", "10.1.0.3", "ns", "vm-del", "c3", "virt-launcher-3", "node-a")
	all := []*tenurev1alpha1.IPReservation{alive, gone, replaced, onLostNode, onNotReady, onFenced, earlier, vm, vmGone, vmDeleting}
	facts := OwnerFacts{
		Pods: map[string]*repair.PodFact{
			"ns/alive":  {Exists: true, UID: "u1", NodeName: "node-a"},
			"ns/sts-0":  {Exists: true, UID: "u3-new", NodeName: "node-a"},
			"ns/stuck":  {Exists: true, UID: "u4", NodeName: "node-lost", Terminating: true},
			"ns/stuck2": {Exists: true, UID: "u5", NodeName: "node-down", Terminal: true},
			"ns/stuck3": {Exists: true, UID: "u7", NodeName: "node-fenced", Terminating: true},
		},
		Claims: map[string]*repair.ClaimFact{"ns/vm": {Exists: true, UID: "c1"}, "ns/vm-del": {Exists: true, UID: "c3", Deleting: true}},
		Nodes: map[string]*repair.NodeFact{
			"node-a":      {Exists: true, Ready: true},
			"node-down":   {Exists: true, NotReadySince: now.Add(-10 * time.Minute)},
			"node-fenced": {Exists: true, NotReadySince: now.Add(-time.Minute), OutOfService: true},
		},
		ByOwner: map[string][]*tenurev1alpha1.IPReservation{"u1": {alive, earlier}},
		// The pod's network-status lists neither (its newest sandbox's ADD
		// never returned): the sandboxes' order decides.
		NetworkStatus: map[string]*repair.NetworkStatus{"ns/alive": repair.NetworkStatusOf(nil)},
	}
	// A NotReady node that is not fenced keeps its pods' addresses.
	wantFindings(t, "every owner state", FindOwnersGone(all, facts, policy, now), []string{
		"OwnerGone IPReservation san.10.0.0.2", "OwnerGone IPReservation san.10.0.0.3", "OwnerGone IPReservation san.10.0.0.4",
		"OwnerGone IPReservation san.10.0.0.6", "OwnerGone IPReservation san.10.0.0.7",
		"OwnerGone IPReservation vm-net.10.1.0.2", "OwnerGone IPReservation vm-net.10.1.0.3",
	}, "(PodGone)", "(PodReplaced)", "(NodeDeleted)", "(NodeOutOfService)", "(EarlierSandbox)", "(ClaimGone)", "(ClaimDeleted)", "the controller releases it")

	// With --release-unfenced, past the grace period it releases them once
	// an agent of another Ready node heard nothing answer for the address
	// (and not before: the controller asks first).
	wantFindings(t, "NotReady past the grace period, opt-in, not probed yet", FindOwnersGone([]*tenurev1alpha1.IPReservation{onNotReady}, facts, optIn, now), nil)
	facts.Probes = map[string]*tenurev1alpha1.IPProbe{onNotReady.Name: {
		ObjectMeta: metav1.ObjectMeta{Name: onNotReady.Name, Generation: 2},
		Spec:       tenurev1alpha1.IPProbeSpec{Network: "san", Address: "10.0.0.5", Node: "node-down", AskedAt: metav1.NewTime(now)},
		Status: tenurev1alpha1.IPProbeStatus{Answers: []tenurev1alpha1.IPProbeAnswer{
			{Node: "node-a", ObservedGeneration: 2, Result: tenurev1alpha1.ProbeSilent, Interface: "san0"}}},
	}}
	wantFindings(t, "NotReady past the grace period, opt-in, silent on the wire", FindOwnersGone([]*tenurev1alpha1.IPReservation{onNotReady}, facts, optIn, now), []string{
		"OwnerGone IPReservation san.10.0.0.5"}, "(NodeNotReady)", "nothing answered for 10.0.0.5 on the wire")
	facts.Probes[onNotReady.Name].Status.Answers[0].Result = tenurev1alpha1.ProbeAnswered
	wantFindings(t, "NotReady past the grace period, opt-in, answering", FindOwnersGone([]*tenurev1alpha1.IPReservation{onNotReady}, facts, optIn, now), nil)
	// Within the grace period a NotReady node keeps its pods' addresses.
	facts.Nodes["node-down"].NotReadySince = now.Add(-time.Minute)
	wantFindings(t, "NotReady within the grace period, opt-in", FindOwnersGone([]*tenurev1alpha1.IPReservation{onNotReady}, facts, optIn, now), nil)
}

func TestFindClaimMismatches(t *testing.T) {
	held := claimRes("vm-net", "10.1.0.1", "ns", "vm", "c1", "launcher", "node-a")
	pd := claimRes("vm-pd", "2001:db8:100::/56", "ns", "vm", "c1", "launcher", "node-a")
	other := podRes("vm-net", "10.1.0.9", "ns", "web", "u9", "node-a")
	byItem := map[netip.Prefix][]*tenurev1alpha1.IPReservation{pfx("10.1.0.9/32"): {other}}
	deleting := claim("ns", "old", "c2", []string{"10.1.0.7/24"})
	deleting.DeletionTimestamp = &metav1.Time{Time: t0}
	for _, tc := range []struct {
		name  string
		claim ipamclaimsv1alpha1.IPAMClaim
		owned []*tenurev1alpha1.IPReservation
		want  []string
		has   []string
	}{
		{"status and reservations agree", claim("ns", "vm", "c1", []string{"10.1.0.1/24"}, "2001:db8:100::/56"), []*tenurev1alpha1.IPReservation{held, pd}, nil, nil},
		{"nothing yet", claim("ns", "vm", "c1", nil), nil, nil, nil},
		{"recorded, held by nobody", claim("ns", "vm", "c1", []string{"10.1.0.1/24", "10.1.0.8/24"}), []*tenurev1alpha1.IPReservation{held},
			[]string{"ClaimMismatch IPAMClaim ns/vm"}, []string{"status.ips records 10.1.0.8/24 but no reservation of the claim holds it: nobody holds it"}},
		{"recorded, held by a pod", claim("ns", "vm", "c1", []string{"10.1.0.1/24", "10.1.0.9/24"}), []*tenurev1alpha1.IPReservation{held},
			[]string{"ClaimMismatch IPAMClaim ns/vm"}, []string{"it is held by pod ns/web (reservation vm-net.10.1.0.9)"}},
		{"a prefix recorded, not held", claim("ns", "vm", "c1", []string{"10.1.0.1/24"}, "2001:db8:200::/56"), []*tenurev1alpha1.IPReservation{held},
			[]string{"ClaimMismatch IPAMClaim ns/vm"}, []string{"status.delegatedPrefixes records 2001:db8:200::/56"}},
		{"held, not recorded", claim("ns", "vm", "c1", nil), []*tenurev1alpha1.IPReservation{held},
			[]string{"ClaimMismatch IPAMClaim ns/vm"}, []string{"reservation " + held.Name + " holds 10.1.0.1 for the claim but its status does not record it"}},
		{"a prefix held, none recorded, is PrefixNotRecorded's", claim("ns", "vm", "c1", []string{"10.1.0.1/24"}), []*tenurev1alpha1.IPReservation{held, pd}, nil, nil},
		{"unparsable status", claim("ns", "vm", "c1", []string{"10.1.0.1/24", "bogus"}), []*tenurev1alpha1.IPReservation{held},
			[]string{"ClaimMismatch IPAMClaim ns/vm"}, []string{"unparsable status.ips: bogus"}},
		{"a claim being deleted is the controller's", deleting, nil, nil, nil},
	} {
		owned := map[string][]*tenurev1alpha1.IPReservation{string(tc.claim.UID): tc.owned}
		wantFindings(t, tc.name, FindClaimMismatches([]ipamclaimsv1alpha1.IPAMClaim{tc.claim}, owned, byItem), tc.want, tc.has...)
	}
}

func TestFindOutsideRanges(t *testing.T) {
	inv := inventory.BuildInventory(nil, []inventory.NetworkConfig{{Namespace: "ns", Name: "san", Config: `{"cniVersion":"1.0.0","name":"san","type":"macvlan",
		"ipam":{"type":"tenure","network_name":"san","range":"10.0.0.0/28","exclude":["10.0.0.5/32"],
		"prefix_delegation":{"range":"2001:db8:100::/40","prefix_length":56}}}`}})
	if len(inv.Notes) > 0 {
		t.Fatalf("notes: %v", inv.Notes)
	}
	for _, tc := range []struct {
		name      string
		r         *tenurev1alpha1.IPReservation
		want      []string
		has       string
		unchecked int
	}{
		{"in range", podRes("san", "10.0.0.4", "ns", "a", "ua", "n"), nil, "", 0},
		{"out of bounds", podRes("san", "10.0.0.99", "ns", "a", "ua", "n"), []string{"OutsideRange IPReservation san.10.0.0.99"},
			"10.0.0.99 is not assignable in any configured range of network san (out of bounds or excluded): 10.0.0.0/28 (NetworkAttachmentDefinition ns/san)", 0},
		{"excluded", podRes("san", "10.0.0.5", "ns", "a", "ua", "n"), []string{"OutsideRange IPReservation san.10.0.0.5"}, "", 0},
		{"the network address", podRes("san", "10.0.0.0", "ns", "a", "ua", "n"), []string{"OutsideRange IPReservation san.10.0.0.0"}, "", 0},
		{"a delegated prefix of the pool", podRes("san", "2001:db8:1ff::/56", "ns", "a", "ua", "n"), nil, "", 0},
		{"a prefix of another length", podRes("san", "2001:db8:100::/64", "ns", "a", "ua", "n"), []string{"OutsideRange IPReservation san.pd.2001-0db8-0100-0000-0000-0000-0000-0000.64"}, "", 0},
		{"unknown network, inside the range it records", withRange(podRes("lab", "10.9.0.3", "ns", "a", "ua", "n"), "10.9.0.2-10.9.0.5/24"), nil, "", 0},
		{"unknown network, outside the range it records", withRange(podRes("lab", "10.9.0.9", "ns", "a", "ua", "n"), "10.9.0.2-10.9.0.5/24"),
			[]string{"OutsideRange IPReservation lab.10.9.0.9"}, "10.9.0.9 is outside 10.9.0.2-10.9.0.5/24, the range it records", 0},
		{"unknown network, recorded pool", withRange(podRes("lab", "2001:db8:ff00::/56", "ns", "a", "ua", "n"), "2001:db8:ff00::/40 as /56"), nil, "", 0},
		{"unknown network, no range", podRes("lab", "10.9.0.9", "ns", "a", "ua", "n"), nil, "", 1},
	} {
		got, unchecked := FindOutsideRanges([]*tenurev1alpha1.IPReservation{tc.r}, inv)
		var has []string
		if tc.has != "" {
			has = []string{tc.has}
		}
		wantFindings(t, tc.name, got, tc.want, has...)
		if unchecked != tc.unchecked {
			t.Errorf("%s: unchecked %d, want %d", tc.name, unchecked, tc.unchecked)
		}
	}
}

func TestSortFindings(t *testing.T) {
	fs := []Finding{
		{Rule: RuleMalformed, Object: "IPReservation a"},
		{Rule: RuleOwnerGone, Object: "IPReservation b"},
		{Rule: RuleDuplicate, Object: "IPReservation z"},
		{Rule: RuleOwnerGone, Object: "IPReservation a"},
	}
	sortFindings(fs)
	want := []string{"Duplicate IPReservation z", "OwnerGone IPReservation a", "OwnerGone IPReservation b", "Malformed IPReservation a"}
	for i, f := range fs {
		if got := string(f.Rule) + " " + f.Object; got != want[i] {
			t.Errorf("finding %d: %s, want %s", i, got, want[i])
		}
	}
}

func TestFindDuplicateAttachments(t *testing.T) {
	now := t0.Add(time.Hour)
	policy := repair.Policy{NodeGracePeriod: 5 * time.Minute}
	// Pod ns/web's net1 holds two addresses of one range; its network-status
	// lists the first.
	used := withRange(podRes("san", "10.0.0.1", "ns", "web", "u1", "node-a"), "10.0.0.0/24")
	second := withRange(podRes("san", "10.0.0.2", "ns", "web", "u1", "node-a"), "10.0.0.0/24")
	second.CreationTimestamp = metav1.NewTime(t0.Add(time.Second))
	// Pod ns/two-ranges holds one address of each of two IPv4 ranges.
	r1 := withRange(podRes("san", "10.0.0.5", "ns", "two-ranges", "u2", "node-a"), "10.0.0.0/24")
	r2 := withRange(podRes("san", "10.0.1.5", "ns", "two-ranges", "u2", "node-a"), "10.0.1.0/24")
	// Pod ns/fresh's pair was made a moment ago and it has no network-status yet.
	f1 := withRange(podRes("san", "10.0.0.7", "ns", "fresh", "u3", "node-a"), "10.0.0.0/24")
	f2 := withRange(podRes("san", "10.0.0.8", "ns", "fresh", "u3", "node-a"), "10.0.0.0/24")
	f1.CreationTimestamp, f2.CreationTimestamp = metav1.NewTime(now), metav1.NewTime(now)
	// Pod ns/gone is gone: its pair is OwnerGone, not a duplicate.
	g1 := withRange(podRes("san", "10.0.0.9", "ns", "gone", "u4", "node-a"), "10.0.0.0/24")
	g2 := withRange(podRes("san", "10.0.0.10", "ns", "gone", "u4", "node-a"), "10.0.0.0/24")
	// Claim ns/vm records 10.1.0.1 and holds 10.1.0.2 too.
	vmUsed := withRange(claimRes("vm-net", "10.1.0.1", "ns", "vm", "c1", "launcher", "node-a"), "10.1.0.0/24")
	vmSecond := withRange(claimRes("vm-net", "10.1.0.2", "ns", "vm", "c1", "launcher-target", "node-b"), "10.1.0.0/24")
	vm := claim("ns", "vm", "c1", []string{"10.1.0.1/24"})

	all := []*tenurev1alpha1.IPReservation{used, second, r1, r2, f1, f2, g1, g2, vmUsed, vmSecond}
	facts := OwnerFacts{
		Pods: map[string]*repair.PodFact{
			"ns/web":        {Exists: true, UID: "u1", NodeName: "node-a"},
			"ns/two-ranges": {Exists: true, UID: "u2", NodeName: "node-a"},
			"ns/fresh":      {Exists: true, UID: "u3", NodeName: "node-a"},
		},
		Claims:  map[string]*repair.ClaimFact{"ns/vm": repair.ClaimFactOf(&vm)},
		Nodes:   map[string]*repair.NodeFact{"node-a": {Exists: true, Ready: true}},
		ByOwner: map[string][]*tenurev1alpha1.IPReservation{},
		NetworkStatus: map[string]*repair.NetworkStatus{
			"ns/web":   repair.NetworkStatusOf(map[string]string{"k8s.v1.cni.cncf.io/network-status": `[{"name":"ns/san","interface":"net1","ips":["10.0.0.1"]}]`}),
			"ns/fresh": repair.NetworkStatusOf(nil),
		},
	}
	for _, r := range all {
		facts.ByOwner[r.Spec.Owner.UID] = append(facts.ByOwner[r.Spec.Owner.UID], r)
	}
	got := FindDuplicateAttachments(all, facts, policy, now)
	wantFindings(t, "every holder state", got, []string{
		"DuplicateAttachment IPReservation san.10.0.0.2",
		"DuplicateAttachment IPReservation san.10.0.0.7",
		"DuplicateAttachment IPReservation vm-net.10.1.0.2",
	},
		"pod ns/web interface net1 (sandbox sandbox-u1) holds 2 IPv4 addresses of network san range 10.0.0.0/24: 10.0.0.1 (reservation san.10.0.0.1) and 10.0.0.2 (reservation san.10.0.0.2); its network-status lists 10.0.0.1",
		"IPAMClaim ns/vm holds 2 IPv4 addresses of network vm-net range 10.1.0.0/24: 10.1.0.1 (reservation vm-net.10.1.0.1) and 10.1.0.2 (reservation vm-net.10.1.0.2); its status records 10.1.0.1",
		"the controller releases it", "the controller releases none of them yet")
	for _, f := range got {
		want := map[string]string{"IPReservation san.10.0.0.2": "IPReservation san.10.0.0.1", "IPReservation san.10.0.0.7": "IPReservation san.10.0.0.8",
			"IPReservation vm-net.10.1.0.2": "IPReservation vm-net.10.1.0.1"}[f.Object]
		if len(f.Related) != 1 || f.Related[0] != want {
			t.Errorf("%s: related %q, want %q", f.Object, f.Related, want)
		}
	}
	// OwnerGone reports the gone pod's pair, and no surplus of a live owner.
	wantFindings(t, "owners gone", FindOwnersGone(all, facts, policy, now), []string{"OwnerGone IPReservation san.10.0.0.10", "OwnerGone IPReservation san.10.0.0.9"})
}

// TestFindAddressesAnswering: a reservation whose IPProbe another node's
// agent answered, for the current request, with a MAC is reported; an
// answer of an earlier request, a silent one, and the owner node's own
// word are not.
func TestFindAddressesAnswering(t *testing.T) {
	now := t0.Add(time.Hour)
	r := podRes("san", "10.0.0.5", "ns", "stuck", "u5", "node-down")
	probe := func(answers ...tenurev1alpha1.IPProbeAnswer) *tenurev1alpha1.IPProbe {
		return &tenurev1alpha1.IPProbe{ObjectMeta: metav1.ObjectMeta{Name: r.Name, Generation: 3},
			Spec:   tenurev1alpha1.IPProbeSpec{Network: "san", Address: "10.0.0.5", Node: "node-down", AskedAt: metav1.NewTime(now)},
			Status: tenurev1alpha1.IPProbeStatus{Answers: answers}}
	}
	answered := func(node string, gen int64) tenurev1alpha1.IPProbeAnswer {
		return tenurev1alpha1.IPProbeAnswer{Node: node, ObservedGeneration: gen, Result: tenurev1alpha1.ProbeAnswered, MAC: "02:00:00:00:00:0b", Kind: "arp-reply", Interface: "san0"}
	}
	nodes := map[string]*repair.NodeFact{"node-a": {Exists: true, Ready: true}, "node-down": {Exists: true}}
	for _, tc := range []struct {
		name  string
		probe *tenurev1alpha1.IPProbe
		want  []string
	}{
		{"no IPProbe", nil, nil},
		{"answered now by another node", probe(answered("node-a", 3)), []string{"AddressAnswers IPReservation san.10.0.0.5"}},
		{"answered an earlier request", probe(answered("node-a", 2)), nil},
		{"the owner node's own word", probe(answered("node-down", 3)), nil},
		{"silent", probe(tenurev1alpha1.IPProbeAnswer{Node: "node-a", ObservedGeneration: 3, Result: tenurev1alpha1.ProbeSilent}), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			facts := OwnerFacts{Nodes: nodes, Probes: map[string]*tenurev1alpha1.IPProbe{}}
			if tc.probe != nil {
				facts.Probes[r.Name] = tc.probe
			}
			var has []string
			if tc.want != nil {
				has = []string{"answers on the wire from MAC 02:00:00:00:00:0b (arp-reply, heard by node node-a on san0"}
			}
			wantFindings(t, tc.name, FindAddressesAnswering([]*tenurev1alpha1.IPReservation{r}, facts), tc.want, has...)
		})
	}
}
