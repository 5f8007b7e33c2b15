// Package admission judges, for tenure-controller's validating webhook,
// the writes of tenure-agent that the node-restriction policy's CEL cannot:
// those whose answer lies in other objects (which pods run on the caller's
// node and present which claims, which reservations a claim owns, where a
// VM runs). The attacker it stands against has root on one node and so the
// agent's token, which the API server binds to that node.
//
// The decisions are pure functions of the request and of facts the server
// reads from the API server (Gather); each refusal names its rule in
// brackets, as the CEL policy's do.
package admission

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ipamclaimsv1alpha1 "github.com/tenure-ipam/tenure/api/ipamclaims/v1alpha1"
	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/claims"
	"github.com/tenure-ipam/tenure/internal/kubevirt"
	"github.com/tenure-ipam/tenure/internal/reservation"
)

// The rules, as refusals name them.
const (
	RuleNodeBoundToken        = "node-bound-token"
	RuleReservationClaim      = "reservation-claim-presented"
	RuleReservationOwnerLabel = "reservation-owner-label"
	RuleReservationRollback   = "reservation-delete-claim-rollback"
	RuleClaimStatusPresented  = "claim-status-presented"
	RuleClaimStatusOwnerPod   = "claim-status-owner-pod-local"
	RuleClaimStatusOwnerPodVM = "claim-status-owner-pod-vm-node"
	RuleClaimStatusItemsOwned = "claim-status-items-owned"
	RuleClaimStatusAppendOnly = "claim-status-append-only"
	RuleClaimStatusOnePerSlot = "claim-status-one-per-slot"
	RuleClaimCreateSticky     = "claim-create-sticky"
	RuleEventSubject          = "event-subject"
	RuleUnjudged              = "admission-unjudged"
	RuleFacts                 = "admission-facts"
)

// Verdict is a decision: allowed, or refused by Rule with Message (which
// starts with the rule in brackets).
type Verdict struct {
	Allowed bool
	Rule    string
	Message string
}

// Allow is the verdict that lets a request through.
func Allow() Verdict { return Verdict{Allowed: true} }

func deny(rule, format string, args ...any) Verdict {
	return Verdict{Rule: rule, Message: "[" + rule + "] " + fmt.Sprintf(format, args...)}
}

// Presents reports whether pod presents claim: the pod names it, either
// by an element of its k8s.v1.cni.cncf.io/networks annotation whose
// ipam-claim-reference is the claim's name, or because the claim is the
// sticky StatefulSet claim of the pod (labelled sticky, annotated with the
// pod's name, named as claims.StickyClaimName names it for its interface,
// and the pod is that StatefulSet's); and claims.MayPresent lets it: no
// mirror pod, no pod being deleted or finished, and for a KubeVirt VM's
// claim only a pod its VirtualMachineInstance
// names as its own (vmis finds it; nil where the API serves no VMIs).
func Presents(pod *corev1.Pod, claim *ipamclaimsv1alpha1.IPAMClaim, vmis kubevirt.Lookup) bool {
	return pod != nil && claim != nil && names(pod, claim) && claims.MayPresent(pod, claim, vmis) == nil
}

// names reports whether pod names claim (Presents), whatever its kind or
// state.
func names(pod *corev1.Pod, claim *ipamclaimsv1alpha1.IPAMClaim) bool {
	if pod.Namespace != claim.Namespace {
		return false
	}
	// A claim's name (a DNS subdomain) needs no escaping in JSON: an
	// annotation that does not contain it names it nowhere, and is not
	// parsed.
	if a := pod.Annotations["k8s.v1.cni.cncf.io/networks"]; strings.Contains(a, claim.Name) {
		if elems, err := claims.Networks(pod); err == nil {
			for _, e := range elems {
				if e.IPAMClaimReference == claim.Name {
					return true
				}
			}
		}
	}
	s, sticky, err := claims.StickyOf(claim)
	if !sticky || err != nil || s.Pod != pod.Name || claim.Name != claims.StickyClaimName(pod.Name, claim.Spec.Interface) {
		return false
	}
	sts, _, ok := claims.StatefulSetOf(pod)
	return ok && sts.Name == s.StatefulSet
}

// presenters are the pods of node (pods: those the caller's node runs)
// that present claim, by name (vmis: as Presents takes it).
func presenters(node string, pods []corev1.Pod, claim *ipamclaimsv1alpha1.IPAMClaim, vmis kubevirt.Lookup) []string {
	var out []string
	for i := range pods {
		if pods[i].Spec.NodeName == node && Presents(&pods[i], claim, vmis) {
			out = append(out, pods[i].Name)
		}
	}
	slices.Sort(out)
	return out
}

// refusedPresenters says, for the pods of node that name claim but do not
// present it, why not: what a refusal adds so that it names the cause.
func refusedPresenters(node string, pods []corev1.Pod, claim *ipamclaimsv1alpha1.IPAMClaim, vmis kubevirt.Lookup) string {
	var why []string
	for i := range pods {
		p := &pods[i]
		if p.Spec.NodeName != node || !names(p, claim) {
			continue
		}
		if err := claims.MayPresent(p, claim, vmis); err != nil {
			why = append(why, err.Error())
		}
	}
	if len(why) == 0 {
		return ""
	}
	slices.Sort(why)
	return " (" + strings.Join(why, "; ") + ")"
}

// ReservationCreate judges the creation of r by the agent of node. A
// reservation owned by a claim is made by an ADD of a pod that presents
// the claim: spec.owner.podName must name a pod of node that does, and the
// owner's UID must be the claim's (claim: the claim spec.owner names, nil
// when it does not exist; pods: the pods of node in its namespace). The
// owner-UID label, by which the agent and controller find a claim's
// reservations, must be spec.owner.uid (deploy/policy checks it too, and
// is all that judges a pod's reservation: deploy/webhook does not send
// those). vmis finds the VirtualMachineInstance of a KubeVirt VM's claim
// (Presents).
func ReservationCreate(node string, r *tenurev1alpha1.IPReservation, claim *ipamclaimsv1alpha1.IPAMClaim, pods []corev1.Pod, vmis kubevirt.Lookup) Verdict {
	o := r.Spec.Owner
	if got := r.Labels[reservation.LabelOwnerUID]; got != o.UID {
		return deny(RuleReservationOwnerLabel, "reservation %s has label %s=%q but spec.owner.uid %q", r.Name, reservation.LabelOwnerUID, got, o.UID)
	}
	if o.Kind != tenurev1alpha1.OwnerIPAMClaim {
		return Allow()
	}
	if v := claimPresentedBy(node, o, claim, pods, vmis, RuleReservationClaim); !v.Allowed {
		return v
	}
	if local := presenters(node, pods, claim, vmis); !slices.Contains(local, o.PodName) {
		return deny(RuleReservationClaim, "reservation %s for IPAMClaim %s/%s names spec.owner.podName %q, which is no pod of node %s presenting that claim (presenting it there: %s)%s",
			r.Name, o.Namespace, o.Name, o.PodName, node, list(local), refusedPresenters(node, pods, claim, vmis))
	}
	return Allow()
}

func claimPresentedBy(node string, o tenurev1alpha1.ReservationOwner, claim *ipamclaimsv1alpha1.IPAMClaim, pods []corev1.Pod, vmis kubevirt.Lookup, rule string) Verdict {
	if claim == nil {
		return deny(rule, "IPAMClaim %s/%s of the reservation does not exist", o.Namespace, o.Name)
	}
	if string(claim.UID) != o.UID {
		return deny(rule, "the reservation names IPAMClaim %s/%s with UID %s, but that claim has UID %s", o.Namespace, o.Name, o.UID, claim.UID)
	}
	if len(presenters(node, pods, claim, vmis)) == 0 {
		return deny(rule, "no pod of node %s presents IPAMClaim %s/%s%s", node, o.Namespace, o.Name, refusedPresenters(node, pods, claim, vmis))
	}
	return Allow()
}

// ReservationDelete judges the deletion of r (the stored object) by the
// agent of node. Reservations owned by a pod are the CEL policy's to judge
// (node label and owner node). A claim's reservations are the controller's
// to release, except the rollback of a losing concurrent ADD: an item made
// on node that the claim's status does not record, while a pod of node
// presents the claim (vmis: as ReservationCreate takes it).
func ReservationDelete(node string, r *tenurev1alpha1.IPReservation, claim *ipamclaimsv1alpha1.IPAMClaim, pods []corev1.Pod, vmis kubevirt.Lookup) Verdict {
	o := r.Spec.Owner
	if o.Kind != tenurev1alpha1.OwnerIPAMClaim {
		return Allow()
	}
	if o.Node != node {
		return deny(RuleReservationRollback, "reservation %s of IPAMClaim %s/%s was made on node %s: only the controller releases it", r.Name, o.Namespace, o.Name, orNone(o.Node))
	}
	if v := claimPresentedBy(node, o, claim, pods, vmis, RuleReservationRollback); !v.Allowed {
		return v
	}
	item, err := reservation.ParseItem(r.Spec.Address)
	if err != nil {
		return deny(RuleReservationRollback, "reservation %s: spec.address %q: %v", r.Name, r.Spec.Address, err)
	}
	if recorded(claim.Status, item.Addr()) {
		return deny(RuleReservationRollback, "IPAMClaim %s/%s records %s: only the controller releases it", o.Namespace, o.Name, r.Spec.Address)
	}
	return Allow()
}

// recorded reports whether the claim's status records addr (an address of
// status.ips or the base of a delegated prefix), as the agent's rollback
// tells its own items from recorded ones.
func recorded(st ipamclaimsv1alpha1.IPAMClaimStatus, addr netip.Addr) bool {
	rec, _ := claims.ParseStatus(st)
	for _, p := range rec.Addresses {
		if p.Addr() == addr {
			return true
		}
	}
	for _, p := range rec.Prefixes {
		if p.Addr() == addr {
			return true
		}
	}
	return slices.Contains(st.IPs, addr.String())
}

// ClaimStatus is what a status update is judged on beyond the two claims.
type ClaimStatus struct {
	// Pods are the pods of the caller's node in the claim's namespace.
	Pods []corev1.Pod
	// Owned are the reservations whose owner-UID label is the claim's UID,
	// read from the API server (not a cache: the agent records an item
	// right after creating it); needed only where the update adds items
	// (AddsItems).
	Owned []tenurev1alpha1.IPReservation
	// VMI is the KubeVirt VirtualMachineInstance of the claim and its new
	// ownerPod where the API serves VMIs and one runs on a node (VMOf);
	// nil otherwise.
	VMI *kubevirt.VMI
	// VMIs finds the VirtualMachineInstance of a KubeVirt VM's claim,
	// which decides which pods present it (Presents); nil where the API
	// serves no VMIs.
	VMIs kubevirt.Lookup
}

// ClaimStatusUpdate judges a status update of a claim (old: stored, new:
// sent) by the agent of node. Some pod of node must present the claim
// (Presents). status.ips and status.delegatedPrefixes are append-only by
// position, with at most one item per slot (appendOnly): what every node
// serves and routes first stays first, and no item a node adds makes a
// slot ambiguous for the ADDs of another. A changed status.ownerPod must
// name a pod of node that presents the claim, and where KubeVirt's VMI
// says where the VM runs, a recorded ownerPod moves only to that node's
// pod. Addresses and prefixes may only be added when a reservation owned
// by the claim holds them. (What must never be dropped or changed is the
// CEL policy's as well.)
func ClaimStatusUpdate(node string, old, new *ipamclaimsv1alpha1.IPAMClaim, f ClaimStatus) Verdict {
	key := claims.Key(new)
	local := presenters(node, f.Pods, new, f.VMIs)
	if len(local) == 0 {
		return deny(RuleClaimStatusPresented, "no pod of node %s presents IPAMClaim %s: its agent may not write that claim's status%s",
			node, key, refusedPresenters(node, f.Pods, new, f.VMIs))
	}
	if v := appendOnly(old, new); !v.Allowed {
		return v
	}
	oldOwner, newOwner := ownerPod(old), ownerPod(new)
	if newOwner != oldOwner && newOwner != "" {
		if !slices.Contains(local, newOwner) {
			return deny(RuleClaimStatusOwnerPod, "status.ownerPod of IPAMClaim %s may only name a pod of node %s presenting it (%s), not %q%s",
				key, node, list(local), newOwner, refusedPresenters(node, f.Pods, new, f.VMIs))
		}
		if oldOwner != "" && f.VMI != nil && f.VMI.Node() != node {
			return deny(RuleClaimStatusOwnerPodVM, "IPAMClaim %s: VirtualMachineInstance %s/%s runs on node %s, so only that node's agent moves status.ownerPod (from %s)",
				key, f.VMI.Namespace, f.VMI.Name, f.VMI.Node(), oldOwner)
		}
	}
	var unowned []string
	addrs, prefixes, bad := added(old, new)
	if len(bad) > 0 {
		return deny(RuleClaimStatusItemsOwned, "IPAMClaim %s: unparsable %s", key, strings.Join(bad, ", "))
	}
	for _, p := range addrs {
		if !ownsItem(f.Owned, new, func(item netip.Prefix) bool { return item.Addr() == p.Addr() }) {
			unowned = append(unowned, p.String())
		}
	}
	for _, p := range prefixes {
		if !ownsItem(f.Owned, new, func(item netip.Prefix) bool { return item == p }) {
			unowned = append(unowned, p.String())
		}
	}
	if len(unowned) > 0 {
		return deny(RuleClaimStatusItemsOwned, "IPAMClaim %s (UID %s) holds no reservation of %s: its status may only gain what it holds",
			key, new.UID, strings.Join(unowned, ", "))
	}
	return Allow()
}

// appendOnly judges the lists of a claim's status: new's status.ips and
// status.delegatedPrefixes start with old's, item by item, and each item
// new appends fills a slot neither old nor an earlier appended item
// fills: one address per family (a configuration has at most one range of
// each), one delegated prefix (a claim is bound to one interface, which
// has one delegation pool). A slot old already holds twice is left as it
// is: the rule judges what a write adds.
func appendOnly(old, new *ipamclaimsv1alpha1.IPAMClaim) Verdict {
	key := claims.Key(new)
	for _, l := range []struct {
		field    string
		old, new []string
		slot     func(string) (string, bool)
	}{
		{"status.ips", old.Status.IPs, new.Status.IPs, addressSlot},
		{"status.delegatedPrefixes", old.Status.DelegatedPrefixes, new.Status.DelegatedPrefixes, func(string) (string, bool) { return "the delegated prefix", true }},
	} {
		for i, o := range l.old {
			switch {
			case i >= len(l.new):
				return deny(RuleClaimStatusAppendOnly, "IPAMClaim %s: %s drops %s (item %d): its items are only ever appended", key, l.field, o, i)
			case l.new[i] != o:
				return deny(RuleClaimStatusAppendOnly, "IPAMClaim %s: %s has %s as item %d, where it records %s: its items are only ever appended, never reordered, prepended or changed", key, l.field, l.new[i], i, o)
			}
		}
		for i := len(l.old); i < len(l.new); i++ {
			slot, ok := l.slot(l.new[i])
			if !ok {
				continue // unparsable: claim-status-items-owned names it
			}
			for j := 0; j < i; j++ {
				if other, ok := l.slot(l.new[j]); ok && other == slot {
					return deny(RuleClaimStatusOnePerSlot, "IPAMClaim %s: %s item %d, %s, is a second item of %s after %s: a claim records one item per slot", key, l.field, i, l.new[i], slot, l.new[j])
				}
			}
		}
	}
	return Allow()
}

// addressSlot is the slot of an item of status.ips (CIDR form, or a bare
// address): its family.
func addressSlot(item string) (string, bool) {
	a, err := netip.ParseAddr(item)
	if p, perr := netip.ParsePrefix(item); perr == nil {
		a, err = p.Addr(), nil
	}
	switch {
	case err != nil:
		return "", false
	case a.Is4():
		return "IPv4", true
	}
	return "IPv6", true
}

// added are the addresses and prefixes the status of new records that
// the status of old does not (an address by its IP), and what of new's
// cannot be parsed.
func added(old, new *ipamclaimsv1alpha1.IPAMClaim) (addrs, prefixes []netip.Prefix, bad []string) {
	oldRec, _ := claims.ParseStatus(old.Status)
	newRec, bad := claims.ParseStatus(new.Status)
	for _, p := range newRec.Addresses {
		if !slices.ContainsFunc(oldRec.Addresses, func(o netip.Prefix) bool { return o.Addr() == p.Addr() }) {
			addrs = append(addrs, p)
		}
	}
	for _, p := range newRec.Prefixes {
		if !slices.Contains(oldRec.Prefixes, p) {
			prefixes = append(prefixes, p)
		}
	}
	return addrs, prefixes, bad
}

// AddsItems reports whether a status update from old to new records an
// item old does not, or something unparsable: only then is it judged on
// the claim's reservations (ClaimStatus.Owned).
func AddsItems(old, new *ipamclaimsv1alpha1.IPAMClaim) bool {
	addrs, prefixes, bad := added(old, new)
	return len(addrs)+len(prefixes)+len(bad) > 0
}

func ownerPod(c *ipamclaimsv1alpha1.IPAMClaim) string {
	if c == nil || c.Status.OwnerPod == nil {
		return ""
	}
	return c.Status.OwnerPod.Name
}

func ownsItem(owned []tenurev1alpha1.IPReservation, claim *ipamclaimsv1alpha1.IPAMClaim, match func(netip.Prefix) bool) bool {
	for i := range owned {
		r := &owned[i]
		o := r.Spec.Owner
		if o.Kind != tenurev1alpha1.OwnerIPAMClaim || o.UID != string(claim.UID) || o.Namespace != claim.Namespace || o.Name != claim.Name ||
			r.DeletionTimestamp != nil {
			continue
		}
		if item, err := reservation.ParseItem(r.Spec.Address); err == nil && match(item) {
			return true
		}
	}
	return false
}

// ClaimCreate judges the creation of claim c by the agent of node. The
// agent creates only the sticky claim of a StatefulSet's pod on its node,
// exactly as claims.NewStickyClaim builds it (pod: the pod its annotation
// names, in its namespace; nil when there is none).
func ClaimCreate(node string, c *ipamclaimsv1alpha1.IPAMClaim, pod *corev1.Pod) Verdict {
	key := claims.Key(c)
	s, sticky, err := claims.StickyOf(c)
	switch {
	case !sticky:
		return deny(RuleClaimCreateSticky, "IPAMClaim %s is not labelled %s=true: the agent creates only a sticky StatefulSet pod's claim", key, claims.LabelSticky)
	case err != nil:
		return deny(RuleClaimCreateSticky, "%v", err)
	case pod == nil:
		return deny(RuleClaimCreateSticky, "IPAMClaim %s names pod %s/%s, which does not exist", key, c.Namespace, s.Pod)
	case pod.Spec.NodeName != node:
		return deny(RuleClaimCreateSticky, "IPAMClaim %s is for pod %s/%s of node %s, not of node %s", key, pod.Namespace, pod.Name, orNone(pod.Spec.NodeName), node)
	}
	sts, _, ok := claims.StatefulSetOf(pod)
	if !ok || sts.Name != s.StatefulSet {
		return deny(RuleClaimCreateSticky, "IPAMClaim %s names StatefulSet %s, but pod %s/%s is not its pod", key, s.StatefulSet, pod.Namespace, pod.Name)
	}
	want := claims.NewStickyClaim(pod, c.Spec.Interface, c.Spec.Network, sts)
	if c.Name != want.Name || !equality.Semantic.DeepEqual(c.Labels, want.Labels) ||
		!equality.Semantic.DeepEqual(c.Annotations, want.Annotations) || !sameOwners(c.OwnerReferences, want.OwnerReferences) ||
		len(c.Finalizers) > 0 {
		return deny(RuleClaimCreateSticky, "IPAMClaim %s is not the sticky claim of pod %s interface %s: want name %s, labels %v, annotations %v, owner StatefulSet %s uid %s, no finalizers",
			key, pod.Name, c.Spec.Interface, want.Name, want.Labels, want.Annotations, sts.Name, sts.UID)
	}
	return Allow()
}

func sameOwners(a, b []metav1.OwnerReference) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := a[i], b[i]
		if x.APIVersion != y.APIVersion || x.Kind != y.Kind || x.Name != y.Name || x.UID != y.UID ||
			(x.Controller != nil && *x.Controller) || (x.BlockOwnerDeletion != nil && *x.BlockOwnerDeletion) {
			return false
		}
	}
	return true
}

// Subject is the object an Event is about: involvedObject (core/v1) or
// regarding (events.k8s.io/v1).
type Subject struct {
	APIVersion, Kind, Namespace, Name, UID string
}

// EventSubject is what an Event write is judged on: its subject and, for
// a pod, that pod (nil when it does not exist); for a claim, the claim
// (nil when it does not exist) and the pods of the caller's node in its
// namespace.
type EventSubject struct {
	Subject Subject
	Pod     *corev1.Pod
	Claim   *ipamclaimsv1alpha1.IPAMClaim
	Pods    []corev1.Pod
	// VMIs finds the VirtualMachineInstance of a KubeVirt VM's claim
	// (Presents); nil where the API serves no VMIs.
	VMIs kubevirt.Lookup
}

// EventWrite judges an Event created or patched by the agent of node: it
// is about a pod of node, or a claim a pod of node presents. A patch is
// judged on the stored Event's subject as well as the sent one's.
func EventWrite(node string, subjects ...EventSubject) Verdict {
	for _, e := range subjects {
		s := e.Subject
		what := fmt.Sprintf("%s %s/%s", orNone(s.Kind), s.Namespace, s.Name)
		switch {
		case s.Kind == "Pod" && (s.APIVersion == "v1" || s.APIVersion == ""):
			if e.Pod == nil || e.Pod.Spec.NodeName != node || (s.UID != "" && s.UID != string(e.Pod.UID)) {
				return deny(RuleEventSubject, "the agent of node %s records Events only about pods of its node and the claims they present; %s is no pod of node %s", node, what, node)
			}
		case s.Kind == "IPAMClaim" && strings.HasPrefix(s.APIVersion, ipamclaimsv1alpha1.GroupVersion.Group+"/"):
			if e.Claim == nil || (s.UID != "" && s.UID != string(e.Claim.UID)) || len(presenters(node, e.Pods, e.Claim, e.VMIs)) == 0 {
				return deny(RuleEventSubject, "the agent of node %s records Events only about pods of its node and the claims they present; no pod of node %s presents %s", node, node, what)
			}
		default:
			return deny(RuleEventSubject, "the agent of node %s records Events only about pods and IPAMClaims, not about %s (apiVersion %s)", node, what, orNone(s.APIVersion))
		}
	}
	return Allow()
}

func list(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}
