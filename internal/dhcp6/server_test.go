package dhcp6

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv6"

	"github.com/tenure-ipam/tenure/test/testbed"
)

// serve runs s.Serve in a goroutine and returns a function that closes s and
// checks that Serve returned nil.
func serve(t *testing.T, s *Server) (stop func()) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- s.Serve() }()
	return func() {
		t.Helper()
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Serve returned %v after Close", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("Serve did not return after Close")
		}
		if err := s.Close(); err != nil {
			t.Errorf("second Close: %v", err)
		}
	}
}

// exchange sends m from c to dst and returns the first message received.
func exchange(t *testing.T, c *net.UDPConn, dst *net.UDPAddr, m dhcpv6.DHCPv6) (dhcpv6.DHCPv6, *net.UDPAddr) {
	t.Helper()
	if _, err := c.WriteToUDP(m.ToBytes(), dst); err != nil {
		t.Fatalf("send: %v", err)
	}
	buf := make([]byte, 4096)
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, from, err := c.ReadFromUDP(buf)
	if err != nil {
		t.Fatalf("no answer from %v: %v", dst, err)
	}
	d, err := dhcpv6.FromBytes(buf[:n])
	if err != nil {
		t.Fatalf("answer does not decode: %v", err)
	}
	return d, from
}

// The Server on a plain loopback socket (no privileges needed): a Solicit
// gets an Advertise, an unknown client gets nothing, Close stops Serve.
func TestServerLoopback(t *testing.T) {
	conn, err := net.ListenUDP("udp6", &net.UDPAddr{IP: net.IPv6loopback})
	if err != nil {
		testbed.SkipUnlessEverything(t, "no IPv6 loopback: "+err.Error())
	}
	obs := &countingObserver{}
	lookup := newFakeLookup(fullBinding())
	s, err := newServer(ifname, NewHandler(testConfig(), lookup, obs), conn)
	if err != nil {
		t.Fatal(err)
	}
	stop := serve(t, s)
	defer stop()

	client, err := net.ListenUDP("udp6", &net.UDPAddr{IP: net.IPv6loopback})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	dst := s.LocalAddr().(*net.UDPAddr)

	// Unknown client first: no answer, then the known one is answered (and
	// is the first thing the client reads).
	stranger, err := dhcpv6.NewSolicit(otherMAC)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.WriteToUDP(stranger.ToBytes(), dst); err != nil {
		t.Fatal(err)
	}
	if _, err := client.WriteToUDP([]byte{1, 2}, dst); err != nil { // undecodable: counted, not answered
		t.Fatal(err)
	}
	sol := solicit(t, withPD)
	got, from := exchange(t, client, dst, sol)
	if from.Port != dst.Port {
		t.Errorf("answer from %v, want %v", from, dst)
	}
	checkReply(t, handleCase{msg: sol, wantType: dhcpv6.MessageTypeAdvertise,
		na: []iaWant{naLease(naIAID)}, pd: []iaWant{pdLease(pdIAID)}}, got)

	deadline := time.Now().Add(5 * time.Second)
	for obs.get(MsgTypeSolicit, OutcomeNoBinding) != 1 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := obs.get(MsgTypeSolicit, OutcomeNoBinding); n != 1 {
		t.Errorf("%d unknown Solicits observed, want 1", n)
	}
	// Messages are handled in the order they arrive: the undecodable one
	// was counted before the Advertise was sent.
	if n := obs.get(MsgTypeUnknown, OutcomeUndecodable); n != 1 {
		t.Errorf("%d undecodable packets observed, want 1: %v", n, obs.counts)
	}
	for _, c := range lookup.calls {
		if !strings.HasSuffix(c, "%"+ifname) {
			t.Errorf("Lookup asked about interface of %q", c)
		}
	}
}

func TestServerCloseBeforeServe(t *testing.T) {
	conn, err := net.ListenUDP("udp6", &net.UDPAddr{IP: net.IPv6loopback})
	if err != nil {
		testbed.SkipUnlessEverything(t, "no IPv6 loopback: "+err.Error())
	}
	s, err := newServer(ifname, NewHandler(testConfig(), newFakeLookup(), nil), conn)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Serve(); err != nil {
		t.Errorf("Serve after Close: %v", err)
	}
}

func TestNewServerErrors(t *testing.T) {
	h := NewHandler(testConfig(), newFakeLookup(), nil)
	if _, err := NewServer("", h); err == nil {
		t.Error("no interface name accepted")
	}
	if _, err := NewServer("lo", nil); err == nil {
		t.Error("nil Handler accepted")
	}
	if _, err := NewServer("tenure-no-such-if0", h); err == nil {
		t.Error("missing interface accepted")
	}
}

// Three Servers on three interfaces of one network namespace: all bind
// [::]:547, each answers only its interface's client, known by the Ethernet
// source of its frames (DUID-EN clients, one on a random link-local
// address), and Close stops them.
// The test re-runs itself under `unshare --net` with two veth pairs; it
// needs root.
func TestServerPerInterface(t *testing.T) {
	if os.Getenv("TENURE_DHCP6_NETNS") != "1" {
		testbed.NeedPlumb(t) // root and iproute2
		unshare, err := exec.LookPath("unshare")
		if err != nil {
			t.Fatal("no unshare: install util-linux")
		}
		if out, err := exec.Command(unshare, "--net", "true").CombinedOutput(); err != nil {
			t.Fatalf("cannot make a network namespace as root: %v: %s", err, out)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, unshare, "--net", os.Args[0], "-test.run=^TestServerPerInterface$", "-test.v", "-test.count=1")
		cmd.Env = append(os.Environ(), "TENURE_DHCP6_NETNS=1")
		out, err := cmd.CombinedOutput()
		t.Logf("in a new network namespace:\n%s", out)
		if err != nil {
			t.Fatalf("child: %v", err)
		}
		return
	}

	// In the new namespace. No DAD, so link-local addresses are usable at once.
	for _, k := range []string{"all", "default"} {
		if err := os.WriteFile("/proc/sys/net/ipv6/conf/"+k+"/accept_dad", []byte("0"), 0o644); err != nil {
			t.Fatalf("cannot disable DAD: %v", err)
		}
	}
	ipCmd := func(args ...string) error {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			return errors.New(strings.TrimSpace(string(out)))
		}
		return nil
	}
	for _, pair := range [][2]string{{"cl0", "srv0"}, {"cl1", "srv1"}, {"cl2", "srv2"}} {
		if err := ipCmd("link", "add", pair[0], "type", "veth", "peer", "name", pair[1]); err != nil {
			t.Fatalf("no veth: %v", err)
		}
		if pair[0] == "cl2" {
			// A stable-privacy-like link-local address: no EUI-64 to read
			// a MAC from.
			if err := ipCmd("link", "set", "cl2", "addrgenmode", "random"); err != nil {
				t.Fatal(err)
			}
		}
		for _, l := range pair {
			if err := ipCmd("link", "set", l, "up"); err != nil {
				t.Fatal(err)
			}
		}
	}
	linkLocal := func(name string) (net.HardwareAddr, netip.Addr) {
		deadline := time.Now().Add(10 * time.Second)
		for {
			iface, err := net.InterfaceByName(name)
			if err != nil {
				t.Fatal(err)
			}
			addrs, _ := iface.Addrs()
			for _, a := range addrs {
				if p, err := netip.ParsePrefix(a.String()); err == nil && p.Addr().IsLinkLocalUnicast() {
					return iface.HardwareAddr, p.Addr()
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s has no link-local address", name)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}

	mac0, ll0 := linkLocal("cl0")
	mac1, ll1 := linkLocal("cl1")
	mac2, ll2 := linkLocal("cl2")
	if _, ok := MACFromLinkLocal(ll2); ok {
		t.Fatalf("cl2's link-local address %s is EUI-64", ll2)
	}
	addr1 := netip.MustParseAddr("2001:db8:1::11")
	addr2 := netip.MustParseAddr("2001:db8:1::22")
	lookup := &fakeLookup{bindings: map[string]Binding{
		lookupKey(mac0, "srv0"): {Key: "ns/vm0", MAC: mac0, Address: bindAddr, Prefix: bindPrefix},
		lookupKey(mac1, "srv1"): {Key: "ns/vm1", MAC: mac1, Address: addr1},
		lookupKey(mac2, "srv2"): {Key: "ns/vm2", MAC: mac2, Address: addr2},
	}}
	obs := &countingObserver{}
	h := NewHandler(testConfig(), lookup, obs)
	var stops []func()
	for _, name := range []string{"srv0", "srv1", "srv2"} {
		s, err := NewServer(name, h)
		if err != nil {
			t.Fatalf("NewServer(%s): %v", name, err)
		}
		stops = append(stops, serve(t, s))
	}

	for _, c := range []struct {
		ifname string
		ll     netip.Addr
		want   netip.Addr
	}{{"cl0", ll0, bindAddr}, {"cl1", ll1, addr1}, {"cl2", ll2, addr2}} {
		conn, err := net.ListenUDP("udp6", &net.UDPAddr{IP: net.IP(c.ll.AsSlice()), Port: dhcpv6.DefaultClientPort, Zone: c.ifname})
		if err != nil {
			t.Fatal(err)
		}
		// A DUID-EN: only the Ethernet source of the frame maps the client
		// (on cl2 the link-local address carries no MAC either).
		sol := solicit(t, dhcpv6.WithClientID(&dhcpv6.DUIDEN{EnterpriseNumber: 32473, EnterpriseIdentifier: []byte(c.ifname)}))
		dst := &net.UDPAddr{IP: dhcpv6.AllDHCPRelayAgentsAndServers, Port: dhcpv6.DefaultServerPort, Zone: c.ifname}
		got, _ := exchange(t, conn, dst, sol)
		conn.Close()
		m, ok := got.(*dhcpv6.Message)
		if !ok || m.MessageType != dhcpv6.MessageTypeAdvertise {
			t.Fatalf("%s: got %v, want an Advertise", c.ifname, got)
		}
		a := m.Options.OneIANA().Options.OneAddress()
		if a == nil || !a.IPv6Addr.Equal(net.IP(c.want.AsSlice())) {
			t.Errorf("%s: offered %v, want %s", c.ifname, a, c.want)
		}
	}
	for _, stop := range stops {
		stop()
	}

	// Each Server only saw its own interface's client.
	for _, call := range lookup.calls {
		if call != lookupKey(mac0, "srv0") && call != lookupKey(mac1, "srv1") && call != lookupKey(mac2, "srv2") {
			t.Errorf("unexpected Lookup %s", call)
		}
	}
	if n := obs.get(MsgTypeSolicit, OutcomeAdvertise); n != 3 {
		t.Errorf("%d Advertises observed, want 3: %v", n, obs.counts)
	}
}
