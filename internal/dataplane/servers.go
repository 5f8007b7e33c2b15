package dataplane

import (
	"bytes"
	"crypto/sha256"
	"maps"
	"net"
	"slices"

	"github.com/insomniacslk/dhcp/dhcpv6"

	"github.com/tenure-ipam/tenure/internal/config"
	"github.com/tenure-ipam/tenure/internal/dhcp6"
)

// ServerDUID is the server identifier of every tenure DHCPv6 server: a
// DUID-UUID whose UUID is derived (SHA-256, RFC 9562 version 8 layout) from
// a fixed name, so it is the same on every node (see the package doc).
func ServerDUID() dhcpv6.DUID {
	sum := sha256.Sum256([]byte("tenure-ipam.dev/dhcpv6-server-id/v1"))
	d := &dhcpv6.DUIDUUID{}
	copy(d.UUID[:], sum[:16])
	d.UUID[6] = d.UUID[6]&0x0f | 0x80 // version 8
	d.UUID[8] = d.UUID[8]&0x3f | 0x80 // RFC 9562 variant
	return d
}

type server struct {
	srv     *dhcp6.Server
	ifindex int
	cfg     dhcp6.Config
	done    chan struct{}
}

// handlerConfig is the Handler config of one interface: the smallest
// lifetimes of the networks listing it, and the relays any of them trusts on
// that interface.
func handlerConfig(networks map[string]config.DHCPv6) map[string]dhcp6.Config {
	out := map[string]dhcp6.Config{}
	for _, name := range slices.Sorted(maps.Keys(networks)) {
		n := networks[name]
		if !n.Enabled {
			continue
		}
		for _, ifn := range n.Interfaces {
			c, ok := out[ifn]
			if !ok {
				c = dhcp6.Config{ServerDUID: ServerDUID(), Preference: 255, PreferredLifetime: n.PreferredLifetime, ValidLifetime: n.ValidLifetime}
			}
			c.PreferredLifetime = min(c.PreferredLifetime, n.PreferredLifetime)
			c.ValidLifetime = min(c.ValidLifetime, n.ValidLifetime)
			for _, r := range n.TrustedRelays {
				rl := dhcp6.Relay{MAC: r.MAC, Address: r.Address}
				if r.Interface == ifn && !slices.ContainsFunc(c.TrustedRelays, func(x dhcp6.Relay) bool { return sameRelay(x, rl) }) {
					c.TrustedRelays = append(c.TrustedRelays, rl)
				}
			}
			out[ifn] = c
		}
	}
	return out
}

func sameConfig(a, b dhcp6.Config) bool {
	return a.PreferredLifetime == b.PreferredLifetime && a.ValidLifetime == b.ValidLifetime &&
		a.T1 == b.T1 && a.T2 == b.T2 && a.Preference == b.Preference &&
		slices.EqualFunc(a.TrustedRelays, b.TrustedRelays, sameRelay)
}

func sameRelay(a, b dhcp6.Relay) bool {
	return bytes.Equal(a.MAC, b.MAC) && a.Address == b.Address
}

func (s *Service) reconcileServers(networks map[string]config.DHCPv6) {
	want := handlerConfig(networks)
	for name, sv := range s.servers {
		c, wanted := want[name]
		select {
		case <-sv.done:
			s.log.Warn("dhcpv6 server stopped; restarting", "interface", name)
			s.stopServer(name, sv)
			continue
		default:
		}
		if !wanted {
			s.log.Info("dhcpv6 server no longer wanted", "interface", name)
			s.stopServer(name, sv)
			continue
		}
		if !sameConfig(c, sv.cfg) {
			s.log.Info("dhcpv6 server settings changed; restarting", "interface", name)
			s.stopServer(name, sv)
			continue
		}
		link, err := s.nl.LinkByName(name)
		if err != nil || link.Attrs().Index != sv.ifindex {
			s.log.Info("dhcpv6 interface gone or re-created; restarting its server", "interface", name)
			s.stopServer(name, sv)
		}
	}
	startMissing(s, s.servers, want, "server", "cannot serve dhcpv6 yet; retrying at the next resync", s.startServer,
		func(name string, sv *server) {
			s.log.Info("serving dhcpv6", "interface", name, "netns", s.ns.String(), "ifindex", sv.ifindex,
				"preferredLifetime", sv.cfg.PreferredLifetime, "validLifetime", sv.cfg.ValidLifetime,
				"trustedRelays", len(sv.cfg.TrustedRelays))
		})
}

// startMissing starts, in name order, each interface's service that want
// has and running lacks, and records it in running; one that fails to start
// is logged (once until its error changes) and tried again at the next
// reconcile.
func startMissing[V, C any](s *Service, running map[string]V, want map[string]C, what, failMsg string,
	start func(string, C) (V, error), started func(string, V)) {
	for _, name := range slices.Sorted(maps.Keys(want)) {
		if _, ok := running[name]; ok {
			continue
		}
		v, err := start(name, want[name])
		s.logErr(what+" "+name, err, failMsg, "interface", name, "netns", s.ns.String())
		if err == nil {
			running[name] = v
			started(name, v)
		}
	}
}

func (s *Service) startServer(name string, cfg dhcp6.Config) (*server, error) {
	h := dhcp6.NewHandler(cfg, s, s.opts.Observer)
	if err := h.Err(); err != nil {
		return nil, err
	}
	sv := &server{cfg: cfg, done: make(chan struct{})}
	err := s.ns.do(func() error {
		iface, err := net.InterfaceByName(name)
		if err != nil {
			return err
		}
		sv.ifindex = iface.Index
		sv.srv, err = dhcp6.NewServer(name, h, dhcp6.WithLogger(s.log.With("interface", name)))
		return err
	})
	if err != nil {
		return nil, err
	}
	go func() {
		defer close(sv.done)
		if err := sv.srv.Serve(); err != nil {
			s.log.Warn("dhcpv6 server failed", "interface", name, "err", err)
			s.Trigger()
		}
	}()
	return sv, nil
}

func (s *Service) stopServer(name string, sv *server) {
	_ = sv.srv.Close()
	<-sv.done
	delete(s.servers, name)
}
