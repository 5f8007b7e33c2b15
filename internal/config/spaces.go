package config

import (
	"net/netip"

	"github.com/tenure-ipam/tenure/internal/addrspace"
	"github.com/tenure-ipam/tenure/internal/reservation"
)

// ScopedSpace is one space of a config, a range or the delegation pool,
// with the allocation scope of its reservations: the one type for "a space
// and its scope". The agent's slot and the inventory's entry embed it.
type ScopedSpace struct {
	Scope string          // the allocation scope: spec.network of the space's reservations
	Space addrspace.Space // addrspace.AddressSpace or addrspace.PrefixSpace
	Range *addrspace.Range
	// Pool is the IPPool the space comes from, "" for the config's own.
	Pool string
	// Gateway is the gateway a result gives an address of the range: the
	// config's (or its pool's) when the range's subnet holds it.
	Gateway netip.Addr
}

// Spaces returns the config's ranges, in the order of Ranges (Range points
// into it), then its delegation pool if it has one (Range nil).
// A config SelectPools joined from several pools lists every pool's
// ranges, then the delegation pool.
func (c *Config) Spaces() []ScopedSpace {
	if c.parts != nil {
		var ranges, prefixes []ScopedSpace
		for _, p := range c.parts {
			for _, s := range p.Spaces() {
				if s.Range != nil {
					ranges = append(ranges, s)
				} else {
					prefixes = append(prefixes, s)
				}
			}
		}
		return append(ranges, prefixes...)
	}
	out := make([]ScopedSpace, 0, len(c.Ranges)+1)
	for i := range c.Ranges {
		r := &c.Ranges[i]
		s := ScopedSpace{Scope: c.scope(r.String()), Space: addrspace.AddressSpace{Range: *r}, Range: r, Pool: c.Pool}
		if c.Gateway.IsValid() && r.Prefix.Contains(c.Gateway) {
			s.Gateway = c.Gateway
		}
		out = append(out, s)
	}
	if pd := c.PrefixDelegation; pd != nil {
		out = append(out, ScopedSpace{Scope: c.scope(pd.Range.String()), Space: addrspace.PrefixSpace{PD: *pd}, Pool: c.Pool})
	}
	return out
}

// scope is the allocation scope of the space whose String is space.
func (c *Config) scope(space string) string {
	return reservation.Scope(c.NetworkName, space, c.OverlappingRanges)
}
