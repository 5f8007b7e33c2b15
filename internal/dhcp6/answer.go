package dhcp6

import (
	"net"
	"net/netip"
	"slices"

	"github.com/insomniacslk/dhcp/dhcpv6"
	"github.com/insomniacslk/dhcp/iana"
)

// iaMode says how the leases of the IAs in a message are answered.
type iaMode int

const (
	// assign (Solicit, Request): the binding's lease, else NoAddrsAvail /
	// NoPrefixAvail in the IA (RFC 8415 §18.3.1, §18.3.2, §18.3.9).
	assign iaMode = iota
	// renew: the binding's lease plus, at lifetimes 0, every lease the
	// client sent that is not the binding's; NoBinding in the IA when the
	// binding has no lease of the IA's kind (§18.3.4).
	renew
	// rebind: as renew, except that when the binding has no lease of the
	// IA's kind the leases the client sent are returned at lifetimes 0
	// (§18.3.5); NoBinding if it sent none.
	rebind
)

// answer builds the reply to a validated request from a known client: nil
// with an outcome and a reason when nothing must be sent. leased says the
// reply gives an IA a lease with non-zero lifetimes.
func (h *Handler) answer(req *request, l lease) (reply *dhcpv6.Message, outcome, reason string, leased bool) {
	m := req.msg
	switch m.MessageType {
	case dhcpv6.MessageTypeSolicit:
		if m.GetOneOption(dhcpv6.OptionRapidCommit) != nil {
			// §18.3.1: commit at once and Reply, with Rapid Commit.
			reply = h.newMessage(dhcpv6.MessageTypeReply, req)
			reply.AddOption(&dhcpv6.OptionGeneric{OptionCode: dhcpv6.OptionRapidCommit})
			leased = h.addIAs(reply, m, l, assign)
			return reply, OutcomeReply, "", leased
		}
		reply = h.newMessage(dhcpv6.MessageTypeAdvertise, req)
		if leased = h.addIAs(reply, m, l, assign); !leased {
			// §18.3.9: nothing to offer in any IA. The per-IA statuses stay
			// too, as dnsmasq does; a client ignores such an Advertise
			// either way (§18.2.9).
			reply.AddOption(status(iana.StatusNoAddrsAvail, "no addresses or prefixes available"))
		}
		if h.pref != 0 {
			reply.AddOption(dhcpv6.OptPreference(h.pref))
		}
		return reply, OutcomeAdvertise, "", leased

	case dhcpv6.MessageTypeRequest:
		reply = h.newMessage(dhcpv6.MessageTypeReply, req)
		leased = h.addIAs(reply, m, l, assign)
		return reply, OutcomeReply, "", leased

	case dhcpv6.MessageTypeRenew:
		reply = h.newMessage(dhcpv6.MessageTypeReply, req)
		leased = h.addIAs(reply, m, l, renew)
		return reply, OutcomeReply, "", leased

	case dhcpv6.MessageTypeRebind:
		reply = h.newMessage(dhcpv6.MessageTypeReply, req)
		leased = h.addIAs(reply, m, l, rebind)
		return reply, OutcomeReply, "", leased

	case dhcpv6.MessageTypeRelease, dhcpv6.MessageTypeDecline:
		// §18.3.7, §18.3.8: Success, and NoBinding in each IA the server
		// has no lease for. Nothing is released or marked: the binding
		// belongs to the claim, not to this exchange.
		reply = h.newMessage(dhcpv6.MessageTypeReply, req)
		for _, ia := range m.Options.IANA() {
			if !l.addr.IsValid() {
				reply.AddOption(&dhcpv6.OptIANA{IaId: ia.IaId, Options: dhcpv6.IdentityOptions{Options: dhcpv6.Options{
					status(iana.StatusNoBinding, "no address bound to this IA"),
				}}})
			}
		}
		for _, ia := range m.Options.IAPD() {
			if !l.prefix.IsValid() {
				reply.AddOption(&dhcpv6.OptIAPD{IaId: ia.IaId, Options: dhcpv6.PDOptions{Options: dhcpv6.Options{
					status(iana.StatusNoBinding, "no prefix bound to this IA"),
				}}})
			}
		}
		if m.MessageType == dhcpv6.MessageTypeDecline {
			reply.AddOption(status(iana.StatusSuccess, "decline noted"))
			return reply, OutcomeDeclined, "", false
		}
		reply.AddOption(status(iana.StatusSuccess, "release noted"))
		return reply, OutcomeReply, "", false

	case dhcpv6.MessageTypeConfirm:
		// §18.3.3: Success when every address is appropriate for the link,
		// which for tenure means: it is the binding's address. No
		// addresses: no reply.
		var addrs []netip.Addr
		for _, ia := range m.Options.IANA() {
			addrs = appendAddrs(addrs, ia.Options.Addresses())
		}
		for _, ia := range m.Options.IATA() {
			addrs = appendAddrs(addrs, ia.Options.Addresses())
		}
		if len(addrs) == 0 {
			return nil, OutcomeIgnored, "Confirm without addresses", false
		}
		code, text := iana.StatusSuccess, "all addresses on link"
		for _, a := range addrs {
			if !l.addr.IsValid() || a != l.addr {
				code, text = iana.StatusNotOnLink, "address "+a.String()+" is not on link"
				break
			}
		}
		reply = h.newMessage(dhcpv6.MessageTypeReply, req)
		reply.AddOption(status(code, text))
		return reply, OutcomeReply, "", false

	case dhcpv6.MessageTypeInformationRequest:
		// §18.3.6: no IAs; this server has no other configuration to give.
		return h.newMessage(dhcpv6.MessageTypeReply, req), OutcomeReply, "", false
	}
	return nil, OutcomeIgnored, m.MessageType.String() + " is not answered by this server", false
}

// newMessage starts a reply: same transaction, Client Identifier echoed
// (when the client sent one), our Server Identifier (§18.3.10).
func (h *Handler) newMessage(typ dhcpv6.MessageType, req *request) *dhcpv6.Message {
	m := &dhcpv6.Message{MessageType: typ, TransactionID: req.msg.TransactionID}
	if req.cid != nil {
		m.AddOption(dhcpv6.OptClientID(req.cid))
	}
	// A fresh DUID per reply: nothing the caller does to a reply reaches the
	// Handler. The bytes were checked by NewHandler.
	sid, _ := dhcpv6.DUIDFromBytes(h.serverID)
	m.AddOption(dhcpv6.OptServerID(sid))
	return m
}

// addIAs answers every IA_NA, IA_TA and IA_PD of req into reply, IAIDs
// echoed, in the order the client sent each kind. It reports whether any IA
// got a lease with non-zero lifetimes.
//
// A client has one address and one prefix (its claim's), so one IA_NA gets
// the address and one IA_PD the prefix (RFC 8415 §18.3: the others are
// answered as IAs the server has nothing for, e.g. NoAddrsAvail or
// NoPrefixAvail inside the IA in Solicit and Request). The one is the first
// IA that already lists the lease, else the first IA of its kind in the
// message, so a client renewing its IAs in another order keeps its lease in
// the same IA.
func (h *Handler) addIAs(reply, req *dhcpv6.Message, l lease, mode iaMode) bool {
	leased := false
	nas := req.Options.IANA()
	holder := slices.IndexFunc(nas, func(ia *dhcpv6.OptIANA) bool {
		return l.addr.IsValid() && containsAddr(appendAddrs(nil, ia.Options.Addresses()), l.addr)
	})
	for i, ia := range nas {
		il := lease{addr: l.addr, lt: l.lt}
		if i != max(holder, 0) {
			il = lease{lt: l.lt}
		}
		out, ok := h.answerNA(ia, il, mode)
		reply.AddOption(out)
		leased = leased || ok
	}
	if mode == assign {
		// Temporary addresses are not offered (§21.5). Renew and Rebind do
		// not carry IA_TAs.
		for _, ia := range req.Options.IATA() {
			reply.AddOption(&dhcpv6.OptIATA{IaId: ia.IaId, Options: dhcpv6.IdentityOptions{Options: dhcpv6.Options{
				status(iana.StatusNoAddrsAvail, "temporary addresses are not offered"),
			}}})
		}
	}
	pds := req.Options.IAPD()
	holder = slices.IndexFunc(pds, func(ia *dhcpv6.OptIAPD) bool {
		return l.prefix.IsValid() && slices.Contains(appendPrefixes(nil, ia.Options.Prefixes()), l.prefix)
	})
	for i, ia := range pds {
		il := lease{prefix: l.prefix, lt: l.lt}
		if i != max(holder, 0) {
			il = lease{lt: l.lt}
		}
		out, ok := h.answerPD(ia, il, mode)
		reply.AddOption(out)
		leased = leased || ok
	}
	return leased
}

func (h *Handler) answerNA(in *dhcpv6.OptIANA, l lease, mode iaMode) (*dhcpv6.OptIANA, bool) {
	out := &dhcpv6.OptIANA{IaId: in.IaId}
	sent := appendAddrs(nil, in.Options.Addresses())
	if l.addr.IsValid() {
		out.T1, out.T2 = l.lt.t1, l.lt.t2
		out.Options.Add(&dhcpv6.OptIAAddress{
			IPv6Addr:          net.IP(l.addr.AsSlice()),
			PreferredLifetime: l.lt.preferred,
			ValidLifetime:     l.lt.valid,
		})
		if mode != assign {
			for _, a := range sent {
				if a != l.addr {
					out.Options.Add(&dhcpv6.OptIAAddress{IPv6Addr: net.IP(a.AsSlice())})
				}
			}
		}
		return out, true
	}
	switch {
	case mode == assign:
		out.Options.Add(status(iana.StatusNoAddrsAvail, "no address available for this client"))
	case mode == rebind && len(sent) > 0:
		for _, a := range sent {
			out.Options.Add(&dhcpv6.OptIAAddress{IPv6Addr: net.IP(a.AsSlice())})
		}
	default:
		out.Options.Add(status(iana.StatusNoBinding, "no address bound to this IA"))
	}
	return out, false
}

func (h *Handler) answerPD(in *dhcpv6.OptIAPD, l lease, mode iaMode) (*dhcpv6.OptIAPD, bool) {
	out := &dhcpv6.OptIAPD{IaId: in.IaId}
	sent := appendPrefixes(nil, in.Options.Prefixes())
	if l.prefix.IsValid() {
		out.T1, out.T2 = l.lt.t1, l.lt.t2
		out.Options.Add(&dhcpv6.OptIAPrefix{
			PreferredLifetime: l.lt.preferred,
			ValidLifetime:     l.lt.valid,
			Prefix:            ipNet(l.prefix),
		})
		if mode != assign {
			for _, p := range sent {
				if p != l.prefix {
					out.Options.Add(&dhcpv6.OptIAPrefix{Prefix: ipNet(p)})
				}
			}
		}
		return out, true
	}
	switch {
	case mode == assign:
		out.Options.Add(status(iana.StatusNoPrefixAvail, "no prefix available for this client"))
	case mode == rebind && len(sent) > 0:
		for _, p := range sent {
			out.Options.Add(&dhcpv6.OptIAPrefix{Prefix: ipNet(p)})
		}
	default:
		out.Options.Add(status(iana.StatusNoBinding, "no prefix bound to this IA"))
	}
	return out, false
}

func status(code iana.StatusCode, msg string) *dhcpv6.OptStatusCode {
	return &dhcpv6.OptStatusCode{StatusCode: code, StatusMessage: msg}
}

// appendAddrs appends the distinct, specified unicast addresses of opts.
func appendAddrs(dst []netip.Addr, opts []*dhcpv6.OptIAAddress) []netip.Addr {
	for _, o := range opts {
		a, ok := netip.AddrFromSlice(o.IPv6Addr)
		if !ok || !a.Is6() || a.IsUnspecified() || a.IsMulticast() {
			continue
		}
		if !containsAddr(dst, a) {
			dst = append(dst, a)
		}
	}
	return dst
}

func containsAddr(s []netip.Addr, a netip.Addr) bool {
	for _, x := range s {
		if x == a {
			return true
		}
	}
	return false
}

// appendPrefixes appends the distinct, well-formed prefixes of opts, masked.
func appendPrefixes(dst []netip.Prefix, opts []*dhcpv6.OptIAPrefix) []netip.Prefix {
	for _, o := range opts {
		if o.Prefix == nil {
			continue
		}
		a, ok := netip.AddrFromSlice(o.Prefix.IP)
		ones, bits := o.Prefix.Mask.Size()
		if !ok || !a.Is6() || bits != 128 || ones == 0 {
			continue
		}
		p := netip.PrefixFrom(a, ones).Masked()
		found := false
		for _, x := range dst {
			found = found || x == p
		}
		if !found {
			dst = append(dst, p)
		}
	}
	return dst
}

func ipNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: net.IP(p.Addr().AsSlice()), Mask: net.CIDRMask(p.Bits(), 128)}
}
