//go:build integration

package e2e

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/admission"
	"github.com/tenure-ipam/tenure/internal/reservation"
	"github.com/tenure-ipam/tenure/test/testbed"
)

// Issue 42's first finding: node A wrote a reservation naming pod p1 of
// node B (a free address, sandbox ffff, spec.owner.node A, labels and
// summary as an agent writes them), and the controller released p1's real
// reservation as EarlierSandbox. Now A's agent is refused the decoy
// (reservation-pod-bound), and a decoy that exists anyway (written before
// the webhook judged pods' reservations; here by the administrator) makes
// a real controller release nothing in two full sweeps: neither of p1,
// whose network-status lists its address, nor of p2, which has none.
func TestADecoyReservationMakesTheControllerReleaseNothing(t *testing.T) {
	ctx := testContext(t, 2*time.Minute)
	admin := apiClient(t)
	const ns, network = "nodeputy", "nodeputy-net"
	if err := testbed.EnsureNamespace(ctx, admin, ns); err != nil {
		t.Fatal(err)
	}
	a, b := newNodeAgent(t, ctx, "nd-a"), newNodeAgent(t, ctx, "nd-b")
	made := func(addr string, o tenurev1alpha1.ReservationOwner) *tenurev1alpha1.IPReservation {
		return reservation.New(reservation.Spec{Network: network, Kind: tenurev1alpha1.KindAddress, Item: netip.MustParsePrefix(addr + "/32"),
			Range: "10.91.0.0/24", CNINetwork: network, Owner: o})
	}
	type victim struct {
		pod   *corev1.Pod
		own   *tenurev1alpha1.IPReservation
		decoy *tenurev1alpha1.IPReservation
	}
	var victims []victim
	for i, listed := range []bool{true, false} {
		name := fmt.Sprintf("p%d", i+1)
		var ann map[string]string
		own := fmt.Sprintf("10.91.0.%d1", i+1)
		if listed {
			// What Multus on B writes once the ADD returned.
			ann = map[string]string{"k8s.v1.cni.cncf.io/network-status": fmt.Sprintf(`[{"name":"%s/%s","interface":"net1","ips":[%q],"dns":{}}]`, ns, network, own)}
		}
		p, err := testbed.CreatePod(ctx, admin, ns, name, b.node, ann)
		if err != nil {
			t.Fatal(err)
		}
		o := testbed.PodOwner(p, b.node)
		o.ContainerID, o.Interface = "sandbox-"+name, "net1"
		r := made(own, o)
		if err := b.c.Create(ctx, r); err != nil {
			t.Fatalf("B reserves for its pod %s: %v", name, err)
		}
		// The decoy: newer, another sandbox, made on A.
		d := o
		d.ContainerID, d.Node = "ffff", a.node
		decoy := made(fmt.Sprintf("10.91.0.%d2", i+1), d)
		wantRefused(t, "A's agent creates a decoy naming "+name+" of node B", a.c.Create(ctx, decoy.DeepCopy()), admission.RuleReservationPodBound)
		if err := admin.Create(ctx, decoy); err != nil {
			t.Fatalf("the decoy of %s, as it was admitted before: %v", name, err)
		}
		victims = append(victims, victim{p, r, decoy})
	}

	ctrl := ctlStart(t, ctx, "e2e-nodeputy", "--sweep-interval", "1s")
	ctrl.waitLeading(t, ctx)
	for range 2 {
		ctrl.waitSweepAfter(t, ctx, time.Now())
	}
	for _, v := range victims {
		for _, r := range []*tenurev1alpha1.IPReservation{v.own, v.decoy} {
			got := &tenurev1alpha1.IPReservation{}
			if err := admin.Get(ctx, client.ObjectKey{Name: r.Name}, got); err != nil || got.UID != r.UID {
				t.Errorf("pod %s: reservation %s after two sweeps: %v (uid %s, want %s)", v.pod.Name, r.Name, err, got.UID, r.UID)
			}
		}
	}
}
