package agent

import (
	"context"
	"net/netip"
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipamclaimsv1alpha1 "github.com/tenure-ipam/tenure/api/ipamclaims/v1alpha1"
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

// The caches' share of a claim's holdings (what the data path serves a
// prefix from where the status records none) is its claim-owned
// reservations only: a pod's reservation carrying the claim's UID is none.
func TestAPodsReservationWithAClaimsUIDIsNoneOfTheClaimsHoldings(t *testing.T) {
	claim := ipamClaim("vm1", "vm-net", ipamclaimsv1alpha1.IPAMClaimStatus{})
	claim.UID = "uid-vm1"
	owner := tenurev1alpha1.ReservationOwner{Kind: tenurev1alpha1.OwnerIPAMClaim, Namespace: "ns", Name: "vm1", UID: "uid-vm1", PodName: "launcher", Node: thisNode}
	item := reservation.New(reservation.Spec{Network: "vm-net", Kind: tenurev1alpha1.KindDelegatedPrefix, Item: netip.MustParsePrefix("2001:db8:100:200::/56"), Owner: owner})
	decoyOwner := owner
	decoyOwner.Kind, decoyOwner.Name, decoyOwner.PodUID = tenurev1alpha1.OwnerPod, "launcher", "uid-vm1"
	decoy := reservation.New(reservation.Spec{Network: "vm-net", Kind: tenurev1alpha1.KindDelegatedPrefix, Item: netip.MustParsePrefix("2001:db8:100:100::/56"), Owner: decoyOwner})
	h := startAgent(t, claim, item, decoy)
	if err := wait.PollUntilContextTimeout(h.ctx, 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return len(h.agent.store.ByOwnerUID("uid-vm1")) == 2, nil
	}); err != nil {
		t.Fatalf("the node cache never held both: %v", err)
	}
	var got []string
	for _, r := range h.agent.holdings.cached("uid-vm1") {
		got = append(got, r.Name)
	}
	if !slices.Equal(got, []string{item.Name}) {
		t.Fatalf("the claim's cached holdings are %v; want %s alone", got, item.Name)
	}
}
