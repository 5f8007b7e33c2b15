package agent

import (
	"net/netip"
	"slices"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"

	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/reservation"
)

// Node B writes a reservation naming this node's pod p1, its sandbox and
// interface. The attachment's reservations are those this node made: the
// ADD answers with its own address and not the decoy's, and the DELs
// (the first releases the pod's address, a repeated one finds nothing in
// the node cache and reads the API server) release only that, never
// trying the decoy, which the policy would refuse this node, failing
// every DEL of the pod.
func TestADecoyOfAnotherNodeIsNoPartOfThisNodesAttachment(t *testing.T) {
	p1 := pod("p1", thisNode, nil)
	decoy := reservation.New(reservation.Spec{Network: "san", Kind: tenurev1alpha1.KindAddress, Item: netip.MustParsePrefix("10.0.0.6/32"), Range: "10.0.0.0/29",
		Owner: tenurev1alpha1.ReservationOwner{Kind: tenurev1alpha1.OwnerPod, Namespace: "ns", Name: "p1", UID: string(p1.UID), PodName: "p1", PodUID: string(p1.UID),
			ContainerID: "c1", Interface: "net1", Node: "node-b"}})
	h := startAgent(t, p1, decoy)
	got := ips(t, h.do(call{cmd: "ADD", ctr: "c1", pod: "p1"}))
	if slices.Contains(got, "10.0.0.6") || len(got) != 1 {
		t.Fatalf("ADD answered %v; want one address of this node's, not the decoy's 10.0.0.6", got)
	}
	for i := range 2 {
		if r := h.do(call{cmd: "DEL", ctr: "c1", pod: "p1"}); r.Error != nil {
			t.Fatalf("DEL %d: code %d: %s", i+1, r.Error.Code, r.Error.Msg)
		}
	}
	list := &tenurev1alpha1.IPReservationList{}
	if err := h.fake.List(h.ctx, list, client.MatchingLabels{reservation.LabelOwnerUID: string(p1.UID)}); err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 1 || list.Items[0].Name != decoy.Name {
		t.Fatalf("after the DELs, p1's UID holds %v; want the decoy %s alone (this node's own released, the decoy untouched)", list.Items, decoy.Name)
	}
}
