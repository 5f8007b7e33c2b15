//go:build integration

package nodes_test

import (
	"context"
	"fmt"
	"net/netip"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipamclaimsv1alpha1 "github.com/tenure-ipam/tenure/api/ipamclaims/v1alpha1"
	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/dev/devnode"
	"github.com/tenure-ipam/tenure/dev/localnode"
	"github.com/tenure-ipam/tenure/dev/nodetest"
	"github.com/tenure-ipam/tenure/internal/admission"
	"github.com/tenure-ipam/tenure/internal/kube"
	"github.com/tenure-ipam/tenure/internal/reservation"
	"github.com/tenure-ipam/tenure/test/testbed"
)

// Node 1's agent, with the token node 1's kubelet minted for its pod, is
// refused writes to what node 2's agent made for node 2's pods: a real
// pod's reservation and a real VM launcher's claim and its reservation
// (deploy/policy's CEL and deploy/webhook's webhook, served by the deployed
// controller). It may write its own node's. Node 2's objects remain as
// node 2's agent left them.
func nodeOnesAgentIsRefusedNodeTwosObjects(t *testing.T) {
	ctx := nodetest.Context(t, 4*time.Minute)
	one, two := cluster.Nodes[0], cluster.Nodes[1]
	agents := agentsByNode(ctx, t)
	agent := agents[one.Name]
	token, _ := nodetest.ProjectedToken(t, filepath.Join(one.Path(one.Dir), "kubelet", "root"), string(agent.UID))
	ac, err := kube.NewClient(testbed.WithToken(cp.Config, token))
	if err != nil {
		t.Fatal(err)
	}

	const network = "authz-san"
	ns := kc.Namespace(ctx, t, "authz3")
	kc.NAD(ctx, t, ns, network, `{
		"cniVersion": "1.0.0", "name": "`+network+`", "type": "macvlan", "master": "`+devnode.SANLink+`", "mode": "bridge",
		"ipam": {"type": "tenure", "range": "10.103.0.0/24"}}`)
	// Node 2's: a pod, and a VM's claim presented by its launcher.
	podB := localnode.Pod(ns, "pod-b", network)
	podB.Spec.NodeName = two.Name
	claimB := &ipamclaimsv1alpha1.IPAMClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "vm-b"},
		Spec: ipamclaimsv1alpha1.IPAMClaimSpec{Network: network, Interface: "net1"}}
	launcherB := localnode.Pod(ns, "launcher-b", fmt.Sprintf(`[{"name":%q,"interface":"net1","ipam-claim-reference":%q}]`, network, claimB.Name))
	launcherB.Spec.NodeName = two.Name
	for _, o := range []client.Object{claimB, podB, launcherB} {
		if err := cl.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	podB = kc.WaitRunning(ctx, t, ns, podB.Name)
	launcherB = kc.WaitRunning(ctx, t, ns, launcherB.Name)
	var resPodB, resClaimB *tenurev1alpha1.IPReservation
	for _, r := range kc.Reservations(ctx, t, ns) {
		switch {
		case r.Spec.Owner.UID == string(podB.UID):
			resPodB = r.DeepCopy()
		case r.Spec.Owner.Kind == tenurev1alpha1.OwnerIPAMClaim && r.Spec.Owner.Name == claimB.Name:
			resClaimB = r.DeepCopy()
		}
	}
	if resPodB == nil || resClaimB == nil || resPodB.Spec.Owner.Node != two.Name {
		t.Fatalf("node 2's reservations: pod's %v, claim's %v", resPodB, resClaimB)
	}
	var claimBefore ipamclaimsv1alpha1.IPAMClaim
	if err := cl.Get(ctx, client.ObjectKeyFromObject(claimB), &claimBefore); err != nil {
		t.Fatal(err)
	}

	held := func(addr string, o tenurev1alpha1.ReservationOwner) *tenurev1alpha1.IPReservation {
		return reservation.New(reservation.Spec{Network: network, Kind: tenurev1alpha1.KindAddress, Item: netip.MustParsePrefix(addr + "/32"),
			Range: "10.103.0.0/24", CNINetwork: network, Owner: o})
	}
	asB := held("10.103.0.200", testbed.PodOwner(podB, two.Name))
	own := held("10.103.0.201", testbed.PodOwner(&agent, one.Name))
	t.Cleanup(func() { _ = cl.Delete(context.Background(), own.DeepCopy()) })
	rows := []testbed.Attempt{
		testbed.Try("node 2's pod", "ipreservations", "create", "reserve an address as node 2",
			func() error { return ac.Create(ctx, asB.DeepCopy()) }, "reservation-create-own-node"),
		testbed.Try("node 2's pod's reservation", "ipreservations", "delete", "release node 2's pod's address",
			func() error { return ac.Delete(ctx, resPodB.DeepCopy()) }, "reservation-delete-own-node"),
		testbed.Try("node 2's VM's claim's reservation", "ipreservations", "delete", "release node 2's VM's address",
			func() error { return ac.Delete(ctx, resClaimB.DeepCopy()) }, "reservation-delete-claim-owned"),
		testbed.Try("node 2's VM's claim", "ipamclaims/status", "update", "point ownerPod at its own pod",
			func() error { return testbed.PresentClaim(ctx, ac, client.ObjectKeyFromObject(claimB), agent.Name) }, admission.RuleClaimStatusPresented),
		testbed.Try("its own pod", "ipreservations", "create", "reserve for its pod",
			func() error { return ac.Create(ctx, own.DeepCopy()) }, ""),
		testbed.Try("its own pod", "ipreservations", "delete", "release its pod's address",
			func() error { return ac.Delete(ctx, own.DeepCopy()) }, ""),
	}
	table := testbed.RunMatrix(t, "node 2's unless its own", rows)
	t.Logf("node 1's agent's kubelet-minted token against node 2's objects:\n%s", table)

	// What remains: node 2's reservations, the same objects; its claim
	// as node 2's agent wrote it; nothing of node 1's attempts.
	for _, want := range []*tenurev1alpha1.IPReservation{resPodB, resClaimB} {
		var got tenurev1alpha1.IPReservation
		if err := cl.Get(ctx, client.ObjectKey{Name: want.Name}, &got); err != nil || got.UID != want.UID {
			t.Errorf("node 2's reservation %s: %v (uid %s, want %s)", want.Name, err, got.UID, want.UID)
		}
	}
	for _, gone := range []*tenurev1alpha1.IPReservation{asB, own} {
		if err := cl.Get(ctx, client.ObjectKey{Name: gone.Name}, &tenurev1alpha1.IPReservation{}); err == nil {
			t.Errorf("reservation %s exists", gone.Name)
		}
	}
	var claimAfter ipamclaimsv1alpha1.IPAMClaim
	if err := cl.Get(ctx, client.ObjectKeyFromObject(claimB), &claimAfter); err != nil {
		t.Fatal(err)
	}
	if o := claimAfter.Status.OwnerPod; o == nil || o.Name != launcherB.Name || claimAfter.ResourceVersion != claimBefore.ResourceVersion {
		t.Errorf("node 2's claim: ownerPod %+v, resourceVersion %s (was %s); want %s, unchanged", o, claimAfter.ResourceVersion, claimBefore.ResourceVersion, launcherB.Name)
	}
	for _, p := range []*corev1.Pod{podB, launcherB} {
		if err := cl.Delete(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	if err := cl.Delete(ctx, claimB); err != nil {
		t.Fatal(err)
	}
	kc.WaitReleased(ctx, t, ns)
}
