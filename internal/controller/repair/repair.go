// Package repair decides whether one IPReservation is an orphan to give
// back. It is pure: the caller gathers the facts about the reservation's
// owner (from a cache to find candidates, then from live API reads to
// confirm them) and Decide answers the same way for both, so the watch
// path, the periodic sweep and `tenure-controller --once` share one rule
// book.
//
// The rules, in the order Decide applies them:
//
// Owner kind Pod (the pod named owner.namespace/owner.name):
//   - PodGone: no pod of that name exists.
//   - PodReplaced: a pod of that name exists with another UID (a StatefulSet
//     recreated it); the owner's UID can never come back, and the new pod's
//     own reservations are untouched (they carry its UID).
//   - EarlierSandbox: the pod exists, and another pod-owned reservation with
//     the same owner, interface, network, kind and address family but a
//     different containerID is newer (creationTimestamp, then
//     resourceVersion, then name), and the pod's network-status does not
//     list this one on its interface: the older sandbox died mid-ADD and
//     never got its DEL.
//   - DuplicateAttachment: the pod exists, and the same attachment (pod
//     UID, containerID, interface) holds another reservation of the same
//     network, kind, family and range: a second item of one slot (an ADD
//     whose create committed but whose reply was lost, then retried). The
//     pod's network-status says which one it uses; the others are surplus.
//     When it lists none of them, the newest is kept, once DuplicateGrace
//     has passed. See duplicatePod.
//   - NodeDeleted / NodeOutOfService / NodeNotReady: the pod exists but is
//     terminating (deletionTimestamp set) or terminal (Succeeded/Failed) on
//     owner.node, and that node is fenced: its Node object is gone, or it
//     is not Ready and carries the taint node.kubernetes.io/out-of-service
//     (any effect), Kubernetes' mark of a node shut down (non-graceful node
//     shutdown, KEP-2268; the pod GC force-deletes such pods on the same
//     two conditions). A terminating pod on a dead node is never confirmed
//     gone by its kubelet, so it would hold its address until someone
//     force-deletes it. A node that is only NotReady is not dead: one cut
//     off from the API server keeps running its pods, so their addresses
//     are kept, waiting for the node to be fenced (Decision.Fence).
//     NodeNotReady, the one release of an address whose node may still
//     run, applies only with Policy.ReleaseUnfenced, once the node has not
//     been Ready for the grace period, and then only on the wire's word
//     (Facts.Wire, decideWire): an agent of a Ready node other than
//     owner.node probed the address after the current request and heard
//     nothing. While anything answers, or no such agent has answered, it
//     is kept, waiting for the node to be fenced.
//
// No deputy: both sibling rules weigh only reservations made on the node
// the pod runs on (spec.owner.node is the pod's spec.nodeName, for the
// reservation judged and for each sibling; Evidence), since any node may
// write a reservation naming any pod, and the policy holds spec.owner.node
// to the writer's node. What the pod's network-status lists is never
// released by them.
//
// Owner kind IPAMClaim (the claim named owner.namespace/owner.name):
//   - ClaimGone: no claim of that name, or one with another UID.
//   - ClaimDeleted: the claim with the owner's UID has a deletionTimestamp
//     and no finalizer other than tenure's own (ipam.tenure.dev/release)
//     is left on it. While another remains (KubeVirt's
//     kubevirt.io/persistent-ipam until the VM's VMI is gone, the garbage
//     collector's foregroundDeletion), whoever set it still uses the claim,
//     and its reservations are kept.
//   - DuplicateAttachment: the claim exists and holds another reservation
//     of the same network, kind, family and range, and its status records
//     that one and not this. See duplicateClaim.
//
// Never released: a pod-owned reservation whose pod (same UID) exists and is
// neither terminating nor terminal, whatever its node says (a Node object
// deleted under a running pod is the pod GC's business: once it deletes the
// pod, PodGone applies), unless it is a DuplicateAttachment; a claim-owned reservation whose claim exists and is
// not being deleted, whatever happens to pods and nodes, unless it is a
// DuplicateAttachment; anything whose facts are unknown (nil) or whose
// owner is incomplete or of an unknown kind.
package repair

import (
	"fmt"
	"net/netip"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/resourceversion"

	ipamclaimsv1alpha1 "github.com/tenure-ipam/tenure/api/ipamclaims/v1alpha1"
	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/claims"
)

// Reason says why a reservation is released; it is the `reason` label of
// tenure_releases_total and part of every Event and --dry-run line.
type Reason string

// The release reasons.
const (
	PodGone        Reason = "PodGone"
	PodReplaced    Reason = "PodReplaced"
	EarlierSandbox Reason = "EarlierSandbox"
	NodeDeleted    Reason = "NodeDeleted"
	// NodeOutOfService: the node is fenced by the out-of-service taint.
	NodeOutOfService Reason = "NodeOutOfService"
	// NodeNotReady: the node is not fenced, only NotReady for the grace
	// period (Policy.ReleaseUnfenced). It is the one release of addresses
	// that the node may still answer for on the wire, so the one a probe
	// of the address gates.
	NodeNotReady Reason = "NodeNotReady"
	ClaimGone    Reason = "ClaimGone"
	ClaimDeleted Reason = "ClaimDeleted"
	// DuplicateAttachment: a second reservation of one slot of a live
	// attachment or claim.
	DuplicateAttachment Reason = "DuplicateAttachment"
)

// Reasons lists every Reason, for metric initialisation.
var Reasons = []Reason{PodGone, PodReplaced, EarlierSandbox, NodeDeleted, NodeOutOfService, NodeNotReady, ClaimGone, ClaimDeleted, DuplicateAttachment}

// PodFact is what is known of the pod named by the owner.
type PodFact struct {
	Exists      bool
	UID         string
	NodeName    string
	Terminating bool // deletionTimestamp set
	Terminal    bool // phase Succeeded or Failed
}

// NodeFact is what is known of owner.node.
type NodeFact struct {
	Exists bool
	Ready  bool
	// NotReadySince is when the Ready condition stopped being True (its
	// lastTransitionTime), or the node's creation when it has none.
	NotReadySince time.Time
	// OutOfService: the node carries the taint
	// node.kubernetes.io/out-of-service, with any effect.
	OutOfService bool
}

// ClaimFact is what is known of the IPAMClaim named by the owner.
type ClaimFact struct {
	Exists   bool
	UID      string
	Deleting bool
	// WaitingFor, of a claim being deleted, are its finalizers other than
	// tenure's own: its items are kept until none is left.
	WaitingFor []string
	// Recorded are the items status.ips and status.delegatedPrefixes
	// record (an address as a full-length prefix); Unreadable lists the
	// entries that do not parse.
	Recorded   []netip.Prefix
	Unreadable string
}

// Facts about one reservation's owner. A nil fact is unknown, and nothing
// is ever released on the strength of an unknown.
type Facts struct {
	Now   time.Time
	Pod   *PodFact
	Node  *NodeFact
	Claim *ClaimFact
	// Siblings are reservations with the same owner.uid (the reservation
	// itself may be among them); meaningful only when SiblingsKnown.
	Siblings      []*tenurev1alpha1.IPReservation
	SiblingsKnown bool
	// NetworkStatus of the owning pod, nil when unknown: only a live read
	// of the whole pod gives it (caches do not keep annotations).
	NetworkStatus *NetworkStatus
	// Wire is what other nodes' agents heard of the address on the wire
	// (the reservation's IPProbe), nil when unknown: only a live read of
	// the IPProbe gives it.
	Wire *WireFact
}

// WireFact is what the agents of other nodes answered to the controller's
// request to probe a reservation's address (its IPProbe).
type WireFact struct {
	// Asked: an IPProbe of the reservation exists.
	Asked bool
	// AskedAt is when the current request was made (spec.askedAt).
	AskedAt time.Time
	// Answers to the current request (status entries whose
	// observedGeneration is the IPProbe's generation) of nodes other than
	// the reservation's owner node (WireFactOf).
	Answers []WireAnswer
}

// WireAnswer is one node's answer to the current request.
type WireAnswer struct {
	Node string
	// NodeReady: the answering node is Ready, by a live read of its Node.
	NodeReady bool
	Result    tenurev1alpha1.ProbeResult
	// MAC, Kind and Interface of an answered probe; Message of a failed one.
	MAC, Kind, Interface, Message string
}

// WireFactOf summarises the IPProbe of r: the answers to its current
// request (its generation) of nodes other than r's owner node, whose own
// word, the node in question, does not count. nil p is a request not made
// yet. ready says whether a node is Ready; it is asked only of the nodes
// that answered.
func WireFactOf(r *tenurev1alpha1.IPReservation, p *tenurev1alpha1.IPProbe, ready func(node string) bool) *WireFact {
	if p == nil {
		return &WireFact{}
	}
	f := &WireFact{Asked: true, AskedAt: p.Spec.AskedAt.Time}
	for _, a := range p.Status.Answers {
		if a.ObservedGeneration != p.Generation || a.Node == "" || a.Node == r.Spec.Owner.Node {
			continue
		}
		f.Answers = append(f.Answers, WireAnswer{Node: a.Node, NodeReady: ready(a.Node), Result: a.Result,
			MAC: a.MAC, Kind: a.Kind, Interface: a.Interface, Message: a.Message})
	}
	return f
}

// Policy holds the tunables.
type Policy struct {
	// ReleaseUnfenced releases the addresses of terminating and terminal
	// pods on a node that has not been Ready for NodeGracePeriod though it
	// is not fenced (NodeNotReady). Off, they wait for the node to be
	// fenced.
	ReleaseUnfenced bool
	// NodeGracePeriod is how long a node must have been NotReady before
	// ReleaseUnfenced releases the addresses of its terminating pods.
	NodeGracePeriod time.Duration
	// ProbeInterval is how long a request to probe an address stands
	// before the agents are asked again, while it answers or while no
	// agent of a Ready node has answered (DefaultProbeInterval when 0).
	ProbeInterval time.Duration
}

// DefaultProbeInterval is Policy.ProbeInterval's default.
const DefaultProbeInterval = 30 * time.Second

func (p Policy) probeInterval() time.Duration {
	if p.ProbeInterval > 0 {
		return p.ProbeInterval
	}
	return DefaultProbeInterval
}

// Decision is Decide's answer.
type Decision struct {
	Release bool
	Reason  Reason // set when Release
	// Message says why, in words, for Events, logs and --dry-run; set for
	// keeps too.
	Message string
	// RecheckAfter, when positive, is when the answer may change by the
	// clock alone (a NotReady node reaching its grace period).
	RecheckAfter time.Duration
	// Fence, on a keep, names the node that must be fenced (the
	// out-of-service taint, or its Node deleted) before the addresses of
	// its terminating or terminal pod are released.
	Fence string
	// AskLive: the facts given cannot decide, the live reads can; a cache
	// nominates such a reservation to the live path as it would a release.
	AskLive bool
	// Probe: the release is due (NodeNotReady) and waits for the wire: an
	// IPProbe of the reservation is to exist, and Wire facts decide.
	Probe bool
	// Reask, with Probe: the current request has stood for
	// Policy.ProbeInterval without a silent answer; the agents are to be
	// asked again.
	Reask bool
	// Answering, with Probe, is the answer that keeps the address: what
	// answered for it on the wire.
	Answering *WireAnswer
}

func keep(format string, args ...any) Decision {
	return Decision{Message: fmt.Sprintf(format, args...)}
}

func release(reason Reason, format string, args ...any) Decision {
	return Decision{Release: true, Reason: reason, Message: fmt.Sprintf(format, args...)}
}

// NeedsSiblings reports whether Decide consults Facts.Siblings for r given
// its pod: only when the owning pod exists with the owner's UID.
func NeedsSiblings(r *tenurev1alpha1.IPReservation, pod *PodFact) bool {
	o := r.Spec.Owner
	return o.Kind == tenurev1alpha1.OwnerPod && pod != nil && pod.Exists && pod.UID == o.UID && o.ContainerID != ""
}

// NeedsNode reports whether Decide consults Facts.Node for r given its pod:
// only when the owning pod is terminating or terminal on owner.node.
func NeedsNode(r *tenurev1alpha1.IPReservation, pod *PodFact) bool {
	o := r.Spec.Owner
	return o.Kind == tenurev1alpha1.OwnerPod && o.Node != "" && pod != nil && pod.Exists && pod.UID == o.UID &&
		(pod.Terminating || pod.Terminal) && pod.NodeName == o.Node
}

// Decide says whether r is to be released.
func Decide(r *tenurev1alpha1.IPReservation, f Facts, p Policy) Decision {
	o := r.Spec.Owner
	if o.Kind == tenurev1alpha1.OwnerAdministrator {
		return keep("an address an administrator set aside: only tenurectl release gives it back")
	}
	if o.UID == "" || o.Namespace == "" || o.Name == "" {
		return keep("owner is incomplete (namespace %q, name %q, uid %q)", o.Namespace, o.Name, o.UID)
	}
	switch o.Kind {
	case tenurev1alpha1.OwnerPod:
		return decidePod(r, f, p)
	case tenurev1alpha1.OwnerIPAMClaim:
		return decideClaim(r, f)
	}
	return keep("owner kind %q is not known", o.Kind)
}

func decidePod(r *tenurev1alpha1.IPReservation, f Facts, p Policy) Decision {
	o := r.Spec.Owner
	pod := f.Pod
	switch {
	case pod == nil:
		return keep("pod %s/%s: state unknown", o.Namespace, o.Name)
	case !pod.Exists:
		return release(PodGone, "pod %s/%s (uid %s) no longer exists", o.Namespace, o.Name, o.UID)
	case pod.UID == "":
		return keep("pod %s/%s: uid unknown", o.Namespace, o.Name)
	case pod.UID != o.UID:
		return release(PodReplaced, "pod %s/%s is now uid %s; uid %s, which held this reservation, no longer exists",
			o.Namespace, o.Name, pod.UID, o.UID)
	}
	if NeedsSiblings(r, pod) && f.SiblingsKnown {
		// NeedsNode implies MadeOnPodsNode: a reservation of another node
		// meets no rule below.
		if !MadeOnPodsNode(r, pod) {
			return keep("pod %s/%s (uid %s) exists on node %s; this reservation says it was made on node %s, where the pod has no sandbox, so no rule of its siblings applies to it",
				o.Namespace, o.Name, o.UID, orNone(pod.NodeName), orNone(o.Node))
		}
		evidence := Evidence(r, pod, f.Siblings)
		if d, ok := earlierSandbox(r, f, evidence); ok {
			return d
		}
		if d, ok := duplicatePod(r, f, evidence); ok {
			if d.Release || d.AskLive || !NeedsNode(r, pod) {
				return d
			}
		}
	}
	if !NeedsNode(r, pod) {
		return keep("pod %s/%s (uid %s) exists", o.Namespace, o.Name, o.UID)
	}
	state := "terminating"
	if !pod.Terminating {
		state = "terminal"
	}
	node := f.Node
	switch {
	case node == nil:
		return keep("pod %s/%s is %s; node %s: state unknown", o.Namespace, o.Name, state, o.Node)
	case !node.Exists:
		return release(NodeDeleted, "pod %s/%s (uid %s) is %s on node %s, which was deleted", o.Namespace, o.Name, o.UID, state, o.Node)
	case node.Ready && node.OutOfService:
		return keep("pod %s/%s is %s on Ready node %s: its kubelet runs the DEL (the taint %s counts once the node is not Ready)",
			o.Namespace, o.Name, state, o.Node, corev1.TaintNodeOutOfService)
	case node.Ready:
		return keep("pod %s/%s is %s on Ready node %s: its kubelet runs the DEL", o.Namespace, o.Name, state, o.Node)
	case node.OutOfService:
		return release(NodeOutOfService, "pod %s/%s (uid %s) is %s on node %s, which is not Ready and carries the taint %s: fenced",
			o.Namespace, o.Name, o.UID, state, o.Node, corev1.TaintNodeOutOfService)
	}
	down := f.Now.Sub(node.NotReadySince)
	if p.ReleaseUnfenced && down >= p.NodeGracePeriod {
		return decideWire(r, f, p, fmt.Sprintf("pod %s/%s (uid %s) is %s on node %s, NotReady for %s (grace period %s), not fenced",
			o.Namespace, o.Name, o.UID, state, o.Node, down.Round(time.Second), p.NodeGracePeriod))
	}
	d := keep("pod %s/%s is %s on node %s, NotReady for %s: %s", o.Namespace, o.Name, state, o.Node, down.Round(time.Second), FenceWait(o.Node))
	if p.ReleaseUnfenced {
		d.Message += fmt.Sprintf(", or for the end of its %s grace period", p.NodeGracePeriod)
		d.RecheckAfter = p.NodeGracePeriod - down
	}
	d.Fence = o.Node
	return d
}

// decideWire decides a release that NodeNotReady makes due: the node may
// still run the pod, so the address is released only once an agent of a
// Ready node other than the owner node probed it on the wire, after the
// current request, and heard nothing. While anything answers, or while no
// such agent has answered, it is kept, waiting for the node to be fenced
// as well.
func decideWire(r *tenurev1alpha1.IPReservation, f Facts, p Policy, what string) Decision {
	o, addr, w := r.Spec.Owner, r.Spec.Address, f.Wire
	if r.Spec.Kind != tenurev1alpha1.KindAddress {
		// A delegated prefix is routed, not claimed on the segment: no
		// probe says whether the node still routes it.
		d := keep("%s; a delegated prefix is not probed on the wire: %s", what, FenceWait(o.Node))
		d.Fence = o.Node
		return d
	}
	d := Decision{Probe: true, Fence: o.Node}
	iv := p.probeInterval()
	switch {
	case w == nil:
		d.Message = fmt.Sprintf("%s; whether anything answers for %s on the wire is for a live read of its IPProbe to say", what, addr)
		d.AskLive = true
		return d
	case !w.Asked:
		d.Message = fmt.Sprintf("%s; asking the agents of other nodes whether anything answers for %s on the wire before releasing it, or %s", what, addr, FenceWait(o.Node))
		d.RecheckAfter = iv
		return d
	}
	age := f.Now.Sub(w.AskedAt)
	d.RecheckAfter = iv - age
	if d.RecheckAfter <= 0 {
		d.Reask, d.RecheckAfter = true, iv
	}
	for i := range w.Answers {
		if a := &w.Answers[i]; a.Result == tenurev1alpha1.ProbeAnswered {
			d.Answering = a
			d.Message = fmt.Sprintf("%s; %s answers on the wire from MAC %s (%s, heard by node %s on %s): kept while anything answers for it, or %s",
				what, addr, orNone(a.MAC), orNone(a.Kind), a.Node, orNone(a.Interface), FenceWait(o.Node))
			return d
		}
	}
	for _, a := range w.Answers {
		if a.Result == tenurev1alpha1.ProbeSilent && a.NodeReady {
			return release(NodeNotReady, "%s; nothing answered for %s on the wire (node %s probed it on %s)", what, addr, a.Node, orNone(a.Interface))
		}
	}
	var heard []string
	for _, a := range w.Answers {
		switch {
		case a.Result == tenurev1alpha1.ProbeFailed:
			heard = append(heard, fmt.Sprintf("node %s could not probe: %s", a.Node, orNone(a.Message)))
		case !a.NodeReady:
			heard = append(heard, fmt.Sprintf("node %s heard nothing but is not Ready", a.Node))
		}
	}
	so := ""
	if len(heard) > 0 {
		so = " (" + strings.Join(heard, "; ") + ")"
	}
	if age < iv {
		d.Message = fmt.Sprintf("%s; waiting for an agent of a Ready node other than %s to probe %s on the wire, asked %s ago%s, or %s",
			what, o.Node, addr, age.Round(time.Second), so, FenceWait(o.Node))
		return d
	}
	d.Message = fmt.Sprintf("%s; no agent of a Ready node other than %s probed %s on the wire within %s of the request%s: no other node has served network %s, or their agents are down; %s",
		what, o.Node, addr, iv, so, r.Spec.Network, FenceWait(o.Node))
	return d
}

// FenceWait says what the addresses of a terminating pod on a node that
// is not Ready wait for, and what would release them.
func FenceWait(node string) string {
	return fmt.Sprintf("waiting for node %s to be fenced (kubectl taint node %s %s=nodeshutdown:NoExecute, or delete the Node)",
		node, node, corev1.TaintNodeOutOfService)
}

func decideClaim(r *tenurev1alpha1.IPReservation, f Facts) Decision {
	o := r.Spec.Owner
	c := f.Claim
	switch {
	case c == nil:
		return keep("IPAMClaim %s/%s: state unknown", o.Namespace, o.Name)
	case !c.Exists:
		return release(ClaimGone, "IPAMClaim %s/%s (uid %s) no longer exists", o.Namespace, o.Name, o.UID)
	case c.UID == "":
		return keep("IPAMClaim %s/%s: uid unknown", o.Namespace, o.Name)
	case c.UID != o.UID:
		return release(ClaimGone, "IPAMClaim %s/%s is now uid %s; uid %s, which held this reservation, no longer exists",
			o.Namespace, o.Name, c.UID, o.UID)
	case c.Deleting && len(c.WaitingFor) > 0:
		return keep("IPAMClaim %s/%s (uid %s) is being deleted; waiting for %s %s before releasing this reservation",
			o.Namespace, o.Name, o.UID, plural(len(c.WaitingFor), "finalizer", "finalizers"), strings.Join(c.WaitingFor, ", "))
	case c.Deleting:
		return release(ClaimDeleted, "IPAMClaim %s/%s (uid %s) is being deleted", o.Namespace, o.Name, o.UID)
	}
	if d, ok := duplicateClaim(r, f); ok {
		return d
	}
	return keep("IPAMClaim %s/%s (uid %s) exists", o.Namespace, o.Name, o.UID)
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

func short(id string) string {
	if len(id) > 16 {
		return id[:16]
	}
	return id
}

// family is 4 or 6 for the reservation's address or prefix, 0 if unparsable.
func family(r *tenurev1alpha1.IPReservation) int {
	s := r.Spec.Address
	var a netip.Addr
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return 0
		}
		a = p.Addr()
	} else {
		var err error
		if a, err = netip.ParseAddr(s); err != nil {
			return 0
		}
	}
	if a.Unmap().Is4() {
		return 4
	}
	return 6
}

// sameSlot reports whether two reservations fill the same slot of the same
// pod attachment: same pod UID, interface, network, kind and family.
func sameSlot(a, b *tenurev1alpha1.IPReservation) bool {
	oa, ob := a.Spec.Owner, b.Spec.Owner
	return ob.Kind == tenurev1alpha1.OwnerPod && oa.Kind == tenurev1alpha1.OwnerPod && oa.UID == ob.UID &&
		oa.Interface == ob.Interface && a.Spec.Network == b.Spec.Network && a.Spec.Kind == b.Spec.Kind &&
		family(a) != 0 && family(a) == family(b)
}

// MadeOnPodsNode reports whether pod-owned r says it was made on the node
// its pod runs on. Any node may write a reservation that names any pod;
// only one its pod's node made is that pod's sandbox.
func MadeOnPodsNode(r *tenurev1alpha1.IPReservation, pod *PodFact) bool {
	return pod != nil && pod.NodeName != "" && r.Spec.Owner.Node == pod.NodeName
}

// Evidence is what of siblings may speak against pod-owned r: the
// reservations of the same owner (kind, namespace, name and UID) that were
// made on the node the pod runs on, and none when r was not. So a
// reservation another node wrote naming the pod (a decoy) makes no rule
// release anything of the pod: the sandboxes of a pod are those of its own
// node.
func Evidence(r *tenurev1alpha1.IPReservation, pod *PodFact, siblings []*tenurev1alpha1.IPReservation) []*tenurev1alpha1.IPReservation {
	if !MadeOnPodsNode(r, pod) {
		return nil
	}
	o := r.Spec.Owner
	out := make([]*tenurev1alpha1.IPReservation, 0, len(siblings))
	for _, s := range siblings {
		if s == nil {
			continue
		}
		so := s.Spec.Owner
		if so.Kind == o.Kind && so.Namespace == o.Namespace && so.Name == o.Name && so.UID == o.UID && MadeOnPodsNode(s, pod) {
			out = append(out, s)
		}
	}
	return out
}

// earlierSandbox applies EarlierSandbox to pod-owned r, whose pod exists
// with the owner's UID, given the evidence of its siblings. The pod's
// network-status outranks a sandbox's claims: what it lists on r's
// interface is in use, whatever sandbox is newer. Without network-status
// facts (a cache does not keep them) it keeps r and asks for the live read.
func earlierSandbox(r *tenurev1alpha1.IPReservation, f Facts, evidence []*tenurev1alpha1.IPReservation) (Decision, bool) {
	n := NewerSandbox(r, evidence)
	if n == nil {
		return Decision{}, false
	}
	o := r.Spec.Owner
	what := fmt.Sprintf("pod %s/%s interface %s: sandbox %s got %s (reservation %s) after sandbox %s got this one",
		o.Namespace, o.Name, o.Interface, short(n.Spec.Owner.ContainerID), n.Spec.Address, n.Name, short(o.ContainerID))
	ns := f.NetworkStatus
	switch {
	case ns == nil:
		d := keep("%s; whether the pod still uses this one is for a live read of its network-status to say", what)
		d.AskLive = true
		return d, true
	case ns.Err != nil:
		return keep("%s; whether the pod still uses this one is unknown: %v", what, ns.Err), true
	case ns.lists(r):
		return keep("%s; its network-status lists %s on %s, so the pod uses it", what, r.Spec.Address, o.Interface), true
	}
	return release(EarlierSandbox, "%s, which never got its DEL", what), true
}

// NewerSandbox returns the newest reservation among siblings that fills the
// same slot as r but was made by another sandbox (containerID), when it is
// newer than every reservation of r's own sandbox in that slot; nil when
// r's sandbox is the newest.
func NewerSandbox(r *tenurev1alpha1.IPReservation, siblings []*tenurev1alpha1.IPReservation) *tenurev1alpha1.IPReservation {
	if r.Spec.Owner.Kind != tenurev1alpha1.OwnerPod || r.Spec.Owner.ContainerID == "" || family(r) == 0 {
		return nil
	}
	newest := r
	for _, s := range siblings {
		if s == nil || s.Spec.Owner.ContainerID == "" || !sameSlot(r, s) {
			continue
		}
		if Newer(s, newest) {
			newest = s
		}
	}
	if newest.Spec.Owner.ContainerID == r.Spec.Owner.ContainerID {
		return nil
	}
	return newest
}

// Newer orders reservations by creation: creationTimestamp (whole seconds),
// then resourceVersion (reservations are never updated, so it is the
// creation revision; comparable since Kubernetes 1.35, KEP-5504), then
// name as the last tie-break.
func Newer(a, b *tenurev1alpha1.IPReservation) bool {
	ta, tb := a.CreationTimestamp.Time, b.CreationTimestamp.Time
	if !ta.Equal(tb) {
		return ta.After(tb)
	}
	if c, err := resourceversion.CompareResourceVersion(a.ResourceVersion, b.ResourceVersion); err == nil && c != 0 {
		return c > 0
	}
	return a.Name > b.Name
}

// PodFactOf summarises a pod; nil means NotFound.
func PodFactOf(p *corev1.Pod) *PodFact {
	if p == nil {
		return &PodFact{}
	}
	return &PodFact{
		Exists:      true,
		UID:         string(p.UID),
		NodeName:    p.Spec.NodeName,
		Terminating: p.DeletionTimestamp != nil,
		Terminal:    p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed,
	}
}

// NodeFactOf summarises a node; nil means NotFound.
func NodeFactOf(n *corev1.Node) *NodeFact {
	if n == nil {
		return &NodeFact{}
	}
	f := &NodeFact{Exists: true, NotReadySince: n.CreationTimestamp.Time}
	for _, c := range n.Status.Conditions {
		if c.Type != corev1.NodeReady {
			continue
		}
		f.Ready = c.Status == corev1.ConditionTrue
		if !c.LastTransitionTime.IsZero() {
			f.NotReadySince = c.LastTransitionTime.Time
		}
	}
	for _, t := range n.Spec.Taints {
		if t.Key == corev1.TaintNodeOutOfService {
			f.OutOfService = true
		}
	}
	return f
}

// ClaimFactOf summarises a claim; nil means NotFound.
func ClaimFactOf(c *ipamclaimsv1alpha1.IPAMClaim) *ClaimFact {
	if c == nil {
		return &ClaimFact{}
	}
	f := &ClaimFact{Exists: true, UID: string(c.UID), Deleting: c.DeletionTimestamp != nil}
	if f.Deleting {
		f.WaitingFor = claims.OtherFinalizers(c)
	}
	f.Recorded, f.Unreadable = recordedBy(claims.ParseStatus(c.Status))
	return f
}
