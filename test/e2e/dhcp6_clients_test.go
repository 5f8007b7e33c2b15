//go:build integration

package e2e

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv6"
	"github.com/insomniacslk/dhcp/iana"
	"github.com/mdlayher/packet"
	"golang.org/x/net/ipv6"
	"golang.org/x/sys/unix"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tenure-ipam/tenure/internal/dhcp6"
	"github.com/tenure-ipam/tenure/test/testbed"
)

// These tests drive Debian's dhcpcd (package dhcpcd-base; make test installs
// it through hack/test-deps.sh) as the DHCPv6 client of guests that the
// older test's ISC dhclient does not cover: DUIDs and link-local addresses
// that do not show the guest's MAC, stock settings that wait for a Router
// Advertisement, and two IAs of each kind.

// dhcpcdSite is one "node" (a namespace with bridge br0 served by its own
// tenure-agent) and the network its guests are attached to.
type dhcpcdSite struct {
	t                    *testing.T
	ctx                  context.Context
	c                    client.Client
	sfx, node, network   string
	ns                   string // Kubernetes namespace of the claims and pods
	agentSocket, metrics string
	ipam                 string // the network config the next ADDs carry
	subnet               int    // N of fd00:N::/64
	nodeNS               string
	guests               int
}

// dhcpcdGuest is a guest namespace behind the site's br0 and what its claim
// holds.
type dhcpcdGuest struct {
	ns     string
	mac    string
	addr   netip.Addr
	prefix netip.Prefix
}

func requireDhcpcd(t *testing.T) {
	t.Helper()
	if ok, why := testbed.CanPlumb(); !ok {
		t.Fatal(why)
	}
	if _, err := exec.LookPath("dhcpcd"); err != nil {
		t.Fatal("no dhcpcd: install Debian's dhcpcd-base (apt-get install dhcpcd-base); make test does (hack/test-deps.sh)")
	}
}

// newDhcpcdSite fails the test without dhcpcd, makes the node namespace,
// starts its agent and returns the site, whose network has the range
// fd00:N::/64, delegates /56s of fd00:N00::/40 and serves DHCPv6 on br0,
// with router advertisements if ra.
func newDhcpcdSite(t *testing.T, tag string, n int, ra bool) *dhcpcdSite {
	t.Helper()
	requireDhcpcd(t)
	ctx := testContext(t, 3*time.Minute)
	sfx := fmt.Sprint(os.Getpid() % 100000)
	s := &dhcpcdSite{t: t, ctx: ctx, c: apiClient(t), sfx: sfx, node: "dc-" + tag, network: "dc" + tag,
		ns: "dhcpcd-" + tag, nodeNS: "tdc-" + tag + "-" + sfx, subnet: n}
	s.setRA(ra)
	path := dhcpNode(t, s.nodeNS)
	waitLinkLocal(t, ctx, s.nodeNS, "br0")
	agent, metrics := startDataplaneAgent(t, ctx, s.node, path, "")
	s.agentSocket, s.metrics = agent.Socket, metrics
	return s
}

// setRA sets the network config the next ADDs carry: router advertisements
// on or off, and an IPv6 gateway (fd00:N::1) or none.
func (s *dhcpcdSite) setRA(ra bool, gateway ...bool) {
	gw := ""
	if len(gateway) > 0 && gateway[0] {
		gw = fmt.Sprintf(`"gateway":"fd00:%x::1",`, s.subnet)
	}
	s.ipam = fmt.Sprintf(`{"ipRanges":[{"range":"fd00:%x::/64"}],%s
		"prefix_delegation":{"range":"fd00:%x00::/40","prefix_length":56},
		"dhcpv6":{"interfaces":["br0"],"router_advertisements":%t}}`, s.subnet, gw, s.subnet, ra)
}

// guest makes a guest namespace whose eth0 has mac and a link-local
// address of addr_gen_mode mode (0 EUI-64, 2 stable-privacy, 3 random),
// creates its claim, and runs the CNI ADD of its pod on this site's node.
func (s *dhcpcdSite) guest(mac string, mode int) dhcpcdGuest {
	t := s.t
	t.Helper()
	s.guests++
	g := dhcpcdGuest{ns: fmt.Sprintf("tdc-g%d-%s", s.guests, s.sfx), mac: mac}
	_, remove, err := testbed.AddNetns(g.ns)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(remove)
	noDAD(t, g.ns)
	hostIf := fmt.Sprintf("vdc%d", s.guests)
	mustIP(t, s.nodeNS, "link", "add", hostIf, "type", "veth", "peer", "name", "eth0", "netns", g.ns)
	mustIP(t, s.nodeNS, "link", "set", hostIf, "master", "br0", "up")
	var sysctls []string
	if mode == 2 {
		// stable-privacy needs its secret first.
		sysctls = append(sysctls, fmt.Sprintf("net.ipv6.conf.eth0.stable_secret=2001:db8:5ec:1e7::%d", s.guests))
	}
	sysctls = append(sysctls, fmt.Sprintf("net.ipv6.conf.eth0.addr_gen_mode=%d", mode))
	for _, kv := range sysctls {
		if out, err := exec.Command("ip", "netns", "exec", g.ns, "sysctl", "-qw", kv).CombinedOutput(); err != nil {
			t.Fatalf("sysctl %s in %s: %v: %s", kv, g.ns, err, out)
		}
	}
	mustIP(t, g.ns, "link", "set", "eth0", "address", mac, "up")
	waitLinkLocal(t, s.ctx, g.ns, "eth0")

	claim := fmt.Sprintf("vm%d.%s", s.guests, s.network)
	createClaim(t, s.ctx, s.c, s.ns, claim, s.network)
	p := newPod(t, s.ctx, s.c, s.ns, s.node, map[string]string{"k8s.v1.cni.cncf.io/networks": fmt.Sprintf(
		`[{"name":%q,"interface":"net1","ipam-claim-reference":%q,"mac":%q}]`, s.network, claim, mac)})
	s.add(p)
	cl := getClaim(t, s.ctx, s.c, s.ns, claim)
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
	return g
}

// plainPod makes a pod of the site's node attached through the site's NAD
// without a claim: its ADD carries the NAD's config, as any pod's does.
func (s *dhcpcdSite) plainPod() pod {
	return newPod(s.t, s.ctx, s.c, s.ns, s.node, map[string]string{"k8s.v1.cni.cncf.io/networks": fmt.Sprintf(
		`[{"name":%q,"interface":"net1"}]`, s.network)})
}

// add runs the CNI ADD of p with the site's network config.
func (s *dhcpcdSite) add(p pod) {
	s.t.Helper()
	if _, err := add(s.ctx, p, netconf(s.network, s.agentSocket, s.ipam)); err != nil {
		s.t.Fatalf("ADD of %s: %v", p.name, err)
	}
}

// eth0Addrs lists the IPv6 addresses of eth0 in ns with the scope ("link",
// "global"), as ip's JSON output gives them.
func eth0Addrs(t *testing.T, ns, scope string) []netip.Addr {
	t.Helper()
	var links []struct {
		AddrInfo []struct {
			Local string `json:"local"`
		} `json:"addr_info"`
	}
	if err := json.Unmarshal([]byte(mustIP(t, ns, "-j", "-6", "addr", "show", "dev", "eth0", "scope", scope)), &links); err != nil {
		t.Fatal(err)
	}
	var out []netip.Addr
	for _, l := range links {
		for _, a := range l.AddrInfo {
			if a.Local != "" { // ip lists the filtered-out addresses as {}
				out = append(out, netip.MustParseAddr(a.Local))
			}
		}
	}
	return out
}

// dhcpcdRun is a dhcpcd running in a guest namespace.
type dhcpcdRun struct {
	t    *testing.T
	ns   string
	dir  string
	done chan error
}

// startDhcpcd runs dhcpcd on eth0 of ns, IPv6 only, in the foreground,
// with config file conf ("" for Debian's default /etc/dhcpcd.conf) and a
// hook script that records each call's environment. Its state (DUID,
// leases, pid file) lives on tmpfs mounts private to the run (ip netns exec
// gives it a mount namespace of its own).
func startDhcpcd(t *testing.T, ns, conf string) *dhcpcdRun {
	t.Helper()
	r := &dhcpcdRun{t: t, ns: ns, dir: t.TempDir(), done: make(chan error, 1)}
	script := filepath.Join(r.dir, "hook")
	if err := os.WriteFile(script, []byte(`#!/bin/sh
{ echo "reason=$reason"; env | grep -E '^(new|old)_' | sort; echo ---; } >> "`+r.dir+`/hook.log"
`), 0o755); err != nil {
		t.Fatal(err)
	}
	confPath := "/etc/dhcpcd.conf"
	if conf != "" {
		confPath = filepath.Join(r.dir, "dhcpcd.conf")
		if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	logf, err := os.Create(filepath.Join(r.dir, "dhcpcd.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("ip", "netns", "exec", ns, "sh", "-c",
		`mkdir -p /run/dhcpcd /var/lib/dhcpcd && mount -t tmpfs tmpfs /run/dhcpcd && mount -t tmpfs tmpfs /var/lib/dhcpcd && exec dhcpcd -B -d -6 -f "$0" -c "$1" eth0`,
		confPath, script)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { r.done <- cmd.Wait(); logf.Close() }()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-r.done:
		case <-time.After(10 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-r.done
		}
		if t.Failed() || os.Getenv("TENURE_E2E_LOGS") != "" {
			t.Logf("dhcpcd in %s:\n%s", ns, r.dump())
		}
	})
	return r
}

func (r *dhcpcdRun) log() string {
	b, _ := os.ReadFile(filepath.Join(r.dir, "dhcpcd.log"))
	return string(b)
}

func (r *dhcpcdRun) dump() string {
	h, _ := os.ReadFile(filepath.Join(r.dir, "hook.log"))
	return fmt.Sprintf("log:\n%s\nhook calls:\n%s", r.log(), h)
}

// waitLog polls the client's log for a line containing what.
func (r *dhcpcdRun) waitLog(ctx context.Context, d time.Duration, what string) {
	r.t.Helper()
	poll(r.t, ctx, d, fmt.Sprintf("dhcpcd in %s to log %q", r.ns, what), func() bool {
		return strings.Contains(r.log(), what)
	})
}

// waitLease polls until eth0 holds the guest's claimed address (as a /128)
// and dhcpcd holds its delegated prefix (the unreachable route dhcpcd
// installs for a delegation it does not hand on whole).
func (r *dhcpcdRun) waitLease(ctx context.Context, g dhcpcdGuest, withPrefix bool) {
	r.t.Helper()
	var addrs, routes string
	err := pollErr(ctx, 30*time.Second, func() bool {
		addrs, _ = testbed.IPIn(r.ns, "-6", "addr", "show", "dev", "eth0", "scope", "global")
		routes, _ = testbed.IPIn(r.ns, "-6", "route", "show", "table", "all")
		return strings.Contains(addrs, g.addr.String()+"/128") && (!withPrefix || strings.Contains(routes, g.prefix.String()))
	})
	if err != nil {
		r.t.Fatalf("dhcpcd in %s: no lease of %s and %s within 30s\naddresses: %s\nroutes: %s\n%s", r.ns, g.addr, g.prefix, addrs, routes, r.dump())
	}
}

func pollErr(ctx context.Context, d time.Duration, cond func() bool) error {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	return nil
}

// TestDHCPv6ClientsKnownByTheirFramesMAC: guests whose DUID (DUID-UUID,
// DUID-EN) and link-local address (stable-privacy, random) say nothing of
// their MAC get exactly their claim's address and prefix: the server knows
// them by the Ethernet source of their frames. A packet that is no DHCPv6
// message is counted, not answered.
func TestDHCPv6ClientsKnownByTheirFramesMAC(t *testing.T) {
	s := newDhcpcdSite(t, "mac", 0x97, false)
	ctx := s.ctx

	var first dhcpcdGuest
	for i, c := range []struct {
		name string
		mac  string
		mode int
		duid string
	}{
		{"DUID-UUID on a stable-privacy address", "02:00:00:d7:00:01", 2, "00:04:6f:0e:5d:1a:2b:3c:4d:5e:8f:70:91:a2:b3:c4:d5:e6"},
		{"DUID-EN on a random address", "02:00:00:d7:00:02", 3, "00:02:00:00:7e:d9:74:65:6e:75:72:65"},
	} {
		g := s.guest(c.mac, c.mode)
		if i == 0 {
			first = g
		}
		lls := eth0Addrs(t, g.ns, "link")
		if len(lls) != 1 {
			t.Fatalf("%s: eth0 link-local addresses %v", c.name, lls)
		}
		ll := lls[0]
		if mac, ok := dhcp6.MACFromLinkLocal(ll); ok {
			t.Fatalf("%s: guest link-local %s encodes MAC %s: the test needs one that does not", c.name, ll, mac)
		}
		r := startDhcpcd(t, g.ns, "duid "+c.duid+"\nnoipv6rs\nipv6only\ninterface eth0\n  ia_na 1\n  ia_pd 2\n")
		r.waitLease(ctx, g, true)
		if !strings.Contains(r.log(), "DUID "+c.duid) {
			t.Errorf("%s: dhcpcd did not use DUID %s", c.name, c.duid)
		}
		if got := eth0Addrs(t, g.ns, "global"); len(got) != 1 || got[0] != g.addr {
			t.Errorf("%s: eth0 holds %v, want exactly the claim's %s", c.name, got, g.addr)
		}
		t.Logf("%s (%s, link-local %s): %s and %s", c.name, c.mac, ll, g.addr, g.prefix)
	}

	// A packet to the server port that is no DHCPv6 message: counted with
	// its own outcome.
	err := testbed.InNetns(first.ns, func() error {
		conn, err := net.ListenUDP("udp6", &net.UDPAddr{IP: net.IPv6unspecified, Port: 0})
		if err != nil {
			return err
		}
		defer conn.Close()
		_, err = conn.WriteToUDP([]byte{0xff}, &net.UDPAddr{IP: dhcpv6.AllDHCPRelayAgentsAndServers, Port: dhcpv6.DefaultServerPort, Zone: "eth0"})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	poll(t, ctx, 20*time.Second, "the undecodable packet to be counted", func() bool {
		return counter(t, scrape(t, s.metrics), "unknown", "undecodable") >= 1
	})
}

// TestDHCPv6RouterAdvertisementsStartStockClients: dhcpcd with Debian's
// default configuration waits for a Router Advertisement before it starts
// DHCPv6. With router_advertisements off it never does; once the network's
// config turns them on, the node serving the guest advertises and the same
// client gets its claim's address, with the range's /64 on-link and no
// default route (the network has no gateway); a gateway in the config makes
// the node the guest's default router.
func TestDHCPv6RouterAdvertisementsStartStockClients(t *testing.T) {
	s := newDhcpcdSite(t, "ra", 0x98, false)
	ctx := s.ctx
	g := s.guest("02:00:00:d8:00:01", 2)

	r := startDhcpcd(t, g.ns, "")
	// dhcpcd solicits routers three times, then gives up waiting.
	r.waitLog(ctx, 30*time.Second, "no IPv6 Routers available")
	if n := sumDHCPv6Messages(t, scrape(t, s.metrics)); n != 0 {
		t.Fatalf("the server saw %v DHCPv6 messages with router advertisements off; a stock dhcpcd must send none", n)
	}
	if got := eth0Addrs(t, g.ns, "global"); len(got) != 0 {
		t.Fatalf("eth0 holds %v without router advertisements", got)
	}

	// The operator turns router advertisements on in the NAD: the next ADD
	// through it on the node (another pod of the network) carries the new
	// config.
	s.setRA(true)
	s.add(s.plainPod())
	r.waitLease(ctx, g, false)
	if got := eth0Addrs(t, g.ns, "global"); len(got) != 1 || got[0] != g.addr {
		t.Errorf("eth0 holds %v, want exactly the claim's %s", got, g.addr)
	}
	poll(t, ctx, 20*time.Second, "the on-link route of fd00:98::/64 on eth0", func() bool {
		out, _ := testbed.IPIn(g.ns, "-6", "route", "show", "fd00:98::/64")
		return strings.Contains(out, "dev eth0")
	})
	if out := mustIP(t, g.ns, "-6", "route", "show", "default"); out != "" {
		t.Errorf("default route %q from advertisements with router lifetime 0", out)
	}
	if !strings.Contains(r.log(), "Router Advertisement from") {
		t.Errorf("dhcpcd logged no Router Advertisement")
	}

	// With a gateway in the config, the node advertises itself as the
	// default router: the guest routes through the node's link-local
	// address on br0.
	s.setRA(true, true)
	s.add(s.plainPod())
	nodeLL := ""
	if m := strings.Fields(mustIP(t, s.nodeNS, "-6", "-o", "addr", "show", "dev", "br0", "scope", "link")); len(m) > 3 {
		nodeLL, _, _ = strings.Cut(m[3], "/")
	}
	poll(t, ctx, 20*time.Second, "a default route via the node's "+nodeLL, func() bool {
		out, _ := testbed.IPIn(g.ns, "-6", "route", "show", "default")
		return nodeLL != "" && strings.Contains(out, "via "+nodeLL+" dev eth0")
	})
}

func sumDHCPv6Messages(t *testing.T, metrics string) float64 {
	t.Helper()
	m, err := testbed.ParseMetrics(metrics)
	if err != nil {
		t.Fatal(err)
	}
	v, _ := m.Sum("tenure_dhcpv6_messages_total")
	return v
}

// TestDHCPv6TwoIAsOfEachKind: dhcpcd asking for two IA_NAs and two IA_PDs
// gets the claim's address in one IA_NA and its prefix in one IA_PD; the
// server's Reply (read off the guest's link) has NoAddrsAvail and
// NoPrefixAvail inside the others.
func TestDHCPv6TwoIAsOfEachKind(t *testing.T) {
	s := newDhcpcdSite(t, "ia", 0x99, false)
	ctx := s.ctx
	g := s.guest("02:00:00:d9:00:01", 0)
	replies := captureServerMessages(t, g.ns)
	r := startDhcpcd(t, g.ns, "noipv6rs\nipv6only\ninterface eth0\n  ia_na 1\n  ia_na 2\n  ia_pd 3\n  ia_pd 4\n")
	r.waitLease(ctx, g, true)
	if got := eth0Addrs(t, g.ns, "global"); len(got) != 1 || got[0] != g.addr {
		t.Errorf("eth0 holds %v, want exactly the claim's %s", got, g.addr)
	}

	var reply *dhcpv6.Message
	poll(t, ctx, 10*time.Second, "the server's Reply on the guest's link", func() bool {
		for _, m := range replies.all() {
			if m.MessageType == dhcpv6.MessageTypeReply && len(m.Options.IANA()) == 2 {
				reply = m
				return true
			}
		}
		return false
	})
	leased, refused := 0, 0
	for _, ia := range reply.Options.IANA() {
		switch a := ia.Options.Addresses(); {
		case len(a) == 1 && a[0].IPv6Addr.Equal(net.IP(g.addr.AsSlice())) && a[0].ValidLifetime > 0:
			leased++
		case len(a) == 0 && ia.Options.Status() != nil && ia.Options.Status().StatusCode == iana.StatusNoAddrsAvail:
			refused++
		}
	}
	if leased != 1 || refused != 1 {
		t.Errorf("Reply IA_NAs %v: want one with %s and one with NoAddrsAvail", reply.Options.IANA(), g.addr)
	}
	leased, refused = 0, 0
	for _, ia := range reply.Options.IAPD() {
		switch p := ia.Options.Prefixes(); {
		case len(p) == 1 && p[0].Prefix.String() == g.prefix.String() && p[0].ValidLifetime > 0:
			leased++
		case len(p) == 0 && ia.Options.Status() != nil && ia.Options.Status().StatusCode == iana.StatusNoPrefixAvail:
			refused++
		}
	}
	if leased != 1 || refused != 1 || len(reply.Options.IAPD()) != 2 {
		t.Errorf("Reply IA_PDs %v: want one with %s and one with NoPrefixAvail", reply.Options.IAPD(), g.prefix)
	}
}

// serverMessages collects the DHCPv6 messages a guest's eth0 receives.
type serverMessages struct {
	mu   sync.Mutex
	msgs []*dhcpv6.Message
}

func (s *serverMessages) all() []*dhcpv6.Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*dhcpv6.Message(nil), s.msgs...)
}

// captureServerMessages reads, on a packet socket on eth0 of ns, the UDP
// datagrams to port 546 (the client port) and keeps those that decode as
// DHCPv6 messages, until the test ends.
func captureServerMessages(t *testing.T, ns string) *serverMessages {
	t.Helper()
	var conn *packet.Conn
	err := testbed.InNetns(ns, func() error {
		ifi, err := net.InterfaceByName("eth0")
		if err != nil {
			return err
		}
		conn, err = packet.Listen(ifi, packet.Datagram, unix.ETH_P_IPV6, nil)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	out := &serverMessages{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 1<<16)
		for {
			n, _, err := conn.ReadFrom(buf)
			if err != nil {
				return
			}
			h, err := ipv6.ParseHeader(buf[:n])
			if err != nil || h.NextHeader != unix.IPPROTO_UDP || n < ipv6.HeaderLen+8 {
				continue
			}
			udp := buf[ipv6.HeaderLen:n]
			ulen := int(binary.BigEndian.Uint16(udp[4:6]))
			if binary.BigEndian.Uint16(udp[2:4]) != dhcpv6.DefaultClientPort || ulen < 8 || ulen > len(udp) {
				continue
			}
			if m, err := dhcpv6.MessageFromBytes(bytes.Clone(udp[8:ulen])); err == nil {
				out.mu.Lock()
				out.msgs = append(out.msgs, m)
				out.mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() { conn.Close(); <-done })
	return out
}
