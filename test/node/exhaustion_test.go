//go:build integration

package node_test

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	corev1 "k8s.io/api/core/v1"
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
	ctx := testContext(t, 5*time.Minute)
	ns := namespace(ctx, t, "san")
	// This kernel has no dummy links; the master is a veth whose peer
	// stays on the host, down-to-earth as a NIC with no cable.
	hostLink(t, &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "tnsan0"}, PeerName: "tnsan0p"})
	nad(ctx, t, ns, "storage-san", `{
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
	var running []*corev1.Pod
	var waiting string
	poll(ctx, t, "six pods running and one refused for a full range", func() error {
		running, waiting = nil, ""
		for _, n := range names {
			p, err := getPod(ctx, ns, n)
			if err != nil {
				return err
			}
			if p.Status.Phase == corev1.PodRunning {
				running = append(running, p)
			} else if strings.Contains(eventsOf(ctx, ns, n), "is full") {
				waiting = n
			}
		}
		if len(running) != 6 || waiting == "" {
			return fmt.Errorf("%d running, waiting pod with the exhaustion event: %q", len(running), waiting)
		}
		return nil
	})
	t.Logf("%s waits: %s", waiting, eventsOf(ctx, ns, waiting))
	if p, _ := getPod(ctx, ns, waiting); p.Status.Phase != corev1.PodPending {
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
	waitGone(ctx, t, ns, gone.Name)
	started := waitRunning(ctx, t, ns, waiting)
	addr := checkNet1(ctx, t, started, san)
	if seen[addr] != gone.Name {
		t.Errorf("%s got %s, want %s, the address %s gave back", waiting, addr, addrOf(seen, gone.Name), gone.Name)
	}
	if n := len(reservationsOf(ctx, t, ns)); n != 6 {
		t.Errorf("%d reservations for the namespace, want 6", n)
	}
	for _, n := range names {
		if n != gone.Name {
			deletePod(ctx, t, ns, n)
		}
	}
	poll(ctx, t, "every reservation of the namespace to be released", func() error {
		if left := reservationsOf(ctx, t, ns); len(left) > 0 {
			return fmt.Errorf("%d left, e.g. %s", len(left), left[0].Spec.Address)
		}
		return nil
	})
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
	for _, r := range reservationsOf(ctx, t, p.Namespace) {
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
	p, err := getPod(ctx, ns, name)
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.Delete(ctx, p); err != nil {
		t.Fatal(err)
	}
}
