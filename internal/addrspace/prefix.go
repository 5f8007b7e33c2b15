package addrspace

import (
	"math"
	"net/netip"
)

// PrefixDelegation hands out IPv6 prefixes of PrefixLength from Range.
type PrefixDelegation struct {
	Range        netip.Prefix // IPv6, masked
	PrefixLength int          // >= Range.Bits() (equal is a pool of one), <= 128
}

func (p PrefixDelegation) valid() bool {
	return p.Range.IsValid() && p.Range.Addr().Is6() && p.PrefixLength >= p.Range.Bits() && p.PrefixLength <= 128
}

// Count returns the number of delegable prefixes, saturating at
// math.MaxUint64.
func (p PrefixDelegation) Count() uint64 {
	if !p.valid() {
		return 0
	}
	n := p.PrefixLength - p.Range.Bits()
	if n >= 64 {
		return math.MaxUint64
	}
	return 1 << n
}

// At returns the i-th prefix (i < Count()); the zero Prefix past the end.
func (p PrefixDelegation) At(i uint64) netip.Prefix {
	if !p.valid() {
		return netip.Prefix{}
	}
	n := p.PrefixLength - p.Range.Bits()
	if n < 64 && i >= 1<<n {
		return netip.Prefix{}
	}
	base := u128From(p.Range.Masked().Addr())
	a, _ := base.add(u128{lo: i}.shl(128 - p.PrefixLength))
	return netip.PrefixFrom(a.addr(false), p.PrefixLength)
}

// Index returns i such that At(i) == q; false if q is not one of the
// delegable prefixes (wrong length, host bits set, outside Range) or i does
// not fit in 64 bits.
func (p PrefixDelegation) Index(q netip.Prefix) (uint64, bool) {
	if !p.valid() || !q.IsValid() || !q.Addr().Is6() || q.Addr().Is4In6() || q.Addr().Zone() != "" ||
		q.Bits() != p.PrefixLength || q.Masked() != q || !p.Range.Contains(q.Addr()) {
		return 0, false
	}
	d, _ := u128From(q.Addr()).sub(u128From(p.Range.Masked().Addr()))
	idx := d.shr(128 - p.PrefixLength)
	if idx.hi != 0 {
		return 0, false
	}
	return idx.lo, true
}
