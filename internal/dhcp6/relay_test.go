package dhcp6

import (
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/insomniacslk/dhcp/dhcpv6"
	"github.com/insomniacslk/dhcp/iana"
)

// A guest that names another guest, the victim (clientMAC, holding
// fullBinding), in a Relay-forward of its own is dropped before any lookup,
// whether it holds a binding itself or not, with no relay trusted (the
// default) and with one trusted relay whose IP address it forges; a
// Relay-forward is answered only from a trusted relay's MAC (and address,
// where one is configured).
func TestGuestsCannotSpeakForEachOther(t *testing.T) {
	attackerMAC := otherMAC
	attackerLL := netip.MustParseAddr("fe80::5054:ff:feaa:bbcc") // EUI-64 of otherMAC
	victimLL := net.ParseIP("fe80::5054:ff:fe12:3456")           // EUI-64 of clientMAC
	attackerDUID := &dhcpv6.DUIDLL{HWType: iana.HWTypeEthernet, LinkLayerAddr: attackerMAC}
	attackerBinding := Binding{Key: "ns/attacker", MAC: attackerMAC, Address: oldAddr, Prefix: oldPrefix}
	victimIAs := []dhcpv6.Modifier{withNA, dhcpv6.WithIANA(iaAddr(bindAddr)), dhcpv6.WithIAPD(pdIAID, iaPrefix(bindPrefix))}

	// inner builds a client message of type typ for the victim's leases,
	// with clientID as the Client Identifier.
	inner := func(typ dhcpv6.MessageType, clientID dhcpv6.DUID) *dhcpv6.Message {
		mods := []dhcpv6.Modifier{withType(typ), dhcpv6.WithClientID(clientID), withAddOption(dhcpv6.OptElapsedTime(0))}
		mods = append(mods, victimIAs...)
		switch typ {
		case dhcpv6.MessageTypeRequest, dhcpv6.MessageTypeRenew:
			mods = append(mods, mySID)
		}
		m, err := dhcpv6.NewMessage(mods...)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	// The three ways a Relay-forward names a client.
	namings := map[string]func(typ dhcpv6.MessageType) *dhcpv6.RelayMessage{
		"option 79": func(typ dhcpv6.MessageType) *dhcpv6.RelayMessage {
			r := encapsulate(t, inner(typ, attackerDUID), attackerLL.AsSlice())
			r.AddOption(dhcpv6.OptClientLinkLayerAddress(iana.HWTypeEthernet, clientMAC))
			return r
		},
		"peer-address EUI-64": func(typ dhcpv6.MessageType) *dhcpv6.RelayMessage {
			return encapsulate(t, inner(typ, attackerDUID), victimLL)
		},
		"inner DUID-LL": func(typ dhcpv6.MessageType) *dhcpv6.RelayMessage {
			return encapsulate(t, inner(typ, &dhcpv6.DUIDLL{HWType: iana.HWTypeEthernet, LinkLayerAddr: clientMAC}), attackerLL.AsSlice())
		},
	}
	types := []dhcpv6.MessageType{dhcpv6.MessageTypeSolicit, dhcpv6.MessageTypeRequest, dhcpv6.MessageTypeRenew, dhcpv6.MessageTypeRebind}
	configs := map[string]Config{"no trusted relay": testConfig(), "another trusted relay": relayConfig()}
	sources := map[string]Source{
		"from its own address":         {Ifname: ifname, MAC: attackerMAC, Peer: attackerLL},
		"forging the relay's address":  {Ifname: ifname, MAC: attackerMAC, Peer: relayLL},
		"forging the victim's address": {Ifname: ifname, MAC: attackerMAC, Peer: netip.MustParseAddr(victimLL.String())},
		"with no link-layer source":    {Ifname: ifname, Peer: relayLL},
	}
	for _, bound := range []bool{false, true} {
		for cname, cfg := range configs {
			for nname, naming := range namings {
				for sname, src := range sources {
					for _, typ := range types {
						name := fmt.Sprintf("bound=%v/%s/%s/%s/%s", bound, cname, nname, sname, typ)
						t.Run(strings.ReplaceAll(name, " ", "_"), func(t *testing.T) {
							bs := []Binding{fullBinding()}
							if bound {
								bs = append(bs, attackerBinding)
							}
							lookup := newFakeLookup(bs...)
							r := NewHandler(cfg, lookup, nil).HandleFrom(naming(typ), src)
							if r.Reply != nil {
								t.Fatalf("answered %s:\n%s", r.Outcome, r.Reply.Summary())
							}
							if r.Outcome != OutcomeUntrustedRelay || r.Err != nil {
								t.Errorf("outcome %s (%s), err %v; want %s", r.Outcome, r.Reason, r.Err, OutcomeUntrustedRelay)
							}
							if len(lookup.calls) != 0 || r.Key != "" {
								t.Errorf("looked up %v, binding %q: an untrusted Relay-forward must name nobody", lookup.calls, r.Key)
							}
						})
					}
				}
			}
		}
	}
}

// A guest's direct message that names the victim (by its DUID-LL, by the
// victim's EUI-64 link-local source address, by an RFC 6939 option of its
// own) is looked up by the frame's source alone: the attacker gets its own
// leases, or nothing, never the victim's.
func TestDirectMessageNamingAnotherGuest(t *testing.T) {
	attackerMAC := otherMAC
	victimLL := netip.MustParseAddr("fe80::5054:ff:fe12:3456")
	victimDUID := dhcpv6.WithClientID(&dhcpv6.DUIDLL{HWType: iana.HWTypeEthernet, LinkLayerAddr: clientMAC})
	for _, bound := range []bool{false, true} {
		t.Run(fmt.Sprintf("bound=%v", bound), func(t *testing.T) {
			bs := []Binding{fullBinding()}
			if bound {
				bs = append(bs, Binding{Key: "ns/attacker", MAC: attackerMAC, Address: oldAddr, Prefix: oldPrefix})
			}
			lookup := newFakeLookup(bs...)
			msg := message(t, dhcpv6.MessageTypeSolicit, victimDUID, withNA, withPD,
				withAddOption(dhcpv6.OptClientLinkLayerAddress(iana.HWTypeEthernet, clientMAC)))
			r := NewHandler(relayConfig(), lookup, nil).HandleFrom(msg, Source{Ifname: ifname, MAC: attackerMAC, Peer: victimLL})
			if want := []string{lookupKey(attackerMAC, ifname)}; !equalStrings(lookup.calls, want) {
				t.Errorf("Lookup calls %v, want %v", lookup.calls, want)
			}
			if !bound {
				if r.Reply != nil || r.Outcome != OutcomeNoBinding {
					t.Fatalf("unbound attacker: reply %v, outcome %s", r.Reply != nil, r.Outcome)
				}
				return
			}
			if r.Reply == nil || r.Key != "ns/attacker" {
				t.Fatalf("bound attacker: reply %v for %q (%s)", r.Reply != nil, r.Key, r.Reason)
			}
			m := roundTrip(t, r.Reply).(*dhcpv6.Message)
			for _, ia := range m.Options.IANA() {
				for _, a := range ia.Options.Addresses() {
					if got, _ := netip.AddrFromSlice(a.IPv6Addr); got == bindAddr {
						t.Errorf("the victim's address %s handed to the attacker", got)
					}
				}
			}
			for _, ia := range m.Options.IAPD() {
				for _, p := range ia.Options.Prefixes() {
					if p.Prefix != nil && p.Prefix.String() == bindPrefix.String() {
						t.Errorf("the victim's prefix %s handed to the attacker", p.Prefix)
					}
				}
			}
		})
	}
}

// The relay's identity: its frame's MAC, and its IP source when the Relay
// has an Address.
func TestTrustedRelayIdentity(t *testing.T) {
	anyAddr := testConfig()
	anyAddr.TrustedRelays = []Relay{{MAC: relayMAC}}
	msg := encapsulate(t, solicit(t, withPD), net.ParseIP("fe80::1"))
	msg.AddOption(dhcpv6.OptClientLinkLayerAddress(iana.HWTypeEthernet, clientMAC))
	tests := []struct {
		name string
		cfg  Config
		src  Source
		want string
	}{
		{"relay MAC and address", relayConfig(), Source{Ifname: ifname, MAC: relayMAC, Peer: relayLL}, OutcomeAdvertise},
		{"relay MAC, address with a zone", relayConfig(), Source{Ifname: ifname, MAC: relayMAC, Peer: relayLL.WithZone("br0")}, OutcomeAdvertise},
		{"relay MAC, another address", relayConfig(), Source{Ifname: ifname, MAC: relayMAC, Peer: netip.MustParseAddr("fe80::f")}, OutcomeUntrustedRelay},
		{"relay address, another MAC", relayConfig(), Source{Ifname: ifname, MAC: otherMAC, Peer: relayLL}, OutcomeUntrustedRelay},
		{"relay address, no MAC", relayConfig(), Source{Ifname: ifname, Peer: relayLL}, OutcomeUntrustedRelay},
		{"relay MAC, any address trusted", anyAddr, Source{Ifname: ifname, MAC: relayMAC, Peer: netip.MustParseAddr("fe80::f")}, OutcomeAdvertise},
		{"no relay trusted", testConfig(), Source{Ifname: ifname, MAC: relayMAC, Peer: relayLL}, OutcomeUntrustedRelay},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := NewHandler(tc.cfg, newFakeLookup(fullBinding()), nil).HandleFrom(msg, tc.src)
			if r.Outcome != tc.want || (r.Reply != nil) != (tc.want == OutcomeAdvertise) {
				t.Errorf("outcome %s (%s), reply %v; want %s", r.Outcome, r.Reason, r.Reply != nil, tc.want)
			}
		})
	}
	for _, bad := range []Relay{{}, {MAC: make(net.HardwareAddr, maxMACLen+1)}, {MAC: relayMAC, Address: netip.MustParseAddr("192.0.2.1")}} {
		cfg := testConfig()
		cfg.TrustedRelays = []Relay{{MAC: relayMAC}, bad}
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "TrustedRelays[1]") {
			t.Errorf("Validate(%+v) = %v, want an error naming TrustedRelays[1]", bad, err)
		}
	}
}

func encapsulate(t *testing.T, m dhcpv6.DHCPv6, peer net.IP) *dhcpv6.RelayMessage {
	t.Helper()
	r, err := dhcpv6.EncapsulateRelay(m, dhcpv6.MessageTypeRelayForward, net.ParseIP("2001:db8::1"), peer)
	if err != nil {
		t.Fatal(err)
	}
	return r
}
