package dhcp6

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"

	"github.com/insomniacslk/dhcp/dhcpv6"
	"github.com/insomniacslk/dhcp/dhcpv6/server6"
	"github.com/mdlayher/packet"
	"golang.org/x/net/bpf"
	"golang.org/x/net/ipv6"
	"golang.org/x/sys/unix"
)

// Server serves a Handler on one network interface.
//
// It reads the clients' messages from a packet socket, which gives the
// Ethernet source address of every frame (Source.MAC), and sends the replies
// from a UDP socket on [::]:547 of the interface. See the package
// documentation.
type Server struct {
	ifname string
	h      *Handler
	conn   net.PacketConn // UDP: sends the replies; reads the messages when frames is nil
	frames net.PacketConn // packet socket (SOCK_DGRAM, ETH_P_IPV6) reading the clients' frames; nil in UDP-only mode
	log    *slog.Logger

	closed    atomic.Bool
	closeOnce sync.Once
	closeErr  error
}

// ServerOption configures a Server.
type ServerOption func(*Server)

// WithLogger makes the Server log every decision at debug level (message
// type, outcome, binding key, reason, peer) and failures to send at warning
// level. The default discards.
func WithLogger(l *slog.Logger) ServerOption {
	return func(s *Server) {
		if l != nil {
			s.log = l
		}
	}
}

// NewServer serves h on interface ifname. It opens
//
//   - a UDP socket on [::]:547 bound to the interface (SO_BINDTODEVICE, so
//     Servers on other interfaces of the same network namespace don't
//     conflict), joined to ff02::1:2 (All_DHCP_Relay_Agents_and_Servers) so
//     the interface accepts the clients' multicast, and filtered to receive
//     nothing: it only sends the replies;
//   - a packet socket on the interface with a BPF filter that passes only
//     IPv6 UDP datagrams to port 547 addressed to this host (not frames
//     seen in promiscuous mode, not frames this host sends), which is where
//     the messages are read, with the link-layer source of each frame.
//
// It needs CAP_NET_BIND_SERVICE and CAP_NET_RAW.
func NewServer(ifname string, h *Handler, opts ...ServerOption) (*Server, error) {
	if ifname == "" {
		return nil, errors.New("dhcp6: NewServer needs an interface name")
	}
	if h == nil {
		return nil, errors.New("dhcp6: NewServer needs a Handler")
	}
	if h.err != nil {
		return nil, h.err
	}
	iface, err := net.InterfaceByName(ifname)
	if err != nil {
		return nil, fmt.Errorf("dhcp6: %w", err)
	}
	conn, err := server6.NewIPv6UDPConn(ifname, &net.UDPAddr{IP: net.IPv6unspecified, Port: dhcpv6.DefaultServerPort})
	if err != nil {
		return nil, fmt.Errorf("dhcp6: listening on %s: %w", ifname, err)
	}
	pc := ipv6.NewPacketConn(conn)
	group := &net.UDPAddr{IP: dhcpv6.AllDHCPRelayAgentsAndServers}
	if err := pc.JoinGroup(iface, group); err != nil {
		conn.Close()
		return nil, fmt.Errorf("dhcp6: joining %s on %s: %w", group.IP, ifname, err)
	}
	if err := pc.SetBPF(dropAll); err != nil {
		conn.Close()
		return nil, fmt.Errorf("dhcp6: filtering the UDP socket on %s: %w", ifname, err)
	}
	frames, err := packet.Listen(iface, packet.Datagram, unix.ETH_P_IPV6, &packet.Config{Filter: clientFrames})
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("dhcp6: packet socket on %s: %w", ifname, err)
	}
	s, err := newServer(ifname, h, conn, opts...)
	if err != nil {
		frames.Close()
		return nil, err
	}
	s.frames = frames
	return s, nil
}

// dropAll makes a socket queue nothing.
var dropAll = mustAssemble([]bpf.Instruction{bpf.RetConstant{Val: 0}})

// clientFrames passes, on a SOCK_DGRAM packet socket of protocol ETH_P_IPV6
// (offset 0 is the IPv6 header), the IPv6 packets whose next header is UDP
// and whose UDP destination port is 547, received for this host: frames to
// other hosts (PACKET_OTHERHOST, seen when the interface is promiscuous) and
// frames this host sends (PACKET_OUTGOING) are dropped.
var clientFrames = mustAssemble([]bpf.Instruction{
	bpf.LoadExtension{Num: bpf.ExtType},
	bpf.JumpIf{Cond: bpf.JumpEqual, Val: unix.PACKET_OTHERHOST, SkipTrue: 7},
	bpf.JumpIf{Cond: bpf.JumpEqual, Val: unix.PACKET_OUTGOING, SkipTrue: 6},
	bpf.LoadAbsolute{Off: 0, Size: 1},
	bpf.JumpIf{Cond: bpf.JumpBitsNotSet, Val: 0x60, SkipTrue: 4}, // version 6 (checked again when parsed)
	bpf.LoadAbsolute{Off: 6, Size: 1},
	bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: unix.IPPROTO_UDP, SkipTrue: 2},
	bpf.LoadAbsolute{Off: ipv6.HeaderLen + 2, Size: 2},
	bpf.JumpIf{Cond: bpf.JumpEqual, Val: dhcpv6.DefaultServerPort, SkipTrue: 1},
	bpf.RetConstant{Val: 0},
	bpf.RetConstant{Val: 1 << 16},
})

func mustAssemble(prog []bpf.Instruction) []bpf.RawInstruction {
	raw, err := bpf.Assemble(prog)
	if err != nil {
		panic(err)
	}
	return raw
}

// newServer serves h on an open UDP socket, which it both reads and answers
// on (no link-layer source is known); ifname is what Lookup is told.
func newServer(ifname string, h *Handler, conn net.PacketConn, opts ...ServerOption) (*Server, error) {
	if h == nil || h.err != nil {
		conn.Close()
		if h == nil {
			return nil, errors.New("dhcp6: nil Handler")
		}
		return nil, h.err
	}
	s := &Server{ifname: ifname, h: h, conn: conn, log: slog.New(slog.DiscardHandler)}
	for _, o := range opts {
		o(s)
	}
	return s, nil
}

// Serve answers messages, one at a time, until Close, then returns nil; it
// returns an error if reading fails otherwise (the sockets are then closed).
// Call Serve once.
func (s *Server) Serve() error {
	read := s.readUDP
	if s.frames != nil {
		read = s.readFrame
	}
	buf := make([]byte, 1<<16)
	var err error
	for err == nil {
		var (
			payload []byte
			peer    *net.UDPAddr
			mac     net.HardwareAddr
		)
		if payload, peer, mac, err = read(buf); err == nil && peer != nil {
			s.handle(payload, peer, mac)
		}
	}
	if s.closed.Load() || errors.Is(err, net.ErrClosed) {
		return nil
	}
	_ = s.Close()
	return err
}

// readFrame reads one client frame from the packet socket: the UDP payload,
// its source, and the frame's link-layer source. A frame whose IPv6 or UDP
// header does not hold together is counted as undecodable and gives a nil
// peer.
func (s *Server) readFrame(buf []byte) ([]byte, *net.UDPAddr, net.HardwareAddr, error) {
	n, from, err := s.frames.ReadFrom(buf)
	if err != nil {
		return nil, nil, nil, err
	}
	var mac net.HardwareAddr
	if a, ok := from.(*packet.Addr); ok && len(a.HardwareAddr) > 0 {
		mac = bytes.Clone(a.HardwareAddr)
	}
	peer, payload, err := parseUDP6(buf[:n])
	if err != nil {
		s.undecodable(err, mac, nil)
		return nil, nil, nil, nil
	}
	return payload, peer, mac, nil
}

// readUDP reads one datagram from the UDP socket (UDP-only mode: no
// link-layer source).
func (s *Server) readUDP(buf []byte) ([]byte, *net.UDPAddr, net.HardwareAddr, error) {
	n, from, err := s.conn.ReadFrom(buf)
	if err != nil {
		return nil, nil, nil, err
	}
	peer, _ := from.(*net.UDPAddr)
	return buf[:n], peer, nil, nil
}

// parseUDP6 returns the UDP source and payload of an IPv6 packet that the
// packet socket's filter passed. Extension headers are not followed (the
// filter already wants UDP as the first next header).
func parseUDP6(b []byte) (*net.UDPAddr, []byte, error) {
	h, err := ipv6.ParseHeader(b)
	if err != nil {
		return nil, nil, err
	}
	if h.Version != ipv6.Version || h.NextHeader != unix.IPPROTO_UDP {
		return nil, nil, fmt.Errorf("IPv%d packet with next header %d", h.Version, h.NextHeader)
	}
	end := ipv6.HeaderLen + h.PayloadLen
	if end > len(b) || h.PayloadLen < 8 {
		return nil, nil, fmt.Errorf("IPv6 payload length %d in a %d-byte packet", h.PayloadLen, len(b))
	}
	udp := b[ipv6.HeaderLen:end]
	ulen := int(binary.BigEndian.Uint16(udp[4:6]))
	if ulen < 8 || ulen > len(udp) {
		return nil, nil, fmt.Errorf("UDP length %d in a %d-byte payload", ulen, len(udp))
	}
	return &net.UDPAddr{IP: h.Src, Port: int(binary.BigEndian.Uint16(udp[0:2]))}, udp[8:ulen], nil
}

// Close stops Serve and closes the sockets. It may be called more than once
// and before Serve.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		s.closed.Store(true)
		for _, c := range []net.PacketConn{s.conn, s.frames} {
			if c == nil {
				continue
			}
			if err := c.Close(); err != nil && !errors.Is(err, net.ErrClosed) && s.closeErr == nil {
				s.closeErr = err
			}
		}
	})
	return s.closeErr
}

// LocalAddr is the address the Server answers from.
func (s *Server) LocalAddr() net.Addr { return s.conn.LocalAddr() }

// undecodable counts and logs a packet that is no DHCPv6 message at all.
func (s *Server) undecodable(err error, mac net.HardwareAddr, peer *net.UDPAddr) {
	if s.h.observer != nil {
		s.h.observer.Observe(MsgTypeUnknown, OutcomeUndecodable)
	}
	s.log.Debug("dhcp6: undecodable packet", "ifname", s.ifname, "mac", mac, "peer", peer, "err", err)
}

// handle answers one UDP payload from peer; mac is the frame's link-layer
// source, nil when unknown.
func (s *Server) handle(payload []byte, peer *net.UDPAddr, mac net.HardwareAddr) {
	defer func() {
		// A panic here would end the agent.
		if p := recover(); p != nil {
			if s.h.observer != nil {
				s.h.observer.Observe(MsgTypeUnknown, OutcomePanic)
			}
			s.log.Error("dhcp6: panic handling a message", "ifname", s.ifname, "peer", peer, "panic", p)
		}
	}()
	m, err := dhcpv6.FromBytes(payload)
	if err != nil {
		s.undecodable(err, mac, peer)
		return
	}
	src := Source{Ifname: s.ifname, MAC: mac}
	if a, ok := netip.AddrFromSlice(peer.IP); ok {
		src.Peer = a.Unmap()
	}
	r := s.h.HandleFrom(m, src)
	if s.log.Enabled(context.Background(), slog.LevelDebug) {
		s.log.Debug("dhcp6: message handled", "ifname", s.ifname, "peer", peer, "mac", mac,
			"type", r.MsgType, "outcome", r.Outcome, "key", r.Key, "reason", r.Reason)
	}
	if r.Reply == nil {
		return
	}
	to := &net.UDPAddr{IP: peer.IP, Port: peer.Port, Zone: peer.Zone}
	if s.frames != nil && src.Peer.IsLinkLocalUnicast() {
		to.Zone = s.ifname
	}
	b, err := safeBytes(r.Reply)
	if err == nil {
		_, err = s.conn.WriteTo(b, to)
	}
	if err != nil && !s.closed.Load() {
		s.log.Warn("dhcp6: sending reply", "ifname", s.ifname, "peer", to, "type", r.MsgType, "key", r.Key, "err", err)
	}
}
