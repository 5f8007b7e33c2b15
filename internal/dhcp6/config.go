package dhcp6

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"net"
	"net/netip"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv6"
	"github.com/insomniacslk/dhcp/iana"

	"github.com/tenure-ipam/tenure/internal/config"
)

// Binding is what the server may hand one client: the claim's state.
type Binding struct {
	// Key is a stable identity for logs and metrics, e.g. "namespace/claim".
	Key string
	// MAC is the client's link-layer address.
	MAC net.HardwareAddr
	// Address is the IA_NA address; the zero value when the claim has none.
	Address netip.Addr
	// Prefix is the IA_PD prefix; the zero value when the claim has none.
	Prefix netip.Prefix
	// PreferredLifetime and ValidLifetime, when either is set, are the
	// lifetimes this binding is served with (defaulted as Config's are),
	// instead of the Handler's: bindings of one interface may come from
	// settings of different owners, none of which may retune the others'.
	PreferredLifetime, ValidLifetime time.Duration
	// TrustedRelays, when not nil, are the only relays a Relay-forward for
	// this binding is answered through (besides being one of the Handler's
	// Config.TrustedRelays); empty: none. nil leaves it to the Config.
	TrustedRelays []Relay
}

// Lookup maps a client to its binding on this node. ok=false means the client
// is not ours and the server stays silent.
//
// ifname is the interface the message arrived on; an implementation must only
// return bindings reachable through that interface, since most of the MACs it
// is asked about are chosen by the guest (see the package documentation).
// Lookup is called concurrently from several goroutines, and must not retain
// or modify mac.
type Lookup interface {
	Lookup(mac net.HardwareAddr, ifname string) (Binding, bool)
}

// Heard is implemented by a Lookup that wants to know which interface a
// client sits behind (internal/dataplane routes the client's prefix there).
// The Handler calls Heard(b, ifname) only after it answered a Request, Renew
// or Rebind of b's client with a Reply that leases b's address or prefix,
// when the client's MAC is what the link says (the frame's Ethernet source,
// or a trusted relay's RFC 6939 option) and not what the guest says (a
// DUID, a link-local address). Nothing else calls it: no Solicit (an
// Advertise commits nothing, and a Rapid Commit Solicit is the guest's
// choice of exchange, not evidence of a lease in use), Confirm,
// Information-request, Release, Decline, unanswered, ignored or malformed
// message. It is called concurrently, after Lookup returned b for the same
// message, and must not retain or modify b.MAC.
type Heard interface {
	Heard(b Binding, ifname string)
}

// LookupFunc adapts a function to the Lookup interface.
type LookupFunc func(mac net.HardwareAddr, ifname string) (Binding, bool)

// Lookup calls f.
func (f LookupFunc) Lookup(mac net.HardwareAddr, ifname string) (Binding, bool) {
	return f(mac, ifname)
}

// Observer receives one call per handled message: the DHCPv6 message type of
// the client's message (see the MsgType constants) and what became of it
// (see the Outcome constants). Both come from small fixed sets, so they are
// safe as metric labels. It is called concurrently.
type Observer interface {
	Observe(msgType, outcome string)
}

// Outcomes reported to the Observer.
const (
	// OutcomeAdvertise: an Advertise was sent in answer to a Solicit.
	OutcomeAdvertise = "advertise"
	// OutcomeReply: a Reply was sent.
	OutcomeReply = "reply"
	// OutcomeDeclined: a Reply was sent to a Decline. The guest found the
	// address tenure gave it in use on the link, which deserves an alert.
	OutcomeDeclined = "declined"
	// OutcomeIgnored: a well-formed message not meant for this server: another
	// server's DUID, a type only clients receive, a Confirm without addresses.
	OutcomeIgnored = "ignored"
	// OutcomeMalformed: a DHCPv6 message failing RFC 8415 §16 validation
	// (e.g. no Client Identifier, a Server Identifier on a Solicit).
	OutcomeMalformed = "malformed"
	// OutcomeUndecodable: a packet to the server port that is no DHCPv6
	// message at all (the library cannot decode it, or its IPv6/UDP headers
	// are inconsistent); reported by the Server with MsgTypeUnknown.
	OutcomeUndecodable = "undecodable"
	// OutcomeUntrustedRelay: a Relay-forward from a source that is none of
	// the interface's Config.TrustedRelays (a guest speaking for another
	// one); nothing was sent and no binding was looked up.
	OutcomeUntrustedRelay = "untrustedrelay"
	// OutcomeNoBinding: no candidate MAC of the client maps to a binding on
	// this node; nothing was sent.
	OutcomeNoBinding = "nobinding"
	// OutcomeError: the handler could not build an answer (bad Config).
	OutcomeError = "error"
	// OutcomePanic: the Server recovered a panic while handling the message.
	OutcomePanic = "panic"
)

// Message type labels reported to the Observer: the RFC 8415 names in lower
// case, the inner message's for a relayed one.
const (
	MsgTypeSolicit            = "solicit"
	MsgTypeAdvertise          = "advertise"
	MsgTypeRequest            = "request"
	MsgTypeConfirm            = "confirm"
	MsgTypeRenew              = "renew"
	MsgTypeRebind             = "rebind"
	MsgTypeReply              = "reply"
	MsgTypeRelease            = "release"
	MsgTypeDecline            = "decline"
	MsgTypeReconfigure        = "reconfigure"
	MsgTypeInformationRequest = "information-request"
	MsgTypeRelayForward       = "relay-forw"
	MsgTypeRelayReply         = "relay-repl"
	// MsgTypeOther is any other message type.
	MsgTypeOther = "other"
	// MsgTypeUnknown is used when the message could not be decoded at all.
	MsgTypeUnknown = "unknown"
)

// infinity is the all-ones lifetime of RFC 8415 §7.7.
const infinity = time.Duration(math.MaxUint32) * time.Second

// Config configures a Handler.
type Config struct {
	// ServerDUID identifies this server (Server Identifier option). Use a
	// DUID-LL or DUID-LLT; DUIDFromMAC builds a DUID-LL. Required.
	ServerDUID dhcpv6.DUID

	// PreferredLifetime and ValidLifetime of the address and the prefix.
	// Zero values default: both zero gives the dhcpv6 keys' defaults
	// (config.DefaultPreferredLifetime and config.DefaultValidLifetime); one zero gives valid = 2 x preferred, or
	// preferred = valid / 2. Values at or above 2^32-1 s mean infinity.
	PreferredLifetime, ValidLifetime time.Duration

	// T1 and T2 of every IA_NA and IA_PD; 0 means 0.5 and 0.8 of the
	// preferred lifetime.
	T1, T2 time.Duration

	// Preference, when non-zero, is sent in a Preference option in every
	// Advertise; 255 makes the client request at once instead of waiting a
	// second for other servers (RFC 8415 §18.2.9).
	Preference uint8

	// TrustedRelays are the relay agents whose Relay-forward messages are
	// answered; a Relay-forward from any other source is dropped unread.
	// Empty (the default): no Relay-forward is answered. A guest can put
	// anything in a Relay-forward, so only a relay the operator named may
	// speak for other clients.
	TrustedRelays []Relay
}

// Relay identifies a trusted DHCPv6 relay agent on the Handler's interface.
type Relay struct {
	// MAC is the link-layer source of the relay's frames: what a bridge
	// port's MAC-spoofing check ties to one sender. Required.
	MAC net.HardwareAddr
	// Address, when valid, is the IPv6 source address the relay's messages
	// must also come from; the zero Addr accepts any.
	Address netip.Addr
	// Ifname, in a Binding's TrustedRelays, is the interface the relay is
	// trusted on; "" is any. A Config's relays are its interface's.
	Ifname string
}

// DUIDFromMAC returns a DUID-LL (RFC 8415 §11.4) for an Ethernet MAC, suitable
// for Config.ServerDUID.
func DUIDFromMAC(mac net.HardwareAddr) dhcpv6.DUID {
	return &dhcpv6.DUIDLL{
		HWType:        iana.HWTypeEthernet,
		LinkLayerAddr: bytes.Clone(mac),
	}
}

// lifetimes is the validated, defaulted form of a Config.
type lifetimes struct {
	preferred, valid, t1, t2 time.Duration
}

// Validate reports whether c can configure a Handler, after defaults.
func (c Config) Validate() error {
	_, _, err := c.normalize()
	return err
}

func (c Config) normalize() (serverID []byte, lt lifetimes, err error) {
	serverID, err = duidBytes(c.ServerDUID)
	if err != nil {
		return nil, lt, fmt.Errorf("dhcp6: ServerDUID: %w", err)
	}
	if lt, err = c.lifetimes(); err != nil {
		return nil, lt, err
	}
	for i, r := range c.TrustedRelays {
		if len(r.MAC) == 0 || len(r.MAC) > maxMACLen {
			return nil, lt, fmt.Errorf("dhcp6: TrustedRelays[%d].MAC %q is not a link-layer address", i, r.MAC)
		}
		if r.Address.IsValid() && !r.Address.Unmap().Is6() {
			return nil, lt, fmt.Errorf("dhcp6: TrustedRelays[%d].Address %s is not an IPv6 address", i, r.Address)
		}
	}
	return serverID, lt, nil
}

// lifetimes validates and defaults c's lifetimes, T1 and T2.
func (c Config) lifetimes() (lt lifetimes, err error) {
	for _, f := range []struct {
		name string
		d    time.Duration
	}{
		{"PreferredLifetime", c.PreferredLifetime}, {"ValidLifetime", c.ValidLifetime},
		{"T1", c.T1}, {"T2", c.T2},
	} {
		if f.d < 0 {
			return lt, fmt.Errorf("dhcp6: %s is negative (%v)", f.name, f.d)
		}
	}
	lt = lifetimes{preferred: clampLifetime(c.PreferredLifetime), valid: clampLifetime(c.ValidLifetime)}
	switch {
	case lt.preferred == 0 && lt.valid == 0:
		lt.preferred, lt.valid = config.DefaultPreferredLifetime, config.DefaultValidLifetime
	case lt.valid == 0:
		lt.valid = clampLifetime(2 * lt.preferred)
	case lt.preferred == 0:
		lt.preferred = lt.valid / 2
	}
	if lt.preferred < time.Second {
		return lt, fmt.Errorf("dhcp6: PreferredLifetime %v is under one second", lt.preferred)
	}
	if lt.preferred > lt.valid {
		// RFC 8415 §21.6: a client discards an address whose preferred
		// lifetime exceeds its valid lifetime.
		return lt, fmt.Errorf("dhcp6: PreferredLifetime %v exceeds ValidLifetime %v", lt.preferred, lt.valid)
	}
	lt.t1, lt.t2 = clampLifetime(c.T1), clampLifetime(c.T2)
	if lt.t1 == 0 {
		lt.t1 = lt.preferred / 2
	}
	if lt.t2 == 0 {
		lt.t2 = lt.preferred * 4 / 5
	}
	if lt.t1 > lt.t2 {
		// RFC 8415 §21.4: a client discards an IA_NA with T1 > T2.
		return lt, fmt.Errorf("dhcp6: T1 %v exceeds T2 %v", lt.t1, lt.t2)
	}
	return lt, nil
}

func clampLifetime(d time.Duration) time.Duration {
	if d >= infinity {
		return infinity
	}
	return d
}

// duidBytes returns the wire form of a DUID, checking it is one a client can
// echo: RFC 8415 §11.1 allows at most 128 octets after the type.
func duidBytes(d dhcpv6.DUID) (b []byte, err error) {
	if isNil(d) {
		return nil, errors.New("missing")
	}
	b, err = safeBytes(d)
	if err != nil {
		return nil, err
	}
	if len(b) < 3 || len(b) > 2+128 {
		return nil, fmt.Errorf("length %d out of range", len(b))
	}
	if _, err := dhcpv6.DUIDFromBytes(b); err != nil {
		return nil, err
	}
	return b, nil
}

// isNil reports whether v is nil or a nil pointer of the types this package
// may be handed.
func isNil(v any) bool {
	switch v := v.(type) {
	case nil:
		return true
	case *dhcpv6.Message:
		return v == nil
	case *dhcpv6.RelayMessage:
		return v == nil
	case *dhcpv6.DUIDLL:
		return v == nil
	case *dhcpv6.DUIDLLT:
		return v == nil
	case *dhcpv6.DUIDEN:
		return v == nil
	case *dhcpv6.DUIDUUID:
		return v == nil
	case *dhcpv6.DUIDOpaque:
		return v == nil
	}
	return false
}

// safeBytes marshals v, turning a panic of the library's marshaller (which
// dereferences nil fields of hand-built values) into an error.
func safeBytes(v interface{ ToBytes() []byte }) (b []byte, err error) {
	defer func() {
		if r := recover(); r != nil {
			b, err = nil, fmt.Errorf("cannot marshal %T: %v", v, r)
		}
	}()
	return v.ToBytes(), nil
}
