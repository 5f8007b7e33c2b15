package dhcp6

import (
	"bytes"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv6"
	"github.com/insomniacslk/dhcp/iana"
)

type handleCase struct {
	name     string
	msg      *dhcpv6.Message
	bindings []Binding        // none: the client is unknown
	mac      net.HardwareAddr // Handle's mac argument

	wantType dhcpv6.MessageType // 0: no reply
	outcome  string
	wantErr  bool // ErrMalformed
	rapid    bool
	status   *iana.StatusCode // top-level Status Code
	na, pd   []iaWant
}

func TestHandle(t *testing.T) {
	full := []Binding{fullBinding()}
	noPrefix := []Binding{{Key: "ns/vm-a", MAC: clientMAC, Address: bindAddr}}
	noAddr := []Binding{{Key: "ns/vm-a", MAC: clientMAC, Prefix: bindPrefix}}
	empty := []Binding{{Key: "ns/vm-a", MAC: clientMAC}}
	wrongSID := dhcpv6.WithServerID(otherServerDUID)
	naWith := func(a ...dhcpv6.OptIAAddress) dhcpv6.Modifier { return dhcpv6.WithIANA(a...) }
	pdWith := func(p ...*dhcpv6.OptIAPrefix) dhcpv6.Modifier { return dhcpv6.WithIAPD(pdIAID, p...) }
	zero := func(s string) leaseWant { return leaseWant{lease: s} }
	enDUID := dhcpv6.WithClientID(&dhcpv6.DUIDEN{EnterpriseNumber: 32473, EnterpriseIdentifier: []byte("guest")})

	cases := []handleCase{
		// Solicit.
		{name: "solicit IA_NA only", msg: solicit(t), bindings: full,
			wantType: dhcpv6.MessageTypeAdvertise, outcome: OutcomeAdvertise, na: []iaWant{naLease(naIAID)}},
		{name: "solicit rapid commit", msg: solicit(t, dhcpv6.WithRapidCommit, withPD), bindings: full,
			wantType: dhcpv6.MessageTypeReply, outcome: OutcomeReply, rapid: true,
			na: []iaWant{naLease(naIAID)}, pd: []iaWant{pdLease(pdIAID)}},
		{name: "solicit IA_PD only", msg: solicit(t, noNA, withPD), bindings: full,
			wantType: dhcpv6.MessageTypeAdvertise, outcome: OutcomeAdvertise, pd: []iaWant{pdLease(pdIAID)}},
		{name: "solicit IA_NA and IA_PD", msg: solicit(t, withPD), bindings: full,
			wantType: dhcpv6.MessageTypeAdvertise, outcome: OutcomeAdvertise,
			na: []iaWant{naLease(naIAID)}, pd: []iaWant{pdLease(pdIAID)}},
		{name: "solicit hints are not followed", msg: solicit(t, naWith(iaAddr(oldAddr)), pdWith(iaPrefix(oldPrefix))), bindings: full,
			wantType: dhcpv6.MessageTypeAdvertise, outcome: OutcomeAdvertise,
			na: []iaWant{naLease(naIAID)}, pd: []iaWant{pdLease(pdIAID)}},
		{name: "solicit binding without prefix: NoPrefixAvail", msg: solicit(t, withPD), bindings: noPrefix,
			wantType: dhcpv6.MessageTypeAdvertise, outcome: OutcomeAdvertise,
			na: []iaWant{naLease(naIAID)}, pd: []iaWant{iaStatus(pdIAID, iana.StatusNoPrefixAvail)}},
		{name: "solicit binding without address: NoAddrsAvail", msg: solicit(t, withPD), bindings: noAddr,
			wantType: dhcpv6.MessageTypeAdvertise, outcome: OutcomeAdvertise,
			na: []iaWant{iaStatus(naIAID, iana.StatusNoAddrsAvail)}, pd: []iaWant{pdLease(pdIAID)}},
		{name: "solicit nothing to offer: NoAddrsAvail in the IAs and at the top", msg: solicit(t, withPD), bindings: empty,
			wantType: dhcpv6.MessageTypeAdvertise, outcome: OutcomeAdvertise, status: st(iana.StatusNoAddrsAvail),
			na: []iaWant{iaStatus(naIAID, iana.StatusNoAddrsAvail)}, pd: []iaWant{iaStatus(pdIAID, iana.StatusNoPrefixAvail)}},
		// One address and one prefix per client: two IAs of a kind get
		// the lease in one, NoAddrsAvail / NoPrefixAvail (NoBinding in a
		// Renew) in the other (RFC 8415 §18.3).
		{name: "solicit two IA_NAs and two IA_PDs: the first of each gets the lease",
			msg: solicit(t, withPD, secondNA, secondPD), bindings: full,
			wantType: dhcpv6.MessageTypeAdvertise, outcome: OutcomeAdvertise,
			na: []iaWant{naLease(naIAID), iaStatus(naIAID2, iana.StatusNoAddrsAvail)},
			pd: []iaWant{pdLease(pdIAID), iaStatus(pdIAID2, iana.StatusNoPrefixAvail)}},
		{name: "request two of each: the IA that lists the lease keeps it",
			msg: message(t, dhcpv6.MessageTypeRequest, mySID, withNA, withPD,
				withAddOption(&dhcpv6.OptIANA{IaId: naIAID2, Options: dhcpv6.IdentityOptions{Options: dhcpv6.Options{ptr(iaAddr(bindAddr))}}}),
				withAddOption(&dhcpv6.OptIAPD{IaId: pdIAID2, Options: dhcpv6.PDOptions{Options: dhcpv6.Options{iaPrefix(bindPrefix)}}})),
			bindings: full, wantType: dhcpv6.MessageTypeReply, outcome: OutcomeReply,
			na: []iaWant{iaStatus(naIAID, iana.StatusNoAddrsAvail), naLease(naIAID2)},
			pd: []iaWant{iaStatus(pdIAID, iana.StatusNoPrefixAvail), pdLease(pdIAID2)}},
		{name: "renew two of each: NoBinding in the IAs without the lease",
			msg:      message(t, dhcpv6.MessageTypeRenew, mySID, withNA, naWith(iaAddr(bindAddr)), pdWith(iaPrefix(bindPrefix)), secondNA, secondPD),
			bindings: full, wantType: dhcpv6.MessageTypeReply, outcome: OutcomeReply,
			na: []iaWant{naLease(naIAID), iaStatus(naIAID2, iana.StatusNoBinding)},
			pd: []iaWant{pdLease(pdIAID), iaStatus(pdIAID2, iana.StatusNoBinding)}},
		{name: "solicit rapid commit, nothing to offer", msg: solicit(t, dhcpv6.WithRapidCommit, noNA, withPD), bindings: noPrefix,
			wantType: dhcpv6.MessageTypeReply, outcome: OutcomeReply, rapid: true,
			pd: []iaWant{iaStatus(pdIAID, iana.StatusNoPrefixAvail)}},
		{name: "solicit with a Server ID is dropped", msg: solicit(t, mySID), bindings: full,
			outcome: OutcomeMalformed, wantErr: true},
		{name: "solicit without Client ID is dropped", msg: solicit(t, without(dhcpv6.OptionClientID)), bindings: full,
			outcome: OutcomeMalformed, wantErr: true},
		{name: "solicit with two Client IDs is dropped", msg: solicit(t, withAddOption(dhcpv6.OptClientID(clientDUID()))), bindings: full,
			outcome: OutcomeMalformed, wantErr: true},
		{name: "solicit from an unknown client", msg: solicit(t), bindings: []Binding{{Key: "ns/other", MAC: otherMAC, Address: bindAddr}},
			outcome: OutcomeNoBinding},
		{name: "solicit mapped by the mac argument", msg: solicit(t, enDUID), bindings: full, mac: clientMAC,
			wantType: dhcpv6.MessageTypeAdvertise, outcome: OutcomeAdvertise, na: []iaWant{naLease(naIAID)}},
		{name: "solicit with DUID-EN and no mac", msg: solicit(t, enDUID), bindings: full,
			outcome: OutcomeNoBinding},

		// Request.
		{name: "request", msg: message(t, dhcpv6.MessageTypeRequest, mySID, withNA, naWith(iaAddr(bindAddr)), pdWith(iaPrefix(bindPrefix))),
			bindings: full, wantType: dhcpv6.MessageTypeReply, outcome: OutcomeReply,
			na: []iaWant{naLease(naIAID)}, pd: []iaWant{pdLease(pdIAID)}},
		{name: "request binding without prefix", msg: message(t, dhcpv6.MessageTypeRequest, mySID, withNA, withPD),
			bindings: noPrefix, wantType: dhcpv6.MessageTypeReply, outcome: OutcomeReply,
			na: []iaWant{naLease(naIAID)}, pd: []iaWant{iaStatus(pdIAID, iana.StatusNoPrefixAvail)}},
		{name: "request for another server", msg: message(t, dhcpv6.MessageTypeRequest, wrongSID, withNA), bindings: full,
			outcome: OutcomeIgnored},
		{name: "request without Server ID", msg: message(t, dhcpv6.MessageTypeRequest, withNA), bindings: full,
			outcome: OutcomeMalformed, wantErr: true},
		{name: "request without Client ID", msg: message(t, dhcpv6.MessageTypeRequest, mySID, withNA, without(dhcpv6.OptionClientID)), bindings: full,
			outcome: OutcomeMalformed, wantErr: true},
		{name: "request from an unknown client", msg: message(t, dhcpv6.MessageTypeRequest, mySID, withNA),
			outcome: OutcomeNoBinding},

		// Renew.
		{name: "renew known", msg: message(t, dhcpv6.MessageTypeRenew, mySID, withNA, naWith(iaAddr(bindAddr)), pdWith(iaPrefix(bindPrefix))),
			bindings: full, wantType: dhcpv6.MessageTypeReply, outcome: OutcomeReply,
			na: []iaWant{naLease(naIAID)}, pd: []iaWant{pdLease(pdIAID)}},
		{name: "renew of a changed lease: new one, old one at lifetimes 0",
			msg:      message(t, dhcpv6.MessageTypeRenew, mySID, withNA, naWith(iaAddr(oldAddr)), pdWith(iaPrefix(oldPrefix))),
			bindings: full, wantType: dhcpv6.MessageTypeReply, outcome: OutcomeReply,
			na: []iaWant{naLease(naIAID, zero(oldAddr.String()))}, pd: []iaWant{pdLease(pdIAID, zero(oldPrefix.String()))}},
		{name: "renew with no binding for the IA: NoBinding",
			msg:      message(t, dhcpv6.MessageTypeRenew, mySID, withNA, naWith(iaAddr(oldAddr)), pdWith(iaPrefix(bindPrefix))),
			bindings: noAddr, wantType: dhcpv6.MessageTypeReply, outcome: OutcomeReply,
			na: []iaWant{iaStatus(naIAID, iana.StatusNoBinding)}, pd: []iaWant{pdLease(pdIAID)}},
		{name: "renew with no binding for the IA_PD: NoBinding",
			msg:      message(t, dhcpv6.MessageTypeRenew, mySID, withNA, naWith(iaAddr(bindAddr)), pdWith(iaPrefix(oldPrefix))),
			bindings: noPrefix, wantType: dhcpv6.MessageTypeReply, outcome: OutcomeReply,
			na: []iaWant{naLease(naIAID)}, pd: []iaWant{iaStatus(pdIAID, iana.StatusNoBinding)}},
		{name: "renew for another server", msg: message(t, dhcpv6.MessageTypeRenew, wrongSID, withNA, naWith(iaAddr(bindAddr))),
			bindings: full, outcome: OutcomeIgnored},
		{name: "renew without Server ID", msg: message(t, dhcpv6.MessageTypeRenew, withNA, naWith(iaAddr(bindAddr))),
			bindings: full, outcome: OutcomeMalformed, wantErr: true},
		{name: "renew from an unknown client", msg: message(t, dhcpv6.MessageTypeRenew, mySID, withNA, naWith(iaAddr(bindAddr))),
			outcome: OutcomeNoBinding},

		// Rebind.
		{name: "rebind known", msg: message(t, dhcpv6.MessageTypeRebind, withNA, naWith(iaAddr(bindAddr)), pdWith(iaPrefix(bindPrefix))),
			bindings: full, wantType: dhcpv6.MessageTypeReply, outcome: OutcomeReply,
			na: []iaWant{naLease(naIAID)}, pd: []iaWant{pdLease(pdIAID)}},
		{name: "rebind of a changed lease: new one, old one at lifetimes 0",
			msg:      message(t, dhcpv6.MessageTypeRebind, withNA, naWith(iaAddr(oldAddr), iaAddr(bindAddr))),
			bindings: full, wantType: dhcpv6.MessageTypeReply, outcome: OutcomeReply,
			na: []iaWant{naLease(naIAID, zero(oldAddr.String()))}},
		{name: "rebind with no binding for the IA: its leases at lifetimes 0",
			msg:      message(t, dhcpv6.MessageTypeRebind, withNA, naWith(iaAddr(oldAddr)), pdWith(iaPrefix(oldPrefix))),
			bindings: empty, wantType: dhcpv6.MessageTypeReply, outcome: OutcomeReply,
			na: []iaWant{iaZero(naIAID, oldAddr.String())}, pd: []iaWant{iaZero(pdIAID, oldPrefix.String())}},
		{name: "rebind with no binding and no leases sent: NoBinding",
			msg:      message(t, dhcpv6.MessageTypeRebind, withNA),
			bindings: noAddr, wantType: dhcpv6.MessageTypeReply, outcome: OutcomeReply,
			na: []iaWant{iaStatus(naIAID, iana.StatusNoBinding)}},
		{name: "rebind with a Server ID is dropped", msg: message(t, dhcpv6.MessageTypeRebind, mySID, withNA),
			bindings: full, outcome: OutcomeMalformed, wantErr: true},
		{name: "rebind from an unknown client", msg: message(t, dhcpv6.MessageTypeRebind, withNA, naWith(iaAddr(bindAddr))),
			outcome: OutcomeNoBinding},

		// Release and Decline.
		{name: "release", msg: message(t, dhcpv6.MessageTypeRelease, mySID, withNA, naWith(iaAddr(bindAddr)), pdWith(iaPrefix(bindPrefix))),
			bindings: full, wantType: dhcpv6.MessageTypeReply, outcome: OutcomeReply, status: st(iana.StatusSuccess)},
		{name: "release of an IA_PD without binding: NoBinding", msg: message(t, dhcpv6.MessageTypeRelease, mySID, withNA, naWith(iaAddr(bindAddr)), pdWith(iaPrefix(oldPrefix))),
			bindings: noPrefix, wantType: dhcpv6.MessageTypeReply, outcome: OutcomeReply, status: st(iana.StatusSuccess),
			pd: []iaWant{iaStatus(pdIAID, iana.StatusNoBinding)}},
		{name: "release for another server", msg: message(t, dhcpv6.MessageTypeRelease, wrongSID, withNA, naWith(iaAddr(bindAddr))),
			bindings: full, outcome: OutcomeIgnored},
		{name: "decline", msg: message(t, dhcpv6.MessageTypeDecline, mySID, withNA, naWith(iaAddr(bindAddr))),
			bindings: full, wantType: dhcpv6.MessageTypeReply, outcome: OutcomeDeclined, status: st(iana.StatusSuccess)},
		{name: "decline without Server ID", msg: message(t, dhcpv6.MessageTypeDecline, withNA, naWith(iaAddr(bindAddr))),
			bindings: full, outcome: OutcomeMalformed, wantErr: true},

		// Confirm.
		{name: "confirm on link", msg: message(t, dhcpv6.MessageTypeConfirm, withNA, naWith(iaAddr(bindAddr))),
			bindings: full, wantType: dhcpv6.MessageTypeReply, outcome: OutcomeReply, status: st(iana.StatusSuccess)},
		{name: "confirm not on link", msg: message(t, dhcpv6.MessageTypeConfirm, withNA, naWith(iaAddr(bindAddr), iaAddr(oldAddr))),
			bindings: full, wantType: dhcpv6.MessageTypeReply, outcome: OutcomeReply, status: st(iana.StatusNotOnLink)},
		{name: "confirm when the binding has no address", msg: message(t, dhcpv6.MessageTypeConfirm, withNA, naWith(iaAddr(bindAddr))),
			bindings: noAddr, wantType: dhcpv6.MessageTypeReply, outcome: OutcomeReply, status: st(iana.StatusNotOnLink)},
		{name: "confirm without addresses gets no reply", msg: message(t, dhcpv6.MessageTypeConfirm, withNA),
			bindings: full, outcome: OutcomeIgnored},
		{name: "confirm with a Server ID is dropped", msg: message(t, dhcpv6.MessageTypeConfirm, mySID, withNA, naWith(iaAddr(bindAddr))),
			bindings: full, outcome: OutcomeMalformed, wantErr: true},

		// Information-request.
		{name: "information-request", msg: message(t, dhcpv6.MessageTypeInformationRequest),
			bindings: full, wantType: dhcpv6.MessageTypeReply, outcome: OutcomeReply},
		{name: "information-request with our Server ID", msg: message(t, dhcpv6.MessageTypeInformationRequest, mySID),
			bindings: full, wantType: dhcpv6.MessageTypeReply, outcome: OutcomeReply},
		{name: "information-request without Client ID, mapped by mac", msg: message(t, dhcpv6.MessageTypeInformationRequest, without(dhcpv6.OptionClientID)),
			bindings: full, mac: clientMAC, wantType: dhcpv6.MessageTypeReply, outcome: OutcomeReply},
		{name: "information-request for another server", msg: message(t, dhcpv6.MessageTypeInformationRequest, wrongSID),
			bindings: full, outcome: OutcomeIgnored},
		{name: "information-request with an IA is dropped", msg: message(t, dhcpv6.MessageTypeInformationRequest, withNA),
			bindings: full, outcome: OutcomeMalformed, wantErr: true},
		{name: "information-request from an unknown client", msg: message(t, dhcpv6.MessageTypeInformationRequest),
			outcome: OutcomeNoBinding},

		// Messages a server does not answer.
		{name: "advertise", msg: message(t, dhcpv6.MessageTypeAdvertise, mySID, withNA), bindings: full, outcome: OutcomeIgnored},
		{name: "reply", msg: message(t, dhcpv6.MessageTypeReply, mySID, withNA), bindings: full, outcome: OutcomeIgnored},
		{name: "reconfigure", msg: message(t, dhcpv6.MessageTypeReconfigure, mySID), bindings: full, outcome: OutcomeIgnored},
		{name: "leasequery", msg: message(t, dhcpv6.MessageTypeLeaseQuery, mySID), bindings: full, outcome: OutcomeIgnored},
	}

	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			lookup := newFakeLookup(tc.bindings...)
			before := lookup.snapshot()
			obs := &countingObserver{}
			h := NewHandler(testConfig(), lookup, obs)
			reqBytes := tc.msg.ToBytes()

			got, err := h.Handle(tc.msg, ifname, tc.mac)

			if !bytes.Equal(tc.msg.ToBytes(), reqBytes) {
				t.Error("Handle modified the request")
			}
			if after := lookup.snapshot(); !equalBindings(before, after) {
				t.Errorf("bindings changed: %v -> %v", before, after)
			}
			if tc.wantErr != (err != nil) || (err != nil && !errors.Is(err, ErrMalformed)) {
				t.Errorf("err = %v, want malformed: %v", err, tc.wantErr)
			}
			if obs.last[1] != tc.outcome || obs.last[0] != typeLabel(tc.msg.MessageType) {
				t.Errorf("observed %v, want [%s %s]", obs.last, typeLabel(tc.msg.MessageType), tc.outcome)
			}
			if tc.wantType == 0 {
				if got != nil {
					t.Fatalf("got a reply, want none:\n%s", got.Summary())
				}
				return
			}
			if got == nil {
				t.Fatalf("no reply (err %v), want %s", err, tc.wantType)
			}
			checkReply(t, tc, roundTrip(t, got))
		})
	}
}

func checkReply(t *testing.T, tc handleCase, d dhcpv6.DHCPv6) {
	t.Helper()
	rep, ok := d.(*dhcpv6.Message)
	if !ok {
		t.Fatalf("reply is a %T", d)
	}
	if rep.MessageType != tc.wantType {
		t.Errorf("reply type %s, want %s", rep.MessageType, tc.wantType)
	}
	if rep.TransactionID != tc.msg.TransactionID {
		t.Errorf("transaction ID %s, want %s", rep.TransactionID, tc.msg.TransactionID)
	}
	sid := rep.Options.ServerID()
	if sid == nil || !bytes.Equal(sid.ToBytes(), DUIDFromMAC(serverMAC).ToBytes()) {
		t.Errorf("Server ID %v, want ours", sid)
	}
	if n := len(rep.Options.Get(dhcpv6.OptionServerID)); n != 1 {
		t.Errorf("%d Server IDs", n)
	}
	switch want, got := tc.msg.Options.ClientID(), rep.Options.ClientID(); {
	case want == nil && got != nil:
		t.Errorf("Client ID %v in reply, the client sent none", got)
	case want != nil && (got == nil || !bytes.Equal(got.ToBytes(), want.ToBytes())):
		t.Errorf("Client ID %v, want %v echoed", got, want)
	}
	if rc := rep.GetOneOption(dhcpv6.OptionRapidCommit) != nil; rc != tc.rapid {
		t.Errorf("Rapid Commit option %v, want %v", rc, tc.rapid)
	}
	if s := gotStatus(rep.Options.Options); statusString(s) != statusString(tc.status) {
		t.Errorf("top-level status %s, want %s", statusString(s), statusString(tc.status))
	}
	if n := len(rep.Options.IATA()); n != 0 {
		t.Errorf("%d IA_TA in reply", n)
	}
	checkNA(t, rep.Options.IANA(), tc.na)
	checkPD(t, rep.Options.IAPD(), tc.pd)
}

func equalBindings(a, b map[string]Binding) bool {
	if len(a) != len(b) {
		return false
	}
	for k, x := range a {
		y, ok := b[k]
		if !ok || x.Key != y.Key || !bytes.Equal(x.MAC, y.MAC) || x.Address != y.Address || x.Prefix != y.Prefix {
			return false
		}
	}
	return true
}

// Every message type a client sends gets nothing when the Lookup knows no
// binding for it, and the Lookup is asked.
func TestUnknownClientGetsNothing(t *testing.T) {
	msgs := []*dhcpv6.Message{
		solicit(t, withPD),
		solicit(t, dhcpv6.WithRapidCommit),
		message(t, dhcpv6.MessageTypeRequest, mySID, withNA, withPD),
		message(t, dhcpv6.MessageTypeConfirm, withNA, dhcpv6.WithIANA(iaAddr(bindAddr))),
		message(t, dhcpv6.MessageTypeRenew, mySID, withNA, dhcpv6.WithIANA(iaAddr(bindAddr))),
		message(t, dhcpv6.MessageTypeRebind, withNA, dhcpv6.WithIANA(iaAddr(bindAddr))),
		message(t, dhcpv6.MessageTypeRelease, mySID, withNA, dhcpv6.WithIANA(iaAddr(bindAddr))),
		message(t, dhcpv6.MessageTypeDecline, mySID, withNA, dhcpv6.WithIANA(iaAddr(bindAddr))),
		message(t, dhcpv6.MessageTypeInformationRequest),
	}
	for _, m := range msgs {
		t.Run(m.MessageType.String(), func(t *testing.T) {
			lookup := newFakeLookup(Binding{Key: "ns/other", MAC: otherMAC, Address: bindAddr, Prefix: bindPrefix})
			h := NewHandler(testConfig(), lookup, nil)
			got, err := h.Handle(m, ifname, nil)
			if got != nil || err != nil {
				t.Fatalf("Handle = %v, %v; want nil, nil", got, err)
			}
			if len(lookup.calls) == 0 {
				t.Error("Lookup was not asked")
			}
			// Relayed by a trusted relay, the same.
			relayed, err := dhcpv6.EncapsulateRelay(m, dhcpv6.MessageTypeRelayForward, net.ParseIP("2001:db8::1"), net.ParseIP("fe80::1"))
			if err != nil {
				t.Fatal(err)
			}
			relayed.AddOption(dhcpv6.OptClientLinkLayerAddress(iana.HWTypeEthernet, clientMAC))
			r := NewHandler(relayConfig(), lookup, nil).HandleFrom(relayed, Source{Ifname: ifname, MAC: relayMAC, Peer: relayLL})
			if r.Reply != nil || r.Err != nil || r.Outcome != OutcomeNoBinding {
				t.Fatalf("relayed: %v, %v, %s; want no reply, %s", r.Reply, r.Err, r.Outcome, OutcomeNoBinding)
			}
		})
	}
}

// A whole exchange driven by insomniacslk's client-side constructors:
// Solicit -> Advertise -> Request (NewRequestFromAdvertise) -> Reply.
func TestSolicitRequestExchange(t *testing.T) {
	h := NewHandler(testConfig(), newFakeLookup(fullBinding()), nil)
	sol := solicit(t, withPD)
	adv, err := h.Handle(sol, ifname, nil)
	if err != nil || adv == nil {
		t.Fatalf("Solicit: %v, %v", adv, err)
	}
	advMsg := roundTrip(t, adv).(*dhcpv6.Message)
	req, err := dhcpv6.NewRequestFromAdvertise(advMsg)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := h.Handle(req, ifname, nil)
	if err != nil || rep == nil {
		t.Fatalf("Request: %v, %v", rep, err)
	}
	checkReply(t, handleCase{msg: req, wantType: dhcpv6.MessageTypeReply,
		na: []iaWant{naLease(naIAID)}, pd: []iaWant{pdLease(pdIAID)}}, roundTrip(t, rep))
}

func TestSolicitWithIATA(t *testing.T) {
	h := NewHandler(testConfig(), newFakeLookup(fullBinding()), nil)
	m := solicit(t, dhcpv6.WithIATA([4]byte{9, 9, 9, 9}))
	got, err := h.Handle(m, ifname, nil)
	if err != nil || got == nil {
		t.Fatalf("Handle: %v, %v", got, err)
	}
	rep := roundTrip(t, got).(*dhcpv6.Message)
	tas := rep.Options.IATA()
	if len(tas) != 1 || tas[0].IaId != [4]byte{9, 9, 9, 9} || statusString(gotStatus(tas[0].Options.Options)) != iana.StatusNoAddrsAvail.String() {
		t.Errorf("IA_TA answer %v, want NoAddrsAvail", tas)
	}
	checkNA(t, rep.Options.IANA(), []iaWant{naLease(naIAID)})
}

func TestPreference(t *testing.T) {
	cfg := testConfig()
	cfg.Preference = 255
	h := NewHandler(cfg, newFakeLookup(fullBinding()), nil)
	got, _ := h.Handle(solicit(t), ifname, nil)
	if got == nil {
		t.Fatal("no Advertise")
	}
	if p := roundTrip(t, got).(*dhcpv6.Message).Options.Preference(); p != 255 {
		t.Errorf("preference %d, want 255", p)
	}
	got, _ = h.Handle(solicit(t, dhcpv6.WithRapidCommit), ifname, nil)
	if got.GetOneOption(dhcpv6.OptionPreference) != nil {
		t.Error("preference in a Reply")
	}
}

// The candidate MACs: for a direct message the link-layer source of the
// frame alone when known; otherwise (and for a relayed message after the RFC
// 6939 option) DUID-LL/LLT, then EUI-64 of the link-local source.
func TestMACMappingOrder(t *testing.T) {
	srcMAC := net.HardwareAddr{0x52, 0x54, 0, 0, 0, 1}
	duidMAC := net.HardwareAddr{0x52, 0x54, 0, 0, 0, 2}
	euiMAC := net.HardwareAddr{0x52, 0x54, 0, 0, 0, 3}
	optMAC := net.HardwareAddr{0x52, 0x54, 0, 0, 0, 4}
	linkLocal := netipMust("fe80::5054:ff:fe00:3") // EUI-64 of euiMAC
	duidLL := dhcpv6.WithClientID(&dhcpv6.DUIDLL{HWType: iana.HWTypeEthernet, LinkLayerAddr: duidMAC})
	enDUID := dhcpv6.WithClientID(&dhcpv6.DUIDEN{EnterpriseNumber: 1, EnterpriseIdentifier: []byte{1}})
	key := func(m net.HardwareAddr) string { return lookupKey(m, ifname) }

	relay := func(m *dhcpv6.Message, peer string, opts ...dhcpv6.Option) *dhcpv6.RelayMessage {
		r, err := dhcpv6.EncapsulateRelay(m, dhcpv6.MessageTypeRelayForward, net.ParseIP("2001:db8::1"), net.ParseIP(peer))
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range opts {
			r.AddOption(o)
		}
		return r
	}

	tests := []struct {
		name      string
		msg       dhcpv6.DHCPv6
		src       Source
		known     []net.HardwareAddr
		wantCalls []string
		wantKey   string
	}{
		{name: "direct: mac argument first",
			msg: solicit(t, duidLL), src: Source{Ifname: ifname, MAC: srcMAC, Peer: linkLocal},
			known: []net.HardwareAddr{srcMAC, duidMAC, euiMAC}, wantCalls: []string{key(srcMAC)}, wantKey: srcMAC.String()},
		{name: "direct: a known link-layer source is the only candidate",
			msg: solicit(t, duidLL), src: Source{Ifname: ifname, MAC: srcMAC, Peer: linkLocal},
			known: []net.HardwareAddr{duidMAC, euiMAC}, wantCalls: []string{key(srcMAC)}},
		{name: "direct: without a link-layer source, DUID-LL first",
			msg: solicit(t, duidLL), src: Source{Ifname: ifname, Peer: linkLocal},
			known: []net.HardwareAddr{duidMAC, euiMAC}, wantCalls: []string{key(duidMAC)}, wantKey: duidMAC.String()},
		{name: "direct: DUID-LLT",
			msg: solicit(t), src: Source{Ifname: ifname},
			known: []net.HardwareAddr{clientMAC}, wantCalls: []string{key(clientMAC)}, wantKey: clientMAC.String()},
		{name: "direct: without a link-layer source, EUI-64 of the link-local source last",
			msg: solicit(t, duidLL), src: Source{Ifname: ifname, Peer: linkLocal},
			known: []net.HardwareAddr{euiMAC}, wantCalls: []string{key(duidMAC), key(euiMAC)}, wantKey: euiMAC.String()},
		{name: "direct: EUI-64 with a DUID-EN",
			msg: solicit(t, enDUID), src: Source{Ifname: ifname, Peer: linkLocal},
			known: []net.HardwareAddr{euiMAC}, wantCalls: []string{key(euiMAC)}, wantKey: euiMAC.String()},
		{name: "direct: a DUID-EN on a stable-privacy link-local address, known by its link-layer source",
			msg: solicit(t, enDUID), src: Source{Ifname: ifname, MAC: srcMAC, Peer: netipMust("fe80::3c1a:99d2:7b04:e5f1")},
			known: []net.HardwareAddr{srcMAC}, wantCalls: []string{key(srcMAC)}, wantKey: srcMAC.String()},
		{name: "direct: nothing maps",
			msg: solicit(t, duidLL), src: Source{Ifname: ifname, Peer: linkLocal},
			known: []net.HardwareAddr{optMAC}, wantCalls: []string{key(duidMAC), key(euiMAC)}},
		{name: "direct: a global source has no EUI-64",
			msg: solicit(t, enDUID), src: Source{Ifname: ifname, Peer: netipMust("2001:db8::5054:ff:fe00:3")},
			known: []net.HardwareAddr{euiMAC}, wantCalls: nil},
		{name: "direct: the same MAC is asked once",
			msg: solicit(t, dhcpv6.WithClientID(&dhcpv6.DUIDLL{HWType: iana.HWTypeEthernet, LinkLayerAddr: euiMAC})),
			src: Source{Ifname: ifname, MAC: euiMAC, Peer: linkLocal}, wantCalls: []string{key(euiMAC)}},
		{name: "direct: an RFC 6939 option from the client itself is not trusted",
			msg: solicit(t, enDUID, dhcpv6.WithClientLinkLayerAddress(iana.HWTypeEthernet, optMAC)), src: Source{Ifname: ifname},
			known: []net.HardwareAddr{optMAC}, wantCalls: nil},
		{name: "relayed by a trusted relay: the RFC 6939 option, the relay's own MAC ignored",
			msg:   relay(solicit(t, duidLL), "fe80::5054:ff:fe00:3", dhcpv6.OptClientLinkLayerAddress(iana.HWTypeEthernet, optMAC)),
			src:   Source{Ifname: ifname, MAC: relayMAC, Peer: relayLL},
			known: []net.HardwareAddr{optMAC, relayMAC}, wantCalls: []string{key(optMAC)}, wantKey: optMAC.String()},
		{name: "relayed by a trusted relay: neither the DUID nor the peer-address's EUI-64 is asked",
			msg:   relay(solicit(t, duidLL), "fe80::5054:ff:fe00:3", dhcpv6.OptClientLinkLayerAddress(iana.HWTypeEthernet, optMAC)),
			src:   Source{Ifname: ifname, MAC: relayMAC, Peer: relayLL},
			known: []net.HardwareAddr{euiMAC, duidMAC, relayMAC}, wantCalls: []string{key(optMAC)}},
		{name: "relayed by a trusted relay without an RFC 6939 option: nobody",
			msg:   relay(solicit(t, duidLL), "fe80::5054:ff:fe00:3"),
			src:   Source{Ifname: ifname, MAC: relayMAC, Peer: relayLL},
			known: []net.HardwareAddr{euiMAC, duidMAC, relayMAC}, wantCalls: nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var bs []Binding
			for _, m := range tc.known {
				bs = append(bs, Binding{Key: m.String(), MAC: m, Address: bindAddr})
			}
			lookup := newFakeLookup(bs...)
			r := NewHandler(relayConfig(), lookup, nil).HandleFrom(tc.msg, tc.src)
			if !equalStrings(lookup.calls, tc.wantCalls) {
				t.Errorf("Lookup calls %v, want %v", lookup.calls, tc.wantCalls)
			}
			if r.Key != tc.wantKey {
				t.Errorf("binding %q, want %q", r.Key, tc.wantKey)
			}
			if (r.Reply != nil) != (tc.wantKey != "") {
				t.Errorf("reply %v, outcome %s (%s)", r.Reply != nil, r.Outcome, r.Reason)
			}
		})
	}
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestRelayedSolicit(t *testing.T) {
	h := NewHandler(relayConfig(), newFakeLookup(fullBinding()), nil)
	sol := solicit(t, withPD)
	inner, err := dhcpv6.EncapsulateRelay(sol, dhcpv6.MessageTypeRelayForward, net.ParseIP("2001:db8:a::1"), net.ParseIP("fe80::1"))
	if err != nil {
		t.Fatal(err)
	}
	inner.AddOption(dhcpv6.OptInterfaceID([]byte("port-7")))
	inner.AddOption(dhcpv6.OptClientLinkLayerAddress(iana.HWTypeEthernet, clientMAC))
	outer, err := dhcpv6.EncapsulateRelay(inner, dhcpv6.MessageTypeRelayForward, net.ParseIP("2001:db8:b::1"), net.ParseIP("2001:db8:a::1"))
	if err != nil {
		t.Fatal(err)
	}

	r := h.HandleFrom(outer, Source{Ifname: ifname, MAC: relayMAC, Peer: relayLL})
	got, err := r.Reply, r.Err
	if err != nil || got == nil {
		t.Fatalf("Handle: %v, %v (%s: %s)", got, err, r.Outcome, r.Reason)
	}
	d := roundTrip(t, got)
	want := []struct {
		hop        uint8
		link, peer string
		ifaceID    string
	}{{1, "2001:db8:b::1", "2001:db8:a::1", ""}, {0, "2001:db8:a::1", "fe80::1", "port-7"}}
	for i, w := range want {
		rr, ok := d.(*dhcpv6.RelayMessage)
		if !ok || rr.MessageType != dhcpv6.MessageTypeRelayReply {
			t.Fatalf("level %d: %v, want a Relay-reply", i, d)
		}
		if rr.HopCount != w.hop || rr.LinkAddr.String() != w.link || rr.PeerAddr.String() != w.peer {
			t.Errorf("level %d: hop %d link %s peer %s, want %+v", i, rr.HopCount, rr.LinkAddr, rr.PeerAddr, w)
		}
		if id := string(rr.Options.InterfaceID()); id != w.ifaceID {
			t.Errorf("level %d: Interface-ID %q, want %q", i, id, w.ifaceID)
		}
		d = rr.Options.RelayMessage()
	}
	checkReply(t, handleCase{msg: sol, wantType: dhcpv6.MessageTypeAdvertise,
		na: []iaWant{naLease(naIAID)}, pd: []iaWant{pdLease(pdIAID)}}, d)
}

func TestRelayMalformed(t *testing.T) {
	h := NewHandler(testConfig(), newFakeLookup(fullBinding()), nil)
	empty := &dhcpv6.RelayMessage{MessageType: dhcpv6.MessageTypeRelayForward, LinkAddr: net.IPv6zero, PeerAddr: net.IPv6zero}
	if got, err := h.Handle(empty, ifname, nil); got != nil || !errors.Is(err, ErrMalformed) {
		t.Errorf("relay without message: %v, %v", got, err)
	}
	var d dhcpv6.DHCPv6 = solicit(t)
	for range maxRelayDepth + 1 {
		var err error
		if d, err = dhcpv6.EncapsulateRelay(d, dhcpv6.MessageTypeRelayForward, nil, nil); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := h.Handle(d, ifname, clientMAC); got != nil || !errors.Is(err, ErrMalformed) {
		t.Errorf("too deep: %v, %v", got, err)
	}
	repl, _ := dhcpv6.EncapsulateRelay(solicit(t), dhcpv6.MessageTypeRelayReply, nil, nil)
	if got, err := h.Handle(repl, ifname, clientMAC); got != nil || err != nil {
		t.Errorf("relay-reply: %v, %v", got, err)
	}
}

// Hand-built values the library's own accessors would panic on.
func TestHandleOddValues(t *testing.T) {
	h := NewHandler(testConfig(), newFakeLookup(fullBinding()), nil)
	var nilMsg *dhcpv6.Message
	var nilRelay *dhcpv6.RelayMessage
	odd := map[string]dhcpv6.DHCPv6{
		"nil":           nil,
		"nil *Message":  nilMsg,
		"nil *Relay":    nilRelay,
		"nil client ID": &dhcpv6.Message{MessageType: dhcpv6.MessageTypeSolicit, Options: dhcpv6.MessageOptions{Options: dhcpv6.Options{dhcpv6.OptClientID(nil)}}},
		"generic client ID": &dhcpv6.Message{MessageType: dhcpv6.MessageTypeSolicit, Options: dhcpv6.MessageOptions{Options: dhcpv6.Options{
			&dhcpv6.OptionGeneric{OptionCode: dhcpv6.OptionClientID, OptionData: []byte{0}},
		}}},
		"generic IA_NA": &dhcpv6.Message{MessageType: dhcpv6.MessageTypeSolicit, Options: dhcpv6.MessageOptions{Options: dhcpv6.Options{
			dhcpv6.OptClientID(clientDUID()),
			&dhcpv6.OptionGeneric{OptionCode: dhcpv6.OptionIANA, OptionData: []byte{1, 2}},
		}}},
		"huge client ID": solicit(t, dhcpv6.WithClientID(&dhcpv6.DUIDOpaque{Type: 9, Data: make([]byte, 200)})),
		"too many IAs": solicit(t, func(d dhcpv6.DHCPv6) {
			for i := range maxIAs + 1 {
				d.AddOption(&dhcpv6.OptIAPD{IaId: [4]byte{byte(i)}})
			}
		}),
	}
	for name, m := range odd {
		t.Run(name, func(t *testing.T) {
			got, err := h.Handle(m, ifname, clientMAC)
			if got != nil || !errors.Is(err, ErrMalformed) {
				t.Errorf("Handle = %v, %v; want nil, ErrMalformed", got, err)
			}
		})
	}
	// A generic option whose bytes are a valid IA_NA is decoded as one.
	raw := (&dhcpv6.OptIANA{IaId: naIAID}).ToBytes()
	m := &dhcpv6.Message{MessageType: dhcpv6.MessageTypeSolicit, Options: dhcpv6.MessageOptions{Options: dhcpv6.Options{
		dhcpv6.OptClientID(clientDUID()),
		&dhcpv6.OptionGeneric{OptionCode: dhcpv6.OptionIANA, OptionData: raw},
	}}}
	got, err := h.Handle(m, ifname, nil)
	if err != nil || got == nil {
		t.Fatalf("Handle: %v, %v", got, err)
	}
	checkNA(t, roundTrip(t, got).(*dhcpv6.Message).Options.IANA(), []iaWant{naLease(naIAID)})
}

// Bindings that can't be served count as absent.
func TestUnservableBinding(t *testing.T) {
	for name, b := range map[string]Binding{
		"IPv4 address":     {MAC: clientMAC, Address: netipMust("192.0.2.1")},
		"4in6 address":     {MAC: clientMAC, Address: netipMust("::ffff:192.0.2.1")},
		"multicast":        {MAC: clientMAC, Address: netipMust("ff02::1")},
		"IPv4 prefix":      {MAC: clientMAC, Prefix: netipPrefixMust("192.0.2.0/24")},
		"zero-bits prefix": {MAC: clientMAC, Prefix: netipPrefixMust("::/0")},
	} {
		t.Run(name, func(t *testing.T) {
			h := NewHandler(testConfig(), newFakeLookup(b), nil)
			got, _ := h.Handle(solicit(t, withPD), ifname, nil)
			rep := roundTrip(t, got).(*dhcpv6.Message)
			if s := gotStatus(rep.Options.Options); s == nil || *s != iana.StatusNoAddrsAvail {
				t.Errorf("top-level status %s, want NoAddrsAvail", statusString(s))
			}
		})
	}
	// A zoned address is served without its zone, an unmasked prefix masked.
	b := Binding{MAC: clientMAC, Address: bindAddr.WithZone("eth0"), Prefix: netipPrefixMust("2001:db8:100::1/56")}
	got, _ := NewHandler(testConfig(), newFakeLookup(b), nil).Handle(solicit(t, withPD), ifname, nil)
	rep := roundTrip(t, got).(*dhcpv6.Message)
	checkNA(t, rep.Options.IANA(), []iaWant{naLease(naIAID)})
	checkPD(t, rep.Options.IAPD(), []iaWant{pdLease(pdIAID)})
}

// What the handler returns is the caller's: changing a reply does not change
// the next one.
func TestRepliesDoNotShareState(t *testing.T) {
	h := NewHandler(testConfig(), newFakeLookup(fullBinding()), nil)
	m := solicit(t, withPD)
	first, _ := h.Handle(m, ifname, nil)
	want := first.ToBytes()
	if ll, ok := first.(*dhcpv6.Message).Options.ServerID().(*dhcpv6.DUIDLL); ok {
		ll.LinkLayerAddr[0] = 0xee
	} else {
		t.Fatalf("server ID is a %T", first.(*dhcpv6.Message).Options.ServerID())
	}
	first.(*dhcpv6.Message).Options.IANA()[0].Options.Addresses()[0].IPv6Addr[15] = 0xee
	second, _ := h.Handle(m, ifname, nil)
	if !bytes.Equal(second.ToBytes(), want) {
		t.Error("a change to one reply showed in the next")
	}
}

func TestConfig(t *testing.T) {
	duid := DUIDFromMAC(serverMAC)
	tests := []struct {
		name    string
		cfg     Config
		want    lifetimes
		wantErr bool
	}{
		{name: "defaults", cfg: Config{ServerDUID: duid},
			want: lifetimes{preferred: time.Hour, valid: 2 * time.Hour, t1: 30 * time.Minute, t2: 48 * time.Minute}},
		{name: "preferred only", cfg: Config{ServerDUID: duid, PreferredLifetime: 10 * time.Minute},
			want: lifetimes{preferred: 10 * time.Minute, valid: 20 * time.Minute, t1: 5 * time.Minute, t2: 8 * time.Minute}},
		{name: "valid only", cfg: Config{ServerDUID: duid, ValidLifetime: 20 * time.Minute},
			want: lifetimes{preferred: 10 * time.Minute, valid: 20 * time.Minute, t1: 5 * time.Minute, t2: 8 * time.Minute}},
		{name: "explicit", cfg: Config{ServerDUID: duid, PreferredLifetime: time.Hour, ValidLifetime: time.Hour, T1: time.Minute, T2: 2 * time.Minute},
			want: lifetimes{preferred: time.Hour, valid: time.Hour, t1: time.Minute, t2: 2 * time.Minute}},
		{name: "infinite", cfg: Config{ServerDUID: duid, PreferredLifetime: 1 << 62, ValidLifetime: 1 << 62, T1: time.Hour, T2: 2 * time.Hour},
			want: lifetimes{preferred: infinity, valid: infinity, t1: time.Hour, t2: 2 * time.Hour}},
		{name: "DUID-LLT", cfg: Config{ServerDUID: &dhcpv6.DUIDLLT{HWType: iana.HWTypeEthernet, Time: 1, LinkLayerAddr: serverMAC}},
			want: lifetimes{preferred: time.Hour, valid: 2 * time.Hour, t1: 30 * time.Minute, t2: 48 * time.Minute}},
		{name: "no DUID", cfg: Config{}, wantErr: true},
		{name: "nil DUID pointer", cfg: Config{ServerDUID: (*dhcpv6.DUIDLL)(nil)}, wantErr: true},
		{name: "empty DUID", cfg: Config{ServerDUID: &dhcpv6.DUIDOpaque{Type: 5}}, wantErr: true},
		{name: "preferred above valid", cfg: Config{ServerDUID: duid, PreferredLifetime: 2 * time.Hour, ValidLifetime: time.Hour}, wantErr: true},
		{name: "T1 above T2", cfg: Config{ServerDUID: duid, T1: time.Hour, T2: time.Minute}, wantErr: true},
		{name: "T2 below default T1", cfg: Config{ServerDUID: duid, T2: time.Minute}, wantErr: true},
		{name: "negative", cfg: Config{ServerDUID: duid, ValidLifetime: -time.Second}, wantErr: true},
		{name: "sub-second", cfg: Config{ServerDUID: duid, PreferredLifetime: time.Millisecond}, wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, lt, err := tc.cfg.normalize()
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error: %v", err, tc.wantErr)
			}
			if err != nil {
				if tc.cfg.Validate() == nil {
					t.Error("Validate accepts it")
				}
				obs := &countingObserver{}
				h := NewHandler(tc.cfg, newFakeLookup(fullBinding()), obs)
				if h.Err() == nil {
					t.Error("Handler.Err() is nil")
				}
				if got, err := h.Handle(solicit(t), ifname, nil); got != nil || err == nil {
					t.Errorf("misconfigured Handle = %v, %v", got, err)
				}
				if obs.get(MsgTypeUnknown, OutcomeError) != 1 {
					t.Errorf("observed %v", obs.counts)
				}
				if _, err := NewServer("lo", h); err == nil {
					t.Error("NewServer accepts a misconfigured Handler")
				}
				return
			}
			if lt != tc.want {
				t.Errorf("lifetimes %+v, want %+v", lt, tc.want)
			}
		})
	}
	if NewHandler(testConfig(), nil, nil).Err() == nil {
		t.Error("nil Lookup accepted")
	}
}

func TestInfiniteLifetimeOnTheWire(t *testing.T) {
	cfg := testConfig()
	cfg.PreferredLifetime, cfg.ValidLifetime = 1<<62, 1<<62
	cfg.T1, cfg.T2 = time.Hour, 2*time.Hour
	got, _ := NewHandler(cfg, newFakeLookup(fullBinding()), nil).Handle(solicit(t), ifname, nil)
	a := roundTrip(t, got).(*dhcpv6.Message).Options.OneIANA().Options.OneAddress()
	if a.PreferredLifetime != infinity || a.ValidLifetime != infinity {
		t.Errorf("lifetimes %v/%v, want 0xffffffff s", a.PreferredLifetime, a.ValidLifetime)
	}
}

func TestMACFromLinkLocal(t *testing.T) {
	for in, want := range map[string]string{
		"fe80::5054:ff:fe12:3456":        "52:54:00:12:34:56",
		"fe80::200:ff:fe00:a1a1":         "00:00:00:00:a1:a1",
		"fe80::5054:ff:fe12:3456%eth0":   "52:54:00:12:34:56",
		"fe80::1":                        "",
		"2001:db8::5054:ff:fe12:3456":    "",
		"::ffff:169.254.1.1":             "",
		"fe80::9045:adff:fea5:f9fc":      "92:45:ad:a5:f9:fc",
		"fe80::3cda:3eff:fedd:f129%veth": "3e:da:3e:dd:f1:29",
	} {
		got, ok := MACFromLinkLocal(netipMust(in))
		if (want == "") == ok || (ok && got.String() != want) {
			t.Errorf("MACFromLinkLocal(%s) = %v, %v; want %q", in, got, ok, want)
		}
	}
	if _, ok := MACFromLinkLocal(netipZero); ok {
		t.Error("zero Addr has a MAC")
	}
}

func TestObserverLabels(t *testing.T) {
	obs := &countingObserver{}
	h := NewHandler(testConfig(), newFakeLookup(fullBinding()), obs)
	h.Handle(nil, ifname, nil)
	h.Handle(message(t, 99), ifname, nil)
	h.Handle(solicit(t), ifname, nil)
	relayed, _ := dhcpv6.EncapsulateRelay(solicit(t), dhcpv6.MessageTypeRelayForward, nil, net.ParseIP("fe80::1"))
	relayed.AddOption(dhcpv6.OptClientLinkLayerAddress(iana.HWTypeEthernet, clientMAC))
	h.Handle(relayed, ifname, clientMAC) // no relay is trusted
	NewHandler(relayConfig(), newFakeLookup(fullBinding()), obs).HandleFrom(relayed, Source{Ifname: ifname, MAC: relayMAC, Peer: relayLL})
	for _, w := range [][2]string{
		{MsgTypeUnknown, OutcomeMalformed},
		{MsgTypeOther, OutcomeIgnored},
		{MsgTypeSolicit, OutcomeAdvertise},
		{MsgTypeSolicit, OutcomeUntrustedRelay},
	} {
		if n := obs.get(w[0], w[1]); n == 0 {
			t.Errorf("no %v observed: %v", w, obs.counts)
		}
	}
	if n := obs.get(MsgTypeSolicit, OutcomeAdvertise); n != 2 {
		t.Errorf("relayed solicit not counted as a solicit: %v", obs.counts)
	}
}
