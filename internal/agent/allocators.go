package agent

import "github.com/tenure-ipam/tenure/internal/allocator"

// allocators hand an ADD the allocator of a slot: the factory's, vetted by
// the wire check where that is on.
type allocators struct {
	alloc *allocator.Factory
	// wire probes candidates on the segment; nil when off.
	wire *wire
}

// nextAllocator is the allocator an ADD takes a free item of slot s from:
// with the wire check of the network's parent interface where it is on
// and the slot is a range's.
func (n *allocators) nextAllocator(at *attachment, s slot) (allocator.Interface, error) {
	if n.wire == nil || s.Range == nil {
		return n.alloc.For(s.Scope, s.Space), nil
	}
	c := at.cfg
	iface, err := n.wire.iface(configProbe{Name: c.Name, Probe: c.Probe, ProbeInterface: c.ProbeInterface,
		ProbeDefaultRoute: c.ProbeDefaultRoute, ProbeSkipped: c.ProbeSkipped})
	if err != nil {
		return nil, err
	}
	if iface == "" {
		if c.Probe && c.ProbeSkipped != "" {
			n.wire.noteSkipped(c.Name, c.ProbeSkipped)
		}
		return n.alloc.For(s.Scope, s.Space), nil
	}
	return n.alloc.ForVetted(s.Scope, s.Space, n.wire.vet(iface, s.Scope, s.Space, c.Name, at.pod)), nil
}
