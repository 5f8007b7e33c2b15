package dataplane

import (
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// RouteProtocol marks the routes tenure installs (rtm_protocol); routes with
// another protocol are never changed.
const RouteProtocol = 116

func (s *Service) reconcileRoutes(bindings []Binding) {
	want := DesiredRoutes(bindings, s.heardSnapshot())
	have, err := s.tenureRoutes()
	s.logErr("routes list", err, "cannot list routes", "netns", s.ns.String())
	if err != nil {
		return
	}
	replace, remove := PlanRoutes(want, have)
	for _, r := range remove {
		err := s.deleteRoute(r)
		s.logErr("route del "+r.Prefix.String(), err, "cannot delete route", "route", r.String())
		if err == nil {
			s.log.Info("route removed", "route", r.String(), "netns", s.ns.String())
		}
	}
	for _, r := range replace {
		err := s.replaceRoute(r)
		s.logErr("route "+r.Prefix.String(), err, "cannot install route", "route", r.String())
		if err == nil {
			s.log.Info("route installed", "route", r.String(), "netns", s.ns.String())
		}
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
