//go:build integration

package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/containernetworking/cni/pkg/types"

	ipamclaimsv1alpha1 "github.com/tenure-ipam/tenure/api/ipamclaims/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/admission"
	"github.com/tenure-ipam/tenure/internal/agent"
	"github.com/tenure-ipam/tenure/test/testbed"
)

// claimState is what a victim's claim holds: its status lists and owner,
// and its reservations by name and UID.
type claimState struct {
	ips, prefixes []string
	owner         string
	held          map[string]string
}

func claimStateOf(t *testing.T, ctx context.Context, c client.Client, ns, name string) claimState {
	t.Helper()
	cl := getClaim(t, ctx, c, ns, name)
	s := claimState{ips: cl.Status.IPs, prefixes: cl.Status.DelegatedPrefixes, held: claimReservations(t, ctx, string(cl.UID))}
	if cl.Status.OwnerPod != nil {
		s.owner = cl.Status.OwnerPod.Name
	}
	return s
}

func (s claimState) String() string {
	return fmt.Sprintf("ips %v, delegatedPrefixes %v, ownerPod %q, reservations %v", s.ips, s.prefixes, s.owner, s.held)
}

func (s claimState) equal(o claimState) bool {
	if !slices.Equal(s.ips, o.ips) || !slices.Equal(s.prefixes, o.prefixes) || s.owner != o.owner || len(s.held) != len(o.held) {
		return false
	}
	for name, uid := range s.held {
		if o.held[name] != uid {
			return false
		}
	}
	return true
}

// wantNotPresented fails unless err is a CNI error of code naming the
// pod, the claim and want.
func wantNotPresented(t *testing.T, err error, code uint, p pod, claim, want string) {
	t.Helper()
	if err == nil {
		t.Fatalf("the ADD of pod %s/%s succeeded, want it refused: %s", p.ns, p.name, want)
	}
	msg := err.Error()
	if cniCode(err) != code || !strings.Contains(msg, "pod "+p.ns+"/"+p.name) || !strings.Contains(msg, "IPAMClaim "+p.ns+"/"+claim) || !strings.Contains(msg, want) {
		t.Fatalf("the ADD of pod %s/%s failed with code %d %q; want code %d naming the pod, IPAMClaim %s/%s and %q", p.ns, p.name, cniCode(err), msg, code, p.ns, claim, want)
	}
}

const presentIPAM = `{"ipRanges":[{"range":"10.96.0.0/24"},{"range":"fd00:96::/64"}],
	"prefix_delegation":{"range":"fd00:9600::/55","prefix_length":56},"network_name":"presentnet"}`

// TestAMirrorPodPresentsNoClaim: a mirror pod on node A (the kubelet
// writes those itself, in any namespace, with any annotations) naming the
// claim of a workload on node B gets no ADD: a CNI error naming the pod,
// the claim and why, and B's claim status and reservations stay as they
// were. The ADD of a pod of B, which presents the claim, still works.
func TestAMirrorPodPresentsNoClaim(t *testing.T) {
	ctx := testContext(t, 2*time.Minute)
	c := apiClient(t)
	agents := startAgents(t, ctx, "mirror-a", "mirror-b")
	const ns, network = "e2e-mirror", "presentnet"
	conf := func(p pod) []byte { return netconf(network, agents[p.node].Socket, presentIPAM) }
	claim := createClaim(t, ctx, c, ns, "vm1", network)
	onB := newPod(t, ctx, c, ns, "mirror-b", vmAnnotations(network, claim.Name))
	if _, err := add(ctx, onB, conf(onB)); err != nil {
		t.Fatalf("the ADD of B's pod: %v", err)
	}
	before := claimStateOf(t, ctx, c, ns, claim.Name)

	for _, tc := range []struct {
		name string
		mark func(p *corev1.Pod)
	}{
		{"static-by-annotation", func(p *corev1.Pod) { p.Annotations[corev1.MirrorPodAnnotationKey] = "a1b2c3" }},
		{"static-by-node-owner", func(p *corev1.Pod) {
			node := &corev1.Node{}
			if err := c.Get(ctx, client.ObjectKey{Name: "mirror-a"}, node); err != nil {
				t.Fatal(err)
			}
			p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID}}
		}},
	} {
		m := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: tc.name + "-mirror-a", Annotations: vmAnnotations(network, claim.Name)},
			Spec: corev1.PodSpec{NodeName: "mirror-a", Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}}}
		tc.mark(m)
		if err := c.Create(ctx, m); err != nil {
			t.Fatal(err)
		}
		p := pod{ns: ns, name: m.Name, uid: string(m.UID), node: "mirror-a", containerID: "sandbox-" + string(m.UID)}
		_, err := add(ctx, p, conf(p))
		wantNotPresented(t, err, agent.CodeNotPresented, p, claim.Name, "mirror pod")
	}
	if after := claimStateOf(t, ctx, c, ns, claim.Name); !after.equal(before) {
		t.Fatalf("B's claim: %s after the mirror pods' ADDs, %s before", after, before)
	}
	if _, err := add(ctx, onB, conf(onB)); err != nil {
		t.Fatalf("B's pod's retried ADD: %v", err)
	}
}

// TestADeletingPodPresentsNoClaim: a pod being deleted (its node may keep
// it running as long as it likes) naming a claim gets no ADD: a CNI error
// naming the pod, the claim and why, and the claim stays empty.
func TestADeletingPodPresentsNoClaim(t *testing.T) {
	ctx := testContext(t, time.Minute)
	c := apiClient(t)
	agents := startAgents(t, ctx, "deleting-a")
	const ns, network = "e2e-deleting", "presentnet"
	claim := createClaim(t, ctx, c, ns, "vm1", network)
	p := newPod(t, ctx, c, ns, "deleting-a", vmAnnotations(network, claim.Name))
	obj := &corev1.Pod{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: p.name}, obj); err != nil {
		t.Fatal(err)
	}
	obj.Finalizers = append(obj.Finalizers, "e2e.tenure.dev/hold")
	if err := c.Update(ctx, obj); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cur := &corev1.Pod{}
		if err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: p.name}, cur); err == nil {
			cur.Finalizers = nil
			_ = c.Update(context.Background(), cur)
		}
	})
	if err := c.Delete(ctx, obj); err != nil {
		t.Fatal(err)
	}
	// The agent reads the pod from its cache: wait until it may have seen
	// the deletion, by the API's word.
	poll(t, ctx, 10*time.Second, "the pod being deleted", func() bool {
		return c.Get(ctx, client.ObjectKey{Namespace: ns, Name: p.name}, obj) == nil && obj.DeletionTimestamp != nil
	})
	var err error
	poll(t, ctx, 10*time.Second, "the agent refusing the deleting pod", func() bool {
		_, err = add(ctx, p, netconf(network, agents["deleting-a"].Socket, presentIPAM))
		return err != nil
	})
	wantNotPresented(t, err, agent.CodeNotPresented, p, claim.Name, "being deleted")
	if st := claimStateOf(t, ctx, c, ns, claim.Name); len(st.ips)+len(st.prefixes)+len(st.held) > 0 || st.owner != "" {
		t.Fatalf("the claim holds %s after the deleting pod's ADD", st)
	}
}

// TestOnlyTheVMIsPodsPresentItsClaim: with KubeVirt's API served, the
// claim of a VM is presented by the pods its VMI names (status.activePods,
// the migration's target pod) and by no other: a pod on node B naming the
// claim that the VMI does not list gets 11 naming the pod, the claim and
// the VMI; the webhook refuses a third node's agent, where another such
// pod runs, a reservation for the claim and its ownerPod; the VM's claim
// stays as it was; and the migration target the VMI lists gets the VM's
// addresses.
func TestOnlyTheVMIsPodsPresentItsClaim(t *testing.T) {
	ctx := testContext(t, 3*time.Minute)
	c := apiClient(t)
	installKubeVirtCRDs(t, ctx)
	agents := startAgents(t, ctx, "vmipods-a", "vmipods-b")
	waitVMIsServed(t, ctx, agents["vmipods-a"], agents["vmipods-b"])
	ipam := `{"ipRanges":[{"range":"10.96.1.0/24"}],"prefix_delegation":{"range":"fd00:9601::/55","prefix_length":56},"network_name":"vmipods"}`
	conf := func(p pod) []byte { return netconf("dhcpnet", agents[p.node].Socket, ipam) }

	vm := createVM(t, ctx, c, "e2e-vmipods", "vm1", "02:00:00:96:00:01")
	vm.Start(ctx, t, c)
	src := launcher(t, ctx, c, vm, "vmipods-a", "")
	if _, err := add(ctx, src, conf(src)); err != nil {
		t.Fatalf("the ADD of the VMI's pod: %v", err)
	}
	vm.Running(ctx, t, c, src.launcher())
	before := claimStateOf(t, ctx, c, vm.Namespace, vm.Claim)

	// A pod of B naming the claim, as the launcher does, that KubeVirt
	// never listed.
	stray := newPod(t, ctx, c, vm.Namespace, "vmipods-b", map[string]string{"k8s.v1.cni.cncf.io/networks": fmt.Sprintf(
		`[{"name":%q,"namespace":%q,"interface":%q,"ipam-claim-reference":%q}]`, kvNAD, vm.Namespace, testbed.LauncherInterface(vm.Network), vm.Claim)})
	stray.ifName = testbed.LauncherInterface(vm.Network)
	_, err := add(ctx, stray, conf(stray))
	wantNotPresented(t, err, types.ErrTryAgainLater, stray, vm.Claim, "status.activePods")
	if !strings.Contains(err.Error(), "VirtualMachineInstance "+vm.Namespace+"/"+vm.Name) {
		t.Fatalf("the refusal %q does not name the VMI", err)
	}
	if after := claimStateOf(t, ctx, c, vm.Namespace, vm.Claim); !after.equal(before) {
		t.Fatalf("the VM's claim: %s after the stray pod's ADD, %s before", after, before)
	}

	// The webhook counts the stray pod no more than the agent does: the
	// agent of a third node where such a pod runs may neither reserve for
	// the claim nor move its ownerPod there, and is told why.
	third := newNodeAgent(t, ctx, "vmipods-c")
	strayC := newPod(t, ctx, c, vm.Namespace, third.node, map[string]string{"k8s.v1.cni.cncf.io/networks": fmt.Sprintf(
		`[{"name":%q,"namespace":%q,"interface":%q,"ipam-claim-reference":%q}]`, kvNAD, vm.Namespace, testbed.LauncherInterface(vm.Network), vm.Claim)})
	vmClaim := getClaim(t, ctx, c, vm.Namespace, vm.Claim)
	err = third.c.Create(ctx, heldFor(third.node, "vmipods", "10.96.1.200", vmClaim, strayC.name))
	wantRefused(t, "a reservation for the VM's claim by a pod its VMI does not list", err, admission.RuleReservationClaim)
	if err != nil && !strings.Contains(err.Error(), "status.activePods") {
		t.Errorf("the refusal %q does not say the VMI does not list the pod", err)
	}
	err = updateStatusFresh(ctx, c, third.c, vm.Namespace, vm.Claim, func(s *ipamclaimsv1alpha1.IPAMClaimStatus) {
		s.OwnerPod = &ipamclaimsv1alpha1.OwnerPod{Name: strayC.name}
	})
	wantRefused(t, "ownerPod of the VM's claim to a pod its VMI does not list", err, admission.RuleClaimStatusPresented)
	if after := claimStateOf(t, ctx, c, vm.Namespace, vm.Claim); !after.equal(before) {
		t.Fatalf("the VM's claim: %s after the third node's writes, %s before", after, before)
	}

	// The migration's target, which virt-controller lists: the VM's items.
	m := kvMigration{uid: "migration-1", src: src}
	m.dst = launcher(t, ctx, c, vm, "vmipods-b", m.uid)
	got, err := add(ctx, m.dst, conf(m.dst))
	if err != nil {
		t.Fatalf("the ADD of the migration target: %v", err)
	}
	srcAddrs := before.ips
	if len(srcAddrs) != 1 || len(addrs(got)) != 1 || !strings.HasPrefix(srcAddrs[0], addrs(got)[0]+"/") {
		t.Fatalf("the migration target got %v, the claim records %v", addrs(got), srcAddrs)
	}
	if after := claimStateOf(t, ctx, c, vm.Namespace, vm.Claim); !after.equal(before) {
		t.Fatalf("the VM's claim: %s after the target's ADD, %s before", after, before)
	}
}

// TestClaimStatusIsAppendOnlyByPosition: with a token bound to its agent
// pod, node A's agent presenting a claim (a real pod of A names it, beside
// B's) may append to its status, one item per slot, and nothing else:
// reordering, prepending, removing and a second item in a slot are refused
// by the webhook, naming the rule, and the claim stays as B recorded it.
func TestClaimStatusIsAppendOnlyByPosition(t *testing.T) {
	ctx := testContext(t, 2*time.Minute)
	admin := apiClient(t)
	const ns, network = "e2e-appendonly", "appendnet"
	a, b := newNodeAgent(t, ctx, "append-a"), newNodeAgent(t, ctx, "append-b")
	claim := createClaim(t, ctx, admin, ns, "shared", network)
	presentOn(t, ctx, b.node, "shared-b", claim)
	presentOn(t, ctx, a.node, "shared-a", claim)
	v4 := heldFor(b.node, network, "10.77.0.2", claim, "shared-b")
	v6 := heldFor(b.node, network, "fd00:77::2", claim, "shared-b")
	for _, r := range []client.Object{v4, v6} {
		if err := b.c.Create(ctx, r); err != nil {
			t.Fatalf("B reserves for the claim: %v", err)
		}
	}
	// A's reservations the claim owns: what A could record.
	a4 := heldFor(a.node, network, "10.77.0.9", claim, "shared-a")
	a6 := heldFor(a.node, network, "fd00:77::9", claim, "shared-a")
	for _, r := range []client.Object{a4, a6} {
		if err := a.c.Create(ctx, r); err != nil {
			t.Fatalf("A reserves for the claim: %v", err)
		}
	}
	write := func(w nodeAgent, change func(*ipamclaimsv1alpha1.IPAMClaimStatus)) error {
		return updateStatusFresh(ctx, admin, w.c, ns, claim.Name, change)
	}
	if err := write(b, func(s *ipamclaimsv1alpha1.IPAMClaimStatus) {
		s.IPs, s.OwnerPod = []string{"10.77.0.2/24"}, &ipamclaimsv1alpha1.OwnerPod{Name: "shared-b"}
	}); err != nil {
		t.Fatalf("B records its address: %v", err)
	}
	if err := write(b, func(s *ipamclaimsv1alpha1.IPAMClaimStatus) { s.IPs = append(s.IPs, "fd00:77::2/64") }); err != nil {
		t.Fatalf("B appends its IPv6 address: %v", err)
	}
	before := claimStateOf(t, ctx, admin, ns, claim.Name)
	for _, tc := range []struct {
		what   string
		change func(*ipamclaimsv1alpha1.IPAMClaimStatus)
		rule   string
	}{
		{"reorder ips", func(s *ipamclaimsv1alpha1.IPAMClaimStatus) { s.IPs = []string{s.IPs[1], s.IPs[0]} }, admission.RuleClaimStatusAppendOnly},
		{"prepend its address to ips", func(s *ipamclaimsv1alpha1.IPAMClaimStatus) { s.IPs = append([]string{"10.77.0.9/24"}, s.IPs...) }, admission.RuleClaimStatusAppendOnly},
		// The CEL policy refuses these first, on the request alone.
		{"replace B's address with its own", func(s *ipamclaimsv1alpha1.IPAMClaimStatus) { s.IPs[0] = "10.77.0.9/24" }, "claim-status-keeps-ips"},
		{"drop B's IPv6 address", func(s *ipamclaimsv1alpha1.IPAMClaimStatus) { s.IPs = s.IPs[:1] }, "claim-status-keeps-ips"},
		{"a second IPv4 address", func(s *ipamclaimsv1alpha1.IPAMClaimStatus) { s.IPs = append(s.IPs, "10.77.0.9/24") }, admission.RuleClaimStatusOnePerSlot},
		{"a second IPv6 address", func(s *ipamclaimsv1alpha1.IPAMClaimStatus) { s.IPs = append(s.IPs, "fd00:77::9/64") }, admission.RuleClaimStatusOnePerSlot},
	} {
		wantRefused(t, "A: "+tc.what, write(a, tc.change), tc.rule)
	}
	if after := claimStateOf(t, ctx, admin, ns, claim.Name); !after.equal(before) {
		t.Fatalf("the claim: %s after A's writes, %s before", after, before)
	}
}

// updateStatusFresh sends w's status update of the claim on a fresh read
// (admin's), again while it meets a conflict: a verdict is never a 409.
func updateStatusFresh(ctx context.Context, admin, w client.Client, ns, name string, change func(*ipamclaimsv1alpha1.IPAMClaimStatus)) error {
	for {
		cl := &ipamclaimsv1alpha1.IPAMClaim{}
		if err := admin.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, cl); err != nil {
			return err
		}
		if cl.Status.IPs == nil {
			cl.Status.IPs = []string{}
		}
		change(&cl.Status)
		err := w.Status().Update(ctx, cl)
		if !apierrors.IsConflict(err) || ctx.Err() != nil {
			return err
		}
	}
}
