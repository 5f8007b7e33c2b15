package dataplane

import (
	"cmp"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// RouteProtocol marks the routes tenure installs (rtm_protocol); routes with
// another protocol are never changed.
const RouteProtocol = 116

// RouteOverlap is how long a node keeps the route to a prefix whose VM
// left it by a migration that switched over (make before break). The source and the target
// see the switchover through their own informers, so the source would
// otherwise withdraw its route up to an informer lag before the target's
// appears, and the segment's router, still sending the prefix to the
// source, would lose it for that gap. The guest is on the same segment
// and the source's route reaches it there (make before break); the
// target's route replaces it at the router within this time.
const RouteOverlap = 5 * time.Second

// overlap notes, from this reconcile's skips, the prefixes whose VM left
// this node by a switchover: each route is held until RouteOverlap after
// the switchover was first seen, once. A prefix is forgotten when no skip names it
// any more and its time is past.
func (s *Service) overlap(skips []Skip, now time.Time) {
	named := map[netip.Prefix]bool{}
	for _, k := range skips {
		if !k.SwitchedAway.IsValid() {
			continue
		}
		p := k.SwitchedAway.Masked()
		named[p] = true
		if _, ok := s.overlaps[p]; ok {
			continue
		}
		if s.overlaps == nil {
			s.overlaps = map[netip.Prefix]time.Time{}
		}
		s.overlaps[p] = now.Add(RouteOverlap)
		s.log.Info("route kept after its VM's switchover to another node", "prefix", p.String(), "pod", k.Pod, "claim", k.Claim, "for", RouteOverlap)
	}
	clear(s.held)
	for p, until := range s.overlaps {
		switch {
		case now.Before(until):
			if s.held == nil {
				s.held = map[netip.Prefix]time.Time{}
			}
			s.held[p] = until
		case !named[p]:
			delete(s.overlaps, p)
		}
	}
}

// overlapDue fires when the earliest held route's overlap ends; nil
// when none is held.
func (s *Service) overlapDue() <-chan time.Time {
	var first time.Time
	for _, until := range s.held {
		if first.IsZero() || until.Before(first) {
			first = until
		}
	}
	if first.IsZero() {
		return nil
	}
	return time.After(time.Until(first))
}

func (s *Service) reconcileRoutes(bindings []Binding) {
	want := DesiredRoutes(bindings, s.heardSnapshot())
	have, err := s.tenureRoutes()
	s.logErr("routes list", err, "cannot list routes", "netns", s.ns.String())
	if err != nil {
		s.routesLeft = -1
		return
	}
	replace, remove := PlanRoutes(want, have)
	s.routesLeft = len(want)
	for _, r := range remove {
		if _, ok := s.held[r.Prefix]; ok {
			s.routesLeft++ // kept: its VM switched over to another node
			continue
		}
		err := s.deleteRoute(r)
		if err != nil {
			s.routesLeft++
		}
		s.observeRoute(RouteRemove, err)
		s.logErr("route del "+r.Prefix.String(), err, "cannot delete route", "route", r.String())
		if err == nil {
			s.log.Info("route removed", "route", r.String(), "netns", s.ns.String())
		}
	}
	present := map[netip.Prefix]bool{}
	for _, h := range have {
		present[h.Prefix] = true
	}
	migrations := map[netip.Prefix]*MigrationCause{}
	for _, b := range bindings {
		if b.Migration != nil && b.Prefix.IsValid() {
			migrations[b.Prefix.Masked()] = b.Migration
		}
	}
	for _, r := range replace {
		err := s.replaceRoute(r)
		s.observeRoute(RouteInstall, err)
		s.logErr("route "+r.Prefix.String(), err, "cannot install route", "route", r.String())
		if err != nil {
			continue
		}
		m := migrations[r.Prefix]
		if m == nil || present[r.Prefix] {
			// Present already (another interface): no switchover here.
			s.log.Info("route installed", "route", r.String(), "netns", s.ns.String())
			continue
		}
		// The prefix came to this node with a VM's migration: the gap from
		// the VMI's signal to the route is what the guest's prefix was
		// unreachable at most, less KubeVirt's own delay.
		var gap time.Duration
		if !m.Signal.IsZero() {
			gap = max(time.Since(m.Signal), 0)
		}
		if o, ok := s.opts.Observer.(RouteObserver); ok {
			o.Switchover(m.Outcome, gap, !m.Signal.IsZero())
		}
		s.log.Info("route installed", "route", r.String(), "netns", s.ns.String(),
			"switchover", m.Outcome, "signal", m.Signal, "sinceSignal", gap)
	}
}

// Route changes reported to a RouteObserver.
const (
	RouteInstall = "install"
	RouteRemove  = "remove"
)

// RouteObserver is implemented by an Options.Observer that counts route
// changes and switchovers.
type RouteObserver interface {
	// RouteChange is one route installed or removed; err is its result.
	RouteChange(change string, err error)
	// Switchover is a VM's prefix route installed on this node because of
	// its migration (outcome SwitchoverTarget or SwitchoverBack), gap after
	// the VMI's signal when timed.
	Switchover(outcome string, gap time.Duration, timed bool)
}

func (s *Service) observeRoute(change string, err error) {
	if o, ok := s.opts.Observer.(RouteObserver); ok {
		o.RouteChange(change, err)
	}
}

// tenureRoutes lists the IPv6 main-table routes with RouteProtocol.
func (s *Service) tenureRoutes() ([]Route, error) {
	rs, err := s.nl.RouteListFiltered(netlink.FAMILY_V6, &netlink.Route{Protocol: RouteProtocol, Table: unix.RT_TABLE_MAIN},
		netlink.RT_FILTER_PROTOCOL|netlink.RT_FILTER_TABLE)
	if err != nil {
		// Also ErrDumpInterrupted: never delete from a torn dump; the next
		// reconcile retries.
		return nil, err
	}
	names := map[int]string{}
	var out []Route
	for _, r := range rs {
		if r.Dst == nil {
			continue
		}
		p, ok := prefixOf(r.Dst)
		if !ok {
			continue
		}
		via, _ := netip.AddrFromSlice(r.Gw)
		dev, ok := names[r.LinkIndex]
		if !ok {
			if l, err := s.nl.LinkByIndex(r.LinkIndex); err == nil {
				dev = l.Attrs().Name
			}
			names[r.LinkIndex] = dev
		}
		if r.Flags&int(netlink.FLAG_ONLINK) == 0 {
			dev = "" // not the route we install: replace it
		}
		out = append(out, Route{Prefix: p, Via: via.Unmap(), Dev: dev})
	}
	return out, nil
}

func prefixOf(n *net.IPNet) (netip.Prefix, bool) {
	a, ok := netip.AddrFromSlice(n.IP)
	if !ok {
		return netip.Prefix{}, false
	}
	ones, _ := n.Mask.Size()
	return netip.PrefixFrom(a.Unmap(), ones), true
}

func (s *Service) replaceRoute(r Route) error {
	link, err := s.nl.LinkByName(r.Dev)
	if err != nil {
		return fmt.Errorf("interface %s: %w", r.Dev, err)
	}
	return s.nl.RouteReplace(&netlink.Route{
		LinkIndex: link.Attrs().Index,
		Dst:       &net.IPNet{IP: r.Prefix.Addr().AsSlice(), Mask: net.CIDRMask(r.Prefix.Bits(), 128)},
		Gw:        r.Via.AsSlice(),
		Flags:     int(netlink.FLAG_ONLINK),
		Protocol:  RouteProtocol,
		Table:     unix.RT_TABLE_MAIN,
		Family:    netlink.FAMILY_V6,
	})
}

func (s *Service) deleteRoute(r Route) error {
	err := s.nl.RouteDel(&netlink.Route{
		Dst:      &net.IPNet{IP: r.Prefix.Addr().AsSlice(), Mask: net.CIDRMask(r.Prefix.Bits(), 128)},
		Protocol: RouteProtocol,
		Table:    unix.RT_TABLE_MAIN,
		Family:   netlink.FAMILY_V6,
	})
	if errors.Is(err, unix.ESRCH) {
		return nil // already gone
	}
	return err
}

// Route is one wanted route: Prefix via Via dev Dev onlink.
type Route struct {
	Prefix netip.Prefix
	Via    netip.Addr
	Dev    string
}

func (r Route) String() string { return fmt.Sprintf("%s via %s dev %s onlink", r.Prefix, r.Via, r.Dev) }

// DesiredRoutes returns the routes this node must have, sorted by prefix:
// one per binding with an address and a prefix on a network with
// install_routes, through the binding's OwnInterface when it has one; otherwise
// through the interface the client was last heard on (lastHeard, by
// binding Key: an answered Request, Renew or Rebind from its MAC, see
// Service.Heard) when the binding is served there, else the first one it
// is served on.
func DesiredRoutes(bs []Binding, lastHeard map[string]string) []Route {
	var out []Route
	for _, b := range bs {
		if !b.InstallRoutes || !b.Address.IsValid() || !b.Prefix.IsValid() || len(b.Interfaces) == 0 {
			continue
		}
		dev := b.Interfaces[0]
		if h, ok := lastHeard[b.Key]; ok && b.OwnInterface == "" && slices.Contains(b.Interfaces, h) {
			dev = h
		}
		out = append(out, Route{Prefix: b.Prefix.Masked(), Via: b.Address, Dev: dev})
	}
	slices.SortStableFunc(out, func(a, b Route) int {
		return cmp.Or(a.Prefix.Addr().Compare(b.Prefix.Addr()), cmp.Compare(a.Prefix.Bits(), b.Prefix.Bits()))
	})
	// Reservations make prefixes unique; should two bindings still name one
	// prefix, the first (by binding key) wins, as a kernel table holds one.
	return slices.CompactFunc(out, func(a, b Route) bool { return a.Prefix == b.Prefix })
}

// PlanRoutes compares the wanted routes with those present (tenure's, by
// protocol) and returns what to replace and what to delete. A present route
// whose Dev is "" (its interface is gone) counts as different.
func PlanRoutes(want, have []Route) (replace, remove []Route) {
	wanted := map[netip.Prefix]Route{}
	for _, r := range want {
		wanted[r.Prefix] = r
	}
	present := map[netip.Prefix]bool{}
	for _, h := range have {
		w, ok := wanted[h.Prefix]
		switch {
		case !ok:
			remove = append(remove, h)
		case w == h:
			present[h.Prefix] = true
		}
	}
	for _, w := range want {
		if !present[w.Prefix] {
			replace = append(replace, w)
		}
	}
	return replace, remove
}
