//go:build integration

package e2e

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv6/nclient6"

	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/reservation"
)

// TestDHCPv6ServesAPodsOptInPrefix: a pod without a claim that opted in to
// a delegated prefix (annotation ipam.tenure.dev/prefix-delegation) is
// served its prefix and its IPv6 address over DHCPv6 by its node's agent,
// which routes the prefix to it, as it does a claim's; after its DEL,
// neither.
func TestDHCPv6ServesAPodsOptInPrefix(t *testing.T) {
	ctx, c := dhcpTest(t, 3*time.Minute)

	node := "tdo-n-" + strconv.Itoa(os.Getpid()%100000)
	path := dhcpNode(t, node)
	waitLinkLocal(t, ctx, node, "br0")
	guest := plugGuest(t, ctx, node+"-g", node, "vg", dhcpOtherMAC)
	agent, _ := startDataplaneAgent(t, ctx, "optin-a", path, "")

	const ipam = `{"ipRanges":[{"range":"fd00:98::/64"}],
		"prefix_delegation":{"range":"fd00:9800::/40","prefix_length":60},
		"network_name":"dhcpnet","dhcpv6":{"interfaces":["br0"]}}`
	p := newPod(t, ctx, c, "dhcp6pods", "optin-a", map[string]string{
		"k8s.v1.cni.cncf.io/networks":       fmt.Sprintf(`[{"name":"dhcpnet","interface":"net1","mac":%q}]`, dhcpOtherMAC),
		"ipam.tenure.dev/prefix-delegation": "net1",
	})
	conf := netconf("dhcpnet", agent.Socket, ipam)
	if _, err := add(ctx, p, conf); err != nil {
		t.Fatalf("ADD: %v", err)
	}
	var wantAddr netip.Addr
	var wantPrefix netip.Prefix
	for _, r := range ownedBy(t, ctx, p.uid) {
		item, err := reservation.ParseItem(r.Spec.Address)
		if err != nil {
			t.Fatal(err)
		}
		if r.Spec.Kind == tenurev1alpha1.KindDelegatedPrefix {
			wantPrefix = item
		} else {
			wantAddr = item.Addr()
		}
	}
	if !wantAddr.IsValid() || wantPrefix.Bits() != 60 {
		t.Fatalf("the pod holds %s and %s, want an IPv6 address and a /60", wantAddr, wantPrefix)
	}

	lease := runDhclient(t, ctx, guest)
	if lease.addr != wantAddr || lease.prefix != wantPrefix {
		t.Fatalf("dhclient leased %s and %s, the pod holds %s and %s", lease.addr, lease.prefix, wantAddr, wantPrefix)
	}
	waitRoute(t, ctx, node, wantPrefix, fmt.Sprintf("%s via %s dev br0", wantPrefix, wantAddr), true)

	// DEL releases the pod's reservations: the route goes, and the guest is
	// no longer answered.
	if err := del(ctx, p, conf); err != nil {
		t.Fatalf("DEL: %v", err)
	}
	waitRoute(t, ctx, node, wantPrefix, "", false)
	if adv, err := solicit(t, guest, 3*time.Second); !errors.Is(err, nclient6.ErrNoResponse) {
		t.Fatalf("after the pod's DEL: advertise %v, err %v; want no response", adv, err)
	}
}
