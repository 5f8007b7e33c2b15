package admission

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	ipamclaimsv1alpha1 "github.com/tenure-ipam/tenure/api/ipamclaims/v1alpha1"
	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/claims"
	"github.com/tenure-ipam/tenure/internal/kubevirt"
	"github.com/tenure-ipam/tenure/internal/reservation"
)

const ns = "vms"

func claimObj(name string, status ...string) *ipamclaimsv1alpha1.IPAMClaim {
	c := &ipamclaimsv1alpha1.IPAMClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + name)},
		Spec: ipamclaimsv1alpha1.IPAMClaimSpec{Network: "net", Interface: "net1"}}
	for _, s := range status {
		if strings.HasSuffix(s, "/56") {
			c.Status.DelegatedPrefixes = append(c.Status.DelegatedPrefixes, s)
		} else {
			c.Status.IPs = append(c.Status.IPs, s)
		}
	}
	return c
}

// kubeVirtClaim is a claim as KubeVirt's ipam-extensions makes it for VM
// name: owned by the VM, labelled with it.
func kubeVirtClaim(name string) *ipamclaimsv1alpha1.IPAMClaim {
	c := claimObj(name)
	c.Labels = map[string]string{claims.LabelKubeVirtVM: name}
	c.OwnerReferences = []metav1.OwnerReference{{APIVersion: "kubevirt.io/v1", Kind: "VirtualMachine", Name: name, UID: "uid-vm-" + types.UID(name)}}
	return c
}

func withOwner(c *ipamclaimsv1alpha1.IPAMClaim, pod string) *ipamclaimsv1alpha1.IPAMClaim {
	c = c.DeepCopy()
	c.Status.OwnerPod = &ipamclaimsv1alpha1.OwnerPod{Name: pod}
	return c
}

func podOn(name, node, claim string) corev1.Pod {
	p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + name)}, Spec: corev1.PodSpec{NodeName: node}}
	if claim != "" {
		p.Annotations = map[string]string{"k8s.v1.cni.cncf.io/networks": fmt.Sprintf(`[{"name":"net","interface":"net1","ipam-claim-reference":%q}]`, claim)}
	}
	return p
}

func stsPod(name, node, sts string) corev1.Pod {
	p := podOn(name, node, "")
	yes := true
	p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "StatefulSet", Name: sts, UID: "uid-sts-" + types.UID(sts), Controller: &yes}}
	return p
}

func res(item, node string, claim *ipamclaimsv1alpha1.IPAMClaim, pod string) *tenurev1alpha1.IPReservation {
	p := netip.MustParsePrefix(item)
	kind := tenurev1alpha1.KindAddress
	if p.Bits() < p.Addr().BitLen() {
		kind = tenurev1alpha1.KindDelegatedPrefix
	}
	o := tenurev1alpha1.ReservationOwner{Kind: tenurev1alpha1.OwnerPod, Namespace: ns, Name: pod, UID: "uid-" + pod, PodName: pod, Node: node}
	if claim != nil {
		o.Kind, o.Name, o.UID = tenurev1alpha1.OwnerIPAMClaim, claim.Name, string(claim.UID)
	}
	return reservation.New(reservation.Spec{Network: "net", Kind: kind, Item: p, Range: item, Owner: o})
}

func check(t *testing.T, name string, v Verdict, rule string) {
	t.Helper()
	switch {
	case rule == "" && !v.Allowed:
		t.Errorf("%s: refused %q, want allowed", name, v.Message)
	case rule != "" && v.Allowed:
		t.Errorf("%s: allowed, want refused by [%s]", name, rule)
	case rule != "" && (v.Rule != rule || !strings.HasPrefix(v.Message, "["+rule+"] ")):
		t.Errorf("%s: refused by [%s] %q, want [%s]", name, v.Rule, v.Message, rule)
	}
}

func TestPresents(t *testing.T) {
	vm := claimObj("vm")
	sticky := claims.NewStickyClaim(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web-0"}}, "net1", "net",
		metav1.OwnerReference{APIVersion: "apps/v1", Kind: "StatefulSet", Name: "web", UID: "uid-sts-web"})
	done := podOn("done", "a", "vm")
	done.Status.Phase = corev1.PodSucceeded
	other := podOn("x", "a", "vm")
	other.Namespace = "elsewhere"
	mirror := podOn("static", "a", "vm")
	mirror.Annotations[corev1.MirrorPodAnnotationKey] = "hash"
	nodeOwned := podOn("static2", "a", "vm")
	nodeOwned.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: "a", UID: "uid-node-a"}}
	deleting := podOn("going", "a", "vm")
	deleting.DeletionTimestamp = &metav1.Time{}
	kv := kubeVirtClaim("kv")
	active, target, stray := podOn("launcher-a", "a", "kv"), podOn("launcher-b", "b", "kv"), podOn("stray-a", "a", "kv")
	vmi := &kubevirt.VMI{Namespace: ns, Name: "kv", NodeName: "a", ActivePods: map[string]string{string(active.UID): "a"},
		Migration: &kubevirt.Migration{SourceNode: "a", SourcePod: "launcher-a", TargetNode: "b", TargetPod: "launcher-b"}}
	targetElsewhere := podOn("launcher-b", "c", "kv")
	otherVMI := &kubevirt.VMI{Namespace: ns, Name: "kv2", ActivePods: vmi.ActivePods}
	for _, tc := range []struct {
		name  string
		pod   corev1.Pod
		claim *ipamclaimsv1alpha1.IPAMClaim
		vmi   *kubevirt.VMI
		want  bool
	}{
		{"network element names the claim", podOn("p", "a", "vm"), vm, nil, true},
		{"a mirror pod (annotation) naming the claim", mirror, vm, nil, false},
		{"a mirror pod (owned by its Node) naming the claim", nodeOwned, vm, nil, false},
		{"a pod being deleted", deleting, vm, nil, false},
		{"the VMI's active pod", active, kv, vmi, true},
		{"the VMI's migration target pod", target, kv, vmi, true},
		{"a pod the VMI does not name", stray, kv, vmi, false},
		{"the target pod's name on another node than the migration's target", targetElsewhere, kv, vmi, false},
		{"the VM's claim while its VMI does not exist", active, kv, nil, false},
		{"another VMI naming the pod", active, kv, otherVMI, false},
		{"element names another claim", podOn("p", "a", "other"), vm, nil, false},
		{"no networks annotation", podOn("p", "a", ""), vm, nil, false},
		{"finished pod", done, vm, nil, false},
		{"pod of another namespace", other, vm, nil, false},
		{"the sticky claim's StatefulSet pod", stsPod("web-0", "a", "web"), sticky, nil, true},
		{"a pod of that name of another StatefulSet", stsPod("web-0", "a", "webx"), sticky, nil, false},
		{"another pod of the StatefulSet", stsPod("web-1", "a", "web"), sticky, nil, false},
		{"the pod's name without a StatefulSet", podOn("web-0", "a", ""), sticky, nil, false},
	} {
		if got := Presents(&tc.pod, tc.claim, claims.LookupOf(tc.vmi)); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestReservationCreate(t *testing.T) {
	vm := claimObj("vm")
	pods := []corev1.Pod{podOn("launcher-a", "a", "vm"), podOn("launcher-b", "b", "vm"), podOn("plain-a", "a", "")}
	forged := vm.DeepCopy()
	forged.UID = "uid-other"
	badLabel := res("10.0.0.1/32", "a", nil, "plain-a")
	badLabel.Labels[reservation.LabelOwnerUID] = "uid-someone"
	for _, tc := range []struct {
		name  string
		r     *tenurev1alpha1.IPReservation
		claim *ipamclaimsv1alpha1.IPAMClaim
		rule  string
	}{
		{"a pod's reservation (the CEL policy's to judge)", res("10.0.0.1/32", "a", nil, "plain-a"), nil, ""},
		{"the claim's, for its pod on the node", res("10.0.0.2/32", "a", vm, "launcher-a"), vm, ""},
		{"the claim's, naming its pod on another node", res("10.0.0.2/32", "a", vm, "launcher-b"), vm, RuleReservationClaim},
		{"the claim's, naming a pod that does not present it", res("10.0.0.2/32", "a", vm, "plain-a"), vm, RuleReservationClaim},
		{"a claim that does not exist", res("10.0.0.2/32", "a", vm, "launcher-a"), nil, RuleReservationClaim},
		{"a claim's name with another UID", res("10.0.0.2/32", "a", vm, "launcher-a"), forged, RuleReservationClaim},
		{"owner-uid label not the owner's", badLabel, nil, RuleReservationOwnerLabel},
	} {
		check(t, tc.name, ReservationCreate("a", tc.r, tc.claim, pods, claims.LookupOf(nil)), tc.rule)
	}
	check(t, "a claim no pod of the node presents", ReservationCreate("c", res("10.0.0.2/32", "c", vm, "launcher-a"), vm, pods, claims.LookupOf(nil)), RuleReservationClaim)
	mirror := podOn("static-a", "a", "vm")
	mirror.Annotations[corev1.MirrorPodAnnotationKey] = "hash"
	check(t, "for a claim a mirror pod names", ReservationCreate("a", res("10.0.0.2/32", "a", vm, "static-a"), vm, []corev1.Pod{mirror}, nil), RuleReservationClaim)
	kv := kubeVirtClaim("kv")
	kvPods := []corev1.Pod{podOn("launcher-a", "a", "kv"), podOn("stray-a", "a", "kv")}
	vmi := &kubevirt.VMI{Namespace: ns, Name: "kv", NodeName: "a", ActivePods: map[string]string{"uid-launcher-a": "a"}}
	check(t, "for a VM's claim, by the VMI's pod", ReservationCreate("a", res("10.0.0.2/32", "a", kv, "launcher-a"), kv, kvPods, claims.LookupOf(vmi)), "")
	check(t, "for a VM's claim, by a pod the VMI does not name", ReservationCreate("a", res("10.0.0.2/32", "a", kv, "stray-a"), kv, kvPods, claims.LookupOf(vmi)), RuleReservationClaim)
	check(t, "for a VM's claim whose VMI does not exist", ReservationCreate("a", res("10.0.0.2/32", "a", kv, "launcher-a"), kv, kvPods, claims.LookupOf(nil)), RuleReservationClaim)
}

func TestReservationDelete(t *testing.T) {
	vm := claimObj("vm", "10.0.0.2/24", "fd00:1::/56")
	pods := []corev1.Pod{podOn("launcher-a", "a", "vm"), podOn("launcher-b", "b", "vm")}
	for _, tc := range []struct {
		name  string
		node  string
		r     *tenurev1alpha1.IPReservation
		claim *ipamclaimsv1alpha1.IPAMClaim
		rule  string
	}{
		{"a pod's (the CEL policy's)", "a", res("10.0.0.1/32", "a", nil, "p"), nil, ""},
		{"rollback of an unrecorded item made here", "a", res("10.0.0.3/32", "a", vm, "launcher-a"), vm, ""},
		{"a recorded address made here (hole 2: the VM moved)", "a", res("10.0.0.2/32", "a", vm, "launcher-a"), vm, RuleReservationRollback},
		{"the recorded prefix made here", "a", res("fd00:1::/56", "a", vm, "launcher-a"), vm, RuleReservationRollback},
		{"made on another node", "a", res("10.0.0.3/32", "b", vm, "launcher-b"), vm, RuleReservationRollback},
		{"no pod of the node presents the claim any more", "c", res("10.0.0.3/32", "c", vm, "launcher-a"), vm, RuleReservationRollback},
		{"the claim is gone (the controller releases)", "a", res("10.0.0.3/32", "a", vm, "launcher-a"), nil, RuleReservationRollback},
	} {
		check(t, tc.name, ReservationDelete(tc.node, tc.r, tc.claim, pods, claims.LookupOf(nil)), tc.rule)
	}
}

func TestClaimStatusUpdate(t *testing.T) {
	empty := claimObj("vm")
	filled := withOwner(claimObj("vm", "10.0.0.2/24", "fd00:1::/56"), "launcher-a")
	pods := []corev1.Pod{podOn("launcher-a", "a", "vm"), podOn("launcher-a2", "a", "vm"), podOn("launcher-b", "b", "vm"), podOn("plain-a", "a", "")}
	owned := []tenurev1alpha1.IPReservation{*res("10.0.0.2/32", "a", empty, "launcher-a"), *res("fd00:1::/56", "a", empty, "launcher-a"), *res("fd00::5/128", "b", empty, "launcher-b")}
	strange := *res("10.0.0.9/32", "a", claimObj("other"), "launcher-a")
	strange.Labels[reservation.LabelOwnerUID] = string(empty.UID)
	vmiOnB := &kubevirt.VMI{Namespace: ns, Name: "vm", NodeName: "b"}
	vmiOnA := &kubevirt.VMI{Namespace: ns, Name: "vm", NodeName: "a"}
	for _, tc := range []struct {
		name     string
		node     string
		old, new *ipamclaimsv1alpha1.IPAMClaim
		owned    []tenurev1alpha1.IPReservation
		vmi      *kubevirt.VMI
		rule     string
	}{
		{"first ADD records what the claim holds", "a", empty, withOwner(claimObj("vm", "10.0.0.2/24", "fd00:1::/56"), "launcher-a"), owned, nil, ""},
		{"a bare IP in status.ips", "a", empty, withOwner(claimObj("vm", "10.0.0.2"), "launcher-a"), owned, nil, ""},
		{"hole 4: an address no reservation of the claim holds", "a", empty, withOwner(claimObj("vm", "10.0.0.7/24"), "launcher-a"), owned, nil, RuleClaimStatusItemsOwned},
		{"hole 4: a prefix no reservation of the claim holds", "a", empty, withOwner(claimObj("vm", "fd00:2::/56"), "launcher-a"), owned, nil, RuleClaimStatusItemsOwned},
		{"an item held by another claim under this claim's label", "a", empty, withOwner(claimObj("vm", "10.0.0.9/24"), "launcher-a"), append(owned, strange), nil, RuleClaimStatusItemsOwned},
		{"unparsable item", "a", empty, withOwner(claimObj("vm", "nonsense"), "launcher-a"), owned, nil, RuleClaimStatusItemsOwned},
		{"a grown configuration adds a held address", "b", filled, withOwner(claimObj("vm", "10.0.0.2/24", "fd00::5/64", "fd00:1::/56"), "launcher-a"), owned, nil, ""},
		{"condition only, from the node of a migration target", "b", filled, filled, nil, nil, ""},
		{"no pod of the node presents the claim", "c", filled, filled, owned, nil, RuleClaimStatusPresented},
		{"hole 1: ownerPod to a pod of another node", "a", filled, withOwner(filled, "launcher-b"), owned, nil, RuleClaimStatusOwnerPod},
		{"hole 1: ownerPod to an invented name", "a", filled, withOwner(filled, "nobody"), owned, nil, RuleClaimStatusOwnerPod},
		{"ownerPod to a local pod not presenting it", "a", filled, withOwner(filled, "plain-a"), owned, nil, RuleClaimStatusOwnerPod},
		{"without KubeVirt the migration target takes ownerPod", "b", filled, withOwner(filled, "launcher-b"), owned, nil, ""},
		{"the VM runs on the source: the target may not take ownerPod", "b", filled, withOwner(filled, "launcher-b"), owned, vmiOnA, RuleClaimStatusOwnerPodVM},
		{"the VM runs here after the switchover", "b", filled, withOwner(filled, "launcher-b"), owned, vmiOnB, ""},
		{"another local presenter", "a", filled, withOwner(filled, "launcher-a2"), owned, vmiOnA, ""},
	} {
		check(t, tc.name, ClaimStatusUpdate(tc.node, tc.old, tc.new, ClaimStatus{Pods: pods, Owned: tc.owned, VMI: tc.vmi}), tc.rule)
	}
}

func TestClaimStatusIsAppendOnlyByPosition(t *testing.T) {
	pods := []corev1.Pod{podOn("launcher-a", "a", "vm")}
	owned := []tenurev1alpha1.IPReservation{}
	claim := func(ips, prefixes []string) *ipamclaimsv1alpha1.IPAMClaim {
		c := withOwner(claimObj("vm"), "launcher-a")
		c.Status.IPs, c.Status.DelegatedPrefixes = ips, prefixes
		return c
	}
	for _, item := range []string{"10.0.0.2/32", "10.0.0.3/32", "fd00::5/128", "fd00::6/128", "fd00:1::/56", "fd00:2::/56"} {
		owned = append(owned, *res(item, "a", claimObj("vm"), "launcher-a"))
	}
	v4, v4b, v6, v6b := "10.0.0.2/24", "10.0.0.3/24", "fd00::5/64", "fd00::6/64"
	p1, p2 := "fd00:1::/56", "fd00:2::/56"
	for _, tc := range []struct {
		name     string
		old, new *ipamclaimsv1alpha1.IPAMClaim
		rule     string
	}{
		{"the first ADD records both families and the prefix", claim(nil, nil), claim([]string{v4, v6}, []string{p1}), ""},
		{"a grown configuration appends the other family", claim([]string{v4}, nil), claim([]string{v4, v6}, nil), ""},
		{"a grown configuration appends the prefix", claim([]string{v4}, nil), claim([]string{v4}, []string{p1}), ""},
		{"nothing changes but the condition", claim([]string{v4, v6}, []string{p1}), claim([]string{v4, v6}, []string{p1}), ""},
		{"reorder ips", claim([]string{v4, v6}, nil), claim([]string{v6, v4}, nil), RuleClaimStatusAppendOnly},
		{"prepend to ips", claim([]string{v6}, nil), claim([]string{v4, v6}, nil), RuleClaimStatusAppendOnly},
		{"remove from ips", claim([]string{v4, v6}, nil), claim([]string{v4}, nil), RuleClaimStatusAppendOnly},
		{"replace an address", claim([]string{v4}, nil), claim([]string{v4b}, nil), RuleClaimStatusAppendOnly},
		{"the same address in another prefix length", claim([]string{v4}, nil), claim([]string{"10.0.0.2/32"}, nil), RuleClaimStatusAppendOnly},
		{"prepend a delegated prefix", claim(nil, []string{p1}), claim(nil, []string{p2, p1}), RuleClaimStatusAppendOnly},
		{"remove the delegated prefix", claim(nil, []string{p1}), claim(nil, nil), RuleClaimStatusAppendOnly},
		{"a second IPv4 address appended", claim([]string{v4}, nil), claim([]string{v4, v4b}, nil), RuleClaimStatusOnePerSlot},
		{"a second IPv6 address appended", claim([]string{v4, v6}, nil), claim([]string{v4, v6, v6b}, nil), RuleClaimStatusOnePerSlot},
		{"two IPv4 addresses at once", claim(nil, nil), claim([]string{v4, v4b}, nil), RuleClaimStatusOnePerSlot},
		{"a second delegated prefix", claim(nil, []string{p1}), claim(nil, []string{p1, p2}), RuleClaimStatusOnePerSlot},
	} {
		check(t, tc.name, ClaimStatusUpdate("a", tc.old, tc.new, ClaimStatus{Pods: pods, Owned: owned}), tc.rule)
	}
}

func TestAMirrorPodPresentsNoClaimToTheWebhook(t *testing.T) {
	filled := withOwner(claimObj("vm", "10.0.0.2/24"), "launcher-b")
	mirror := podOn("static-a", "a", "vm")
	mirror.Annotations[corev1.MirrorPodAnnotationKey] = "hash"
	owned := []tenurev1alpha1.IPReservation{*res("10.0.0.2/32", "b", claimObj("vm"), "launcher-b"), *res("10.0.0.7/32", "a", claimObj("vm"), "static-a")}
	for _, tc := range []struct {
		name string
		pods []corev1.Pod
		new  *ipamclaimsv1alpha1.IPAMClaim
		rule string
	}{
		{"ownerPod moved to the mirror pod", []corev1.Pod{mirror}, withOwner(filled, "static-a"), RuleClaimStatusPresented},
		{"ownerPod moved to the mirror pod beside a real presenter", []corev1.Pod{mirror, podOn("launcher-a", "a", "vm")}, withOwner(filled, "static-a"), RuleClaimStatusOwnerPod},
		{"an address appended for the mirror pod", []corev1.Pod{mirror}, withOwner(claimObj("vm", "10.0.0.2/24", "fd00::7/64"), "launcher-b"), RuleClaimStatusPresented},
	} {
		v := ClaimStatusUpdate("a", filled, tc.new, ClaimStatus{Pods: tc.pods, Owned: owned})
		check(t, tc.name, v, tc.rule)
		if !v.Allowed && tc.rule == RuleClaimStatusPresented && !strings.Contains(v.Message, "mirror pod") {
			t.Errorf("%s: %q does not say the pod is a mirror pod", tc.name, v.Message)
		}
	}
}

func TestClaimCreate(t *testing.T) {
	pod := stsPod("web-0", "a", "web")
	good := claims.NewStickyClaim(&pod, "net1", "net", *metav1.GetControllerOf(&pod))
	mutate := func(f func(c *ipamclaimsv1alpha1.IPAMClaim)) *ipamclaimsv1alpha1.IPAMClaim {
		c := good.DeepCopy()
		f(c)
		return c
	}
	plain := podOn("web-0", "a", "")
	onB := stsPod("web-0", "b", "web")
	for _, tc := range []struct {
		name string
		c    *ipamclaimsv1alpha1.IPAMClaim
		pod  *corev1.Pod
		rule string
	}{
		{"the sticky claim of a StatefulSet pod of the node", good, &pod, ""},
		{"hole 5: a claim that is not sticky (a KubeVirt claim's name)", claimObj("vm"), nil, RuleClaimCreateSticky},
		{"the sticky claim of a pod of another node", good, &onB, RuleClaimCreateSticky},
		{"for a pod that does not exist", good, nil, RuleClaimCreateSticky},
		{"for a pod no StatefulSet controls", good, &plain, RuleClaimCreateSticky},
		{"another name", mutate(func(c *ipamclaimsv1alpha1.IPAMClaim) { c.Name = "vm" }), &pod, RuleClaimCreateSticky},
		{"an extra label", mutate(func(c *ipamclaimsv1alpha1.IPAMClaim) { c.Labels["x"] = "y" }), &pod, RuleClaimCreateSticky},
		{"a controlling owner", mutate(func(c *ipamclaimsv1alpha1.IPAMClaim) { yes := true; c.OwnerReferences[0].Controller = &yes }), &pod, RuleClaimCreateSticky},
		{"another owner UID", mutate(func(c *ipamclaimsv1alpha1.IPAMClaim) { c.OwnerReferences[0].UID = "x" }), &pod, RuleClaimCreateSticky},
		{"a finalizer", mutate(func(c *ipamclaimsv1alpha1.IPAMClaim) { c.Finalizers = []string{"x/y"} }), &pod, RuleClaimCreateSticky},
		{"labelled sticky without the StatefulSet label", mutate(func(c *ipamclaimsv1alpha1.IPAMClaim) { delete(c.Labels, claims.LabelStatefulSet) }), &pod, RuleClaimCreateSticky},
	} {
		check(t, tc.name, ClaimCreate("a", tc.c, tc.pod), tc.rule)
	}
}

func TestEventWrite(t *testing.T) {
	vm := claimObj("vm")
	podA, podB := podOn("launcher-a", "a", "vm"), podOn("web-b", "b", "")
	pods := []corev1.Pod{podA, podB}
	aboutPod := func(p *corev1.Pod, uid string) EventSubject {
		return EventSubject{Subject: Subject{APIVersion: "v1", Kind: "Pod", Namespace: ns, Name: "x", UID: uid}, Pod: p}
	}
	aboutClaim := EventSubject{Subject: Subject{APIVersion: "k8s.cni.cncf.io/v1alpha1", Kind: "IPAMClaim", Namespace: ns, Name: "vm"}, Claim: vm, Pods: pods}
	for _, tc := range []struct {
		name string
		node string
		s    []EventSubject
		rule string
	}{
		{"about a pod of the node", "a", []EventSubject{aboutPod(&podA, string(podA.UID))}, ""},
		{"about a claim a pod of the node presents", "a", []EventSubject{aboutClaim}, ""},
		{"hole 6: about a pod of another node", "a", []EventSubject{aboutPod(&podB, "")}, RuleEventSubject},
		{"about a pod that does not exist", "a", []EventSubject{aboutPod(nil, "")}, RuleEventSubject},
		{"about an earlier pod of the name", "a", []EventSubject{aboutPod(&podA, "uid-old")}, RuleEventSubject},
		{"hole 6: about a claim no pod of the node presents", "c", []EventSubject{aboutClaim}, RuleEventSubject},
		{"about a Node", "a", []EventSubject{{Subject: Subject{APIVersion: "v1", Kind: "Node", Name: "a"}}}, RuleEventSubject},
		{"a patch of another node's Event onto its own pod", "a", []EventSubject{aboutPod(&podA, ""), aboutPod(&podB, "")}, RuleEventSubject},
		{"no subject", "a", []EventSubject{{}}, RuleEventSubject},
	} {
		check(t, tc.name, EventWrite(tc.node, tc.s...), tc.rule)
	}
}

func TestCallerAndAgent(t *testing.T) {
	if !IsAgent("system:serviceaccount:other-ns:tenure-agent") || IsAgent("system:serviceaccount:tenure-system:tenure-controller") || IsAgent("tenure-agent") {
		t.Error("IsAgent")
	}
	for _, tc := range []struct {
		extra map[string][]string
		want  string
	}{
		{map[string][]string{extraPodName: {"agent-x"}, extraNodeName: {"a"}}, "a"},
		{map[string][]string{extraNodeName: {"a"}}, ""},
		{map[string][]string{extraPodName: {"agent-x"}, extraNodeName: {"a", "b"}}, ""},
		{nil, ""},
	} {
		if got := CallerNode(tc.extra); got != tc.want {
			t.Errorf("CallerNode(%v) = %q, want %q", tc.extra, got, tc.want)
		}
	}
}
