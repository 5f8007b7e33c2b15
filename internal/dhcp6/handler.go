package dhcp6

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/insomniacslk/dhcp/dhcpv6"
)

// Limits on what one message may carry; a message over them is dropped as
// malformed. Real clients send one or two IAs with one lease each, and the
// limits keep a forged message from making a reply many times its size.
const (
	maxRelayDepth  = 32 // RFC 8415 §7.6 HOP_COUNT_LIMIT is 8
	maxIAs         = 16 // IA_NA + IA_TA + IA_PD options in one message
	maxLeasesPerIA = 16 // IA Address or IA Prefix options in one IA
	maxMACLen      = 20 // longest link-layer address (InfiniBand)
	maxMessageSize = 64 << 10
)

// ErrMalformed is wrapped by the error Handle returns for a message that
// cannot be decoded or fails RFC 8415 §16 validation.
var ErrMalformed = errors.New("dhcp6: malformed message")

// Handler answers DHCPv6 client messages from the bindings a Lookup returns.
// It holds no lease state and is safe for concurrent use.
type Handler struct {
	lookup   Lookup
	observer Observer
	serverID []byte // wire form of Config.ServerDUID
	lt       lifetimes
	pref     uint8
	relays   []Relay
	err      error // configuration error, returned for every message
}

// NewHandler returns a Handler answering from lookup. metrics may be nil. A
// Config that fails Validate, or a nil lookup, gives a Handler that answers
// nothing and returns the error from Err and from every Handle.
func NewHandler(cfg Config, lookup Lookup, metrics Observer) *Handler {
	h := &Handler{lookup: lookup, observer: metrics, pref: cfg.Preference}
	h.serverID, h.lt, h.err = cfg.normalize()
	for _, r := range cfg.TrustedRelays {
		h.relays = append(h.relays, Relay{MAC: bytes.Clone(r.MAC), Address: r.Address.Unmap().WithZone("")})
	}
	if h.err == nil && lookup == nil {
		h.err = errors.New("dhcp6: nil Lookup")
	}
	return h
}

// Err returns the configuration error of the Handler, or nil.
func (h *Handler) Err() error { return h.err }

// Source says where a message came from.
type Source struct {
	// Ifname is the interface the message arrived on; it is passed to Lookup.
	Ifname string
	// MAC is the link-layer source address of the packet, when the caller
	// knows it (a raw socket does, a UDP socket does not); nil otherwise.
	MAC net.HardwareAddr
	// Peer is the IP source address of the packet (the zero Addr when
	// unknown). For a client on the link it is its link-local address, whose
	// EUI-64 interface identifier may give its MAC.
	Peer netip.Addr
}

// Result is the decision taken on one message.
type Result struct {
	// Reply is the message to send back to the packet's source; nil when
	// nothing must be sent. For a relayed message it is a Relay-reply.
	Reply dhcpv6.DHCPv6
	// MsgType and Outcome are what was reported to the Observer.
	MsgType, Outcome string
	// Key is the Binding's Key when a binding was found.
	Key string
	// Heard says the message placed the client behind Source.Ifname: an
	// answered Request, Renew or Rebind, with a lease, from the MAC the link
	// gives (see Heard). The Lookup was told when it implements Heard.
	Heard bool
	// Reason says, for a message that got no reply, why.
	Reason string
	// Err is set for OutcomeMalformed (wrapping ErrMalformed) and
	// OutcomeError.
	Err error
}

// Handle returns the reply to send, or nil when the message must be ignored.
// ifname is the interface the message came in on; mac is the client's
// link-layer address if known from the packet source, else nil (then the
// client's DUID-LL / DUID-LLT is used; see the package documentation for the
// full order). The error is non-nil only for a malformed message or a
// misconfigured Handler; an ignored message or an unknown client give
// (nil, nil).
//
// Handle never modifies msg: it works on a decoded copy of msg's wire form.
func (h *Handler) Handle(msg dhcpv6.DHCPv6, ifname string, mac net.HardwareAddr) (dhcpv6.DHCPv6, error) {
	r := h.HandleFrom(msg, Source{Ifname: ifname, MAC: mac})
	return r.Reply, r.Err
}

// HandleFrom is Handle with the full Source (including the peer address, for
// the EUI-64 mapping) and the full Result.
func (h *Handler) HandleFrom(msg dhcpv6.DHCPv6, src Source) Result {
	r := h.process(msg, src)
	if h.observer != nil {
		h.observer.Observe(r.MsgType, r.Outcome)
	}
	return r
}

// request is a validated client message.
type request struct {
	msg    *dhcpv6.Message
	relays []*dhcpv6.RelayMessage // outermost first
	cid    dhcpv6.DUID            // nil only for Information-request
}

func (h *Handler) process(msg dhcpv6.DHCPv6, src Source) Result {
	r := Result{MsgType: MsgTypeUnknown}
	if h.err != nil {
		r.Outcome, r.Reason, r.Err = OutcomeError, "handler misconfigured", h.err
		return r
	}
	req, drop := h.parse(msg, &r)
	if drop != nil {
		return *drop
	}
	if len(req.relays) > 0 && !h.trustedRelay(src) {
		return ignore(r, OutcomeUntrustedRelay, fmt.Sprintf("Relay-forward on %q from %v (%s), no trusted relay", src.Ifname, src.MAC, src.Peer))
	}

	macs, fromLink := candidates(req, src)
	var b Binding
	found := false
	for _, mac := range macs {
		if b, found = h.lookup.Lookup(mac, src.Ifname); found {
			break
		}
	}
	if !found {
		return ignore(r, OutcomeNoBinding, fmt.Sprintf("no binding on %q for %d candidate MAC(s)", src.Ifname, len(macs)))
	}
	r.Key = b.Key
	if len(req.relays) > 0 && b.TrustedRelays != nil && !trusts(b.TrustedRelays, src) {
		return ignore(r, OutcomeUntrustedRelay, fmt.Sprintf("Relay-forward on %q from %v (%s), not a relay binding %s trusts", src.Ifname, src.MAC, src.Peer, b.Key))
	}

	reply, outcome, reason, leased := h.answer(req, h.leaseOf(b))
	if reply == nil {
		return ignore(r, outcome, reason)
	}
	r.Reply, r.Outcome = wrapRelays(reply, req.relays), outcome
	if leased && fromLink && placesClient(req.msg.MessageType) {
		r.Heard = true
		if hd, ok := h.lookup.(Heard); ok {
			hd.Heard(b, src.Ifname)
		}
	}
	return r
}

// placesClient reports whether an answered message of type t says where the
// client is: the exchanges that commit a lease (Request) or keep one in use
// (Renew, Rebind). A Solicit, Rapid Commit or not, and the messages that
// carry no lease are sent by anyone who wants to look.
func placesClient(t dhcpv6.MessageType) bool {
	switch t {
	case dhcpv6.MessageTypeRequest, dhcpv6.MessageTypeRenew, dhcpv6.MessageTypeRebind:
		return true
	}
	return false
}

func ignore(r Result, outcome, reason string) Result {
	r.Outcome, r.Reason = outcome, reason
	return r
}

func malformed(r Result, format string, args ...any) *Result {
	r.Outcome = OutcomeMalformed
	r.Reason = fmt.Sprintf(format, args...)
	r.Err = fmt.Errorf("%w: %s", ErrMalformed, r.Reason)
	return &r
}

func ignored(r Result, format string, args ...any) *Result {
	r = ignore(r, OutcomeIgnored, fmt.Sprintf(format, args...))
	return &r
}

// parse decodes msg into a request we own and validates it (RFC 8415 §16). A
// non-nil *Result means: drop the message, with that result.
func (h *Handler) parse(msg dhcpv6.DHCPv6, r *Result) (*request, *Result) {
	if isNil(msg) {
		return nil, malformed(*r, "nil message")
	}
	// Bound the relay nesting before marshalling, which copies every level.
	cur := msg
	for depth := 0; ; depth++ {
		rm, ok := cur.(*dhcpv6.RelayMessage)
		if !ok || rm == nil {
			break
		}
		if depth == maxRelayDepth {
			r.MsgType = MsgTypeRelayForward
			return nil, malformed(*r, "more than %d relay levels", maxRelayDepth)
		}
		cur = rm.Options.RelayMessage()
	}
	// Work on a decoded copy of the wire form: the caller's value is never
	// touched, and every option has the concrete type the library's
	// accessors assert (a hand-built message may not).
	raw, err := safeBytes(msg)
	if err != nil {
		return nil, malformed(*r, "%v", err)
	}
	if len(raw) > maxMessageSize {
		return nil, malformed(*r, "%d-byte message", len(raw))
	}
	decoded, err := dhcpv6.FromBytes(raw)
	if err != nil {
		return nil, malformed(*r, "decoding: %v", err)
	}

	req := &request{}
	cur = decoded
	for cur.IsRelay() {
		rm, ok := cur.(*dhcpv6.RelayMessage)
		if !ok {
			return nil, malformed(*r, "relay message of type %T", cur)
		}
		if rm.MessageType != dhcpv6.MessageTypeRelayForward {
			r.MsgType = typeLabel(rm.MessageType)
			return nil, ignored(*r, "%s is not for a server", rm.MessageType)
		}
		if len(req.relays) == maxRelayDepth {
			r.MsgType = MsgTypeRelayForward
			return nil, malformed(*r, "more than %d relay levels", maxRelayDepth)
		}
		req.relays = append(req.relays, rm)
		if cur = rm.Options.RelayMessage(); cur == nil {
			r.MsgType = MsgTypeRelayForward
			return nil, malformed(*r, "Relay-forward without a Relay Message option")
		}
	}
	m, ok := cur.(*dhcpv6.Message)
	if !ok || m == nil {
		return nil, malformed(*r, "message of type %T", cur)
	}
	req.msg = m
	r.MsgType = typeLabel(m.MessageType)

	typ := m.MessageType
	switch typ {
	case dhcpv6.MessageTypeSolicit, dhcpv6.MessageTypeRequest, dhcpv6.MessageTypeConfirm,
		dhcpv6.MessageTypeRenew, dhcpv6.MessageTypeRebind, dhcpv6.MessageTypeRelease,
		dhcpv6.MessageTypeDecline, dhcpv6.MessageTypeInformationRequest:
	default:
		return nil, ignored(*r, "%s is not answered by this server", typ)
	}

	// Client Identifier: exactly one, except in Information-request where it
	// is optional (§16.2-16.12).
	switch cids := m.Options.Get(dhcpv6.OptionClientID); {
	case len(cids) > 1:
		return nil, malformed(*r, "%d Client Identifier options", len(cids))
	case len(cids) == 1:
		req.cid = m.Options.ClientID()
		if n := len(req.cid.ToBytes()); n < 3 || n > 2+128 {
			return nil, malformed(*r, "Client Identifier of %d octets", n)
		}
	case typ != dhcpv6.MessageTypeInformationRequest:
		return nil, malformed(*r, "%s without a Client Identifier", typ)
	}

	// Server Identifier: absent from Solicit, Confirm and Rebind; ours in
	// Request, Renew, Release and Decline; ours if present in
	// Information-request.
	sids := m.Options.Get(dhcpv6.OptionServerID)
	if len(sids) > 1 {
		return nil, malformed(*r, "%d Server Identifier options", len(sids))
	}
	hasSID := len(sids) == 1
	ours := hasSID && bytes.Equal(m.Options.ServerID().ToBytes(), h.serverID)
	switch typ {
	case dhcpv6.MessageTypeSolicit, dhcpv6.MessageTypeConfirm, dhcpv6.MessageTypeRebind:
		if hasSID {
			return nil, malformed(*r, "%s with a Server Identifier", typ)
		}
	case dhcpv6.MessageTypeRequest, dhcpv6.MessageTypeRenew,
		dhcpv6.MessageTypeRelease, dhcpv6.MessageTypeDecline:
		if !hasSID {
			return nil, malformed(*r, "%s without a Server Identifier", typ)
		}
		if !ours {
			return nil, ignored(*r, "%s for another server", typ)
		}
	case dhcpv6.MessageTypeInformationRequest:
		if hasSID && !ours {
			return nil, ignored(*r, "%s for another server", typ)
		}
	}

	nIA := 0
	for _, code := range []dhcpv6.OptionCode{dhcpv6.OptionIANA, dhcpv6.OptionIATA, dhcpv6.OptionIAPD} {
		nIA += len(m.Options.Get(code))
	}
	if typ == dhcpv6.MessageTypeInformationRequest && nIA > 0 {
		return nil, malformed(*r, "%s with IA options", typ)
	}
	if nIA > maxIAs {
		return nil, malformed(*r, "%d IA options (at most %d)", nIA, maxIAs)
	}
	for _, ia := range m.Options.IANA() {
		if n := len(ia.Options.Addresses()); n > maxLeasesPerIA {
			return nil, malformed(*r, "IA_NA with %d addresses (at most %d)", n, maxLeasesPerIA)
		}
	}
	for _, ia := range m.Options.IATA() {
		if n := len(ia.Options.Addresses()); n > maxLeasesPerIA {
			return nil, malformed(*r, "IA_TA with %d addresses (at most %d)", n, maxLeasesPerIA)
		}
	}
	for _, ia := range m.Options.IAPD() {
		if n := len(ia.Options.Prefixes()); n > maxLeasesPerIA {
			return nil, malformed(*r, "IA_PD with %d prefixes (at most %d)", n, maxLeasesPerIA)
		}
	}
	return req, nil
}

// trustedRelay reports whether src is one of the configured relays: its
// frame's link-layer source is the relay's MAC, and its IP source the
// relay's address when one is configured. A source without a link-layer
// address is no relay.
func (h *Handler) trustedRelay(src Source) bool { return trusts(h.relays, src) }

// trusts reports whether src is one of relays (on its interface, for a
// relay that names one).
func trusts(relays []Relay, src Source) bool {
	if len(src.MAC) == 0 {
		return false
	}
	peer := src.Peer.Unmap().WithZone("")
	for _, r := range relays {
		if bytes.Equal(r.MAC, src.MAC) && (!r.Address.IsValid() || r.Address.Unmap().WithZone("") == peer) &&
			(r.Ifname == "" || r.Ifname == src.Ifname) {
			return true
		}
	}
	return false
}

// candidates returns the MACs to look the client up by, most trusted first,
// without duplicates (see the package documentation), and whether they are
// the link's word (the frame's source, a trusted relay's option) rather than
// the guest's.
func candidates(req *request, src Source) ([]net.HardwareAddr, bool) {
	var macs []net.HardwareAddr
	add := func(mac net.HardwareAddr) {
		if len(mac) == 0 || len(mac) > maxMACLen {
			return
		}
		for _, m := range macs {
			if bytes.Equal(m, mac) {
				return
			}
		}
		macs = append(macs, bytes.Clone(mac))
	}

	if n := len(req.relays); n > 0 {
		// A trusted relay's message (process dropped any other): the
		// innermost Relay-forward was built by the relay on the client's
		// link, and its RFC 6939 option is the link-layer source of the
		// client's frame as that relay saw it. The DUID and the
		// peer-address are the client's choice, so they name nobody.
		first := req.relays[n-1]
		_, lla := first.Options.ClientLinkLayerAddress()
		add(lla)
		return macs, true
	}
	if len(src.MAC) > 0 {
		// The frame's link-layer source is the client's MAC: what a
		// bridge port's MAC-spoofing check enforces. The DUID and the
		// link-local address, which the guest chooses freely, are only
		// a fallback where the link gives no source address.
		add(src.MAC)
		return macs, true
	}
	peer := src.Peer
	switch d := req.cid.(type) {
	case *dhcpv6.DUIDLL:
		add(d.LinkLayerAddr)
	case *dhcpv6.DUIDLLT:
		add(d.LinkLayerAddr)
	}
	if mac, ok := MACFromLinkLocal(peer); ok {
		add(mac)
	}
	return macs, false
}

// MACFromLinkLocal returns the MAC encoded in the modified EUI-64 interface
// identifier (RFC 4291 appendix A) of a link-local IPv6 address, if it has
// one.
func MACFromLinkLocal(a netip.Addr) (net.HardwareAddr, bool) {
	a = a.Unmap()
	if !a.Is6() || !a.IsLinkLocalUnicast() {
		return nil, false
	}
	b := a.As16()
	if b[11] != 0xff || b[12] != 0xfe {
		return nil, false
	}
	return net.HardwareAddr{b[8] ^ 0x02, b[9], b[10], b[13], b[14], b[15]}, true
}

// lease is the part of a Binding the server hands out, each field valid only
// if it can be served, and the lifetimes it is handed out with.
type lease struct {
	addr   netip.Addr
	prefix netip.Prefix
	lt     lifetimes
}

// leaseOf is what b is served: its lifetimes where it has its own (and they
// hold together), else the Handler's.
func (h *Handler) leaseOf(b Binding) lease {
	l := lease{lt: h.lt}
	if b.PreferredLifetime != 0 || b.ValidLifetime != 0 {
		if lt, err := (Config{PreferredLifetime: b.PreferredLifetime, ValidLifetime: b.ValidLifetime}).lifetimes(); err == nil {
			l.lt = lt
		}
	}
	if a := b.Address.WithZone(""); a.Is6() && !a.Is4In6() && !a.IsUnspecified() &&
		!a.IsMulticast() && !a.IsLoopback() {
		l.addr = a
	}
	if p := b.Prefix; p.IsValid() && p.Addr().Is6() && !p.Addr().Is4In6() && p.Bits() > 0 {
		l.prefix = p.Masked()
	}
	return l
}

// wrapRelays wraps reply in one Relay-reply per Relay-forward the request
// came through (RFC 8415 §19.3), copying hop-count, link-address,
// peer-address and Interface-Id.
func wrapRelays(reply *dhcpv6.Message, relays []*dhcpv6.RelayMessage) dhcpv6.DHCPv6 {
	var out dhcpv6.DHCPv6 = reply
	for i := len(relays) - 1; i >= 0; i-- {
		fw := relays[i]
		rr := &dhcpv6.RelayMessage{
			MessageType: dhcpv6.MessageTypeRelayReply,
			HopCount:    fw.HopCount,
			LinkAddr:    bytes.Clone(fw.LinkAddr),
			PeerAddr:    bytes.Clone(fw.PeerAddr),
		}
		if id := fw.Options.InterfaceID(); id != nil {
			rr.AddOption(dhcpv6.OptInterfaceID(bytes.Clone(id)))
		}
		rr.AddOption(dhcpv6.OptRelayMessage(out))
		out = rr
	}
	return out
}

var typeLabels = map[dhcpv6.MessageType]string{
	dhcpv6.MessageTypeSolicit:            MsgTypeSolicit,
	dhcpv6.MessageTypeAdvertise:          MsgTypeAdvertise,
	dhcpv6.MessageTypeRequest:            MsgTypeRequest,
	dhcpv6.MessageTypeConfirm:            MsgTypeConfirm,
	dhcpv6.MessageTypeRenew:              MsgTypeRenew,
	dhcpv6.MessageTypeRebind:             MsgTypeRebind,
	dhcpv6.MessageTypeReply:              MsgTypeReply,
	dhcpv6.MessageTypeRelease:            MsgTypeRelease,
	dhcpv6.MessageTypeDecline:            MsgTypeDecline,
	dhcpv6.MessageTypeReconfigure:        MsgTypeReconfigure,
	dhcpv6.MessageTypeInformationRequest: MsgTypeInformationRequest,
	dhcpv6.MessageTypeRelayForward:       MsgTypeRelayForward,
	dhcpv6.MessageTypeRelayReply:         MsgTypeRelayReply,
}

func typeLabel(t dhcpv6.MessageType) string {
	if s, ok := typeLabels[t]; ok {
		return s
	}
	return MsgTypeOther
}
