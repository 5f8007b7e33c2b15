package dataplane

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/mdlayher/ndp"

	"github.com/tenure-ipam/tenure/internal/config"
	"github.com/tenure-ipam/tenure/test/testbed"
)

func TestWantedAdvertisements(t *testing.T) {
	p64 := netip.MustParsePrefix("fd00:96::/64")
	p48 := netip.MustParsePrefix("fd00:97::/48")
	networks := map[string]config.DHCPv6{
		"ra":    {Enabled: true, RouterAdvertisements: true, Interfaces: []string{"br0", "br1"}, OnLink: []netip.Prefix{p64}, PreferredLifetime: time.Hour, ValidLifetime: 2 * time.Hour},
		"ragw":  {Enabled: true, RouterAdvertisements: true, Interfaces: []string{"br1"}, OnLink: []netip.Prefix{p64, p48}, Gateway: netip.MustParseAddr("fd00:97::1"), PreferredLifetime: 600 * time.Second, ValidLifetime: 3 * time.Hour},
		"quiet": {Enabled: true, Interfaces: []string{"br2"}, OnLink: []netip.Prefix{p64}, PreferredLifetime: time.Hour, ValidLifetime: 2 * time.Hour},
		"unused": {Enabled: true, RouterAdvertisements: true, Interfaces: []string{"br3"}, OnLink: []netip.Prefix{p64},
			PreferredLifetime: time.Hour, ValidLifetime: 2 * time.Hour},
	}
	bind := func(key, network string, ifaces ...string) Binding {
		b := binding(key, "fd00:96::5", "", false, ifaces...)
		b.Network, b.NAD = network, network // the NAD of each network is named after it here
		return b
	}
	got := WantedAdvertisements([]Binding{
		bind("vms/a", "ra", "br0", "br1"),
		bind("vms/b", "ragw", "br1"),
		bind("vms/c", "quiet", "br2"),
		bind("vms/d", "nosettings", "br4"),
	}, networks)

	want := map[string]RASettings{
		"br0": {Prefixes: []RAPrefix{{p64, time.Hour, 2 * time.Hour}}},
		// Both networks: p64 at the smaller lifetimes of the two; a gateway
		// in one makes the sender a router.
		"br1": {Prefixes: []RAPrefix{{p64, 600 * time.Second, 2 * time.Hour}, {p48, 600 * time.Second, 3 * time.Hour}}, Router: true},
	}
	if len(got) != len(want) {
		t.Fatalf("advertising on %v, want %v (no binding on br3, no router_advertisements on br2)", got, want)
	}
	for ifn, w := range want {
		if g, ok := got[ifn]; !ok || !g.equal(w) {
			t.Errorf("%s: %+v, want %+v", ifn, g, w)
		}
	}
}

func TestRouterAdvertisementMessage(t *testing.T) {
	mac := net.HardwareAddr{2, 0, 0, 0, 0, 1}
	s := RASettings{Prefixes: []RAPrefix{{netip.MustParsePrefix("fd00:96::/64"), time.Hour, 2 * time.Hour}}}
	ra := routerAdvertisement(s, mac, false)
	if !ra.ManagedConfiguration || !ra.OtherConfiguration || ra.RouterLifetime != 0 {
		t.Errorf("RA %+v: want M, O, router lifetime 0 without a gateway", ra)
	}
	checkPrefix(t, ra, "fd00:96::/64")
	s.Router = true
	if ra := routerAdvertisement(s, mac, false); ra.RouterLifetime != raRouterLifetime {
		t.Errorf("router lifetime %v with a gateway, want %v", ra.RouterLifetime, raRouterLifetime)
	}
	if ra := routerAdvertisement(s, mac, true); ra.RouterLifetime != 0 {
		t.Errorf("final RA router lifetime %v, want 0", ra.RouterLifetime)
	}
}

func checkPrefix(t *testing.T, ra *ndp.RouterAdvertisement, want string) {
	t.Helper()
	for _, o := range ra.Options {
		if p, ok := o.(*ndp.PrefixInformation); ok {
			if got := netip.PrefixFrom(p.Prefix, int(p.PrefixLength)).String(); got != want || !p.OnLink || p.AutonomousAddressConfiguration {
				t.Errorf("prefix option %+v, want %s on-link, not autonomous", p, want)
			}
			return
		}
	}
	t.Errorf("RA %+v has no prefix option", ra)
}

// logMessages is a slog.Handler that passes each record's message on.
type logMessages chan string

func (m logMessages) Enabled(context.Context, slog.Level) bool { return true }

func (m logMessages) Handle(_ context.Context, r slog.Record) error {
	select {
	case m <- r.Message:
	default: // the test reads only the messages it waits for
	}
	return nil
}

func (m logMessages) WithAttrs([]slog.Attr) slog.Handler { return m }
func (m logMessages) WithGroup(string) slog.Handler      { return m }

// waitFor reads messages until one contains what.
func (m logMessages) waitFor(t *testing.T, what string) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case msg := <-m:
			if strings.Contains(msg, what) {
				return
			}
		case <-timeout:
			t.Fatalf("nothing logged %q", what)
		}
	}
}

// TestAdvertiserInANamespace: an advertiser on one end of a veth pair in a
// namespace the test makes answers a Router Solicitation from the other
// end, warns about another router's advertisement, and says goodbye with
// router lifetime 0 when it stops (root only).
func TestAdvertiserInANamespace(t *testing.T) {
	name, path := testNetns(t, "ra")
	for _, k := range []string{"all", "default"} { // link-local addresses usable at once
		err := testbed.InNetns(name, func() error {
			return os.WriteFile("/proc/sys/net/ipv6/conf/"+k+"/accept_dad", []byte("0"), 0o644)
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, args := range [][]string{
		{"link", "add", "rt0", "type", "veth", "peer", "name", "cl0"},
		{"link", "set", "rt0", "up"}, {"link", "set", "cl0", "up"},
	} {
		if out, err := testbed.IPIn(name, args...); err != nil {
			t.Fatalf("ip %v: %v: %s", args, err, out)
		}
	}
	logs := make(logMessages, 64)
	s, err := New(Options{Source: &fakeSource{}, Netns: path, Logger: slog.New(logs)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.nl.Close(); s.ns.close() })

	var client *ndp.Conn
	deadline := time.Now().Add(10 * time.Second)
	for {
		err = testbed.InNetns(name, func() error {
			ifi, err := net.InterfaceByName("cl0")
			if err != nil {
				return err
			}
			client, _, err = ndp.Listen(ifi, ndp.LinkLocal)
			return err
		})
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond) // the link-local address is being configured
	}
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	// next returns the next Router Advertisement the client receives.
	next := func(what string) *ndp.RouterAdvertisement {
		t.Helper()
		if err := client.SetReadDeadline(time.Now().Add(10 * time.Second)); err != nil {
			t.Fatal(err)
		}
		for {
			m, _, _, err := client.ReadFrom()
			if err != nil {
				t.Fatalf("waiting for %s: %v", what, err)
			}
			if ra, ok := m.(*ndp.RouterAdvertisement); ok {
				return ra
			}
		}
	}

	settings := RASettings{Prefixes: []RAPrefix{{netip.MustParsePrefix("fd00:96::/64"), time.Hour, 2 * time.Hour}}}
	s.reconcileAdvertisers(map[string]RASettings{"rt0": settings})
	if len(s.advertisers) != 1 {
		t.Fatal("no advertiser started")
	}
	checkPrefix(t, next("the first periodic advertisement"), "fd00:96::/64")

	// A solicitation is answered.
	if err := client.WriteTo(&ndp.RouterSolicitation{}, nil, netip.MustParseAddr("ff02::2")); err != nil {
		t.Fatal(err)
	}
	if ra := next("the answer to a solicitation"); !ra.ManagedConfiguration || !ra.OtherConfiguration || ra.RouterLifetime != 0 {
		t.Errorf("answer %+v: want M, O, router lifetime 0", ra)
	}

	// Another router on the segment is warned about.
	if err := client.WriteTo(&ndp.RouterAdvertisement{RouterLifetime: time.Minute}, nil, netip.IPv6LinkLocalAllNodes()); err != nil {
		t.Fatal(err)
	}
	logs.waitFor(t, "another router advertises on this segment")

	// A gateway: advertised at once with a router lifetime.
	settings.Router = true
	s.reconcileAdvertisers(map[string]RASettings{"rt0": settings})
	if ra := next("the advertisement of the new settings"); ra.RouterLifetime != raRouterLifetime {
		t.Errorf("router lifetime %v, want %v", ra.RouterLifetime, raRouterLifetime)
	}
	// No longer wanted: a final advertisement withdraws the router.
	s.reconcileAdvertisers(nil)
	if len(s.advertisers) != 0 {
		t.Fatal("advertiser still running")
	}
	if ra := next("the final advertisement"); ra.RouterLifetime != 0 {
		t.Errorf("final router lifetime %v, want 0", ra.RouterLifetime)
	}
}

// testNetns makes a network namespace for the test (root only; skipped
// otherwise) and returns its name and path.
func testNetns(t *testing.T, tag string) (name, path string) {
	t.Helper()
	testbed.NeedPlumb(t)
	name = fmt.Sprintf("tdp-%s-%d", tag, os.Getpid())
	path, remove, err := testbed.AddNetns(name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(remove)
	return name, path
}
