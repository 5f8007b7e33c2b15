// Package probe asks a segment whether anything answers for an address:
// for IPv4 an ARP probe (RFC 5227: sender IP 0.0.0.0, so no neighbour's
// cache learns anything), for IPv6 a Neighbor Solicitation from the
// unspecified address to the target's solicited-node group (RFC 4862
// duplicate address detection). It sends from a given interface, the
// segment's parent interface on the node (a macvlan or ipvlan master, a
// bridge), over an AF_PACKET socket, which needs CAP_NET_RAW.
//
// A host answers for an address when it sends, from a MAC other than the
// probing interface's:
//   - IPv4: any ARP packet whose sender IP is the address (a reply to the
//     probe, an announcement), or an ARP probe for it (a host probing the
//     same address at the same time, RFC 5227 section 2.1.1);
//   - IPv6: a Neighbor Advertisement for the address, or a Neighbor
//     Solicitation for it from the unspecified address (another DAD).
package probe

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/mdlayher/arp"
	"github.com/mdlayher/ethernet"
	"github.com/mdlayher/ndp"
	"github.com/mdlayher/packet"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Defaults of Prober. Three probes as RFC 5227 and 4862 send, but spaced
// by a LAN's round trip and a loaded host's reply time, not by RFC 5227's
// seconds: a probe guards an address the cluster is about to hand out,
// and the pod's start waits for it when it is not done ahead of time.
const (
	DefaultCount    = 3
	DefaultInterval = 150 * time.Millisecond
)

// Prober sends probes. The zero value probes in the caller's network
// namespace with the defaults.
type Prober struct {
	// Netns is the path of the network namespace the interfaces are in
	// ("" for the process's own).
	Netns string
	// Count probes are sent, Interval apart; an answer is waited for until
	// Interval after the last one. Total time without an answer:
	// Count*Interval.
	Count    int
	Interval time.Duration
	// HoldersOnly counts only a host that claims the address (an ARP
	// packet with it as the sender, a Neighbor Advertisement for it), not
	// another host's probe for it: a probe that asks whether an address
	// is still held, not one that is about to take it, where other nodes
	// probe the same address at the same moment.
	HoldersOnly bool
}

// Kinds of Answer that are another host's probe of the address, not a
// claim to it.
const (
	KindARPProbe        = "arp-probe"
	KindDADSolicitation = "dad-solicitation"
)

// Answer is what answered for an address.
type Answer struct {
	// MAC is the sender's hardware address.
	MAC net.HardwareAddr
	// Kind says what it sent: "arp-reply", "arp-announcement",
	// "arp-probe", "neighbor-advertisement", "dad-solicitation".
	Kind string
}

// Budget is the longest a probe without an answer takes.
func (p *Prober) Budget() time.Duration {
	c, iv := p.params()
	return time.Duration(c) * iv
}

func (p *Prober) params() (int, time.Duration) {
	c, iv := p.Count, p.Interval
	if c <= 0 {
		c = DefaultCount
	}
	if iv <= 0 {
		iv = DefaultInterval
	}
	return c, iv
}

// Probe asks the segment of interface ifName whether anything answers for
// addr: nil when nothing did within Budget, else the first answer. An
// error means the probe could not be sent or listened for (no such
// interface, no CAP_NET_RAW), so nothing is known.
func (p *Prober) Probe(ctx context.Context, ifName string, addr netip.Addr) (*Answer, error) {
	addr = addr.Unmap()
	if !addr.IsValid() || addr.IsUnspecified() {
		return nil, fmt.Errorf("probe: %v is not an address to probe", addr)
	}
	proto := unix.ETH_P_ARP
	if addr.Is6() {
		proto = unix.ETH_P_IPV6
	}
	ifi, conn, err := p.open(ifName, proto)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	if len(ifi.HardwareAddr) != 6 {
		return nil, fmt.Errorf("probe: interface %s has no Ethernet address (%v): ARP and NDP probes need one", ifName, ifi.HardwareAddr)
	}
	var frame []byte
	var dst net.HardwareAddr
	var match func(b []byte, from net.HardwareAddr) *Answer
	if addr.Is4() {
		frame, dst, match, err = arpProbe(ifi.HardwareAddr, addr)
	} else {
		frame, dst, match, err = dadProbe(ifi.HardwareAddr, addr)
	}
	if err != nil {
		return nil, err
	}
	count, interval := p.params()
	start := time.Now()
	end := start.Add(time.Duration(count) * interval)
	// A context that ends before the probe's budget cuts it short: what
	// was not heard by then is no silence, whichever of the read deadline
	// and the context's own timer fires first.
	cut := false
	if d, ok := ctx.Deadline(); ok && d.Before(end) {
		end, cut = d, true
	}
	stop := context.AfterFunc(ctx, func() { _ = conn.SetReadDeadline(time.Unix(1, 0)) })
	defer stop()

	buf := make([]byte, 1500)
	for i := range count {
		if _, err := conn.WriteTo(frame, &packet.Addr{HardwareAddr: dst}); err != nil {
			return nil, fmt.Errorf("probe: sending on %s: %w", ifName, err)
		}
		next := start.Add(time.Duration(i+1) * interval)
		if next.After(end) {
			next = end
		}
		if err := conn.SetReadDeadline(next); err != nil {
			return nil, err
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		for {
			n, from, err := conn.ReadFrom(buf)
			if err != nil {
				var ne net.Error
				if errors.As(err, &ne) && ne.Timeout() {
					if ctx.Err() != nil {
						return nil, ctx.Err()
					}
					break
				}
				return nil, fmt.Errorf("probe: reading on %s: %w", ifName, err)
			}
			var src net.HardwareAddr
			if pa, ok := from.(*packet.Addr); ok {
				src = pa.HardwareAddr
			}
			if equalMAC(src, ifi.HardwareAddr) {
				continue // our own frames, which a packet socket sees too
			}
			if a := match(buf[:n], src); a != nil && !equalMAC(a.MAC, ifi.HardwareAddr) &&
				!(p.HoldersOnly && (a.Kind == KindARPProbe || a.Kind == KindDADSolicitation)) {
				return a, nil
			}
		}
		if !time.Now().Before(end) {
			break
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if cut {
		return nil, context.DeadlineExceeded
	}
	return nil, nil
}

// open finds ifName and opens a datagram packet socket of proto on it, in
// p.Netns when set: a socket stays in the namespace it was made in.
func (p *Prober) open(ifName string, proto int) (*net.Interface, *packet.Conn, error) {
	var ifi *net.Interface
	var conn *packet.Conn
	do := func() error {
		link, err := netlink.LinkByName(ifName)
		if err != nil {
			return fmt.Errorf("probe: interface %s: %w", ifName, err)
		}
		attrs := link.Attrs()
		ifi = &net.Interface{Index: attrs.Index, Name: attrs.Name, HardwareAddr: attrs.HardwareAddr, MTU: attrs.MTU, Flags: attrs.Flags}
		conn, err = packet.Listen(ifi, packet.Datagram, proto, nil)
		if err != nil {
			return fmt.Errorf("probe: opening a packet socket on %s (needs CAP_NET_RAW): %w", ifName, err)
		}
		return nil
	}
	if err := inNetns(p.Netns, do); err != nil {
		return nil, nil, err
	}
	return ifi, conn, nil
}

// inNetns runs fn in the network namespace at path ("" for the caller's);
// a socket fn opens stays in that namespace. ns.Do runs fn on a locked
// thread of its own and discards the thread if it cannot switch back.
func inNetns(path string, fn func() error) error {
	if path == "" {
		return fn()
	}
	target, err := ns.GetNS(path)
	if err != nil {
		return fmt.Errorf("probe: network namespace %s: %w", path, err)
	}
	defer target.Close()
	return target.Do(func(ns.NetNS) error { return fn() })
}

func equalMAC(a, b net.HardwareAddr) bool {
	return len(a) == len(b) && string(a) == string(b)
}

var zero4 = netip.AddrFrom4([4]byte{})

// arpProbe builds the ARP probe for addr (RFC 5227 section 2.1.1: sender
// IP zero, target hardware address zero, broadcast) and its matcher.
func arpProbe(mac net.HardwareAddr, addr netip.Addr) ([]byte, net.HardwareAddr, func([]byte, net.HardwareAddr) *Answer, error) {
	req, err := arp.NewPacket(arp.OperationRequest, mac, zero4, ethernet.Broadcast, addr)
	if err != nil {
		return nil, nil, nil, err
	}
	req.TargetHardwareAddr = make(net.HardwareAddr, 6)
	b, err := req.MarshalBinary()
	if err != nil {
		return nil, nil, nil, err
	}
	// The ARP packet's sender hardware address is the MAC that claims the
	// address (a proxy's frame may come from another).
	match := func(b []byte, _ net.HardwareAddr) *Answer {
		var p arp.Packet
		if err := p.UnmarshalBinary(b); err != nil {
			return nil
		}
		mac := net.HardwareAddr(append([]byte(nil), p.SenderHardwareAddr...))
		switch {
		case p.SenderIP == addr && p.Operation == arp.OperationReply:
			return &Answer{MAC: mac, Kind: "arp-reply"}
		case p.SenderIP == addr:
			return &Answer{MAC: mac, Kind: "arp-announcement"}
		case p.SenderIP == zero4 && p.TargetIP == addr && p.Operation == arp.OperationRequest:
			return &Answer{MAC: mac, Kind: KindARPProbe}
		}
		return nil
	}
	return b, ethernet.Broadcast, match, nil
}

const (
	ipv6HeaderLen = 40
	icmpv6Proto   = 58
)

// dadProbe builds the Neighbor Solicitation of duplicate address
// detection for addr (RFC 4862 section 5.4.2: source ::, destination the
// solicited-node group, no source link-layer option, hop limit 255) and
// its matcher.
func dadProbe(mac net.HardwareAddr, addr netip.Addr) ([]byte, net.HardwareAddr, func([]byte, net.HardwareAddr) *Answer, error) {
	group, err := ndp.SolicitedNodeMulticast(addr)
	if err != nil {
		return nil, nil, nil, err
	}
	body, err := ndp.MarshalMessageChecksum(&ndp.NeighborSolicitation{TargetAddress: addr}, netip.IPv6Unspecified(), group)
	if err != nil {
		return nil, nil, nil, err
	}
	pkt := make([]byte, ipv6HeaderLen+len(body))
	pkt[0] = 6 << 4
	binary.BigEndian.PutUint16(pkt[4:6], uint16(len(body)))
	pkt[6] = icmpv6Proto
	pkt[7] = 255
	// source: the unspecified address (zero bytes)
	g := group.As16()
	copy(pkt[24:40], g[:])
	copy(pkt[40:], body)
	// 33:33 and the group's low 32 bits (RFC 2464 section 7).
	dst := net.HardwareAddr{0x33, 0x33, g[12], g[13], g[14], g[15]}
	match := func(b []byte, from net.HardwareAddr) *Answer {
		if len(b) < ipv6HeaderLen || b[0]>>4 != 6 || b[6] != icmpv6Proto || b[7] != 255 {
			return nil // RFC 4861 section 7.1.2: a neighbour's message has hop limit 255
		}
		n := int(binary.BigEndian.Uint16(b[4:6]))
		if ipv6HeaderLen+n > len(b) {
			return nil
		}
		src := netip.AddrFrom16([16]byte(b[8:24]))
		m, err := ndp.ParseMessage(b[ipv6HeaderLen : ipv6HeaderLen+n])
		if err != nil {
			return nil
		}
		switch m := m.(type) {
		case *ndp.NeighborAdvertisement:
			if m.TargetAddress == addr {
				mac := linkAddr(m.Options, ndp.Target)
				if mac == nil {
					mac = from
				}
				return &Answer{MAC: mac, Kind: "neighbor-advertisement"}
			}
		case *ndp.NeighborSolicitation:
			if m.TargetAddress == addr && src.IsUnspecified() {
				return &Answer{MAC: append(net.HardwareAddr(nil), from...), Kind: KindDADSolicitation}
			}
		}
		return nil
	}
	return pkt, dst, match, nil
}

// linkAddr is the link-layer address option of direction d, if present.
func linkAddr(opts []ndp.Option, d ndp.Direction) net.HardwareAddr {
	for _, o := range opts {
		if la, ok := o.(*ndp.LinkLayerAddress); ok && la.Direction == d {
			return append(net.HardwareAddr(nil), la.Addr...)
		}
	}
	return nil
}

// DefaultRouteInterface is the name of the interface of the default route
// of addr's family in the namespace at netnsPath ("" for the process's
// own): where the macvlan and ipvlan plugins attach when their config
// names no master.
func DefaultRouteInterface(netnsPath string, v6 bool) (string, error) {
	var name string
	do := func() error {
		family := netlink.FAMILY_V4
		if v6 {
			family = netlink.FAMILY_V6
		}
		routes, err := netlink.RouteListFiltered(family, &netlink.Route{Table: unix.RT_TABLE_MAIN}, netlink.RT_FILTER_TABLE)
		if err != nil {
			return fmt.Errorf("probe: listing routes: %w", err)
		}
		for _, r := range routes {
			if isDefault(r.Dst) && r.LinkIndex > 0 {
				link, err := netlink.LinkByIndex(r.LinkIndex)
				if err != nil {
					return fmt.Errorf("probe: the default route's interface: %w", err)
				}
				name = link.Attrs().Name
				return nil
			}
		}
		return fmt.Errorf("probe: no default route")
	}
	err := inNetns(netnsPath, do)
	return name, err
}

func isDefault(dst *net.IPNet) bool {
	if dst == nil {
		return true
	}
	ones, _ := dst.Mask.Size()
	return ones == 0
}
