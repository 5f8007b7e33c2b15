//go:build integration

package e2e

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv6"
	"github.com/insomniacslk/dhcp/iana"

	"github.com/tenure-ipam/tenure/internal/dataplane"
	"github.com/tenure-ipam/tenure/test/testbed"
)

// TestDHCPv6AGuestPosingAsAnotherCannotMoveItsRoute: one node (namespace)
// with two bridges, br0 and br1, both listed by the network's
// dhcpv6.interfaces; the victim's NAD is a bridge plugin's on br0, so br0
// is its binding's own interface. The victim runs dhcpcd behind br0 and
// holds its claim's address and /56, routed via br0. Two attackers take
// the victim's MAC (no MAC-spoofing protection on the ports): one on
// another port of br0, one on br1, as a host on a shared VLAN bridged into
// br1 would. Each sends, from the victim's MAC and link-local address,
// every message a client sends: Solicit (with and without Rapid Commit),
// Request, Renew, Rebind, Confirm, Information-request, Release and
// Decline, for the victim's leases. None on br1 is answered (counted as
// nobinding), the route to the victim's prefix stays "via <victim> dev
// br0" with no route change for it seen meanwhile, and the victim's dhcpcd
// keeps renewing, answered, afterwards.
func TestDHCPv6AGuestPosingAsAnotherCannotMoveItsRoute(t *testing.T) {
	requireDhcpcd(t)
	ctx := testContext(t, 3*time.Minute)
	c := apiClient(t)
	sfx := fmt.Sprint(os.Getpid() % 100000)
	const (
		network = "dcshared"
		k8sNS   = "dhcp-shared"
		node    = "dc-shared"
	)
	nodeNS := "tds-n-" + sfx
	path := dhcpNode(t, nodeNS)
	mustIP(t, nodeNS, "link", "add", "br1", "type", "bridge", "mcast_snooping", "0")
	mustIP(t, nodeNS, "link", "set", "br1", "up")
	for _, br := range []string{"br0", "br1"} {
		waitLinkLocal(t, ctx, nodeNS, br)
	}
	agent, metrics := startDataplaneAgent(t, ctx, node, path, "")
	// Short lifetimes: the victim renews every 5 s (T1).
	conf := []byte(fmt.Sprintf(`{"cniVersion":"1.1.0","name":%q,"type":"bridge","bridge":"br0",
		"ipam":{"type":"tenure","agent_socket":%q,"ipRanges":[{"range":"fd00:99::/64"}],
		"prefix_delegation":{"range":"fd00:9900::/40","prefix_length":56},
		"dhcpv6":{"interfaces":["br0","br1"],"preferred_lifetime":10,"valid_lifetime":20}}}`, network, agent.Socket))

	victimMAC := net.HardwareAddr{0x02, 0, 0, 0xd9, 0, 0x01}
	guests := 0
	// guest makes a guest namespace on bridge br whose eth0 has mac, and
	// returns it with its link-local address.
	guest := func(br string, mac net.HardwareAddr) (string, netip.Addr) {
		t.Helper()
		guests++
		ns := fmt.Sprintf("tds-g%d-%s", guests, sfx)
		_, remove, err := testbed.AddNetns(ns)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(remove)
		noDAD(t, ns)
		hostIf := fmt.Sprintf("vds%d", guests)
		mustIP(t, nodeNS, "link", "add", hostIf, "type", "veth", "peer", "name", "eth0", "netns", ns)
		mustIP(t, nodeNS, "link", "set", hostIf, "master", br, "up")
		mustIP(t, ns, "link", "set", "eth0", "address", mac.String(), "up")
		waitLinkLocal(t, ctx, ns, "eth0")
		lls := eth0Addrs(t, ns, "link")
		if len(lls) != 1 {
			t.Fatalf("%s: link-local addresses %v", ns, lls)
		}
		return ns, lls[0]
	}

	// The victim: its claim, its pod (the NAD's element carries its MAC),
	// dhcpcd behind br0.
	vns, victimLL := guest("br0", victimMAC)
	claim := "vm1." + network
	createClaim(t, ctx, c, k8sNS, claim, network)
	p := newPod(t, ctx, c, k8sNS, node, map[string]string{"k8s.v1.cni.cncf.io/networks": fmt.Sprintf(
		`[{"name":%q,"interface":"net1","ipam-claim-reference":%q,"mac":%q}]`, network, claim, victimMAC)})
	if _, err := add(ctx, p, conf); err != nil {
		t.Fatalf("ADD of the victim's pod: %v", err)
	}
	victim := dhcpcdGuest{ns: vns, mac: victimMAC.String()}
	cl := getClaim(t, ctx, c, k8sNS, claim)
	for _, ip := range cl.Status.IPs {
		if a, err := netip.ParsePrefix(ip); err == nil && a.Addr().Is6() {
			victim.addr = a.Addr()
		}
	}
	if len(cl.Status.DelegatedPrefixes) == 1 {
		victim.prefix, _ = netip.ParsePrefix(cl.Status.DelegatedPrefixes[0])
	}
	if !victim.addr.IsValid() || !victim.prefix.IsValid() {
		t.Fatalf("claim status %+v: want an IPv6 address and a prefix", cl.Status)
	}
	run := startDhcpcd(t, vns, "noipv6rs\nipv6only\ninterface eth0\n  ia_na 1\n  ia_pd 2\n")
	run.waitLease(ctx, victim, true)
	wantRoute := fmt.Sprintf("%s via %s dev br0", victim.prefix, victim.addr)
	waitRoute(t, ctx, nodeNS, victim.prefix, wantRoute, true)

	// Every message a client sends, as the victim would send it.
	posing := func(typ dhcpv6.MessageType, rapid bool) dhcpv6.DHCPv6 {
		mods := []dhcpv6.Modifier{
			dhcpv6.WithClientID(&dhcpv6.DUIDLLT{HWType: iana.HWTypeEthernet, Time: 1, LinkLayerAddr: victimMAC}),
			dhcpv6.WithOption(dhcpv6.OptElapsedTime(0)),
		}
		if typ != dhcpv6.MessageTypeInformationRequest {
			mods = append(mods,
				dhcpv6.WithIANA(dhcpv6.OptIAAddress{IPv6Addr: victim.addr.AsSlice(), PreferredLifetime: 10 * time.Second, ValidLifetime: 20 * time.Second}),
				dhcpv6.WithIAPD([4]byte{0, 0, 0, 2}, &dhcpv6.OptIAPrefix{Prefix: &net.IPNet{IP: victim.prefix.Addr().AsSlice(), Mask: net.CIDRMask(victim.prefix.Bits(), 128)},
					PreferredLifetime: 10 * time.Second, ValidLifetime: 20 * time.Second}))
		}
		switch typ {
		case dhcpv6.MessageTypeRequest, dhcpv6.MessageTypeRenew, dhcpv6.MessageTypeRelease, dhcpv6.MessageTypeDecline:
			mods = append(mods, dhcpv6.WithServerID(dataplane.ServerDUID()))
		}
		if rapid {
			mods = append(mods, dhcpv6.WithRapidCommit)
		}
		m, err := dhcpv6.NewMessage(mods...)
		if err != nil {
			t.Fatal(err)
		}
		m.MessageType = typ
		return m
	}
	var msgs []dhcpv6.DHCPv6
	var what []string
	for _, m := range []struct {
		typ   dhcpv6.MessageType
		rapid bool
	}{
		{dhcpv6.MessageTypeSolicit, false}, {dhcpv6.MessageTypeSolicit, true}, {dhcpv6.MessageTypeRequest, false},
		{dhcpv6.MessageTypeRenew, false}, {dhcpv6.MessageTypeRebind, false}, {dhcpv6.MessageTypeConfirm, false},
		{dhcpv6.MessageTypeInformationRequest, false}, {dhcpv6.MessageTypeRelease, false}, {dhcpv6.MessageTypeDecline, false},
	} {
		msgs = append(msgs, posing(m.typ, m.rapid))
		what = append(what, fmt.Sprintf("%s (rapid commit %v)", m.typ, m.rapid))
	}

	monitor := monitorRoutes(t, nodeNS)
	renewsBefore := strings.Count(readHookLog(run), "reason=RENEW6")
	nobindingBefore := counter(t, scrape(t, metrics), "request", "nobinding")

	// The attacker behind br1, another interface of the network: nothing
	// is answered there for the victim's MAC, whatever it sends.
	ans, attackerLL := guest("br1", victimMAC)
	if attackerLL != victimLL {
		t.Fatalf("the attacker's link-local address %s is not the victim's %s", attackerLL, victimLL)
	}
	srcs := make([]netip.Addr, len(msgs))
	for i := range srcs {
		srcs[i] = attackerLL
	}
	for round := 0; round < 3; round++ {
		for i, r := range exchange(t, ans, attackerLL, msgs, srcs, 2*time.Second) {
			if r != nil {
				t.Errorf("on br1, the victim's MAC sending %s was answered: %s", what[i], r.Summary())
			}
		}
		if got, _ := testbed.IPIn(nodeNS, "-6", "route", "show", victim.prefix.String()); !strings.Contains(got, wantRoute) {
			t.Errorf("after round %d on br1: route to the victim's prefix %q, want %q", round, got, wantRoute)
		}
	}
	poll(t, ctx, 10*time.Second, "br1's Requests to be counted as nobinding", func() bool {
		return counter(t, scrape(t, metrics), "request", "nobinding") >= nobindingBefore+3
	})

	// The attacker on another port of br0: the server cannot tell it from
	// the victim (that is the bridge's MAC-spoofing check's job), but the
	// route is the victim's binding's own interface, br0, whatever it sends.
	bns, bLL := guest("br0", victimMAC)
	for i := range srcs {
		srcs[i] = bLL
	}
	exchange(t, bns, bLL, msgs, srcs, 2*time.Second)
	if got, _ := testbed.IPIn(nodeNS, "-6", "route", "show", victim.prefix.String()); !strings.Contains(got, wantRoute) {
		t.Errorf("after the attacker on br0: route to the victim's prefix %q, want %q", got, wantRoute)
	}
	// It leaves: the bridge learns the victim's port again from its next
	// frame.
	mustIP(t, bns, "link", "set", "eth0", "down")

	// The victim keeps renewing, answered, with its lease and route intact.
	poll(t, ctx, 30*time.Second, "the victim's dhcpcd to renew after the attacks", func() bool {
		return strings.Count(readHookLog(run), "reason=RENEW6") > renewsBefore
	})
	run.waitLease(ctx, victim, true)
	waitRoute(t, ctx, nodeNS, victim.prefix, wantRoute, true)
	if changes := monitor(); strings.Contains(changes, victim.prefix.String()) {
		t.Errorf("the route to the victim's prefix changed during the attacks:\n%s", changes)
	}
}
