package repair

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ipamclaimsv1alpha1 "github.com/tenure-ipam/tenure/api/ipamclaims/v1alpha1"
	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
)

// Node A writes reservations naming pod db-0 (uid1), which runs on node-b.
// The policy holds spec.owner.node to the writer's node, so A's say node-a.
// Whatever A writes, no rule may release db-0's own reservation: each
// case gives the facts the controller would read, decoys among the
// siblings.

// victim is db-0's address, made on node-b by sandbox c1 a minute ago.
func victim(opts ...resOpt) *tenurev1alpha1.IPReservation {
	return podRes("net.10.0.0.11", "10.0.0.11", "c1", t0.Add(-time.Minute), "100", append([]resOpt{inRange("10.0.0.0/24")}, opts...)...)
}

// decoy is what node A writes: a newer reservation naming db-0.
func decoy(name, addr, container string, opts ...resOpt) *tenurev1alpha1.IPReservation {
	base := []resOpt{inRange("10.0.0.0/24"), withOwner(func(o *tenurev1alpha1.ReservationOwner) { o.Node = "node-a" })}
	return podRes(name, addr, container, t0, "200", append(base, opts...)...)
}

var asPrefix = withSpec(func(s *tenurev1alpha1.IPReservationSpec) {
	s.Kind = tenurev1alpha1.KindDelegatedPrefix
	s.Range = "2001:db8::/48"
})

func TestADecoyFromAnotherNodeReleasesNothing(t *testing.T) {
	later := t0.Add(DuplicateGrace + time.Hour) // every grace long past
	v := victim()
	vPrefix := podRes("net.pd.v", "2001:db8:0:100::/56", "c1", t0.Add(-time.Minute), "100", asPrefix)
	listed := NetworkStatusOf(networkStatus("net1", "10.0.0.11"))
	listsNothing := NetworkStatusOf(networkStatus())
	absent := NetworkStatusOf(nil)

	// The decoy: another sandbox (ffff), a free address, newer.
	otherSandbox := decoy("net.10.0.0.12", "10.0.0.12", "ffff")
	// The same sandbox as the victim's: a second item of its slot.
	sameSandbox := decoy("net.10.0.0.13", "10.0.0.13", "c1")
	prefixOtherSandbox := decoy("net.pd.d1", "2001:db8:0:200::/56", "ffff", asPrefix)
	prefixSameSandbox := decoy("net.pd.d2", "2001:db8:0:300::/56", "c1", asPrefix)
	// Node A's decoy whose summary and node label lie cannot have a spec
	// saying node-b (the policy); with no node at all it is no sandbox of
	// node-b either.
	noNode := decoy("net.10.0.0.14", "10.0.0.14", "ffff", withOwner(func(o *tenurev1alpha1.ReservationOwner) { o.Node = "" }))
	// Made on node-b, but naming another pod with db-0's UID: no sibling
	// of db-0 (a name and a UID of two pods).
	otherName := podRes("net.10.0.0.15", "10.0.0.15", "ffff", t0, "200", inRange("10.0.0.0/24"), withOwner(func(o *tenurev1alpha1.ReservationOwner) { o.Name = "web-0" }))

	cases := []struct {
		name string
		r    *tenurev1alpha1.IPReservation
		f    Facts
	}{
		{"EarlierSandbox: a newer sandbox of node A, network-status lists the victim", v,
			Facts{Now: t0, Pod: running, Siblings: sib(v, otherSandbox), SiblingsKnown: true, NetworkStatus: listed}},
		{"EarlierSandbox: a newer sandbox of node A, network-status lists nothing", v,
			Facts{Now: later, Pod: running, Siblings: sib(v, otherSandbox), SiblingsKnown: true, NetworkStatus: listsNothing}},
		{"EarlierSandbox: a newer sandbox of node A, no network-status", v,
			Facts{Now: later, Pod: running, Siblings: sib(v, otherSandbox), SiblingsKnown: true, NetworkStatus: absent}},
		{"EarlierSandbox: a newer sandbox of node A, from the cache", v,
			Facts{Now: later, Pod: running, Siblings: sib(v, otherSandbox), SiblingsKnown: true}},
		{"EarlierSandbox: a newer delegated prefix of node A", vPrefix,
			Facts{Now: later, Pod: running, Siblings: sib(vPrefix, prefixOtherSandbox), SiblingsKnown: true, NetworkStatus: listed}},
		{"EarlierSandbox: a decoy without owner.node", v,
			Facts{Now: later, Pod: running, Siblings: sib(v, noNode), SiblingsKnown: true, NetworkStatus: listsNothing}},
		{"EarlierSandbox: a sibling by UID naming another pod", v,
			Facts{Now: later, Pod: running, Siblings: sib(v, otherName), SiblingsKnown: true, NetworkStatus: listsNothing}},
		{"DuplicateAttachment: node A's second item of the victim's slot, network-status lists nothing", v,
			Facts{Now: later, Pod: running, Siblings: sib(v, sameSandbox), SiblingsKnown: true, NetworkStatus: listsNothing}},
		{"DuplicateAttachment: node A's second item of the victim's slot, no network-status", v,
			Facts{Now: later, Pod: running, Siblings: sib(v, sameSandbox), SiblingsKnown: true, NetworkStatus: absent}},
		{"DuplicateAttachment: node A's second delegated prefix of the victim's slot", vPrefix,
			Facts{Now: later, Pod: running, Siblings: sib(vPrefix, prefixSameSandbox), SiblingsKnown: true, NetworkStatus: listed}},
		{"DuplicateAttachment: node A's second item, from the cache", v,
			Facts{Now: later, Pod: running, Siblings: sib(v, sameSandbox), SiblingsKnown: true}},
		{"NodeNotReady: the pod is terminating on its Ready node, decoys around", v,
			Facts{Now: later, Pod: terminating, Node: readyNode, Siblings: sib(v, otherSandbox, sameSandbox), SiblingsKnown: true, NetworkStatus: listsNothing}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := Decide(tc.r, tc.f, Policy{NodeGracePeriod: 5 * time.Minute})
			if d.Release || d.AskLive {
				t.Fatalf("Decide(%s) = %+v; want keep: what node A wrote speaks for no sandbox of node-b", tc.r.Name, d)
			}
		})
	}
}

// sib lists reservations as Facts.Siblings.
func sib(rs ...*tenurev1alpha1.IPReservation) []*tenurev1alpha1.IPReservation { return rs }

func TestADecoyIsNoSandboxOfThePodsNode(t *testing.T) {
	// The decoy judged itself: the victim is older, so EarlierSandbox and
	// DuplicateAttachment would keep the decoy anyway; what matters is
	// that its siblings (db-0's real ones) do not turn into evidence
	// about it either, and that PodGone still clears it.
	v := victim()
	d := decoy("net.10.0.0.12", "10.0.0.12", "c1")
	d.CreationTimestamp = metav1.NewTime(t0.Add(-time.Hour)) // older than the victim
	got := Decide(d, Facts{Now: t0.Add(time.Hour), Pod: running, Siblings: sib(v, d), SiblingsKnown: true, NetworkStatus: NetworkStatusOf(networkStatus())}, Policy{})
	if got.Release || !strings.Contains(got.Message, "made on node node-a") {
		t.Fatalf("Decide(decoy) = %+v; want keep, naming the node it says it was made on", got)
	}
	if got := Decide(d, Facts{Now: t0, Pod: gonePod}, Policy{}); got.Reason != PodGone {
		t.Fatalf("Decide(decoy) with its pod gone = %+v; want PodGone", got)
	}
}

func TestNetworkStatusOutranksANewerSandbox(t *testing.T) {
	// Both sandboxes made on node-b: the newer one's item is real, but
	// the pod's network-status lists the older one's address, so the pod
	// uses it.
	v := victim()
	newer := podRes("net.10.0.0.12", "10.0.0.12", "c2", t0, "200", inRange("10.0.0.0/24"))
	for _, tc := range []struct {
		name string
		ns   *NetworkStatus
		want Reason
	}{
		{"lists the older", NetworkStatusOf(networkStatus("net1", "10.0.0.11")), ""},
		{"lists both", NetworkStatusOf(networkStatus("net1", "10.0.0.11", "net1", "10.0.0.12")), ""},
		{"lists the older on another interface", NetworkStatusOf(networkStatus("net2", "10.0.0.11")), EarlierSandbox},
		{"lists the newer", NetworkStatusOf(networkStatus("net1", "10.0.0.12")), EarlierSandbox},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := Decide(v, Facts{Now: t0, Pod: running, Siblings: sib(v, newer), SiblingsKnown: true, NetworkStatus: tc.ns}, Policy{})
			if d.Reason != tc.want || d.Release != (tc.want != "") {
				t.Fatalf("Decide = %+v; want reason %q", d, tc.want)
			}
		})
	}
}

func TestADecoyOfAClaimReleasesNothingOfTheClaim(t *testing.T) {
	const rng = "10.0.0.0/24"
	// The claim's item, recorded, made on node-b.
	item := claimRes(inRange(rng))
	// Node A's Pod-kind reservation carrying the claim's UID, in the
	// item's slot; its summary may say IPAMClaim, its spec cannot.
	podKind := decoy("net.10.0.0.12", "10.0.0.12", "ffff", withOwner(func(o *tenurev1alpha1.ReservationOwner) { o.Name = "a-pod" }))
	// Node A's claim-owned reservation in the item's slot (a pod of A
	// presenting the claim, which claim presentation decides), unrecorded.
	claimKind := claimRes(inRange(rng), withOwner(func(o *tenurev1alpha1.ReservationOwner) { o.Node = "node-a" }))
	claimKind.Name, claimKind.Spec.Address = "net.10.0.0.13", "10.0.0.13"
	claimKind.CreationTimestamp = metav1.NewTime(t0.Add(time.Hour))
	claim := func(ips ...string) *ClaimFact {
		return ClaimFactOf(&ipamclaimsv1alpha1.IPAMClaim{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "vm1", UID: uid1},
			Status:     ipamclaimsv1alpha1.IPAMClaimStatus{IPs: ips},
		})
	}
	for _, tc := range []struct {
		name string
		c    *ClaimFact
		sibs []*tenurev1alpha1.IPReservation
	}{
		{"a Pod-kind decoy with the claim's UID, the item recorded", claim("10.0.0.9/24"), sib(item, podKind)},
		{"a Pod-kind decoy with the claim's UID, its address recorded and the item's not", claim("10.0.0.12/24"), sib(item, podKind)},
		{"an unrecorded claim-owned reservation of node A", claim("10.0.0.9/24"), sib(item, claimKind)},
		{"nothing recorded yet", claim(), sib(item, podKind, claimKind)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := Decide(item, Facts{Now: t0.Add(2 * time.Hour), Claim: tc.c, Siblings: tc.sibs, SiblingsKnown: true}, Policy{})
			if d.Release || d.AskLive {
				t.Fatalf("Decide(%s) = %+v; want keep", item.Name, d)
			}
		})
	}
}
