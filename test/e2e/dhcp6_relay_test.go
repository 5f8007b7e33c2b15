//go:build integration

package e2e

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv6"
	"github.com/insomniacslk/dhcp/iana"

	"github.com/tenure-ipam/tenure/internal/dataplane"
	"github.com/tenure-ipam/tenure/internal/dhcp6"
	"github.com/tenure-ipam/tenure/test/testbed"
)

// relayAttacker is a guest namespace that attacks the victim.
type relayAttacker struct {
	name   string
	ns     string
	bridge string
	mac    net.HardwareAddr
	ll     netip.Addr
	bound  bool
	addr   netip.Addr // its own claim's address, when bound
}

// TestDHCPv6GuestsCannotSpeakForEachOther: one node (namespace) with two
// bridges, br0 and br1, both served by its agent for one network, which
// trusts one relay on br1 (a MAC no guest has, at fe80::1). The victim runs
// dhcpcd behind br0 and holds its claim's address and /56, routed via br0.
// Four other guests, bound (holding a claim of their own) or not, on br0
// and on br1, each send Relay-forwards naming the victim through the
// Client Link-Layer Address option (79), the peer-address's EUI-64 and the
// inner DUID-LL, with Solicit, Renew and Rebind inside, from their
// link-local address and from the trusted relay's. None gets a reply
// within the read deadline, while a direct Solicit of a bound attacker on
// the same socket path is answered with its own address; the route to the
// victim's prefix stays "via <victim> dev br0" after each attacker (and no
// route change for it is seen at all meanwhile); and the victim's dhcpcd
// renews, answered, after the attacks.
func TestDHCPv6GuestsCannotSpeakForEachOther(t *testing.T) {
	requireDhcpcd(t)
	ctx := testContext(t, 3*time.Minute)
	c := apiClient(t)
	sfx := fmt.Sprint(os.Getpid() % 100000)
	const (
		network  = "dcrelay"
		k8sNS    = "dhcp-relay"
		node     = "dc-relay"
		relayMAC = "02:00:00:d8:0e:01"
	)
	nodeNS := "tdr-n-" + sfx
	path := dhcpNode(t, nodeNS)
	mustIP(t, nodeNS, "link", "add", "br1", "type", "bridge", "mcast_snooping", "0")
	mustIP(t, nodeNS, "link", "set", "br1", "up")
	for _, br := range []string{"br0", "br1"} {
		waitLinkLocal(t, ctx, nodeNS, br)
	}
	agent, metrics := startDataplaneAgent(t, ctx, node, path, "")
	// Short lifetimes: the victim renews every 5 s (T1), so renewing after
	// the attacks is seen within seconds.
	ipam := fmt.Sprintf(`{"ipRanges":[{"range":"fd00:98::/64"}],
		"prefix_delegation":{"range":"fd00:9800::/40","prefix_length":56},
		"dhcpv6":{"interfaces":["br0","br1"],"preferred_lifetime":10,"valid_lifetime":20,
		"trusted_relays":[{"interface":"br1","mac":%q,"address":"fe80::1"}]}}`, relayMAC)

	guests := 0
	// guest makes a guest namespace on bridge br with mac (EUI-64
	// link-local address), and, if bound, its claim and pod; it returns the
	// namespace, link-local address and the claim's address and prefix.
	guest := func(br, mac string, bound bool) (string, netip.Addr, netip.Addr, netip.Prefix) {
		t.Helper()
		guests++
		ns := fmt.Sprintf("tdr-g%d-%s", guests, sfx)
		_, remove, err := testbed.AddNetns(ns)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(remove)
		noDAD(t, ns)
		hostIf := fmt.Sprintf("vdr%d", guests)
		mustIP(t, nodeNS, "link", "add", hostIf, "type", "veth", "peer", "name", "eth0", "netns", ns)
		mustIP(t, nodeNS, "link", "set", hostIf, "master", br, "up")
		mustIP(t, ns, "link", "set", "eth0", "address", mac, "up")
		waitLinkLocal(t, ctx, ns, "eth0")
		lls := eth0Addrs(t, ns, "link")
		if len(lls) != 1 {
			t.Fatalf("%s: link-local addresses %v", ns, lls)
		}
		if !bound {
			return ns, lls[0], netip.Addr{}, netip.Prefix{}
		}
		claim := fmt.Sprintf("vm%d.%s", guests, network)
		createClaim(t, ctx, c, k8sNS, claim, network)
		p := newPod(t, ctx, c, k8sNS, node, map[string]string{"k8s.v1.cni.cncf.io/networks": fmt.Sprintf(
			`[{"name":%q,"interface":"net1","ipam-claim-reference":%q,"mac":%q}]`, network, claim, mac)})
		if _, err := add(ctx, p, netconf(network, agent.Socket, ipam)); err != nil {
			t.Fatalf("ADD of %s: %v", p.name, err)
		}
		var g dhcpcdGuest
		cl := getClaim(t, ctx, c, k8sNS, claim)
		for _, ip := range cl.Status.IPs {
			if p, err := netip.ParsePrefix(ip); err == nil && p.Addr().Is6() {
				g.addr = p.Addr()
			}
		}
		if len(cl.Status.DelegatedPrefixes) == 1 {
			g.prefix, _ = netip.ParsePrefix(cl.Status.DelegatedPrefixes[0])
		}
		if !g.addr.IsValid() || !g.prefix.IsValid() {
			t.Fatalf("claim %s status %+v: want an IPv6 address and a prefix", claim, cl.Status)
		}
		return ns, lls[0], g.addr, g.prefix
	}

	// The victim: dhcpcd behind br0, its route via br0.
	victimMAC := net.HardwareAddr{0x02, 0, 0, 0xd8, 0, 0x01}
	vns, victimLL, vAddr, vPrefix := guest("br0", victimMAC.String(), true)
	if mac, ok := dhcp6.MACFromLinkLocal(victimLL); !ok || mac.String() != victimMAC.String() {
		t.Fatalf("victim link-local %s does not encode its MAC %s", victimLL, victimMAC)
	}
	victim := dhcpcdGuest{ns: vns, mac: victimMAC.String(), addr: vAddr, prefix: vPrefix}
	run := startDhcpcd(t, vns, "noipv6rs\nipv6only\ninterface eth0\n  ia_na 1\n  ia_pd 2\n")
	run.waitLease(ctx, victim, true)
	wantRoute := fmt.Sprintf("%s via %s dev br0", vPrefix, vAddr)
	waitRoute(t, ctx, nodeNS, vPrefix, wantRoute, true)
	t.Logf("victim %s (%s): %s and %s, %q", victimMAC, victimLL, vAddr, vPrefix, wantRoute)

	var attackers []relayAttacker
	for i, a := range []struct {
		br    string
		bound bool
	}{{"br0", false}, {"br0", true}, {"br1", false}, {"br1", true}} {
		at := relayAttacker{name: fmt.Sprintf("%s guest on %s", map[bool]string{false: "unbound", true: "bound"}[a.bound], a.br),
			bridge: a.br, bound: a.bound, mac: net.HardwareAddr{0x02, 0, 0, 0xd8, 0xa0, byte(i + 1)}}
		at.ns, at.ll, at.addr, _ = guest(a.br, at.mac.String(), a.bound)
		attackers = append(attackers, at)
	}

	// Every route change for the victim's prefix while the attacks run.
	monitor := monitorRoutes(t, nodeNS)
	renewsBefore := strings.Count(readHookLog(run), "reason=RENEW6")

	sent := map[string]int{}
	for _, at := range attackers {
		// The control: a direct Solicit from a bound attacker is answered,
		// with its own address, so the silence below is the server's.
		if at.bound {
			replies := exchange(t, at.ns, at.ll, []dhcpv6.DHCPv6{mustSolicit(t, at.mac)}, []netip.Addr{at.ll}, 3*time.Second)
			if replies[0] == nil || advertisedAddr(replies[0].(*dhcpv6.Message)) != at.addr {
				t.Fatalf("%s: direct Solicit got %v, want an Advertise of its own %s", at.name, replies[0], at.addr)
			}
		}
		var msgs []dhcpv6.DHCPv6
		var srcs []netip.Addr
		var what []string
		for _, typ := range []dhcpv6.MessageType{dhcpv6.MessageTypeSolicit, dhcpv6.MessageTypeRenew, dhcpv6.MessageTypeRebind} {
			for _, naming := range []string{"option 79", "peer-address EUI-64", "inner DUID-LL"} {
				for _, src := range []netip.Addr{at.ll, netip.MustParseAddr("fe80::1")} {
					msgs = append(msgs, relayForward(t, typ, naming, at.mac, at.ll, victimMAC, victimLL, vAddr, vPrefix))
					srcs = append(srcs, src)
					what = append(what, fmt.Sprintf("%s naming the victim by %s, from %s", typ, naming, src))
					sent[strings.ToLower(typ.String())]++
				}
			}
		}
		replies := exchange(t, at.ns, at.ll, msgs, srcs, 2*time.Second)
		for i, r := range replies {
			if r != nil {
				t.Errorf("%s: Relay-forward with a %s answered:\n%s", at.name, what[i], r.Summary())
			}
		}
		if got, _ := testbed.IPIn(nodeNS, "-6", "route", "show", vPrefix.String()); !strings.Contains(got, wantRoute) || strings.Contains(got, "br1") {
			t.Errorf("after the %s: route to the victim's prefix %q, want %q", at.name, got, wantRoute)
		}
		if !t.Failed() {
			t.Logf("%s (%s, %s): %d Relay-forwards, no reply; route %q", at.name, at.mac, at.ll, len(msgs), wantRoute)
		}
	}

	// The agent dropped each of them as from an untrusted relay, before
	// looking anyone up.
	poll(t, ctx, 10*time.Second, "the Relay-forwards to be counted as untrustedrelay", func() bool {
		m := scrape(t, metrics)
		for typ, n := range sent {
			if counter(t, m, typ, dhcp6.OutcomeUntrustedRelay) != float64(n) {
				return false
			}
		}
		return true
	})

	// The victim keeps renewing, answered, with its lease and route intact.
	poll(t, ctx, 30*time.Second, "the victim's dhcpcd to renew after the attacks", func() bool {
		return strings.Count(readHookLog(run), "reason=RENEW6") > renewsBefore
	})
	run.waitLease(ctx, victim, true)
	waitRoute(t, ctx, nodeNS, vPrefix, wantRoute, true)
	if changes := monitor(); strings.Contains(changes, vPrefix.String()) {
		t.Errorf("the route to the victim's prefix changed during the attacks:\n%s", changes)
	}
}

// relayForward builds a Relay-forward as an attacker (mac, ll) would, whose
// inner message of type typ asks for the victim's leases and which names the
// victim through naming.
func relayForward(t *testing.T, typ dhcpv6.MessageType, naming string, mac net.HardwareAddr, ll netip.Addr,
	victimMAC net.HardwareAddr, victimLL, vAddr netip.Addr, vPrefix netip.Prefix) dhcpv6.DHCPv6 {
	t.Helper()
	var cid dhcpv6.DUID = &dhcpv6.DUIDLLT{HWType: iana.HWTypeEthernet, Time: 1, LinkLayerAddr: mac}
	if naming == "inner DUID-LL" {
		cid = &dhcpv6.DUIDLL{HWType: iana.HWTypeEthernet, LinkLayerAddr: victimMAC}
	}
	mods := []dhcpv6.Modifier{
		dhcpv6.WithClientID(cid),
		dhcpv6.WithIANA(dhcpv6.OptIAAddress{IPv6Addr: vAddr.AsSlice(), PreferredLifetime: time.Hour, ValidLifetime: 2 * time.Hour}),
		dhcpv6.WithIAPD([4]byte{0, 0, 0, 2}, &dhcpv6.OptIAPrefix{Prefix: &net.IPNet{IP: vPrefix.Addr().AsSlice(), Mask: net.CIDRMask(vPrefix.Bits(), 128)},
			PreferredLifetime: time.Hour, ValidLifetime: 2 * time.Hour}),
	}
	if typ == dhcpv6.MessageTypeRenew {
		mods = append(mods, dhcpv6.WithServerID(dataplane.ServerDUID()))
	}
	inner, err := dhcpv6.NewMessage(mods...)
	if err != nil {
		t.Fatal(err)
	}
	inner.MessageType = typ
	inner.AddOption(dhcpv6.OptElapsedTime(0))
	peer := net.IP(ll.AsSlice())
	if naming == "peer-address EUI-64" {
		peer = victimLL.AsSlice()
	}
	r, err := dhcpv6.EncapsulateRelay(inner, dhcpv6.MessageTypeRelayForward, net.IPv6zero, peer)
	if err != nil {
		t.Fatal(err)
	}
	if naming == "option 79" {
		r.AddOption(dhcpv6.OptClientLinkLayerAddress(iana.HWTypeEthernet, victimMAC))
	}
	return r
}

func mustSolicit(t *testing.T, mac net.HardwareAddr) dhcpv6.DHCPv6 {
	t.Helper()
	m, err := dhcpv6.NewSolicit(mac, dhcpv6.WithIAPD([4]byte{0, 0, 0, 2}))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// exchange sends each message from eth0 of ns to All_DHCP_Relay_Agents_and_
// Servers, each from its own UDP socket (an ephemeral port: the server
// answers the packet's source) bound to srcs[i] (added to eth0 first if it
// is not ll), and returns what each socket received, unwrapped from any
// Relay-replies, within timeout of the last send (nil: nothing).
func exchange(t *testing.T, ns string, ll netip.Addr, msgs []dhcpv6.DHCPv6, srcs []netip.Addr, timeout time.Duration) []dhcpv6.DHCPv6 {
	t.Helper()
	out := make([]dhcpv6.DHCPv6, len(msgs))
	for _, src := range srcs {
		if src != ll {
			// A forged source: the attacker adds the address to its eth0.
			// "ip addr replace" so a second use of it is no error.
			mustIP(t, ns, "-6", "addr", "replace", src.String()+"/64", "dev", "eth0", "nodad")
		}
	}
	err := testbed.InNetns(ns, func() error {
		// One socket per message: per source address a port of its own.
		conns := make([]*net.UDPConn, len(msgs))
		defer func() {
			for _, c := range conns {
				if c != nil {
					c.Close()
				}
			}
		}()
		for i, m := range msgs {
			c, err := net.ListenUDP("udp6", &net.UDPAddr{IP: srcs[i].AsSlice(), Zone: "eth0"})
			if err != nil {
				return err
			}
			conns[i] = c
			dst := &net.UDPAddr{IP: dhcpv6.AllDHCPRelayAgentsAndServers, Port: dhcpv6.DefaultServerPort, Zone: "eth0"}
			if _, err := c.WriteToUDP(m.ToBytes(), dst); err != nil {
				return fmt.Errorf("sending %d: %w", i, err)
			}
		}
		deadline := time.Now().Add(timeout)
		var wg sync.WaitGroup
		for i, c := range conns {
			wg.Add(1)
			go func() {
				defer wg.Done()
				buf := make([]byte, 4096)
				_ = c.SetReadDeadline(deadline)
				n, _, err := c.ReadFromUDP(buf)
				if err != nil {
					return // the deadline: no reply
				}
				d, err := dhcpv6.FromBytes(buf[:n])
				if err != nil {
					d = &dhcpv6.Message{MessageType: dhcpv6.MessageType(buf[0])}
				}
				for d.IsRelay() {
					if inner := d.(*dhcpv6.RelayMessage).Options.RelayMessage(); inner != nil {
						d = inner
						continue
					}
					break
				}
				out[i] = d
			}()
		}
		wg.Wait()
		return nil
	})
	if err != nil {
		t.Fatalf("exchange from %s: %v", ns, err)
	}
	return out
}

// monitorRoutes runs `ip monitor route` in ns until the returned function
// is called, which returns what it printed.
func monitorRoutes(t *testing.T, ns string) func() string {
	t.Helper()
	var buf strings.Builder
	var mu sync.Mutex
	cmd := exec.Command("ip", "-n", ns, "-6", "monitor", "route")
	cmd.Stdout = writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return buf.Write(p)
	})
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	stopped := false
	stop := func() string {
		if !stopped {
			stopped = true
			_ = cmd.Process.Kill()
			if err := <-done; err != nil && !errors.As(err, new(*exec.ExitError)) {
				t.Errorf("ip monitor: %v", err)
			}
		}
		mu.Lock()
		defer mu.Unlock()
		return buf.String()
	}
	t.Cleanup(func() { stop() })
	return stop
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

func readHookLog(r *dhcpcdRun) string {
	b, _ := os.ReadFile(r.dir + "/hook.log")
	return string(b)
}
