package dataplane

import (
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv6"
	corev1 "k8s.io/api/core/v1"

	ipamclaimsv1alpha1 "github.com/tenure-ipam/tenure/api/ipamclaims/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/config"
	"github.com/tenure-ipam/tenure/internal/dhcp6"
	"github.com/tenure-ipam/tenure/test/testbed"
)

type fakeSource struct {
	mu     sync.Mutex
	pods   []*corev1.Pod
	claims []*ipamclaimsv1alpha1.IPAMClaim
}

func (f *fakeSource) Pods() []*corev1.Pod {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.pods)
}

func (f *fakeSource) Claim(ns, name string) (*ipamclaimsv1alpha1.IPAMClaim, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return claimSource(f.claims...)(ns, name)
}

func quietLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// learn is s.Learn, which must not refuse.
func learn(t *testing.T, s *Service, nad, network string, d *config.DHCPv6) {
	t.Helper()
	if err := s.Learn(nad, network, d); err != nil {
		t.Fatalf("Learn(%s): %v", nad, err)
	}
}

func TestLookupFollowsOwnerAndInterface(t *testing.T) {
	src := &fakeSource{
		pods: []*corev1.Pod{testPod("virt-launcher-a", map[string]string{
			nets: `[{"name":"san","interface":"net1","ipam-claim-reference":"vm1.san","mac":"02:00:00:aa:bb:01"}]`})},
		claims: []*ipamclaimsv1alpha1.IPAMClaim{testClaim("vm1.san", "san", "virt-launcher-a", []string{"fd00::7/64"}, []string{"fd00:9000:0:700::/56"})},
	}
	s, err := New(Options{Source: src, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	mac, _ := net.ParseMAC(vmMAC)
	other, _ := net.ParseMAC("02:00:00:aa:bb:02")

	if _, ok := s.Lookup(mac, "br0"); ok {
		t.Fatal("answered before any reconcile")
	}
	learn(t, s, "vms/san", "san", &config.DHCPv6{Enabled: true, Interfaces: []string{"br0"}, InstallRoutes: true, PreferredLifetime: time.Hour, ValidLifetime: 2 * time.Hour})
	s.rebind(src.Pods(), s.Networks())
	b, ok := s.Lookup(mac, "br0")
	if !ok || b.Key != "vms/vm1.san" || b.Address.String() != "fd00::7" || b.Prefix.String() != "fd00:9000:0:700::/56" {
		t.Fatalf("lookup = %+v %v", b, ok)
	}
	if _, ok := s.Lookup(mac, "br1"); ok {
		t.Fatal("answered on an interface the network does not list")
	}
	if _, ok := s.Lookup(other, "br0"); ok {
		t.Fatal("answered a client without a binding")
	}

	// Migration: the claim's owner is now a pod on another node.
	src.mu.Lock()
	src.claims[0] = testClaim("vm1.san", "san", "virt-launcher-b", []string{"fd00::7/64"}, []string{"fd00:9000:0:700::/56"})
	src.mu.Unlock()
	s.rebind(src.Pods(), s.Networks())
	if _, ok := s.Lookup(mac, "br0"); ok {
		t.Fatal("still answering after ownerPod moved to another node")
	}

	// A config without dhcpv6 forgets the network.
	src.mu.Lock()
	src.claims[0] = testClaim("vm1.san", "san", "virt-launcher-a", []string{"fd00::7/64"}, nil)
	src.mu.Unlock()
	s.rebind(src.Pods(), s.Networks())
	if _, ok := s.Lookup(mac, "br0"); !ok {
		t.Fatal("owner back: no answer")
	}
	learn(t, s, "vms/san", "san", nil)
	s.rebind(src.Pods(), s.Networks())
	if _, ok := s.Lookup(mac, "br0"); ok {
		t.Fatal("answering for a network whose config dropped dhcpv6")
	}
}

func TestStateFileRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "agent.sock.dataplane.json")
	s, err := New(Options{Source: &fakeSource{}, StateFile: path, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	want := config.DHCPv6{Enabled: true, Interfaces: []string{"br0", "vlan200"}, InstallRoutes: false, PreferredLifetime: 600 * time.Second, ValidLifetime: 900 * time.Second,
		RouterAdvertisements: true, OnLink: []netip.Prefix{netip.MustParsePrefix("fd00:96::/64")}, Gateway: netip.MustParseAddr("fd00:96::1"),
		TrustedRelays: []config.TrustedRelay{{Interface: "vlan200", MAC: net.HardwareAddr{2, 0, 0, 0, 0, 0xe}, Address: netip.MustParseAddr("fe80::e")},
			{Interface: "br0", MAC: net.HardwareAddr{2, 0, 0, 0, 0, 0xf}}}}
	learn(t, s, "vms/san", "san", &want)
	learn(t, s, "vms/gone", "gone", &config.DHCPv6{Enabled: true, Interfaces: []string{"br9"}, PreferredLifetime: time.Hour, ValidLifetime: time.Hour})
	learn(t, s, "vms/gone", "gone", &config.DHCPv6{Enabled: false})
	s.persist()
	if _, err := os.Stat(path); err != nil {
		t.Fatal(err)
	}
	again, err := New(Options{Source: &fakeSource{}, StateFile: path, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	got := again.Networks()
	want.Network = "san"
	if len(got) != 2 || !sameSettings(got["vms/san"], want) || !sameSettings(got["vms/gone"], config.DHCPv6{Network: "gone"}) {
		t.Fatalf("restored %+v, want vms/san=%+v and vms/gone without dhcpv6", got, want)
	}
	// A torn or foreign file is ignored, not fatal.
	if err := os.WriteFile(path, []byte("{not json"), 0o644); err != nil {
		t.Fatal(err)
	}
	broken, err := New(Options{Source: &fakeSource{}, StateFile: path, Logger: quietLogger()})
	if err != nil || len(broken.Networks()) != 0 {
		t.Fatalf("broken state file: %v %v", err, broken.Networks())
	}
}

func TestHandlerConfigAndServerDUID(t *testing.T) {
	cfgs := handlerConfig(map[string]config.DHCPv6{
		"a": {Enabled: true, Interfaces: []string{"br0"}, PreferredLifetime: 600 * time.Second, ValidLifetime: 7200 * time.Second},
		"b": {Enabled: true, Interfaces: []string{"br0", "br1"}, PreferredLifetime: 3600 * time.Second, ValidLifetime: 3600 * time.Second},
	})
	if c := cfgs["br0"]; c.PreferredLifetime != 600*time.Second || c.ValidLifetime != 3600*time.Second || c.Preference != 255 {
		t.Errorf("br0 config %+v: want the smallest lifetimes of both networks", c)
	}
	if c := cfgs["br1"]; c.PreferredLifetime != 3600*time.Second || c.ValidLifetime != 3600*time.Second {
		t.Errorf("br1 config %+v", c)
	}
	for name, c := range cfgs {
		if err := c.Validate(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
		if len(c.TrustedRelays) != 0 {
			t.Errorf("%s trusts relays %+v; none are configured", name, c.TrustedRelays)
		}
	}
	// A relay is trusted on its own interface only, once however many
	// networks name it.
	relay := config.TrustedRelay{Interface: "br1", MAC: net.HardwareAddr{2, 0, 0, 0, 0, 0xe}, Address: netip.MustParseAddr("fe80::e")}
	cfgs = handlerConfig(map[string]config.DHCPv6{
		"a": {Enabled: true, Interfaces: []string{"br0", "br1"}, PreferredLifetime: time.Hour, ValidLifetime: time.Hour, TrustedRelays: []config.TrustedRelay{relay}},
		"b": {Enabled: true, Interfaces: []string{"br1"}, PreferredLifetime: time.Hour, ValidLifetime: time.Hour, TrustedRelays: []config.TrustedRelay{relay}},
	})
	if r := cfgs["br0"].TrustedRelays; len(r) != 0 {
		t.Errorf("br0 trusts %+v: the relay is br1's", r)
	}
	if r := cfgs["br1"].TrustedRelays; len(r) != 1 || r[0].MAC.String() != relay.MAC.String() || r[0].Address != relay.Address {
		t.Errorf("br1 trusts %+v, want the one relay", r)
	}
	if sameConfig(cfgs["br0"], cfgs["br1"]) {
		t.Error("configs differing in their relays compare equal: a relay change would not restart the server")
	}
	a, b := ServerDUID().ToBytes(), ServerDUID().ToBytes()
	if string(a) != string(b) {
		t.Fatal("ServerDUID is not stable")
	}
	d, err := dhcpv6.DUIDFromBytes(a)
	if err != nil || d.DUIDType() != dhcpv6.DUID_UUID {
		t.Fatalf("ServerDUID %x: %v %v", a, d, err)
	}
}

// TestRoutesInANamespace drives reconcileRoutes against a real kernel table
// in a network namespace the test makes (root only).
// routingService is a Service on a network namespace of its own holding
// the bridges named, and ip, which runs ip(8) in that namespace.
func routingService(t *testing.T, tag string, bridges ...string) (*Service, func(args ...string) string) {
	t.Helper()
	name, path := testNetns(t, tag)
	ip := func(args ...string) string {
		t.Helper()
		out, err := testbed.IPIn(name, args...)
		if err != nil {
			t.Fatalf("ip %v: %v: %s", args, err, out)
		}
		return out
	}
	for _, br := range bridges {
		ip("link", "add", br, "type", "bridge")
		ip("link", "set", br, "up")
	}
	s, err := New(Options{Source: &fakeSource{}, Netns: path, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.nl.Close(); s.ns.close() })
	return s, ip
}

func TestRoutesInANamespace(t *testing.T) {
	s, ip := routingService(t, "rt", "br0", "br1")
	// A route of someone else's, with another protocol: never touched.
	ip("-6", "route", "add", "fd00:9000:0:900::/56", "via", "fd00::9", "dev", "br0", "onlink", "proto", "static")
	routes := func() string { return ip("-6", "route", "show", "proto", "116") }

	a := binding("vms/a", "fd00::7", "fd00:9000:0:700::/56", true, "br0", "br1")
	b := binding("vms/b", "fd00::8", "fd00:9000:0:800::/56", true, "br0")
	s.reconcileRoutes([]Binding{a, b})
	got := routes()
	for _, w := range []string{"fd00:9000:0:700::/56 via fd00::7 dev br0", "fd00:9000:0:800::/56 via fd00::8 dev br0", "onlink"} {
		if !strings.Contains(got, w) {
			t.Fatalf("routes %q lack %q", got, w)
		}
	}
	// The kernel's listing reads back as exactly what is wanted: a second
	// pass changes nothing.
	have, err := s.tenureRoutes()
	if err != nil {
		t.Fatal(err)
	}
	if rep, rem := PlanRoutes(DesiredRoutes([]Binding{a, b}, nil), have); len(rep) != 0 || len(rem) != 0 {
		t.Fatalf("not idempotent: have %v, would replace %v remove %v", have, rep, rem)
	}
	// The client is heard on br1: the route follows.
	s.heard["vms/a"] = "br1"
	s.reconcileRoutes([]Binding{a, b})
	if got := routes(); !strings.Contains(got, "fd00:9000:0:700::/56 via fd00::7 dev br1") {
		t.Fatalf("route did not move to br1: %q", got)
	}
	// b's owner moved away: its route goes, a's stays, the foreign one stays.
	s.reconcileRoutes([]Binding{a})
	got = routes()
	if strings.Contains(got, "fd00:9000:0:800::/56") || !strings.Contains(got, "fd00:9000:0:700::/56") {
		t.Fatalf("routes after b left: %q", got)
	}
	s.reconcileRoutes(nil)
	if got := routes(); got != "" {
		t.Fatalf("routes left: %q", got)
	}
	if all := ip("-6", "route", "show"); !strings.Contains(all, "fd00:9000:0:900::/56 via fd00::9 dev br0 proto static") {
		t.Fatalf("foreign route touched: %q", all)
	}
	// A route re-created by hand with tenure's protocol but a wrong next hop
	// is corrected.
	ip("-6", "route", "add", "fd00:9000:0:700::/56", "via", "fd00::99", "dev", "br0", "onlink", "proto", "116")
	s.reconcileRoutes([]Binding{binding("vms/a", "fd00::7", "fd00:9000:0:700::/56", true, "br0")})
	if got := routes(); !strings.Contains(got, "fd00:9000:0:700::/56 via fd00::7 dev br0") || strings.Contains(got, "fd00::99") {
		t.Fatalf("wrong next hop not corrected: %q", got)
	}
}

var _ dhcp6.Lookup = (*Service)(nil)

// A state file that holds settings by CNI network name alone (written
// without NADs) keeps the node's running guests served across the agent's
// restart: the first reconcile gives each network's settings to the NADs
// this node's pods attach it through, and the file is written back by NAD.
func TestAStateFileWithoutNADsKeepsTheGuestsServed(t *testing.T) {
	path := filepath.Join(t.TempDir(), "agent.sock.dataplane.json")
	if err := os.WriteFile(path, []byte(`{"networks":{"san":{"interfaces":["br0"],"preferred_lifetime":600,"valid_lifetime":900,"install_routes":true},
		"gone":{"interfaces":["br9"],"preferred_lifetime":600,"valid_lifetime":900,"install_routes":true}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	src := &fakeSource{
		pods: []*corev1.Pod{testPod("virt-launcher-a", map[string]string{
			nets: `[{"name":"san","interface":"net1","ipam-claim-reference":"vm1.san","mac":"02:00:00:aa:bb:01"}]`})},
		claims: []*ipamclaimsv1alpha1.IPAMClaim{testClaim("vm1.san", "san", "virt-launcher-a", []string{"fd00::7/64"}, nil)},
	}
	s, err := New(Options{Source: src, StateFile: path, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.nl.Close(); s.ns.close() })
	s.adopt(src.Pods())
	want := config.DHCPv6{Enabled: true, Network: "san", Interfaces: []string{"br0"}, InstallRoutes: true, PreferredLifetime: 600 * time.Second, ValidLifetime: 900 * time.Second}
	if got := s.Networks(); len(got) != 1 || !sameSettings(got["vms/san"], want) {
		t.Fatalf("after the first reconcile: %+v, want vms/san alone with the network's settings", got)
	}
	mac, _ := net.ParseMAC(vmMAC)
	s.rebind(src.Pods(), s.Networks())
	if b, ok := s.Lookup(mac, "br0"); !ok || b.Key != "vms/vm1.san" || b.PreferredLifetime != 600*time.Second {
		t.Fatalf("lookup %+v %v: want vms/vm1.san served at 600 s", b, ok)
	}
	s.persist()
	again, err := New(Options{Source: &fakeSource{}, StateFile: path, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { again.nl.Close(); again.ns.close() })
	if got := again.Networks(); len(got) != 1 || !sameSettings(got["vms/san"], want) || len(again.legacy) != 0 {
		t.Fatalf("the file written back holds %+v (and %v by network), want vms/san alone", got, again.legacy)
	}
}
