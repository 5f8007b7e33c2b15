package repair

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"

	ipamclaimsv1alpha1 "github.com/tenure-ipam/tenure/api/ipamclaims/v1alpha1"
	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

const (
	uid1 = "11111111-1111-1111-1111-111111111111"
	uid2 = "22222222-2222-2222-2222-222222222222"
)

type resOpt func(*tenurev1alpha1.IPReservation)

func podRes(name, addr, container string, created time.Time, rv string, opts ...resOpt) *tenurev1alpha1.IPReservation {
	r := &tenurev1alpha1.IPReservation{
		ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(created), ResourceVersion: rv},
		Spec: tenurev1alpha1.IPReservationSpec{
			Network: "net", Kind: tenurev1alpha1.KindAddress, Address: addr,
			Owner: tenurev1alpha1.ReservationOwner{
				Kind: tenurev1alpha1.OwnerPod, Namespace: "ns", Name: "db-0", UID: uid1,
				PodName: "db-0", PodUID: uid1, ContainerID: container, Interface: "net1", Node: "node-b",
			},
		},
	}
	for _, o := range opts {
		o(r)
	}
	return r
}

func claimRes(opts ...resOpt) *tenurev1alpha1.IPReservation {
	r := podRes("net.10.0.0.9", "10.0.0.9", "c1", t0, "10")
	r.Spec.Owner.Kind = tenurev1alpha1.OwnerIPAMClaim
	r.Spec.Owner.Name = "vm1"
	for _, o := range opts {
		o(r)
	}
	return r
}

func withOwner(f func(*tenurev1alpha1.ReservationOwner)) resOpt {
	return func(r *tenurev1alpha1.IPReservation) { f(&r.Spec.Owner) }
}

func withSpec(f func(*tenurev1alpha1.IPReservationSpec)) resOpt {
	return func(r *tenurev1alpha1.IPReservation) { f(&r.Spec) }
}

var (
	running     = &PodFact{Exists: true, UID: uid1, NodeName: "node-b"}
	terminating = &PodFact{Exists: true, UID: uid1, NodeName: "node-b", Terminating: true}
	terminal    = &PodFact{Exists: true, UID: uid1, NodeName: "node-b", Terminal: true}
	gonePod     = &PodFact{}
	replaced    = &PodFact{Exists: true, UID: uid2, NodeName: "node-b"}
	readyNode   = &NodeFact{Exists: true, Ready: true}
	goneNode    = &NodeFact{}
	downLong    = &NodeFact{Exists: true, NotReadySince: t0.Add(-10 * time.Minute)}
	downShort   = &NodeFact{Exists: true, NotReadySince: t0.Add(-time.Minute)}
	fenced      = &NodeFact{Exists: true, NotReadySince: t0.Add(-time.Minute), OutOfService: true}
)

func TestDecide(t *testing.T) {
	policy := Policy{NodeGracePeriod: 5 * time.Minute}
	older := podRes("net.10.0.0.1", "10.0.0.1", "sandbox-1", t0.Add(-time.Minute), "100")
	newer := podRes("net.10.0.0.2", "10.0.0.2", "sandbox-2", t0, "200")
	// Same second: the resourceVersion orders them.
	sameSecA := podRes("net.10.0.0.7", "10.0.0.7", "sandbox-a", t0, "300")
	sameSecB := podRes("net.10.0.0.3", "10.0.0.3", "sandbox-b", t0, "301")
	// The newest sandbox holds two IPv4 addresses of one network (two ranges).
	newer2 := podRes("net.10.0.0.4", "10.0.0.4", "sandbox-2", t0, "201", withSpec(func(s *tenurev1alpha1.IPReservationSpec) { s.Range = "10.0.0.4/30" }))
	v6newer := podRes("net.fd00", "fd00::2", "sandbox-2", t0, "202")
	otherIf := podRes("net.10.0.0.5", "10.0.0.5", "sandbox-2", t0, "203", withOwner(func(o *tenurev1alpha1.ReservationOwner) { o.Interface = "net2" }))
	otherNet := podRes("other.10.0.0.2", "10.0.0.2", "sandbox-2", t0, "204", withSpec(func(s *tenurev1alpha1.IPReservationSpec) { s.Network = "other" }))
	claimSib := podRes("net.10.0.0.6", "10.0.0.6", "sandbox-2", t0, "205", withOwner(func(o *tenurev1alpha1.ReservationOwner) { o.Kind = tenurev1alpha1.OwnerIPAMClaim }))
	otherUID := podRes("net.10.0.0.8", "10.0.0.8", "sandbox-9", t0.Add(time.Hour), "900", withOwner(func(o *tenurev1alpha1.ReservationOwner) { o.UID = uid2 }))
	prefixNewer := podRes("net.pd", "2001:db8::/56", "sandbox-2", t0, "206", withSpec(func(s *tenurev1alpha1.IPReservationSpec) { s.Kind = tenurev1alpha1.KindDelegatedPrefix }))
	prefixOlder := podRes("net.pd0", "2001:db8:0:100::/56", "sandbox-1", t0.Add(-time.Minute), "99", withSpec(func(s *tenurev1alpha1.IPReservationSpec) { s.Kind = tenurev1alpha1.KindDelegatedPrefix }))
	newPodRes := podRes("net.10.0.0.20", "10.0.0.20", "sandbox-new", t0, "500", withOwner(func(o *tenurev1alpha1.ReservationOwner) { o.UID, o.PodUID = uid2, uid2 }))

	// The pod's network-status lists nothing on net1 (a sandbox whose
	// ADD never returned): the sandboxes' order decides.
	sib := func(rs ...*tenurev1alpha1.IPReservation) Facts {
		return Facts{Now: t0, Pod: running, Siblings: rs, SiblingsKnown: true, NetworkStatus: NetworkStatusOf(networkStatus())}
	}

	cases := []struct {
		name  string
		r     *tenurev1alpha1.IPReservation
		f     Facts
		want  Reason // "" = keep
		inMsg string
	}{
		// Pod owner: every release rule.
		{"pod gone", older, Facts{Now: t0, Pod: gonePod}, PodGone, "no longer exists"},
		{"pod replaced by a new pod of the same name", older, Facts{Now: t0, Pod: replaced}, PodReplaced, "now uid " + uid2},
		{"earlier sandbox", older, sib(older, newer), EarlierSandbox, "sandbox-2"},
		{"earlier sandbox, same second, resourceVersion decides", sameSecA, sib(sameSecA, sameSecB), EarlierSandbox, "sandbox-b"},
		{"earlier sandbox of a delegated prefix", prefixOlder, sib(prefixOlder, prefixNewer), EarlierSandbox, ""},
		{"terminating pod on a deleted node", older, Facts{Now: t0, Pod: terminating, Node: goneNode}, NodeDeleted, "node-b"},
		{"terminating pod on a fenced node", older, Facts{Now: t0, Pod: terminating, Node: fenced}, NodeOutOfService, corev1.TaintNodeOutOfService},
		// Claim owner: every release rule.
		{"claim gone", claimRes(), Facts{Now: t0, Claim: &ClaimFact{}}, ClaimGone, "no longer exists"},
		{"claim recreated with another uid", claimRes(), Facts{Now: t0, Claim: &ClaimFact{Exists: true, UID: uid2}}, ClaimGone, "now uid"},
		{"claim being deleted", claimRes(), Facts{Now: t0, Claim: &ClaimFact{Exists: true, UID: uid1, Deleting: true}}, ClaimDeleted, "being deleted"},

		// Never release.
		{"pod state unknown", older, Facts{Now: t0}, "", "unknown"},
		{"pod exists with an unknown uid", older, Facts{Now: t0, Pod: &PodFact{Exists: true}}, "", "uid unknown"},
		{"live pod on a Ready node", older, Facts{Now: t0, Pod: running, Node: readyNode, SiblingsKnown: true}, "", "exists"},
		{"live pod on a deleted node", older, Facts{Now: t0, Pod: running, Node: goneNode}, "", "exists"},
		{"live pod on a node NotReady past grace", older, Facts{Now: t0, Pod: running, Node: downLong}, "", "exists"},
		{"terminating pod on a Ready node", older, Facts{Now: t0, Pod: terminating, Node: readyNode}, "", "kubelet"},
		{"terminating pod on a node NotReady past grace, not fenced", older, Facts{Now: t0, Pod: terminating, Node: downLong}, "", "waiting for node node-b to be fenced"},
		{"terminating pod, node unknown", older, Facts{Now: t0, Pod: terminating}, "", "unknown"},
		{"terminating pod bound to another node than owner.node", older, Facts{Now: t0, Pod: &PodFact{Exists: true, UID: uid1, NodeName: "node-c", Terminating: true}, Node: goneNode}, "", "exists"},
		{"reservation without owner.node", podRes("x", "10.0.0.1", "c", t0, "1", withOwner(func(o *tenurev1alpha1.ReservationOwner) { o.Node = "" })), Facts{Now: t0, Pod: &PodFact{Exists: true, UID: uid1, Terminating: true}, Node: goneNode}, "", "exists"},
		{"newest sandbox", newer, sib(older, newer), "", "exists"},
		{"newest sandbox holds two addresses of one family", newer, sib(older, newer, newer2), "", "exists"},
		{"newest sandbox, its second address", newer2, sib(older, newer, newer2), "", "exists"},
		{"earlier sandbox, network-status not yet read", older, Facts{Now: t0, Pod: running, Siblings: []*tenurev1alpha1.IPReservation{older, newer}, SiblingsKnown: true}, "", "live read of its network-status"},
		{"earlier sandbox, network-status unparsable", older, Facts{Now: t0, Pod: running, Siblings: []*tenurev1alpha1.IPReservation{older, newer}, SiblingsKnown: true, NetworkStatus: NetworkStatusOf(map[string]string{"k8s.v1.cni.cncf.io/network-status": "{"})}, "", "unknown"},
		{"older sandbox, siblings unknown", older, Facts{Now: t0, Pod: running, Siblings: []*tenurev1alpha1.IPReservation{newer}}, "", "exists"},
		{"newer sandbox of the other family only", older, sib(older, v6newer), "", "exists"},
		{"newer sandbox on another interface", older, sib(older, otherIf), "", "exists"},
		{"newer sandbox on another network", older, sib(older, otherNet), "", "exists"},
		{"claim-owned sibling", older, sib(older, claimSib), "", "exists"},
		{"sibling of another pod uid", older, sib(older, otherUID), "", "exists"},
		{"address and prefix of different sandboxes", older, sib(older, prefixNewer), "", "exists"},
		{"the new pod of the same name keeps its own", newPodRes, Facts{Now: t0, Pod: replaced, Siblings: []*tenurev1alpha1.IPReservation{newPodRes}, SiblingsKnown: true}, "", "exists"},
		{"without containerID no sandbox ordering", podRes("x", "10.0.0.1", "", t0, "1"), sib(newer), "", "exists"},
		{"claim exists", claimRes(), Facts{Now: t0, Claim: &ClaimFact{Exists: true, UID: uid1}}, "", "exists"},
		{"claim being deleted, another finalizer left", claimRes(), Facts{Now: t0, Claim: &ClaimFact{Exists: true, UID: uid1, Deleting: true, WaitingFor: []string{"kubevirt.io/persistent-ipam"}}}, "", "waiting for finalizer kubevirt.io/persistent-ipam"},
		{"claim unknown", claimRes(), Facts{Now: t0}, "", "unknown"},
		{"claim-owned, its pod and node gone", claimRes(), Facts{Now: t0, Pod: gonePod, Node: goneNode, Claim: &ClaimFact{Exists: true, UID: uid1}}, "", "exists"},
		{"claim exists with an unknown uid", claimRes(), Facts{Now: t0, Claim: &ClaimFact{Exists: true}}, "", "uid unknown"},
		{"owner without uid", podRes("x", "10.0.0.1", "c", t0, "1", withOwner(func(o *tenurev1alpha1.ReservationOwner) { o.UID = "" })), Facts{Now: t0, Pod: gonePod}, "", "incomplete"},
		{"owner without name", podRes("x", "10.0.0.1", "c", t0, "1", withOwner(func(o *tenurev1alpha1.ReservationOwner) { o.Name = "" })), Facts{Now: t0, Pod: gonePod}, "", "incomplete"},
		{"an address an administrator set aside, whatever pod its name once was", podRes("x", "10.0.0.1", "", t0, "1", withOwner(func(o *tenurev1alpha1.ReservationOwner) {
			*o = tenurev1alpha1.ReservationOwner{Kind: tenurev1alpha1.OwnerAdministrator, Name: "admin", UID: uid1}
		})), Facts{Now: t0, Pod: gonePod, Claim: &ClaimFact{}}, "", "set aside"},
		{"unknown owner kind", podRes("x", "10.0.0.1", "c", t0, "1", withOwner(func(o *tenurev1alpha1.ReservationOwner) { o.Kind = "VirtualMachine" })), Facts{Now: t0, Pod: gonePod, Claim: &ClaimFact{}}, "", "not known"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := Decide(tc.r, tc.f, policy)
			if d.Release != (tc.want != "") || d.Reason != tc.want {
				t.Fatalf("Decide = release %v reason %q (%s); want reason %q", d.Release, d.Reason, d.Message, tc.want)
			}
			if d.Message == "" {
				t.Fatal("decision without a message")
			}
			if tc.inMsg != "" && !strings.Contains(d.Message, tc.inMsg) {
				t.Fatalf("message %q lacks %q", d.Message, tc.inMsg)
			}
		})
	}
}

// TestDecideNodeFencing: the addresses of a terminating or terminal pod
// leave its node only when the node is fenced (deleted, or not Ready and
// tainted out-of-service), or, with ReleaseUnfenced, once it has not been
// Ready for the grace period.
func TestDecideNodeFencing(t *testing.T) {
	r := podRes("net.10.0.0.1", "10.0.0.1", "sandbox-1", t0.Add(-time.Minute), "100")
	fencing := Policy{NodeGracePeriod: 5 * time.Minute}
	optIn := Policy{NodeGracePeriod: 5 * time.Minute, ReleaseUnfenced: true}
	readyTainted := &NodeFact{Exists: true, Ready: true, OutOfService: true}
	downExactly := &NodeFact{Exists: true, NotReadySince: t0.Add(-5 * time.Minute)}
	fencedLong := &NodeFact{Exists: true, NotReadySince: t0.Add(-10 * time.Minute), OutOfService: true}
	const wait = "waiting for node node-b to be fenced (kubectl taint node node-b node.kubernetes.io/out-of-service=nodeshutdown:NoExecute, or delete the Node)"
	cases := []struct {
		name    string
		pod     *PodFact
		node    *NodeFact
		p       Policy
		want    Reason // "" = keep
		fence   bool   // a keep that waits for the node to be fenced
		recheck time.Duration
		inMsg   string
	}{
		{"terminating on a Ready node", terminating, readyNode, fencing, "", false, 0, "its kubelet runs the DEL"},
		{"terminating on a NotReady node past grace, not fenced", terminating, downLong, fencing, "", true, 0, wait},
		{"terminal on a NotReady node past grace, not fenced", terminal, downLong, fencing, "", true, 0, "is terminal on node node-b"},
		{"terminating on a NotReady node within grace, not fenced", terminating, downShort, fencing, "", true, 0, wait},
		{"terminating on a NotReady node, tainted out-of-service", terminating, fenced, fencing, NodeOutOfService, false, 0, "not Ready and carries the taint node.kubernetes.io/out-of-service"},
		{"terminal on a NotReady node, tainted out-of-service", terminal, fenced, fencing, NodeOutOfService, false, 0, "terminal"},
		// The kubelet of a Ready node heartbeats: the taint does not make it
		// shut down, and its kubelet runs the DEL (the pod GC too waits for
		// both).
		{"terminating on a Ready node, tainted out-of-service", terminating, readyTainted, fencing, "", false, 0, "counts once the node is not Ready"},
		{"terminating on a deleted node", terminating, goneNode, fencing, NodeDeleted, false, 0, "which was deleted"},
		{"terminal on a deleted node", terminal, goneNode, fencing, NodeDeleted, false, 0, "terminal"},
		// A pod not terminating on a fenced node: the pod GC force-deletes
		// it (after the taint manager evicts it, with a NoExecute taint),
		// and PodGone applies then.
		{"running on a NotReady node, tainted out-of-service", running, fencedLong, fencing, "", false, 0, "exists"},
		{"running on a NotReady node past grace, opt-in", running, downLong, optIn, "", false, 0, "exists"},
		{"terminating, node state unknown", terminating, nil, fencing, "", false, 0, "state unknown"},

		// ReleaseUnfenced: the grace period releases what is not fenced.
		// (Past the grace period, the wire decides: TestDecideWire; here
		// a silent answer of a Ready node.)
		{"opt-in: NotReady past grace", terminating, downLong, optIn, NodeNotReady, false, 0, "NotReady for 10m0s (grace period 5m0s), not fenced"},
		{"opt-in: NotReady exactly the grace period", terminal, downExactly, optIn, NodeNotReady, false, 0, "terminal"},
		{"opt-in: NotReady within grace", terminating, downShort, optIn, "", true, 4 * time.Minute, "or for the end of its 5m0s grace period"},
		{"opt-in: within grace, tainted", terminating, fenced, optIn, NodeOutOfService, false, 0, ""},
		{"opt-in: Ready", terminating, readyNode, optIn, "", false, 0, "kubelet"},
		{"opt-in: deleted", terminating, goneNode, optIn, NodeDeleted, false, 0, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := Decide(r, Facts{Now: t0, Pod: tc.pod, Node: tc.node, Wire: silentNow}, tc.p)
			if d.Release != (tc.want != "") || d.Reason != tc.want {
				t.Fatalf("Decide = release %v reason %q (%s); want reason %q", d.Release, d.Reason, d.Message, tc.want)
			}
			if got := d.Fence != ""; got != tc.fence || (got && d.Fence != "node-b") {
				t.Errorf("Fence = %q, want a wait for node-b: %v", d.Fence, tc.fence)
			}
			if d.RecheckAfter != tc.recheck {
				t.Errorf("RecheckAfter = %v, want %v", d.RecheckAfter, tc.recheck)
			}
			if !strings.Contains(d.Message, tc.inMsg) {
				t.Errorf("message %q lacks %q", d.Message, tc.inMsg)
			}
		})
	}
}

// TestDecideRecheckAfterWithinGrace: with ReleaseUnfenced, the keep within
// the grace period asks to be decided again when it ends, and then
// releases.
func TestDecideRecheckAfterWithinGrace(t *testing.T) {
	r := podRes("x", "10.0.0.1", "c", t0, "1")
	p := Policy{NodeGracePeriod: 5 * time.Minute, ReleaseUnfenced: true}
	d := Decide(r, Facts{Now: t0, Pod: terminating, Node: downShort}, p)
	if d.Release || d.RecheckAfter != 4*time.Minute {
		t.Fatalf("got %+v, want keep with RecheckAfter 4m", d)
	}
	d = Decide(r, Facts{Now: t0.Add(4 * time.Minute), Pod: terminating, Node: downShort, Wire: silentNow}, p)
	if !d.Release || d.Reason != NodeNotReady {
		t.Fatalf("after the recheck: %+v, want NodeNotReady", d)
	}
}

func TestNeeds(t *testing.T) {
	r := podRes("x", "10.0.0.1", "c", t0, "1")
	for _, tc := range []struct {
		name           string
		pod            *PodFact
		siblings, node bool
	}{
		{"unknown", nil, false, false},
		{"gone", gonePod, false, false},
		{"replaced", replaced, false, false},
		{"running", running, true, false},
		{"terminating", terminating, true, true},
		{"terminal", terminal, true, true},
		{"terminating elsewhere", &PodFact{Exists: true, UID: uid1, NodeName: "x", Terminating: true}, true, false},
	} {
		if got := NeedsSiblings(r, tc.pod); got != tc.siblings {
			t.Errorf("%s: NeedsSiblings %v", tc.name, got)
		}
		if got := NeedsNode(r, tc.pod); got != tc.node {
			t.Errorf("%s: NeedsNode %v", tc.name, got)
		}
	}
	if NeedsSiblings(claimRes(), running) || NeedsNode(claimRes(), terminating) {
		t.Error("a claim-owned reservation needs neither siblings nor node")
	}
}

func TestNewer(t *testing.T) {
	a := podRes("b", "10.0.0.1", "c", t0, "9")
	b := podRes("a", "10.0.0.2", "c", t0, "10")
	if !Newer(b, a) || Newer(a, b) {
		t.Error("resourceVersion 10 is newer than 9 within one second")
	}
	c := podRes("a", "10.0.0.1", "c", t0.Add(time.Second), "1")
	if !Newer(c, b) {
		t.Error("a later creationTimestamp wins over resourceVersion")
	}
	d := podRes("z", "10.0.0.1", "c", t0, "")
	e := podRes("y", "10.0.0.1", "c", t0, "")
	if !Newer(d, e) || Newer(e, d) {
		t.Error("name breaks the tie when resourceVersions do not compare")
	}
}

func TestFactsOf(t *testing.T) {
	if f := PodFactOf(nil); f.Exists {
		t.Error("nil pod exists")
	}
	now := metav1.NewTime(t0)
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: uid1, DeletionTimestamp: &now}, Spec: corev1.PodSpec{NodeName: "n"}, Status: corev1.PodStatus{Phase: corev1.PodFailed}}
	if f := PodFactOf(p); !f.Exists || f.UID != uid1 || f.NodeName != "n" || !f.Terminating || !f.Terminal {
		t.Errorf("PodFactOf = %+v", f)
	}
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: metav1.NewTime(t0.Add(-time.Hour))}}
	if f := NodeFactOf(n); f.Ready || !f.NotReadySince.Equal(t0.Add(-time.Hour)) {
		t.Errorf("a node without a Ready condition: %+v", f)
	}
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionUnknown, LastTransitionTime: now}}
	if f := NodeFactOf(n); f.Ready || !f.NotReadySince.Equal(t0) {
		t.Errorf("NotReady node: %+v", f)
	}
	n.Status.Conditions[0].Status = corev1.ConditionTrue
	if f := NodeFactOf(n); !f.Ready || f.OutOfService {
		t.Errorf("Ready node: %+v", f)
	}
	for _, effect := range []corev1.TaintEffect{corev1.TaintEffectNoExecute, corev1.TaintEffectNoSchedule, corev1.TaintEffectPreferNoSchedule} {
		n.Spec.Taints = []corev1.Taint{{Key: corev1.TaintNodeUnreachable, Effect: corev1.TaintEffectNoExecute}, {Key: corev1.TaintNodeOutOfService, Value: "nodeshutdown", Effect: effect}}
		if f := NodeFactOf(n); !f.OutOfService {
			t.Errorf("node tainted out-of-service with effect %s: %+v", effect, f)
		}
	}
	n.Spec.Taints = []corev1.Taint{{Key: corev1.TaintNodeUnreachable, Effect: corev1.TaintEffectNoExecute}}
	if f := NodeFactOf(n); f.OutOfService {
		t.Errorf("node tainted unreachable only: %+v", f)
	}
	if f := NodeFactOf(nil); f.Exists {
		t.Error("nil node exists")
	}
	if f := ClaimFactOf(nil); f.Exists {
		t.Error("nil claim exists")
	}
}

// TestDecideTerminatingClaim: a claim being deleted keeps its reservations
// while any finalizer but tenure's own is left on it, from the claim object
// (ClaimFactOf) to the decision.
func TestDecideTerminatingClaim(t *testing.T) {
	const kubevirt, tenure = "kubevirt.io/persistent-ipam", "ipam.tenure.dev/release"
	deleted := metav1.NewTime(t0)
	claim := func(uid string, deleting bool, finalizers ...string) *ipamclaimsv1alpha1.IPAMClaim {
		c := &ipamclaimsv1alpha1.IPAMClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "vm1", UID: k8stypes.UID(uid), Finalizers: finalizers}}
		if deleting {
			c.DeletionTimestamp = &deleted
		}
		return c
	}
	cases := []struct {
		name   string
		claim  *ipamclaimsv1alpha1.IPAMClaim // nil: no claim of that name
		reason Reason                        // "" = keep
		msg    string
	}{
		{"KubeVirt's finalizer and tenure's", claim(uid1, true, kubevirt, tenure), "", "is being deleted; waiting for finalizer kubevirt.io/persistent-ipam before releasing"},
		{"KubeVirt's finalizer alone (tenure's never added)", claim(uid1, true, kubevirt), "", "waiting for finalizer kubevirt.io/persistent-ipam"},
		{"the garbage collector's foreground deletion", claim(uid1, true, tenure, "foregroundDeletion"), "", "waiting for finalizer foregroundDeletion"},
		{"two other finalizers, in the claim's order", claim(uid1, true, "example.com/b", tenure, kubevirt), "", "waiting for finalizers example.com/b, kubevirt.io/persistent-ipam"},
		{"live claim with KubeVirt's finalizer", claim(uid1, false, kubevirt, tenure), "", "exists"},
		{"only tenure's finalizer left", claim(uid1, true, tenure), ClaimDeleted, "is being deleted"},
		{"no finalizer left (the watch's last state)", claim(uid1, true), ClaimDeleted, "is being deleted"},
		{"claim gone", nil, ClaimGone, "no longer exists"},
		{"recreated with another uid, KubeVirt's finalizer on it", claim(uid2, true, kubevirt, tenure), ClaimGone, "now uid " + uid2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := Decide(claimRes(), Facts{Now: t0, Claim: ClaimFactOf(tc.claim)}, Policy{})
			if d.Release != (tc.reason != "") || d.Reason != tc.reason || !strings.Contains(d.Message, tc.msg) {
				t.Fatalf("Decide = %+v, want reason %q with %q", d, tc.reason, tc.msg)
			}
		})
	}
}
