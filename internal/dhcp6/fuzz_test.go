package dhcp6

import (
	"bytes"
	"net"
	"net/netip"
	"testing"

	"github.com/insomniacslk/dhcp/dhcpv6"
	"github.com/insomniacslk/dhcp/iana"
)

// seedMessages are valid client messages of every kind, built with
// insomniacslk's constructors, direct and relayed.
func seedMessages(t testing.TB) []dhcpv6.DHCPv6 {
	na := dhcpv6.WithIANA(iaAddr(bindAddr))
	pd := dhcpv6.WithIAPD(pdIAID, iaPrefix(bindPrefix))
	msgs := []dhcpv6.DHCPv6{
		solicit(t),
		solicit(t, withPD),
		solicit(t, dhcpv6.WithRapidCommit, withPD),
		solicit(t, noNA, withPD),
		solicit(t, dhcpv6.WithIATA([4]byte{1, 2, 3, 4})),
		message(t, dhcpv6.MessageTypeRequest, mySID, withNA, na, pd),
		message(t, dhcpv6.MessageTypeRenew, mySID, withNA, na, pd),
		message(t, dhcpv6.MessageTypeRenew, mySID, withNA, dhcpv6.WithIANA(iaAddr(oldAddr)), dhcpv6.WithIAPD(pdIAID, iaPrefix(oldPrefix))),
		message(t, dhcpv6.MessageTypeRebind, withNA, na, pd),
		message(t, dhcpv6.MessageTypeRelease, mySID, withNA, na, pd),
		message(t, dhcpv6.MessageTypeDecline, mySID, withNA, na),
		message(t, dhcpv6.MessageTypeConfirm, withNA, na),
		message(t, dhcpv6.MessageTypeInformationRequest),
		message(t, dhcpv6.MessageTypeInformationRequest, without(dhcpv6.OptionClientID)),
	}
	for _, m := range msgs[:len(msgs):len(msgs)] {
		r, err := dhcpv6.EncapsulateRelay(m, dhcpv6.MessageTypeRelayForward, net.ParseIP("2001:db8::1"), net.ParseIP("fe80::5054:ff:fe12:3456"))
		if err != nil {
			t.Fatal(err)
		}
		r.AddOption(dhcpv6.OptInterfaceID([]byte("if1")))
		r.AddOption(dhcpv6.OptClientLinkLayerAddress(iana.HWTypeEthernet, clientMAC))
		msgs = append(msgs, r)
	}
	return msgs
}

var knownOutcomes = map[string]bool{
	OutcomeAdvertise: true, OutcomeReply: true, OutcomeDeclined: true, OutcomeIgnored: true,
	OutcomeMalformed: true, OutcomeNoBinding: true, OutcomeUntrustedRelay: true,
}

// FuzzHandle feeds arbitrary bytes to Handle, both decoded by the library
// (what Server passes) and as a hand-built message of generic and half-built
// options (what a caller might pass), with a Lookup that knows everyone, one
// that knows no one and one whose binding has no prefix. Handle must not
// panic, must not change the message, and must return either nothing or a
// reply that encodes and decodes, is an Advertise or Reply (possibly in
// Relay-replies), and carries our Server ID.
func FuzzHandle(f *testing.F) {
	for _, m := range seedMessages(f) {
		f.Add(m.ToBytes())
	}
	for _, b := range [][]byte{{}, {1}, {1, 0, 0, 0}, {12, 0}, {12}, {13, 0}, {3, 1, 2, 3, 0, 1, 0, 0}} {
		f.Add(b)
	}

	// The source below is a trusted relay too, so relayed messages reach
	// the lookup and the answer.
	cfg := testConfig()
	cfg.TrustedRelays = []Relay{{MAC: clientMAC}}
	everyone := NewHandler(cfg, LookupFunc(func(net.HardwareAddr, string) (Binding, bool) {
		return fullBinding(), true
	}), nil)
	noOne := NewHandler(cfg, LookupFunc(func(net.HardwareAddr, string) (Binding, bool) {
		return Binding{}, false
	}), nil)
	noPrefix := NewHandler(cfg, LookupFunc(func(mac net.HardwareAddr, _ string) (Binding, bool) {
		return Binding{Key: "k", MAC: mac, Address: bindAddr}, true
	}), nil)
	handlers := []*Handler{everyone, noOne, noPrefix}
	src := Source{Ifname: ifname, MAC: clientMAC, Peer: netip.MustParseAddr("fe80::5054:ff:fe12:3456")}

	f.Fuzz(func(t *testing.T, data []byte) {
		if msg, err := dhcpv6.FromBytes(data); err == nil {
			before := msg.ToBytes()
			for i, h := range handlers {
				checkFuzzResult(t, i, msg, h.HandleFrom(msg, src), h == noOne)
				checkFuzzResult(t, i, msg, h.HandleFrom(msg, Source{}), h == noOne)
			}
			if !bytes.Equal(msg.ToBytes(), before) {
				t.Fatal("Handle modified the message")
			}
		}
		msg := handBuilt(data)
		for i, h := range handlers {
			checkFuzzResult(t, i, msg, h.HandleFrom(msg, src), h == noOne)
		}
	})
}

func checkFuzzResult(t *testing.T, handler int, msg dhcpv6.DHCPv6, r Result, silent bool) {
	t.Helper()
	if !knownOutcomes[r.Outcome] {
		t.Fatalf("handler %d: outcome %q", handler, r.Outcome)
	}
	if r.Err != nil && r.Reply != nil {
		t.Fatalf("handler %d: both a reply and an error (%v)", handler, r.Err)
	}
	if r.Reply == nil {
		return
	}
	if silent {
		t.Fatalf("handler %d: a reply for an unknown client:\n%s", handler, r.Reply.Summary())
	}
	b := r.Reply.ToBytes()
	if len(b) > 16<<10 {
		t.Fatalf("handler %d: %d-byte reply", handler, len(b))
	}
	d, err := dhcpv6.FromBytes(b)
	if err != nil {
		t.Fatalf("handler %d: reply does not decode: %v\n%s", handler, err, r.Reply.Summary())
	}
	for d.IsRelay() {
		rr := d.(*dhcpv6.RelayMessage)
		if rr.MessageType != dhcpv6.MessageTypeRelayReply {
			t.Fatalf("handler %d: reply wrapped in %s", handler, rr.MessageType)
		}
		if d = rr.Options.RelayMessage(); d == nil {
			t.Fatalf("handler %d: empty Relay-reply", handler)
		}
	}
	m := d.(*dhcpv6.Message)
	if m.MessageType != dhcpv6.MessageTypeReply && m.MessageType != dhcpv6.MessageTypeAdvertise {
		t.Fatalf("handler %d: reply of type %s", handler, m.MessageType)
	}
	if sid := m.Options.ServerID(); sid == nil || !bytes.Equal(sid.ToBytes(), DUIDFromMAC(serverMAC).ToBytes()) {
		t.Fatalf("handler %d: reply without our Server ID", handler)
	}
}

// handBuilt turns data into a Message of options that may not be what their
// code says, or have nil fields: byte 0 is the message type, then each
// option is [selector, code-hi, code-lo, len, data...].
func handBuilt(data []byte) dhcpv6.DHCPv6 {
	if len(data) == 0 {
		return &dhcpv6.Message{}
	}
	m := &dhcpv6.Message{MessageType: dhcpv6.MessageType(data[0])}
	var relay *dhcpv6.RelayMessage
	rest := data[1:]
	for len(rest) >= 4 {
		sel, code, n := rest[0], dhcpv6.OptionCode(uint16(rest[1])<<8|uint16(rest[2])), int(rest[3])
		rest = rest[4:]
		if n > len(rest) {
			n = len(rest)
		}
		payload := rest[:n]
		rest = rest[n:]
		var o dhcpv6.Option
		switch sel % 12 {
		case 0:
			o = dhcpv6.OptClientID(nil)
		case 1:
			o = dhcpv6.OptServerID(nil)
		case 2:
			o = &dhcpv6.OptIAPrefix{Prefix: &net.IPNet{IP: payload, Mask: payload}}
		case 3:
			o = &dhcpv6.OptIAAddress{IPv6Addr: payload}
		case 4:
			o = &dhcpv6.OptIANA{Options: dhcpv6.IdentityOptions{Options: dhcpv6.Options{&dhcpv6.OptionGeneric{OptionCode: code, OptionData: payload}}}}
		case 5:
			o = dhcpv6.OptRelayMessage(nil)
		case 6:
			o = dhcpv6.OptClientID(&dhcpv6.DUIDLL{HWType: iana.HWTypeEthernet, LinkLayerAddr: payload})
		case 7:
			// Wrap what we have so far in a Relay-forward.
			relay = &dhcpv6.RelayMessage{MessageType: dhcpv6.MessageTypeRelayForward, PeerAddr: payload}
			continue
		case 8:
			o = dhcpv6.OptServerID(DUIDFromMAC(serverMAC))
		default:
			o = &dhcpv6.OptionGeneric{OptionCode: code, OptionData: payload}
		}
		m.AddOption(o)
	}
	if relay != nil {
		relay.AddOption(dhcpv6.OptRelayMessage(m))
		return relay
	}
	return m
}
