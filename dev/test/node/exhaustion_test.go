//go:build integration

package node_test

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	corev1 "k8s.io/api/core/v1"

	"github.com/tenure-ipam/tenure/dev/nodetest"
)

// A storage SAN as in deploy/examples (macvlan, here
// over a veth of the test's own as the master, on a /29 without
// exclusions: six assignable addresses), seven pods with the NAD in their
// annotation. Six run with net1 holding their tenure address (inside the
// pod's network namespace and in Multus' network-status); the seventh
// stays in ContainerCreating with tenure's exhaustion message in its
// events. Once one running pod is deleted, the runtime's DEL releases its
// reservation and the seventh starts on the kubelet's own retry.
func TestSlash29SANFillsUpAndTheWaitingPodStartsWhenOneLeaves(t *testing.T) {
	ctx := nodetest.Context(t, 5*time.Minute)
	ns := kc.Namespace(ctx, t, "san")
	// This kernel has no dummy links; the master is a veth whose peer
	// stays on the host, down-to-earth as a NIC with no cable.
	hostLink(t, &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "tnsan0"}, PeerName: "tnsan0p"})
	kc.NAD(ctx, t, ns, "storage-san", `{
		"cniVersion": "1.0.0", "name": "storage-san", "type": "macvlan", "master": "tnsan0", "mode": "bridge",
		"ipam": {"type": "tenure", "range": "10.100.0.0/29"}}`)
	san := netip.MustParsePrefix("10.100.0.0/29")

	var names []string
	for i := range 7 {
		name := fmt.Sprintf("san-%d", i)
		names = append(names, name)
		if err := cl.Create(ctx, podSpecOn(ns, name, "storage-san")); err != nil {
			t.Fatal(err)
		}
	}

	// Six run, one waits with tenure's answer.
	running, waiting := kc.FullRange(ctx, t, ns, names)
	if p, _ := kc.Pod(ctx, ns, waiting); p.Status.Phase != corev1.PodPending {
		t.Errorf("%s is %s, want Pending (ContainerCreating)", waiting, p.Status.Phase)
	}

	seen := map[string]string{}
	for _, p := range running {
		addr := checkNet1(ctx, t, p, san)
		if other, dup := seen[addr]; dup {
			t.Errorf("%s and %s both hold %s", p.Name, other, addr)
		}
		seen[addr] = p.Name
	}

	// One leaves; the waiting pod starts with no one touching it.
	gone := running[0]
	if err := cl.Delete(ctx, gone); err != nil {
		t.Fatal(err)
	}
	kc.WaitGone(ctx, t, ns, gone.Name)
	started := kc.WaitRunning(ctx, t, ns, waiting)
	addr := checkNet1(ctx, t, started, san)
	if seen[addr] != gone.Name {
		t.Errorf("%s got %s, want %s, the address %s gave back", waiting, addr, addrOf(seen, gone.Name), gone.Name)
	}
	if n := len(kc.Reservations(ctx, t, ns)); n != 6 {
		t.Errorf("%d reservations for the namespace, want 6", n)
	}
	for _, n := range names {
		if n != gone.Name {
			deletePod(ctx, t, ns, n)
		}
	}
	kc.WaitReleased(ctx, t, ns)
}

// checkNet1 checks that the pod's net1 holds one address of want, that
// Multus recorded the same, and that the pod's reservation says so; it
// returns the address.
func checkNet1(ctx context.Context, t *testing.T, p *corev1.Pod, want netip.Prefix) string {
	t.Helper()
	inside := interfaceAddrs(t, p, "net1")
	recorded := networkStatus(t, p, "net1")
	if len(inside) != 1 || !slices.Equal(ipsOf(inside), recorded) {
		t.Fatalf("pod %s: net1 holds %v, Multus recorded %v", p.Name, inside, recorded)
	}
	got := netip.MustParsePrefix(inside[0])
	if !want.Contains(got.Addr()) || got.Bits() != want.Bits() {
		t.Errorf("pod %s: net1 holds %s, want an address of %s", p.Name, got, want)
	}
	var mine []string
	for _, r := range kc.Reservations(ctx, t, p.Namespace) {
		if r.Spec.Owner.UID == string(p.UID) {
			mine = append(mine, r.Spec.Address)
		}
	}
	if !slices.Equal(mine, []string{got.Addr().String()}) {
		t.Errorf("pod %s: reservations %v, want [%s]", p.Name, mine, got.Addr())
	}
	return got.Addr().String()
}

func addrOf(seen map[string]string, pod string) string {
	for a, p := range seen {
		if p == pod {
			return a
		}
	}
	return ""
}

func deletePod(ctx context.Context, t *testing.T, ns, name string) {
	t.Helper()
	p, err := kc.Pod(ctx, ns, name)
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.Delete(ctx, p); err != nil {
		t.Fatal(err)
	}
}
