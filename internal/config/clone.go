package config

import (
	"net"
	"slices"

	"github.com/containernetworking/cni/pkg/types"
)

// Clone returns a deep copy of c: no slice, map or pointer of the copy is
// shared with c, so a caller may change the copy (ApplyPool, or anything
// else) while others read c.
func (c *Config) Clone() *Config {
	if c == nil {
		return nil
	}
	n := *c
	n.Ranges = slices.Clone(c.Ranges)
	for i := range n.Ranges {
		n.Ranges[i].Exclude = slices.Clone(n.Ranges[i].Exclude)
	}
	if c.Routes != nil {
		n.Routes = make([]*types.Route, len(c.Routes))
		for i, r := range c.Routes {
			n.Routes[i] = cloneRoute(r)
		}
	}
	n.DNS = types.DNS{Nameservers: slices.Clone(c.DNS.Nameservers), Domain: c.DNS.Domain,
		Search: slices.Clone(c.DNS.Search), Options: slices.Clone(c.DNS.Options)}
	if c.PrefixDelegation != nil {
		pd := *c.PrefixDelegation
		n.PrefixDelegation = &pd
	}
	if c.DHCPv6 != nil {
		d := *c.DHCPv6
		d.Interfaces = slices.Clone(d.Interfaces)
		d.TrustedRelays = slices.Clone(d.TrustedRelays)
		for i := range d.TrustedRelays {
			d.TrustedRelays[i].MAC = slices.Clone(d.TrustedRelays[i].MAC)
		}
		d.OnLink = slices.Clone(d.OnLink)
		n.DHCPv6 = &d
	}
	n.Ignored = slices.Clone(c.Ignored)
	n.Requested = slices.Clone(c.Requested)
	n.own = c.own.clone()
	n.Pools = slices.Clone(c.Pools)
	if c.parts != nil {
		n.parts = make([]*Config, len(c.parts))
		for i, p := range c.parts {
			n.parts[i] = p.Clone()
		}
	}
	return &n
}

func cloneRoute(r *types.Route) *types.Route {
	if r == nil {
		return nil
	}
	n := *r
	n.Dst = net.IPNet{IP: slices.Clone(r.Dst.IP), Mask: slices.Clone(r.Dst.Mask)}
	n.GW = slices.Clone(r.GW)
	if r.Table != nil {
		t := *r.Table
		n.Table = &t
	}
	if r.Scope != nil {
		s := *r.Scope
		n.Scope = &s
	}
	return &n
}

func (s sources) clone() sources {
	n := s
	n.gatewayKey = s.gatewayKey.clone()
	n.networkNameKey = s.networkNameKey.clone()
	if s.pd != nil {
		pd := *s.pd
		n.pd = &pd
	}
	n.pdRangeKey = s.pdRangeKey.clone()
	n.pool = s.pool.clone()
	n.requested = slices.Clone(s.requested)
	for i := range n.requested {
		n.requested[i].f = n.requested[i].f.clone()
	}
	return n
}

func (f field) clone() field {
	f.raw = slices.Clone(f.raw)
	return f
}
