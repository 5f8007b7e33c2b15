package dhcp6

import (
	"bytes"
	"net"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv6"
	"github.com/insomniacslk/dhcp/iana"
)

var (
	serverMAC = net.HardwareAddr{0x02, 0x00, 0x00, 0x00, 0x00, 0x01}
	clientMAC = net.HardwareAddr{0x52, 0x54, 0x00, 0x12, 0x34, 0x56}
	otherMAC  = net.HardwareAddr{0x52, 0x54, 0x00, 0xaa, 0xbb, 0xcc}
	relayMAC  = net.HardwareAddr{0x02, 0x00, 0x00, 0x00, 0x00, 0x0e}
	relayLL   = netip.MustParseAddr("fe80::e")

	// NewSolicit's default IAID: the last four bytes of the MAC.
	naIAID = [4]byte{0x00, 0x12, 0x34, 0x56}
	pdIAID = [4]byte{0, 0, 0, 7}
	// Second IAs of each kind, as a client asking for two of each sends.
	naIAID2 = [4]byte{0, 0, 0, 2}
	pdIAID2 = [4]byte{0, 0, 0, 8}

	bindAddr   = netip.MustParseAddr("2001:db8:1::10")
	bindPrefix = netip.MustParsePrefix("2001:db8:100::/56")
	oldAddr    = netip.MustParseAddr("2001:db8:1::99")
	oldPrefix  = netip.MustParsePrefix("2001:db8:200::/56")

	otherServerDUID = &dhcpv6.DUIDLL{HWType: iana.HWTypeEthernet, LinkLayerAddr: net.HardwareAddr{2, 0, 0, 0, 0, 0x99}}
)

const ifname = "tap0"

func testConfig() Config {
	return Config{ServerDUID: DUIDFromMAC(serverMAC), PreferredLifetime: time.Hour, ValidLifetime: 2 * time.Hour}
}

// relayConfig is testConfig trusting the relay relayMAC at relayLL.
func relayConfig() Config {
	c := testConfig()
	c.TrustedRelays = []Relay{{MAC: relayMAC, Address: relayLL}}
	return c
}

// fakeLookup maps (MAC, ifname) to bindings and records every call.
type fakeLookup struct {
	mu       sync.Mutex
	bindings map[string]Binding
	calls    []string
}

func lookupKey(mac net.HardwareAddr, ifname string) string { return mac.String() + "%" + ifname }

func newFakeLookup(bs ...Binding) *fakeLookup {
	l := &fakeLookup{bindings: map[string]Binding{}}
	for _, b := range bs {
		l.bindings[lookupKey(b.MAC, ifname)] = b
	}
	return l
}

func (l *fakeLookup) Lookup(mac net.HardwareAddr, ifname string) (Binding, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	k := lookupKey(mac, ifname)
	l.calls = append(l.calls, k)
	b, ok := l.bindings[k]
	return b, ok
}

// snapshot deep-copies the bindings, to check nothing was written to them.
func (l *fakeLookup) snapshot() map[string]Binding {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string]Binding{}
	for k, b := range l.bindings {
		b.MAC = bytes.Clone(b.MAC)
		out[k] = b
	}
	return out
}

type countingObserver struct {
	mu     sync.Mutex
	counts map[[2]string]int
	last   [2]string
}

func (o *countingObserver) Observe(msgType, outcome string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.counts == nil {
		o.counts = map[[2]string]int{}
	}
	o.last = [2]string{msgType, outcome}
	o.counts[o.last]++
}

func (o *countingObserver) get(msgType, outcome string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.counts[[2]string{msgType, outcome}]
}

func fullBinding() Binding {
	return Binding{Key: "ns/vm-a", MAC: clientMAC, Address: bindAddr, Prefix: bindPrefix}
}

// Message construction helpers, all on top of insomniacslk's constructors
// and modifiers.

func withType(t dhcpv6.MessageType) dhcpv6.Modifier {
	return func(d dhcpv6.DHCPv6) { d.(*dhcpv6.Message).MessageType = t }
}

func without(code dhcpv6.OptionCode) dhcpv6.Modifier {
	return func(d dhcpv6.DHCPv6) { d.(*dhcpv6.Message).Options.Del(code) }
}

func withAddOption(o dhcpv6.Option) dhcpv6.Modifier {
	return func(d dhcpv6.DHCPv6) { d.AddOption(o) }
}

func iaAddr(a netip.Addr) dhcpv6.OptIAAddress {
	return dhcpv6.OptIAAddress{IPv6Addr: net.IP(a.AsSlice()), PreferredLifetime: time.Hour, ValidLifetime: 2 * time.Hour}
}

func iaPrefix(p netip.Prefix) *dhcpv6.OptIAPrefix {
	return &dhcpv6.OptIAPrefix{Prefix: ipNet(p), PreferredLifetime: time.Hour, ValidLifetime: 2 * time.Hour}
}

var (
	withNA = dhcpv6.WithIAID(naIAID)
	withPD = dhcpv6.WithIAPD(pdIAID)
	noNA   = without(dhcpv6.OptionIANA)
	mySID  = dhcpv6.WithServerID(DUIDFromMAC(serverMAC))

	secondNA = withAddOption(&dhcpv6.OptIANA{IaId: naIAID2})
	secondPD = withAddOption(&dhcpv6.OptIAPD{IaId: pdIAID2})
)

func ptr[T any](v T) *T { return &v }

func clientDUID() dhcpv6.DUID {
	return &dhcpv6.DUIDLLT{HWType: iana.HWTypeEthernet, Time: 12345, LinkLayerAddr: clientMAC}
}

// solicit is dhcpv6.NewSolicit for clientMAC: DUID-LLT client ID, an IA_NA
// with IAID naIAID, ORO, Elapsed Time.
func solicit(t testing.TB, mods ...dhcpv6.Modifier) *dhcpv6.Message {
	t.Helper()
	m, err := dhcpv6.NewSolicit(clientMAC, mods...)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// message builds a client message of type typ with clientDUID.
func message(t testing.TB, typ dhcpv6.MessageType, mods ...dhcpv6.Modifier) *dhcpv6.Message {
	t.Helper()
	mods = append([]dhcpv6.Modifier{withType(typ), dhcpv6.WithClientID(clientDUID()), withAddOption(dhcpv6.OptElapsedTime(0))}, mods...)
	m, err := dhcpv6.NewMessage(mods...)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// Expectations on a reply.

type leaseWant struct {
	lease            string // address or prefix
	preferred, valid time.Duration
}

type iaWant struct {
	iaid   [4]byte
	t1, t2 time.Duration
	leases []leaseWant
	status *iana.StatusCode
}

func st(c iana.StatusCode) *iana.StatusCode { return &c }

// full lifetimes from testConfig: 1h/2h, T1/T2 0.5 and 0.8 of 1h.
const (
	wantT1 = 30 * time.Minute
	wantT2 = 48 * time.Minute
)

func naLease(iaid [4]byte, extra ...leaseWant) iaWant {
	return iaWant{iaid: iaid, t1: wantT1, t2: wantT2,
		leases: append([]leaseWant{{bindAddr.String(), time.Hour, 2 * time.Hour}}, extra...)}
}

func pdLease(iaid [4]byte, extra ...leaseWant) iaWant {
	return iaWant{iaid: iaid, t1: wantT1, t2: wantT2,
		leases: append([]leaseWant{{bindPrefix.String(), time.Hour, 2 * time.Hour}}, extra...)}
}

// iaStatus is an IA with no leases and a status code.
func iaStatus(iaid [4]byte, c iana.StatusCode) iaWant {
	return iaWant{iaid: iaid, status: st(c)}
}

// iaZero is an IA carrying the given leases at lifetimes 0.
func iaZero(iaid [4]byte, leases ...string) iaWant {
	w := iaWant{iaid: iaid}
	for _, l := range leases {
		w.leases = append(w.leases, leaseWant{lease: l})
	}
	return w
}

func gotStatus(opts dhcpv6.Options) *iana.StatusCode {
	o := opts.GetOne(dhcpv6.OptionStatusCode)
	if o == nil {
		return nil
	}
	c := o.(*dhcpv6.OptStatusCode).StatusCode
	return &c
}

func statusString(c *iana.StatusCode) string {
	if c == nil {
		return "none"
	}
	return c.String()
}

func checkNA(t *testing.T, got []*dhcpv6.OptIANA, want []iaWant) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("reply has %d IA_NA, want %d: %v", len(got), len(want), got)
	}
	for i, w := range want {
		g := got[i]
		if g.IaId != w.iaid {
			t.Errorf("IA_NA[%d] IAID %x, want %x", i, g.IaId, w.iaid)
		}
		if g.T1 != w.t1 || g.T2 != w.t2 {
			t.Errorf("IA_NA[%d] T1/T2 %v/%v, want %v/%v", i, g.T1, g.T2, w.t1, w.t2)
		}
		if s := gotStatus(g.Options.Options); statusString(s) != statusString(w.status) {
			t.Errorf("IA_NA[%d] status %s, want %s", i, statusString(s), statusString(w.status))
		}
		addrs := g.Options.Addresses()
		var gl []leaseWant
		for _, a := range addrs {
			gl = append(gl, leaseWant{a.IPv6Addr.String(), a.PreferredLifetime, a.ValidLifetime})
		}
		if !slices.Equal(gl, w.leases) {
			t.Errorf("IA_NA[%d] addresses %v, want %v", i, gl, w.leases)
		}
	}
}

func checkPD(t *testing.T, got []*dhcpv6.OptIAPD, want []iaWant) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("reply has %d IA_PD, want %d: %v", len(got), len(want), got)
	}
	for i, w := range want {
		g := got[i]
		if g.IaId != w.iaid {
			t.Errorf("IA_PD[%d] IAID %x, want %x", i, g.IaId, w.iaid)
		}
		if g.T1 != w.t1 || g.T2 != w.t2 {
			t.Errorf("IA_PD[%d] T1/T2 %v/%v, want %v/%v", i, g.T1, g.T2, w.t1, w.t2)
		}
		if s := gotStatus(g.Options.Options); statusString(s) != statusString(w.status) {
			t.Errorf("IA_PD[%d] status %s, want %s", i, statusString(s), statusString(w.status))
		}
		var gl []leaseWant
		for _, p := range g.Options.Prefixes() {
			gl = append(gl, leaseWant{p.Prefix.String(), p.PreferredLifetime, p.ValidLifetime})
		}
		if !slices.Equal(gl, w.leases) {
			t.Errorf("IA_PD[%d] prefixes %v, want %v", i, gl, w.leases)
		}
	}
}

// roundTrip re-decodes a reply from its wire form, as the client would see it.
func roundTrip(t *testing.T, d dhcpv6.DHCPv6) dhcpv6.DHCPv6 {
	t.Helper()
	out, err := dhcpv6.FromBytes(d.ToBytes())
	if err != nil {
		t.Fatalf("reply does not decode: %v\n%s", err, d.Summary())
	}
	return out
}

var netipZero netip.Addr

func netipMust(s string) netip.Addr { return netip.MustParseAddr(s) }

func netipPrefixMust(s string) netip.Prefix { return netip.MustParsePrefix(s) }
