//go:build integration

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"hash/fnv"
	"net/netip"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipamclaimsv1alpha1 "github.com/tenure-ipam/tenure/api/ipamclaims/v1alpha1"
	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/deploy"
	"github.com/tenure-ipam/tenure/internal/kube"
	"github.com/tenure-ipam/tenure/internal/reservation"
	"github.com/tenure-ipam/tenure/test/controlplane/cptest"
	"github.com/tenure-ipam/tenure/test/testbed"
)

// These tests act as agents directly against the API server, with the
// tokens the e2e agents run with (bound to an agent pod on their node), and
// show what the node-restriction policy of deploy/policy refuses and what
// it lets through. The agents' own work under the policy is every other
// test of this package: each agent runs with such a token, and
// startAgents fails a test whose agent the policy refused anything.

// nodeAgent is one node's agent identity: a Ready node, an agent pod bound
// to it, and clients with a token bound to that pod.
type nodeAgent struct {
	node string
	cfg  *rest.Config
	c    client.Client
}

func newNodeAgent(t testing.TB, ctx context.Context, node string) nodeAgent {
	t.Helper()
	if _, err := testbed.CreateNode(ctx, apiClient(t), node); err != nil {
		t.Fatal(err)
	}
	kc, err := testbed.NodeAgentKubeconfig(ctx, cptest.Current().Config, node, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := kube.RESTConfig(kc)
	if err != nil {
		t.Fatal(err)
	}
	return nodeAgent{node: node, cfg: cfg, c: tokenClient(t, cfg)}
}

func tokenClient(t testing.TB, cfg *rest.Config) client.Client {
	t.Helper()
	c, err := kube.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// agentToken is a client of the agent's service account with a token
// bound as given (nil: bound to nothing).
func agentToken(t *testing.T, ctx context.Context, bound *authv1.BoundObjectReference) client.Client {
	t.Helper()
	admin := cptest.Current().Config
	token, err := testbed.ServiceAccountToken(ctx, admin, testbed.AgentNamespace, testbed.AgentServiceAccount, bound)
	if err != nil {
		t.Fatal(err)
	}
	return tokenClient(t, testbed.WithToken(admin, token))
}

// heldBy is the reservation an agent of node makes for addr, owned by a pod
// or (claim set) by a claim.
func heldBy(node, network, addr string, claim *ipamclaimsv1alpha1.IPAMClaim) *tenurev1alpha1.IPReservation {
	return heldFor(node, network, addr, claim, "p-"+addr)
}

// podHeldBy is the reservation an agent of node makes for addr, owned by a
// pod of namespace np bound to node, which it creates: the webhook admits a
// pod's reservation only for a pod bound to the writer's node
// (reservation-pod-bound).
func podHeldBy(t *testing.T, ctx context.Context, node, network, addr string) *tenurev1alpha1.IPReservation {
	t.Helper()
	admin := apiClient(t)
	if err := testbed.EnsureNamespace(ctx, admin, "np"); err != nil {
		t.Fatal(err)
	}
	h := fnv.New32a()
	h.Write([]byte(node))
	name := fmt.Sprintf("p-%s-%08x", addr, h.Sum32())
	p, err := testbed.CreatePod(ctx, admin, "np", name, node, nil)
	if apierrors.IsAlreadyExists(err) {
		p = &corev1.Pod{}
		err = admin.Get(ctx, client.ObjectKey{Namespace: "np", Name: name}, p)
	}
	if err != nil {
		t.Fatal(err)
	}
	r := heldFor(node, network, addr, nil, name)
	o := r.Spec.Owner
	o.UID, o.PodUID = string(p.UID), string(p.UID)
	return reservation.New(reservation.Spec{Network: network, Kind: r.Spec.Kind, Item: netip.MustParsePrefix(addr + "/32"), Range: r.Spec.Range, Owner: o})
}

// heldFor is heldBy with the pod whose ADD made it (for a claim, the pod
// presenting the claim).
func heldFor(node, network, addr string, claim *ipamclaimsv1alpha1.IPAMClaim, podName string) *tenurev1alpha1.IPReservation {
	a := netip.MustParseAddr(addr)
	uid := fmt.Sprintf("00000000-0000-4000-8000-%012d", time.Now().UnixNano()%1e12)
	owner := tenurev1alpha1.ReservationOwner{Kind: tenurev1alpha1.OwnerPod, Namespace: "np", Name: podName, UID: uid,
		PodName: podName, PodUID: uid, ContainerID: "sandbox-" + uid, Interface: "net1", Node: node}
	if claim != nil {
		owner.Kind, owner.Namespace, owner.Name, owner.UID = tenurev1alpha1.OwnerIPAMClaim, claim.Namespace, claim.Name, string(claim.UID)
	}
	return reservation.New(reservation.Spec{Network: network, Kind: tenurev1alpha1.KindAddress,
		Item: netip.PrefixFrom(a, a.BitLen()), Range: "10.77.0.0/24", Owner: owner})
}

// wantRefused fails unless err is the policy's refusal by rule.
func wantRefused(t *testing.T, what string, err error, rule string) {
	t.Helper()
	switch {
	case err == nil:
		t.Errorf("%s: allowed, want refused by rule %s", what, rule)
	case !apierrors.IsForbidden(err) && !apierrors.IsInvalid(err):
		t.Errorf("%s: %v, want refused by rule %s", what, err, rule)
	case !(strings.Contains(err.Error(), testbed.AgentPolicyName) || strings.Contains(err.Error(), testbed.AgentWebhookName)) ||
		!strings.Contains(err.Error(), "["+rule+"]"):
		t.Errorf("%s: refused with %q, want the policy's or webhook's rule [%s] named", what, err, rule)
	default:
		t.Logf("%s: refused: %v", what, err)
	}
}

// presentOn creates a pod called name on node that presents claim (its
// network-selection element names the claim, as KubeVirt's virt-launcher
// pod's does), and returns name.
func presentOn(t testing.TB, ctx context.Context, node, name string, claim *ipamclaimsv1alpha1.IPAMClaim) string {
	t.Helper()
	if _, err := testbed.CreatePod(ctx, apiClient(t), claim.Namespace, name, node, vmAnnotations(claim.Spec.Network, claim.Name)); err != nil {
		t.Fatal(err)
	}
	return name
}

func wantAllowed(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Errorf("%s: %v, want allowed", what, err)
	}
}

func TestAgentTokenNamesItsNode(t *testing.T) {
	ctx := testContext(t, time.Minute)
	a := newNodeAgent(t, ctx, "np-whoami")
	cs, err := kubernetes.NewForConfig(a.cfg)
	if err != nil {
		t.Fatal(err)
	}
	review, err := cs.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	u := review.Status.UserInfo
	t.Logf("agent token user %s, extra %v", u.Username, u.Extra)
	if u.Username != "system:serviceaccount:"+testbed.AgentNamespace+":"+testbed.AgentServiceAccount {
		t.Errorf("user %q", u.Username)
	}
	if got := u.Extra["authentication.kubernetes.io/node-name"]; len(got) != 1 || got[0] != a.node {
		t.Errorf("extra node-name %v, want [%s]", got, a.node)
	}
	if got := u.Extra["authentication.kubernetes.io/node-uid"]; len(got) != 1 || got[0] == "" {
		t.Errorf("extra node-uid %v: the Node exists, its UID belongs in the token", got)
	}
	if len(u.Extra["authentication.kubernetes.io/pod-name"]) != 1 {
		t.Errorf("extra pod-name %v", u.Extra["authentication.kubernetes.io/pod-name"])
	}
}

// Two nodes' agents: each creates and deletes its own node's reservations,
// never the other's, and a claim's reservations only as the rollback of
// what it made itself; the administrator (and the controller) are not
// held by the policy.
func TestNodeRestrictionOnReservations(t *testing.T) {
	ctx := testContext(t, time.Minute)
	admin := apiClient(t)
	a, b := newNodeAgent(t, ctx, "np-a"), newNodeAgent(t, ctx, "np-b")
	const network = "np-res"
	claim := createClaim(t, ctx, admin, "np", "vm.np-res", network)

	own := podHeldBy(t, ctx, a.node, network, "10.77.0.1")
	wantAllowed(t, "A creates a reservation of node A", a.c.Create(ctx, own))

	forged := heldBy(b.node, network, "10.77.0.2", nil)
	wantRefused(t, "A creates a reservation of node B", a.c.Create(ctx, forged.DeepCopy()), "reservation-create-own-node")
	labelOnly := heldBy(a.node, network, "10.77.0.2", nil)
	labelOnly.Labels[reservation.LabelNode] = b.node
	wantRefused(t, "A creates a reservation labelled with node B", a.c.Create(ctx, labelOnly), "reservation-create-own-node")
	ownerOnly := heldBy(b.node, network, "10.77.0.2", nil)
	ownerOnly.Labels[reservation.LabelNode] = a.node
	wantRefused(t, "A creates a reservation of owner node B under its own label", a.c.Create(ctx, ownerOnly), "reservation-create-own-node")
	unlabelled := heldBy(a.node, network, "10.77.0.2", nil)
	delete(unlabelled.Labels, reservation.LabelNode)
	wantRefused(t, "A creates a reservation without a node label", a.c.Create(ctx, unlabelled), "reservation-create-own-node")

	// The owner-UID label finds a claim's reservations: a pod's reservation
	// labelled with a claim's UID would pass for the claim's. The policy
	// refuses it from the request alone; the webhook never sees a pod's
	// reservation.
	mislabelled := heldBy(a.node, network, "10.77.0.2", nil)
	mislabelled.Labels[reservation.LabelOwnerUID] = string(claim.UID)
	err := a.c.Create(ctx, mislabelled)
	wantRefused(t, "A creates its pod's reservation labelled with a claim's UID", err, "reservation-owner-label")
	if err != nil && !strings.Contains(err.Error(), testbed.AgentPolicyName) {
		t.Errorf("a pod's mislabelled reservation refused by %v, want the policy %s", err, testbed.AgentPolicyName)
	}
	unlabelledOwner := heldBy(a.node, network, "10.77.0.2", nil)
	delete(unlabelledOwner.Labels, reservation.LabelOwnerUID)
	wantRefused(t, "A creates its pod's reservation without the owner-UID label", a.c.Create(ctx, unlabelledOwner), "reservation-owner-label")

	theirs := podHeldBy(t, ctx, b.node, network, "10.77.0.3")
	wantAllowed(t, "B creates a reservation of node B", b.c.Create(ctx, theirs))
	wantRefused(t, "A deletes a reservation of node B", a.c.Delete(ctx, theirs.DeepCopy()), "reservation-delete-own-node")

	// A VM that started on B runs on A now: its claim's reservations were
	// made on B, and A may not release them.
	onB, onA := presentOn(t, ctx, b.node, "np-res-vm-b", claim), presentOn(t, ctx, a.node, "np-res-vm-a", claim)
	claimHeld := heldFor(b.node, network, "10.77.0.4", claim, onB)
	wantAllowed(t, "B creates a claim's reservation", b.c.Create(ctx, claimHeld))
	wantRefused(t, "A deletes a claim's reservation made on node B", a.c.Delete(ctx, claimHeld.DeepCopy()), "reservation-delete-claim-owned")

	// An ADD that lost the race for a claim's status rolls back what it
	// made for the claim: the agent's own node's, just made.
	claimMislabelled := heldFor(a.node, network, "10.77.0.5", claim, onA)
	claimMislabelled.Labels[reservation.LabelOwnerUID] = "00000000-0000-4000-8000-000000000000"
	wantRefused(t, "A creates a claim's reservation labelled with another UID", a.c.Create(ctx, claimMislabelled), "reservation-owner-label")
	rollback := heldFor(a.node, network, "10.77.0.5", claim, onA)
	wantAllowed(t, "A creates a claim's reservation", a.c.Create(ctx, rollback))
	wantAllowed(t, "A rolls back the claim's reservation it made", a.c.Delete(ctx, rollback, client.Preconditions{UID: &rollback.UID}))

	wantAllowed(t, "A deletes its own reservation", a.c.Delete(ctx, own, client.Preconditions{UID: &own.UID}))
	wantAllowed(t, "B deletes its own reservation", b.c.Delete(ctx, theirs))

	// Not the agent: unaffected.
	wantAllowed(t, "the administrator deletes the claim's reservation made on B", admin.Delete(ctx, claimHeld))
	ctlKC := t.TempDir() + "/controller.kubeconfig"
	if err := testbed.ServiceAccountKubeconfig(ctx, cptest.Current().Config, testbed.AgentNamespace, "tenure-controller", ctlKC); err != nil {
		t.Fatal(err)
	}
	ctlCfg, err := kube.RESTConfig(ctlKC)
	if err != nil {
		t.Fatal(err)
	}
	byController := heldFor(b.node, network, "10.77.0.6", claim, onB)
	if err := admin.Create(ctx, byController); err != nil {
		t.Fatal(err)
	}
	wantAllowed(t, "the controller (a token bound to nothing) releases a claim's reservation", tokenClient(t, ctlCfg).Delete(ctx, byController))
}

// A claim's status: an agent fills what is empty, adds what a grown
// configuration adds, and sets ownerPod (the migration target too); it
// never drops or changes a recorded address or prefix, nor clears ownerPod.
func TestNodeRestrictionOnClaimStatus(t *testing.T) {
	ctx := testContext(t, time.Minute)
	admin := apiClient(t)
	src, dst := newNodeAgent(t, ctx, "np-src"), newNodeAgent(t, ctx, "np-dst")
	claim := createClaim(t, ctx, admin, "np", "vm.np-status", "np-status")
	presentOn(t, ctx, src.node, "virt-launcher-src", claim)
	presentOn(t, ctx, dst.node, "virt-launcher-dst", claim)
	// What the status comes to record is held by the claim's reservations
	// (the webhook lets a status gain only those).
	for _, it := range []struct {
		node, item string
		kind       tenurev1alpha1.ReservationKind
	}{{src.node, "10.78.0.7/32", tenurev1alpha1.KindAddress}, {src.node, "fd00:7800:0:700::/56", tenurev1alpha1.KindDelegatedPrefix}, {dst.node, "fd00:78::7/128", tenurev1alpha1.KindAddress}} {
		r := reservation.New(reservation.Spec{Network: "np-status", Kind: it.kind, Item: netip.MustParsePrefix(it.item), Range: it.item,
			Owner: tenurev1alpha1.ReservationOwner{Kind: tenurev1alpha1.OwnerIPAMClaim, Namespace: claim.Namespace, Name: claim.Name, UID: string(claim.UID),
				PodName: "virt-launcher-src", Node: it.node}})
		if err := admin.Create(ctx, r); err != nil {
			t.Fatal(err)
		}
	}

	write := func(who nodeAgent, change func(*ipamclaimsv1alpha1.IPAMClaimStatus)) error {
		cl := getClaim(t, ctx, admin, "np", "vm.np-status")
		change(&cl.Status)
		return who.c.Status().Update(ctx, cl)
	}
	wantAllowed(t, "the source fills the empty status", write(src, func(s *ipamclaimsv1alpha1.IPAMClaimStatus) {
		s.IPs, s.DelegatedPrefixes = []string{"10.78.0.7/24"}, []string{"fd00:7800:0:700::/56"}
		s.OwnerPod = &ipamclaimsv1alpha1.OwnerPod{Name: "virt-launcher-src"}
		s.Conditions = []metav1.Condition{{Type: ipamclaimsv1alpha1.ConditionIPsAllocated, Status: metav1.ConditionTrue,
			Reason: ipamclaimsv1alpha1.ReasonSuccessfulAllocation, Message: "IPs allocated", LastTransitionTime: metav1.Now()}}
	}))
	wantAllowed(t, "the migration target sets ownerPod", write(dst, func(s *ipamclaimsv1alpha1.IPAMClaimStatus) {
		s.OwnerPod = &ipamclaimsv1alpha1.OwnerPod{Name: "virt-launcher-dst"}
	}))
	wantAllowed(t, "an agent adds the address of a range the network gained", write(dst, func(s *ipamclaimsv1alpha1.IPAMClaimStatus) {
		s.IPs = append(s.IPs, "fd00:78::7/64")
	}))

	wantRefused(t, "an agent changes a recorded address", write(dst, func(s *ipamclaimsv1alpha1.IPAMClaimStatus) {
		s.IPs[0] = "10.78.0.8/24"
	}), "claim-status-keeps-ips")
	wantRefused(t, "an agent drops a recorded address", write(src, func(s *ipamclaimsv1alpha1.IPAMClaimStatus) {
		s.IPs = s.IPs[:1]
	}), "claim-status-keeps-ips")
	wantRefused(t, "an agent changes the recorded prefix", write(src, func(s *ipamclaimsv1alpha1.IPAMClaimStatus) {
		s.DelegatedPrefixes = []string{"fd00:7800:0:800::/56"}
	}), "claim-status-keeps-prefixes")
	wantRefused(t, "an agent drops the recorded prefix", write(src, func(s *ipamclaimsv1alpha1.IPAMClaimStatus) {
		s.DelegatedPrefixes = nil
	}), "claim-status-keeps-prefixes")
	wantRefused(t, "an agent clears ownerPod", write(src, func(s *ipamclaimsv1alpha1.IPAMClaimStatus) {
		s.OwnerPod = nil
	}), "claim-status-owner-pod")

	got := getClaim(t, ctx, admin, "np", "vm.np-status").Status
	if strings.Join(got.IPs, ",") != "10.78.0.7/24,fd00:78::7/64" || strings.Join(got.DelegatedPrefixes, ",") != "fd00:7800:0:700::/56" ||
		got.OwnerPod == nil || got.OwnerPod.Name != "virt-launcher-dst" {
		t.Errorf("status after the refusals: %+v", got)
	}
	wantAllowed(t, "the administrator rewrites the status", func() error {
		cl := getClaim(t, ctx, admin, "np", "vm.np-status")
		cl.Status.IPs, cl.Status.DelegatedPrefixes, cl.Status.OwnerPod = []string{}, nil, nil
		return admin.Status().Update(ctx, cl)
	}())
}

// A token of the agent's service account that names no pod on a node may
// write nothing the policy covers, whatever its RBAC allows.
func TestTokenBoundToNoPodWritesNothing(t *testing.T) {
	ctx := testContext(t, time.Minute)
	admin := apiClient(t)
	a := newNodeAgent(t, ctx, "np-unbound")
	const network = "np-unbound"
	createClaim(t, ctx, admin, "np", "vm.np-unbound", network)
	existing := podHeldBy(t, ctx, a.node, network, "10.79.0.1")
	wantAllowed(t, "the node's agent creates a reservation", a.c.Create(ctx, existing))

	nodeBound := &authv1.BoundObjectReference{Kind: "Node", APIVersion: "v1", Name: a.node}
	unscheduled := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: testbed.AgentNamespace, Name: "np-unscheduled-agent"},
		Spec: corev1.PodSpec{ServiceAccountName: testbed.AgentServiceAccount, Containers: []corev1.Container{{Name: "agent", Image: "registry.k8s.io/pause:3.10"}}}}
	if err := admin.Create(ctx, unscheduled); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		what  string
		bound *authv1.BoundObjectReference
	}{
		{"a token bound to nothing", nil},
		{"a token bound to the Node, not to a pod", nodeBound},
		{"a token bound to a pod on no node", &authv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: unscheduled.Name, UID: unscheduled.UID}},
	} {
		t.Run(tc.what, func(t *testing.T) {
			c := agentToken(t, ctx, tc.bound)
			wantRefused(t, "create a reservation", c.Create(ctx, heldBy(a.node, network, "10.79.0.2", nil)), "node-bound-token")
			wantRefused(t, "delete a reservation", c.Delete(ctx, existing.DeepCopy()), "node-bound-token")
			cl := getClaim(t, ctx, admin, "np", "vm.np-unbound")
			cl.Status.IPs = []string{"10.79.0.9/24"}
			wantRefused(t, "fill a claim's status", c.Status().Update(ctx, cl), "node-bound-token")
			ev := &corev1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: "np", GenerateName: "np-"},
				InvolvedObject: corev1.ObjectReference{Kind: "IPAMClaim", Namespace: "np", Name: cl.Name}, Reason: "Test", Message: "test", Type: corev1.EventTypeNormal}
			wantRefused(t, "record an Event", c.Create(ctx, ev), "node-bound-token")
		})
	}
}

// Node names longer than a label value are hashed in the node label
// (reservation.NodeLabel); the policy checks what CEL can of that form and
// spec.owner.node in full.
func TestNodeRestrictionWithLongNodeNames(t *testing.T) {
	ctx := testContext(t, time.Minute)
	long := "np-long-" + strings.Repeat("rack7-row3-", 6) + "node-1.cluster.example.internal"
	other := "np-long-" + strings.Repeat("zone2-pod9-", 6) + "node-2.cluster.example.internal"
	a := newNodeAgent(t, ctx, long)
	if l := reservation.NodeLabel(long); l == long || len(l) > 63 {
		t.Fatalf("node %s (%d bytes) has label %s: not the hashed form this test is about", long, len(long), l)
	}
	const network = "np-long"
	own := podHeldBy(t, ctx, long, network, "10.76.0.1")
	wantAllowed(t, "the long-named node's agent creates its reservation", a.c.Create(ctx, own))
	wantAllowed(t, "and deletes it", a.c.Delete(ctx, own))

	wantRefused(t, "it creates one of another long-named node", a.c.Create(ctx, heldBy(other, network, "10.76.0.2", nil)), "reservation-create-own-node")
	otherLabel := heldBy(long, network, "10.76.0.2", nil)
	otherLabel.Labels[reservation.LabelNode] = reservation.NodeLabel(other)
	wantRefused(t, "it creates its own under another long-named node's label", a.c.Create(ctx, otherLabel), "reservation-create-own-node")
	plain := heldBy(long, network, "10.76.0.2", nil)
	plain.Labels[reservation.LabelNode] = "np-a"
	wantRefused(t, "it creates its own under a short node's label", a.c.Create(ctx, plain), "reservation-create-own-node")
	readable, _, _ := strings.Cut(reservation.NodeLabel(long), "--")
	badHash := heldBy(long, network, "10.76.0.2", nil)
	badHash.Labels[reservation.LabelNode] = readable + "--not_a_hash"
	wantRefused(t, "it creates its own under its label's readable part and a malformed hash", a.c.Create(ctx, badHash), "reservation-create-own-node")

	// The policy's CEL mirrors NodeLabel's folding and cutting: every shape
	// of long name is its agent's own.
	for i, node := range longNodeNames(t) {
		t.Run(fmt.Sprintf("%d bytes, label %s", len(node), reservation.NodeLabel(node)), func(t *testing.T) {
			ag := newNodeAgent(t, ctx, node)
			r := podHeldBy(t, ctx, node, network, fmt.Sprintf("10.76.1.%d", i+1))
			wantAllowed(t, "create", ag.c.Create(ctx, r))
			wantAllowed(t, "delete", ag.c.Delete(ctx, r))
		})
	}
}

// longNodeNames are node names (DNS subdomains) longer than a label value,
// one of each shape NodeLabel treats apart: just over the limit, the
// longest, runs of hyphens and dots folded into one '-', and a name whose
// readable part NodeLabel cuts right after a separator (and so trims).
func longNodeNames(t *testing.T) []string {
	t.Helper()
	names := []string{
		"np-" + strings.Repeat("x", 61),
		"np-max." + strings.Repeat(strings.Repeat("m", 62)+".", 3) + strings.Repeat("m", 57),
		"np-runs---of----hyphens.and.dots-----" + strings.Repeat("r", 40),
	}
	for k := 40; k < 60; k++ {
		// A separator at k: found when k is where NodeLabel cuts.
		name := "np-trim" + strings.Repeat("t", k-7) + "-" + strings.Repeat("u", 70)
		readable, hash, _ := strings.Cut(reservation.NodeLabel(name), "--")
		if len(readable)+len(hash) == 59 { // cut at 60 - len(hash), then one '-' trimmed
			return append(names, name)
		}
	}
	t.Fatal("no name found whose readable part is cut after a separator")
	return nil
}

// While no webhook replica answers, deploy/webhook's configuration fails
// closed for what it is sent: a claim's reservation and a pod's are
// refused (only the webhook reads that the pod is bound to the writer's
// node, and a check that lets writes through while it cannot answer is
// one an attacker who overloads it passes), while a pod's reservation's
// deletion, which its matchConditions do not send, goes on as the policy
// allows, so a pod's DEL does not wait on it. (Its copy here calls a port
// on 127.0.0.1 nothing listens on; TestMain's own stays in force.)
func TestWhileNoWebhookReplicaAnswersAgentsOnlyRelease(t *testing.T) {
	ctx := testContext(t, time.Minute)
	admin := apiClient(t)
	a := newNodeAgent(t, ctx, "np-nowebhook")
	const network = "np-nowebhook"
	claim := createClaim(t, ctx, admin, "np", "vm.np-nowebhook", network)
	launcher := presentOn(t, ctx, a.node, "np-nowebhook-vm", claim)
	own := podHeldBy(t, ctx, a.node, network, "10.77.1.2")
	wantAllowed(t, "A creates its pod's reservation while the webhook answers", a.c.Create(ctx, own))

	data, err := deploy.AgentWebhook.ReadFile("webhook/agent-node-restriction.yaml")
	if err != nil {
		t.Fatal(err)
	}
	down := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	if err := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096).Decode(down); err != nil {
		t.Fatal(err)
	}
	down.Name = "tenure-agent-node-restriction-down"
	url, timeout := "https://127.0.0.1:1/validate-agent", int32(2)
	for i := range down.Webhooks {
		down.Webhooks[i].Name = "down." + down.Webhooks[i].Name
		down.Webhooks[i].ClientConfig = admissionregistrationv1.WebhookClientConfig{URL: &url}
		down.Webhooks[i].TimeoutSeconds = &timeout
	}
	if err := admin.Create(ctx, down); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.Delete(context.Background(), down) })
	// In force once a claim's reservation fails calling it.
	var last error
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		last = a.c.Create(ctx, heldFor(a.node, network, "10.77.1.1", claim, launcher), client.DryRunAll)
		return last != nil && strings.Contains(last.Error(), "down."), nil
	}); err != nil {
		t.Fatalf("the unanswered webhook is not in force: a claim's reservation got %v", last)
	}
	t.Logf("a claim's reservation while no replica answers: %v", last)

	another := podHeldBy(t, ctx, a.node, network, "10.77.1.4")
	err = a.c.Create(ctx, another, client.DryRunAll)
	if err == nil || !strings.Contains(err.Error(), "down.") {
		t.Errorf("A creates its pod's reservation while no webhook replica answers: %v; want the unanswered webhook's refusal", err)
	}
	wantAllowed(t, "A deletes its pod's reservation while no webhook replica answers", a.c.Delete(ctx, own, client.Preconditions{UID: &own.UID}))
	forged := podHeldBy(t, ctx, a.node, network, "10.77.1.3")
	forged.Labels[reservation.LabelOwnerUID] = string(claim.UID)
	wantRefused(t, "A creates its pod's reservation labelled with a claim's UID", a.c.Create(ctx, forged), "reservation-owner-label")
}
