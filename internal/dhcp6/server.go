package dhcp6

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"

	"github.com/insomniacslk/dhcp/dhcpv6"
	"github.com/insomniacslk/dhcp/dhcpv6/server6"
	"golang.org/x/net/ipv6"
)

// Server serves a Handler on one network interface.
type Server struct {
	ifname string
	h      *Handler
	conn   net.PacketConn
	srv    *server6.Server
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

// NewServer opens a UDP socket on [::]:547 bound to interface ifname
// (SO_BINDTODEVICE, so Servers on other interfaces of the same network
// namespace don't conflict: each sees only its interface's traffic), joins
// ff02::1:2 (All_DHCP_Relay_Agents_and_Servers) on it, and returns a Server
// ready to Serve. It needs CAP_NET_BIND_SERVICE and CAP_NET_RAW (for the
// device binding).
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
	group := &net.UDPAddr{IP: dhcpv6.AllDHCPRelayAgentsAndServers}
	if err := ipv6.NewPacketConn(conn).JoinGroup(iface, group); err != nil {
		conn.Close()
		return nil, fmt.Errorf("dhcp6: joining %s on %s: %w", group.IP, ifname, err)
	}
	return newServer(ifname, h, conn, opts...)
}

// newServer serves h on an open socket; ifname is what Lookup is told.
func newServer(ifname string, h *Handler, conn net.PacketConn, opts ...ServerOption) (*Server, error) {
	s := &Server{ifname: ifname, h: h, conn: conn, log: slog.New(slog.DiscardHandler)}
	for _, o := range opts {
		o(s)
	}
	srv, err := server6.NewServer(ifname, nil, s.handle, server6.WithConn(conn))
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("dhcp6: %w", err)
	}
	s.srv = srv
	return s, nil
}

// Serve answers messages until Close, then returns nil; it returns an error
// if reading from the socket fails otherwise (the socket is then closed).
// Each message is handled in its own goroutine. Call Serve once.
func (s *Server) Serve() error {
	err := s.srv.Serve()
	if s.closed.Load() || errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}

// Close stops Serve and closes the socket. It may be called more than once
// and before Serve.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		s.closed.Store(true)
		// server6's Serve closes the socket itself when reading fails.
		if err := s.conn.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
			s.closeErr = err
		}
	})
	return s.closeErr
}

// LocalAddr is the address the Server listens on.
func (s *Server) LocalAddr() net.Addr { return s.conn.LocalAddr() }

// handle is the server6 handler: one call per received message, each in its
// own goroutine.
func (s *Server) handle(conn net.PacketConn, peer net.Addr, m dhcpv6.DHCPv6) {
	defer func() {
		// A panic in a server6 handler goroutine would end the agent.
		if p := recover(); p != nil {
			if s.h.observer != nil {
				s.h.observer.Observe(MsgTypeUnknown, OutcomePanic)
			}
			s.log.Error("dhcp6: panic handling a message", "ifname", s.ifname, "peer", peer, "panic", p)
		}
	}()
	src := Source{Ifname: s.ifname}
	if ua, ok := peer.(*net.UDPAddr); ok {
		if a, ok := netip.AddrFromSlice(ua.IP); ok {
			src.Peer = a.Unmap()
		}
	}
	r := s.h.HandleFrom(m, src)
	if s.log.Enabled(context.Background(), slog.LevelDebug) {
		s.log.Debug("dhcp6: message handled", "ifname", s.ifname, "peer", peer,
			"type", r.MsgType, "outcome", r.Outcome, "key", r.Key, "reason", r.Reason)
	}
	if r.Reply == nil {
		return
	}
	b, err := safeBytes(r.Reply)
	if err == nil {
		_, err = conn.WriteTo(b, peer)
	}
	if err != nil && !s.closed.Load() {
		s.log.Warn("dhcp6: sending reply", "ifname", s.ifname, "peer", peer, "type", r.MsgType, "key", r.Key, "err", err)
	}
}
