//go:build integration

package node_test

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ipamclaimsv1alpha1 "github.com/tenure-ipam/tenure/api/ipamclaims/v1alpha1"
	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/dev/nodetest"
)

// Two pods on the node presenting one IPAMClaim (a
// KubeVirt migration target started while the source runs) get identical
// addresses, IPv4 and IPv6, and the claim one delegated prefix; deleting
// the source releases nothing; deleting the claim releases everything.
func TestTwoPodsOfOneClaimShareItsAddressesAndPrefix(t *testing.T) {
	ctx := nodetest.Context(t, 4*time.Minute)
	ns := kc.Namespace(ctx, t, "vms")
	hostLink(t, &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "tnvm0"}})
	kc.NAD(ctx, t, ns, "vm-net", `{
		"cniVersion": "1.0.0", "name": "vm-net", "type": "bridge", "bridge": "tnvm0", "allowPersistentIPs": true,
		"ipam": {"type": "tenure",
			"ipRanges": [{"range": "10.200.0.0/22", "range_start": "10.200.0.10"}, {"range": "2001:db8:200::/64"}],
			"prefix_delegation": {"range": "2001:db8:100::/40", "prefix_length": 56}}}`)
	claim := &ipamclaimsv1alpha1.IPAMClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "vm-a.vm-net"},
		Spec:       ipamclaimsv1alpha1.IPAMClaimSpec{Network: "vm-net", Interface: "net1"},
	}
	if err := cl.Create(ctx, claim); err != nil {
		t.Fatal(err)
	}
	nets := `[{"name": "vm-net", "interface": "net1", "ipam-claim-reference": "vm-a.vm-net"}]`

	if err := cl.Create(ctx, podSpecOn(ns, "virt-launcher-vm-a-source", nets)); err != nil {
		t.Fatal(err)
	}
	source := kc.WaitRunning(ctx, t, ns, "virt-launcher-vm-a-source")
	if err := cl.Create(ctx, podSpecOn(ns, "virt-launcher-vm-a-target", nets)); err != nil {
		t.Fatal(err)
	}
	target := kc.WaitRunning(ctx, t, ns, "virt-launcher-vm-a-target")

	srcAddrs, tgtAddrs := sorted(interfaceAddrs(t, source, "net1")), sorted(interfaceAddrs(t, target, "net1"))
	if len(srcAddrs) != 2 || !slices.Equal(srcAddrs, tgtAddrs) {
		t.Fatalf("source net1 %v, target net1 %v: want the same IPv4 and IPv6 address", srcAddrs, tgtAddrs)
	}
	if got := sorted(networkStatus(t, target, "net1")); !slices.Equal(got, sorted(ipsOf(srcAddrs))) {
		t.Errorf("Multus recorded %v for the target, want %v", got, ipsOf(srcAddrs))
	}
	status := kc.Claim(ctx, t, ns, claim.Name).Status
	if got := sorted(status.IPs); !slices.Equal(got, srcAddrs) {
		t.Errorf("claim status.ips %v, want %v", got, srcAddrs)
	}
	if len(status.DelegatedPrefixes) != 1 {
		t.Fatalf("claim status.delegatedPrefixes %v, want one /56", status.DelegatedPrefixes)
	}
	pd := netip.MustParsePrefix(status.DelegatedPrefixes[0])
	if pd.Bits() != 56 || !netip.MustParsePrefix("2001:db8:100::/40").Contains(pd.Addr()) {
		t.Errorf("delegated prefix %s, want a /56 of 2001:db8:100::/40", pd)
	}
	held := claimReservations(t, ns)
	if len(held) != 3 {
		t.Fatalf("the claim holds %v, want its IPv4 and IPv6 address and its prefix", held)
	}

	// The migration ends: the source goes, the claim keeps everything.
	deletePod(ctx, t, ns, source.Name)
	kc.WaitGone(ctx, t, ns, source.Name)
	if after := claimReservations(t, ns); !slices.Equal(after, held) {
		t.Errorf("after the source's DEL the claim holds %v, want %v", after, held)
	}
	if after := kc.Claim(ctx, t, ns, claim.Name).Status; !slices.Equal(sorted(after.IPs), srcAddrs) || !slices.Equal(after.DelegatedPrefixes, status.DelegatedPrefixes) {
		t.Errorf("after the source's DEL the claim's status is %+v, want %+v", after, status)
	}
	if got := sorted(interfaceAddrs(t, target, "net1")); !slices.Equal(got, srcAddrs) {
		t.Errorf("after the source's DEL the target's net1 holds %v, want %v", got, srcAddrs)
	}

	// The VM is deleted: the controller releases what the claim held.
	deletePod(ctx, t, ns, target.Name)
	kc.WaitGone(ctx, t, ns, target.Name)
	if after := claimReservations(t, ns); !slices.Equal(after, held) {
		t.Errorf("after the target's DEL the claim holds %v, want %v", after, held)
	}
	if err := cl.Delete(ctx, claim); err != nil {
		t.Fatal(err)
	}
	kc.Poll(ctx, t, "the deleted claim's reservations to be released", func() error {
		if left := kc.Reservations(ctx, t, ns); len(left) > 0 {
			return fmt.Errorf("%d left", len(left))
		}
		return nil
	})
}

// claimReservations lists the addresses and prefixes held by claims in ns.
func claimReservations(t *testing.T, ns string) []string {
	t.Helper()
	var out []string
	for _, r := range kc.Reservations(nodetest.Context(t, 30*time.Second), t, ns) {
		if r.Spec.Owner.Kind != tenurev1alpha1.OwnerIPAMClaim {
			t.Errorf("reservation %s of %s is owned by %s %s", r.Name, r.Spec.Address, r.Spec.Owner.Kind, r.Spec.Owner.Name)
		}
		out = append(out, r.Spec.Address)
	}
	return out
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}
