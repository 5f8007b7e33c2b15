package config

import (
	"github.com/tenure-ipam/tenure/internal/allocator"
	"github.com/tenure-ipam/tenure/internal/allocator/addrspace"
	"github.com/tenure-ipam/tenure/internal/reservation"
)

// ScopedSpace is one space of a config, a range or the delegation pool,
// with the allocation scope of its reservations.
type ScopedSpace struct {
	Scope string          // spec.network of the space's reservations
	Space allocator.Space // allocator.AddressSpace or allocator.PrefixSpace
	Range *addrspace.Range
}

// Spaces returns the config's ranges, in the order of Ranges (Range points
// into it), then its delegation pool if it has one (Range nil).
func (c *Config) Spaces() []ScopedSpace {
	out := make([]ScopedSpace, 0, len(c.Ranges)+1)
	for i := range c.Ranges {
		r := &c.Ranges[i]
		out = append(out, ScopedSpace{Scope: c.scope(r.String()), Space: allocator.AddressSpace{Range: *r}, Range: r})
	}
	if pd := c.PrefixDelegation; pd != nil {
		out = append(out, ScopedSpace{Scope: c.scope(pd.Range.String()), Space: allocator.PrefixSpace{PD: *pd}})
	}
	return out
}

// scope is the allocation scope of the space whose String is space.
func (c *Config) scope(space string) string {
	return reservation.Scope(c.NetworkName, space, c.OverlappingRanges)
}
