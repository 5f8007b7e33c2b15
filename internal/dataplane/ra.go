package dataplane

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mdlayher/ndp"
	"golang.org/x/net/ipv6"

	"github.com/tenure-ipam/tenure/internal/config"
)

// Router Advertisement timing (RFC 4861 §6.2.1 and §10 defaults).
const (
	raMaxInterval = 600 * time.Second
	raMinInterval = 200 * time.Second
	// The first few advertisements after an interface starts advertising
	// come sooner (MAX_INITIAL_RTR_ADVERT_INTERVAL, _ADVERTISEMENTS).
	raInitialInterval = 16 * time.Second
	raInitialCount    = 3
	// Multicast answers to solicitations are at least this far apart
	// (MIN_DELAY_BETWEEN_RAS).
	raMinDelay = 3 * time.Second
	// RouterLifetime when a network has a gateway: 3 x MaxRtrAdvInterval.
	raRouterLifetime = 3 * raMaxInterval
	// How often another router's advertisements are warned about.
	raForeignWarnEvery = time.Hour
)

var allRouters = netip.MustParseAddr("ff02::2")

// RAPrefix is one on-link prefix of a Router Advertisement.
type RAPrefix struct {
	Prefix           netip.Prefix
	Preferred, Valid time.Duration
}

// RASettings is what the Router Advertisements of one interface say besides
// the M and O flags, which are always set.
type RASettings struct {
	// Prefixes are advertised on-link (L=1) and not for SLAAC (A=0): the
	// guest's address comes from DHCPv6.
	Prefixes []RAPrefix
	// Router: some network has a gateway, so the advertisements carry a
	// non-zero router lifetime (the sender is a default router).
	Router bool
}

func (r RASettings) equal(o RASettings) bool {
	return r.Router == o.Router && slices.Equal(r.Prefixes, o.Prefixes)
}

// WantedAdvertisements returns, by DHCPv6 interface, the Router
// Advertisements this node sends: on each interface of each binding whose
// network has router_advertisements, so only the node that serves a guest
// advertises to it. The prefixes are the on-link prefixes of those
// networks, at the networks' DHCPv6 lifetimes (the smallest when two
// networks name one prefix). It is a pure function of its inputs.
func WantedAdvertisements(bs []Binding, networks map[string]config.DHCPv6) map[string]RASettings {
	type acc struct {
		prefixes map[netip.Prefix]RAPrefix
		router   bool
	}
	per := map[string]*acc{}
	for _, b := range bs {
		n, ok := networks[b.NAD]
		if !ok || !n.Enabled || !n.RouterAdvertisements {
			continue
		}
		for _, ifn := range b.Interfaces {
			a := per[ifn]
			if a == nil {
				a = &acc{prefixes: map[netip.Prefix]RAPrefix{}}
				per[ifn] = a
			}
			a.router = a.router || n.Gateway.IsValid()
			for _, p := range n.OnLink {
				p = p.Masked()
				if !p.Addr().Is6() {
					continue
				}
				rp, seen := a.prefixes[p]
				if !seen {
					rp = RAPrefix{Prefix: p, Preferred: n.PreferredLifetime, Valid: n.ValidLifetime}
				}
				rp.Preferred, rp.Valid = min(rp.Preferred, n.PreferredLifetime), min(rp.Valid, n.ValidLifetime)
				a.prefixes[p] = rp
			}
		}
	}
	out := make(map[string]RASettings, len(per))
	for ifn, a := range per {
		ps := slices.SortedFunc(maps.Values(a.prefixes), func(x, y RAPrefix) int {
			return cmp.Or(x.Prefix.Addr().Compare(y.Prefix.Addr()), cmp.Compare(x.Prefix.Bits(), y.Prefix.Bits()))
		})
		out[ifn] = RASettings{Prefixes: ps, Router: a.router}
	}
	return out
}

// routerAdvertisement builds the message for settings from a sender with
// link-layer address mac; final is the last one, sent when the interface
// stops advertising (router lifetime 0, RFC 4861 §6.2.5).
func routerAdvertisement(s RASettings, mac net.HardwareAddr, final bool) *ndp.RouterAdvertisement {
	ra := &ndp.RouterAdvertisement{ManagedConfiguration: true, OtherConfiguration: true}
	if s.Router && !final {
		ra.RouterLifetime = raRouterLifetime
	}
	if len(mac) > 0 {
		ra.Options = append(ra.Options, &ndp.LinkLayerAddress{Direction: ndp.Source, Addr: mac})
	}
	for _, p := range s.Prefixes {
		ra.Options = append(ra.Options, &ndp.PrefixInformation{
			PrefixLength: uint8(p.Prefix.Bits()), OnLink: true,
			PreferredLifetime: p.Preferred, ValidLifetime: p.Valid, Prefix: p.Prefix.Addr(),
		})
	}
	return ra
}

// advertiser sends the Router Advertisements of one interface: periodically
// to all nodes, and in answer to Router Solicitations; it warns about
// advertisements of other routers on the segment.
type advertiser struct {
	ifname  string
	ifindex int
	conn    *ndp.Conn
	self    netip.Addr // the link-local address advertisements come from
	mac     net.HardwareAddr
	log     *slog.Logger

	mu       sync.Mutex
	settings RASettings

	update     chan struct{}   // settings changed: advertise now
	solicited  chan netip.Addr // a solicitation's source (unspecified: answer to all nodes)
	stop       chan struct{}
	senderDone chan struct{}
	readerDone chan struct{}
	readFailed atomic.Bool // reading failed before close: the advertiser is restarted
	stopOnce   sync.Once
}

func (s *Service) startAdvertiser(name string, settings RASettings) (*advertiser, error) {
	a := &advertiser{
		ifname: name, settings: settings, log: s.log.With("interface", name),
		update: make(chan struct{}, 1), solicited: make(chan netip.Addr, 1), stop: make(chan struct{}),
		senderDone: make(chan struct{}), readerDone: make(chan struct{}),
	}
	err := s.ns.do(func() error {
		iface, err := net.InterfaceByName(name)
		if err != nil {
			return err
		}
		a.ifindex, a.mac = iface.Index, iface.HardwareAddr
		a.conn, a.self, err = ndp.Listen(iface, ndp.LinkLocal)
		if err != nil {
			return fmt.Errorf("router advertisements on %s: %w", name, err)
		}
		var f ipv6.ICMPFilter
		f.SetAll(true)
		f.Accept(ipv6.ICMPTypeRouterSolicitation)
		f.Accept(ipv6.ICMPTypeRouterAdvertisement)
		err = errors.Join(a.conn.SetICMPFilter(&f), a.conn.JoinGroup(allRouters))
		if err != nil {
			a.conn.Close()
			return fmt.Errorf("router advertisements on %s: %w", name, err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	go a.send()
	go a.read()
	return a, nil
}

func (a *advertiser) current() RASettings {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.settings
}

// set changes what is advertised, and advertises it at once.
func (a *advertiser) set(s RASettings) {
	a.mu.Lock()
	a.settings = s
	a.mu.Unlock()
	select {
	case a.update <- struct{}{}:
	default:
	}
}

func (a *advertiser) failed() bool { return a.readFailed.Load() }

// close sends the final advertisement and closes the socket.
func (a *advertiser) close() {
	a.stopOnce.Do(func() { close(a.stop) })
	<-a.senderDone
	_ = a.conn.Close()
	<-a.readerDone
}

func (a *advertiser) send() {
	defer close(a.senderDone)
	allNodes := netip.IPv6LinkLocalAllNodes()
	var lastMulticast time.Time
	sent := 0
	t := time.NewTimer(0)
	defer t.Stop()
	advertise := func(dst netip.Addr, final bool) {
		ra := routerAdvertisement(a.current(), a.mac, final)
		if err := a.conn.WriteTo(ra, nil, dst); err != nil {
			a.log.Warn("sending a router advertisement", "to", dst, "err", err)
			return
		}
		if dst == allNodes {
			lastMulticast = time.Now()
		}
		a.log.Debug("router advertisement sent", "to", dst, "routerLifetime", ra.RouterLifetime, "final", final)
	}
	for {
		select {
		case <-a.stop:
			advertise(allNodes, true)
			return
		case <-a.update:
			advertise(allNodes, false)
		case src := <-a.solicited:
			// A solicitation from an address is answered to it; one from
			// the unspecified address (a host without a usable link-local
			// address yet) to all nodes, rate-limited.
			if src.IsUnspecified() {
				if time.Since(lastMulticast) < raMinDelay {
					continue
				}
				src = allNodes
			}
			advertise(src, false)
		case <-t.C:
			advertise(allNodes, false)
			sent++
			next := raMinInterval + rand.N(raMaxInterval-raMinInterval)
			if sent < raInitialCount {
				next = min(next, raInitialInterval)
			}
			t.Reset(next)
		}
	}
}

func (a *advertiser) read() {
	defer close(a.readerDone)
	warned := map[netip.Addr]time.Time{}
	for {
		m, _, src, err := a.conn.ReadFrom()
		if err != nil {
			select {
			case <-a.stop:
			default:
				a.readFailed.Store(true)
				a.log.Warn("reading router solicitations failed; restarting the advertiser", "err", err)
			}
			return
		}
		switch m := m.(type) {
		case *ndp.RouterSolicitation:
			select {
			case a.solicited <- src.WithZone(""):
			default: // an answer is already due
			}
		case *ndp.RouterAdvertisement:
			if src.WithZone("") == a.self.WithZone("") {
				continue
			}
			if last, ok := warned[src]; ok && time.Since(last) < raForeignWarnEvery {
				continue
			}
			warned[src] = time.Now()
			var prefixes []string
			for _, o := range m.Options {
				if p, ok := o.(*ndp.PrefixInformation); ok {
					prefixes = append(prefixes, netip.PrefixFrom(p.Prefix, int(p.PrefixLength)).String())
				}
			}
			a.log.Warn("another router advertises on this segment: guests get its advertisements as well as tenure's",
				"router", src, "managed", m.ManagedConfiguration, "other", m.OtherConfiguration,
				"routerLifetime", m.RouterLifetime, "prefixes", prefixes)
		}
	}
}

func (s *Service) reconcileAdvertisers(want map[string]RASettings) {
	for name, a := range s.advertisers {
		w, wanted := want[name]
		switch {
		case a.failed():
			s.stopAdvertiser(name, a)
		case !wanted:
			s.log.Info("router advertisements no longer wanted: no guest of a network with router_advertisements is served here", "interface", name)
			s.stopAdvertiser(name, a)
		default:
			link, err := s.nl.LinkByName(name)
			if err != nil || link.Attrs().Index != a.ifindex {
				s.log.Info("router advertisement interface gone or re-created; restarting", "interface", name)
				s.stopAdvertiser(name, a)
				continue
			}
			if !a.current().equal(w) {
				s.log.Info("router advertisements changed", "interface", name, "prefixes", w.Prefixes, "router", w.Router)
				a.set(w)
			}
		}
	}
	startMissing(s, s.advertisers, want, "advertiser", "cannot send router advertisements yet; retrying at the next resync", s.startAdvertiser,
		func(name string, a *advertiser) {
			w := a.current()
			s.log.Info("sending router advertisements", "interface", name, "from", a.self, "prefixes", w.Prefixes, "router", w.Router)
		})
}

func (s *Service) stopAdvertiser(name string, a *advertiser) {
	a.close()
	delete(s.advertisers, name)
}
