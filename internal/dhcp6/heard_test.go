package dhcp6

import (
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv6"
	"github.com/insomniacslk/dhcp/iana"
)

// heardLookup is a fakeLookup that records every Heard call.
type heardLookup struct {
	*fakeLookup
	mu    sync.Mutex
	heard []string // key%ifname
}

func (l *heardLookup) Heard(b Binding, ifname string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.heard = append(l.heard, b.Key+"%"+ifname)
}

// TestTheRouteMovesOnlyOnAnAnsweredRequest: the Handler tells its Lookup
// that a client is behind an interface (what moves the client's prefix
// route in internal/dataplane) only for a Request, Renew or Rebind it
// answered with a lease, from the MAC the link gives. Every other message
// of the bound client, and every message it answers from what the guest
// only says (its DUID, its link-local address), tells it nothing.
func TestTheRouteMovesOnlyOnAnAnsweredRequest(t *testing.T) {
	victimLL := netip.MustParseAddr("fe80::5054:ff:fe12:3456") // EUI-64 of clientMAC
	frame := Source{Ifname: ifname, MAC: clientMAC, Peer: victimLL}
	noLink := Source{Ifname: ifname, Peer: victimLL} // no frame source: the DUID-LLT and EUI-64 decide
	relay := Source{Ifname: ifname, MAC: relayMAC, Peer: relayLL}
	leases := []dhcpv6.Modifier{dhcpv6.WithIANA(iaAddr(bindAddr)), dhcpv6.WithIAPD(pdIAID, iaPrefix(bindPrefix))}
	otherLeases := []dhcpv6.Modifier{dhcpv6.WithIANA(iaAddr(oldAddr)), dhcpv6.WithIAPD(pdIAID, iaPrefix(oldPrefix))}
	msg := func(typ dhcpv6.MessageType, sid bool, mods ...dhcpv6.Modifier) *dhcpv6.Message {
		if sid {
			mods = append(mods, mySID)
		}
		return message(t, typ, mods...)
	}
	relayed := func(m dhcpv6.DHCPv6) dhcpv6.DHCPv6 {
		r := encapsulate(t, m, victimLL.AsSlice())
		r.AddOption(dhcpv6.OptClientLinkLayerAddress(iana.HWTypeEthernet, clientMAC))
		return r
	}
	noLease := Binding{Key: "ns/vm-a", MAC: clientMAC}
	tests := []struct {
		name    string
		msg     dhcpv6.DHCPv6
		src     Source
		binding Binding
		outcome string
		heard   bool
	}{
		{"answered Request", msg(dhcpv6.MessageTypeRequest, true, leases...), frame, fullBinding(), OutcomeReply, true},
		{"answered Renew", msg(dhcpv6.MessageTypeRenew, true, leases...), frame, fullBinding(), OutcomeReply, true},
		{"answered Rebind", msg(dhcpv6.MessageTypeRebind, false, leases...), frame, fullBinding(), OutcomeReply, true},
		{"Rebind naming other leases: the binding's lease is given", msg(dhcpv6.MessageTypeRebind, false, otherLeases...), frame, fullBinding(), OutcomeReply, true},
		{"Request through a trusted relay, option 79 the client's", relayed(msg(dhcpv6.MessageTypeRequest, true, leases...)), relay, fullBinding(), OutcomeReply, true},

		{"Solicit", solicit(t, withPD), frame, fullBinding(), OutcomeAdvertise, false},
		{"Rapid Commit Solicit", solicit(t, withPD, dhcpv6.WithRapidCommit), frame, fullBinding(), OutcomeReply, false},
		{"Confirm", msg(dhcpv6.MessageTypeConfirm, false, dhcpv6.WithIANA(iaAddr(bindAddr))), frame, fullBinding(), OutcomeReply, false},
		{"Information-request", msg(dhcpv6.MessageTypeInformationRequest, false, without(dhcpv6.OptionIANA)), frame, fullBinding(), OutcomeReply, false},
		{"Release", msg(dhcpv6.MessageTypeRelease, true, leases...), frame, fullBinding(), OutcomeReply, false},
		{"Decline", msg(dhcpv6.MessageTypeDecline, true, leases...), frame, fullBinding(), OutcomeDeclined, false},
		{"Request for another server", msg(dhcpv6.MessageTypeRequest, false, append(leases, dhcpv6.WithServerID(otherServerDUID))...), frame, fullBinding(), OutcomeIgnored, false},
		{"Request without a Server Identifier (malformed)", msg(dhcpv6.MessageTypeRequest, false, leases...), frame, fullBinding(), OutcomeMalformed, false},
		{"Request without IAs: nothing leased", msg(dhcpv6.MessageTypeRequest, true, without(dhcpv6.OptionIANA)), frame, fullBinding(), OutcomeReply, false},
		{"Renew of a binding with nothing to lease", msg(dhcpv6.MessageTypeRenew, true, leases...), frame, noLease, OutcomeReply, false},
		{"Request known only by its DUID and link-local address", msg(dhcpv6.MessageTypeRequest, true, leases...), noLink, fullBinding(), OutcomeReply, false},
		{"Request from another interface, where the MAC has no binding", msg(dhcpv6.MessageTypeRequest, true, leases...), Source{Ifname: "br9", MAC: clientMAC}, fullBinding(), OutcomeNoBinding, false},
		{"Request from another MAC", msg(dhcpv6.MessageTypeRequest, true, leases...), Source{Ifname: ifname, MAC: otherMAC}, fullBinding(), OutcomeNoBinding, false},
		{"Request through an untrusted relay", relayed(msg(dhcpv6.MessageTypeRequest, true, leases...)), Source{Ifname: ifname, MAC: otherMAC, Peer: relayLL}, fullBinding(), OutcomeUntrustedRelay, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l := &heardLookup{fakeLookup: newFakeLookup(tc.binding)}
			r := NewHandler(relayConfig(), l, nil).HandleFrom(tc.msg, tc.src)
			if r.Outcome != tc.outcome {
				t.Fatalf("outcome %s (%s), want %s", r.Outcome, r.Reason, tc.outcome)
			}
			want := []string(nil)
			if tc.heard {
				want = []string{tc.binding.Key + "%" + ifname}
			}
			if r.Heard != tc.heard || !equalStrings(l.heard, want) {
				t.Errorf("Result.Heard %v, Heard calls %q; want %v, %q", r.Heard, l.heard, tc.heard, want)
			}
		})
	}
}

// A Lookup without Heard is served as before: the Handler asks nothing of it.
func TestHeardIsOptional(t *testing.T) {
	m := message(t, dhcpv6.MessageTypeRequest, mySID, dhcpv6.WithIANA(iaAddr(bindAddr)))
	r := NewHandler(testConfig(), newFakeLookup(fullBinding()), nil).HandleFrom(m, Source{Ifname: ifname, MAC: clientMAC})
	if r.Outcome != OutcomeReply || !r.Heard {
		t.Fatalf("outcome %s, heard %v; want a reply that places the client", r.Outcome, r.Heard)
	}
}

// A binding's own relays and lifetimes: a Relay-forward the interface's
// Config trusts is answered for a binding only through a relay the binding
// trusts too (nil: the Config decides), and a binding with lifetimes of its
// own is served at them, T1 and T2 following.
func TestABindingsOwnRelaysAndLifetimes(t *testing.T) {
	relayed := encapsulate(t, solicit(t, withPD), net.ParseIP("fe80::1"))
	relayed.AddOption(dhcpv6.OptClientLinkLayerAddress(iana.HWTypeEthernet, clientMAC))
	src := Source{Ifname: ifname, MAC: relayMAC, Peer: relayLL}
	for _, tc := range []struct {
		name   string
		relays []Relay
		want   string
	}{
		{"nil: the Config's relays", nil, OutcomeAdvertise},
		{"empty: none", []Relay{}, OutcomeUntrustedRelay},
		{"the relay, on this interface", []Relay{{MAC: relayMAC, Ifname: ifname}}, OutcomeAdvertise},
		{"the relay, on any interface", []Relay{{MAC: relayMAC}}, OutcomeAdvertise},
		{"the relay, on another interface", []Relay{{MAC: relayMAC, Ifname: "br9"}}, OutcomeUntrustedRelay},
		{"another relay", []Relay{{MAC: otherMAC, Ifname: ifname}}, OutcomeUntrustedRelay},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := fullBinding()
			b.TrustedRelays = tc.relays
			r := NewHandler(relayConfig(), newFakeLookup(b), nil).HandleFrom(relayed, src)
			if r.Outcome != tc.want || (r.Reply != nil) != (tc.want == OutcomeAdvertise) {
				t.Errorf("outcome %s (%s), reply %v; want %s", r.Outcome, r.Reason, r.Reply != nil, tc.want)
			}
		})
	}

	b := fullBinding()
	b.PreferredLifetime, b.ValidLifetime = 10*time.Minute, 20*time.Minute
	r := NewHandler(testConfig(), newFakeLookup(b), nil).HandleFrom(solicit(t, withPD), Source{Ifname: ifname, MAC: clientMAC})
	adv, ok := r.Reply.(*dhcpv6.Message)
	if !ok {
		t.Fatalf("outcome %s, no Advertise", r.Outcome)
	}
	checkNA(t, adv.Options.IANA(), []iaWant{{iaid: naIAID, t1: 5 * time.Minute, t2: 8 * time.Minute,
		leases: []leaseWant{{lease: bindAddr.String(), preferred: 10 * time.Minute, valid: 20 * time.Minute}}}})
	checkPD(t, adv.Options.IAPD(), []iaWant{{iaid: pdIAID, t1: 5 * time.Minute, t2: 8 * time.Minute,
		leases: []leaseWant{{lease: bindPrefix.String(), preferred: 10 * time.Minute, valid: 20 * time.Minute}}}})
}
