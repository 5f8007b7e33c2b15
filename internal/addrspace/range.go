package addrspace

import (
	"fmt"
	"math"
	"net/netip"
	"slices"
)

// Range is one address range: each ADD takes one address from each Range of
// a configuration.
//
// Assignable addresses: for IPv4 the network and broadcast addresses are
// removed, except in /31 and /32 (RFC 3021 point-to-point and host routes).
// For IPv6 the whole prefix is used (tenure does not cap IPv6 ranges at /65
// like whereabouts does) except the all-zeros address, the Subnet-Router
// anycast address of RFC 4291 section 2.6.1, which is removed for prefixes
// shorter than /127; /127 (RFC 6164 point-to-point links, where that rule
// does not apply) and /128 use every address. The RFC 2526 reserved anycast
// addresses at the top of a subnet are not removed: whereabouts hands them
// out too, and they only exist for EUI-64 subnets.
type Range struct {
	// Spec is the range as written, for messages: "10.0.0.0/29" or
	// "10.0.0.2-10.0.0.5/24".
	Spec string
	// Prefix is the subnet (masked), for the result's address/mask.
	Prefix netip.Prefix
	// Start and End are the first and last candidate addresses: network,
	// broadcast and anycast addresses already removed, range_start and
	// range_end applied.
	Start, End netip.Addr
	// Exclude lists the addresses never handed out, single addresses as /32
	// or /128, the gateway included when it is inside [Start, End]. After
	// NormalizeExcludes it is sorted, without prefixes nested in others, and
	// holds only the prefixes of the range's family that meet [Start, End]
	// (an exclude outside the range is dropped silently, as whereabouts
	// tolerates it).
	Exclude []netip.Prefix
}

// Family returns 4 or 6 (0 for a zero Range).
func (r Range) Family() int {
	switch {
	case !r.Prefix.IsValid():
		return 0
	case r.Prefix.Addr().Is4():
		return 4
	}
	return 6
}

func (r Range) is4() bool { return r.Start.Is4() }

func (r Range) valid() bool {
	return r.Start.IsValid() && r.End.IsValid() && r.Start.Is4() == r.End.Is4() && !r.End.Less(r.Start)
}

func (r Range) size128() (u128, bool) {
	if !r.valid() {
		return u128{}, false
	}
	d, _ := u128From(r.End).sub(u128From(r.Start))
	n, overflow := d.add(u128{lo: 1})
	return n, !overflow
}

// Size returns End-Start+1, saturating at math.MaxUint64 (an IPv6 /64 has
// 2^64-1 candidates, a /63 saturates).
func (r Range) Size() uint64 {
	n, ok := r.size128()
	if !ok {
		if r.valid() { // 2^128 addresses: only a hand-built Range
			return math.MaxUint64
		}
		return 0
	}
	return n.sat64()
}

// At returns Start+offset. The caller keeps offset < Size(); past End it
// returns the zero Addr.
func (r Range) At(offset uint64) netip.Addr {
	if !r.valid() {
		return netip.Addr{}
	}
	a, overflow := u128From(r.Start).add(u128{lo: offset})
	if overflow || a.cmp(u128From(r.End)) > 0 {
		return netip.Addr{}
	}
	return a.addr(r.is4())
}

// Offset returns a-Start; false if a is outside [Start, End] (or of the other
// family, or zoned) or the offset does not fit in 64 bits.
func (r Range) Offset(a netip.Addr) (uint64, bool) {
	if !r.inBounds(a) {
		return 0, false
	}
	d, _ := u128From(a).sub(u128From(r.Start))
	if d.hi != 0 {
		return 0, false
	}
	return d.lo, true
}

// inBounds reports whether a is in [Start, End] (same family, no zone).
func (r Range) inBounds(a netip.Addr) bool {
	return r.valid() && a.IsValid() && a.Is4() == r.is4() && a.Zone() == "" && !a.Less(r.Start) && !r.End.Less(a)
}

// Contains reports whether a is in [Start, End] and not excluded.
func (r Range) Contains(a netip.Addr) bool {
	if !r.inBounds(a) {
		return false
	}
	for _, p := range r.Exclude {
		if p.Contains(a) {
			return false
		}
	}
	return true
}

// Next returns the first offset at or after offset whose address r
// contains, jumping over a whole excluded prefix at once, so a search never
// walks an excluded block address by address; false when no such offset is
// below Size(). Excludes in NormalizeExcludes order (sorted, disjoint) are
// passed over once; in any other order the loop repeats until no exclude
// holds the address, at most once per exclude.
func (r Range) Next(offset uint64) (uint64, bool) {
	size := r.Size()
	if offset >= size {
		return 0, false
	}
	start, end := u128From(r.Start), u128From(r.End)
	a, _ := start.add(u128{lo: offset}) // offset < Size: no overflow, a <= End
	for moved := true; moved; {
		moved = false
		for _, p := range r.Exclude {
			if !p.IsValid() || p.Addr().Is4() != r.is4() {
				continue
			}
			first, last := prefixBounds(p)
			if a.cmp(first) < 0 || a.cmp(last) > 0 {
				continue
			}
			next, overflow := last.add(u128{lo: 1})
			if overflow || next.cmp(end) > 0 {
				return 0, false
			}
			a, moved = next, true
		}
	}
	d, _ := a.sub(start)
	if d.hi != 0 || d.lo >= size {
		return 0, false
	}
	return d.lo, true
}

func (r Range) capacity128() u128 {
	n, ok := r.size128()
	if !ok {
		if !r.valid() {
			return u128{}
		}
		n = ones(128)
	}
	start, end := u128From(r.Start), u128From(r.End)
	var excluded u128
	for _, p := range mergeExcludes(r.Exclude) {
		if p.Addr().Is4() != r.is4() {
			continue
		}
		first, last := prefixBounds(p)
		if first.cmp(end) > 0 || last.cmp(start) < 0 {
			continue
		}
		if first.cmp(start) < 0 {
			first = start
		}
		if last.cmp(end) > 0 {
			last = end
		}
		d, _ := last.sub(first)
		d, _ = d.add(u128{lo: 1})
		excluded, _ = excluded.add(d)
	}
	c, under := n.sub(excluded)
	if under {
		return u128{}
	}
	return c
}

// Capacity returns the number of assignable addresses: Size minus the
// excluded addresses inside [Start, End], saturating at math.MaxUint64.
func (r Range) Capacity() uint64 { return r.capacity128().sat64() }

// String returns the canonical form of the range, without its excludes:
// the prefix ("10.0.0.0/24") when Start and End are the prefix's default
// bounds, else "Start-End/bits" ("10.0.0.2-10.0.0.5/24"). Equal ranges give
// equal strings however they were written.
func (r Range) String() string {
	if !r.Prefix.IsValid() {
		return "<invalid range>"
	}
	lo, hi := UsableBounds(r.Prefix)
	if r.Start == lo && r.End == hi {
		return r.Prefix.String()
	}
	return fmt.Sprintf("%s-%s/%d", r.Start, r.End, r.Prefix.Bits())
}

// UsableBounds returns the first and last assignable address of p (masked):
// the default Start and End of a Range over p (see Range).
func UsableBounds(p netip.Prefix) (lo, hi netip.Addr) {
	first, last := prefixBounds(p)
	is4 := p.Addr().Is4()
	if is4 && p.Bits() <= 30 {
		first, _ = first.add(u128{lo: 1})
		last, _ = last.sub(u128{lo: 1})
	} else if !is4 && p.Bits() <= 126 {
		first, _ = first.add(u128{lo: 1}) // Subnet-Router anycast address
	}
	return first.addr(is4), last.addr(is4)
}

// mergeExcludes sorts ps and drops prefixes nested in others; the result is
// disjoint (two prefixes are either nested or disjoint).
func mergeExcludes(ps []netip.Prefix) []netip.Prefix {
	if len(ps) < 2 {
		return ps
	}
	s := slices.Clone(ps)
	slices.SortFunc(s, func(a, b netip.Prefix) int {
		if c := a.Addr().Compare(b.Addr()); c != 0 {
			return c
		}
		return a.Bits() - b.Bits()
	})
	out := s[:0]
	for _, p := range s {
		if n := len(out); n > 0 && out[n-1].Addr().Is4() == p.Addr().Is4() && out[n-1].Bits() <= p.Bits() && out[n-1].Contains(p.Addr()) {
			continue
		}
		out = append(out, p)
	}
	return out
}

// NormalizeExcludes keeps the excludes of r's family that meet [Start, End],
// masked, sorted and merged.
func (r *Range) NormalizeExcludes() {
	start, end := u128From(r.Start), u128From(r.End)
	var keep []netip.Prefix
	for _, p := range r.Exclude {
		if !p.IsValid() || p.Addr().Is4() != r.is4() {
			continue
		}
		first, last := prefixBounds(p)
		if first.cmp(end) > 0 || last.cmp(start) < 0 {
			continue
		}
		keep = append(keep, p.Masked())
	}
	r.Exclude = mergeExcludes(keep)
}
