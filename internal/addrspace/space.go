package addrspace

import (
	"net/netip"
	"strconv"

	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
)

// Space is an ordered set of candidates: the addresses of a range or the
// prefixes of a delegation pool. It carries no allocation scope: one space
// is the same in every scope (config.ScopedSpace pairs it with one).
type Space interface {
	Kind() tenurev1alpha1.ReservationKind
	// Size is the number of indexes (saturating).
	Size() uint64
	// Next returns the first index at or after i that holds a candidate,
	// and that candidate, skipping excluded indexes arithmetically rather
	// than one by one; false when none is below Size.
	Next(i uint64) (idx uint64, item netip.Prefix, ok bool)
	Contains(p netip.Prefix) bool
	Capacity() uint64
	String() string
}

// AddressSpace is the assignable addresses of one configured range.
type AddressSpace struct{ Range Range }

func (s AddressSpace) Kind() tenurev1alpha1.ReservationKind { return tenurev1alpha1.KindAddress }
func (s AddressSpace) Size() uint64                         { return s.Range.Size() }
func (s AddressSpace) Capacity() uint64                     { return s.Range.Capacity() }
func (s AddressSpace) String() string                       { return s.Range.String() }

func (s AddressSpace) Next(i uint64) (uint64, netip.Prefix, bool) {
	off, ok := s.Range.Next(i)
	if !ok {
		return 0, netip.Prefix{}, false
	}
	a := s.Range.At(off)
	return off, netip.PrefixFrom(a, a.BitLen()), true
}

func (s AddressSpace) Contains(p netip.Prefix) bool {
	return p.Bits() == p.Addr().BitLen() && s.Range.Contains(p.Addr())
}

// PrefixSpace is the delegable prefixes of a prefix_delegation pool.
type PrefixSpace struct{ PD PrefixDelegation }

func (s PrefixSpace) Kind() tenurev1alpha1.ReservationKind { return tenurev1alpha1.KindDelegatedPrefix }
func (s PrefixSpace) Size() uint64                         { return s.PD.Count() }
func (s PrefixSpace) Capacity() uint64                     { return s.PD.Count() }
func (s PrefixSpace) String() string {
	return s.PD.Range.String() + " as /" + strconv.Itoa(s.PD.PrefixLength)
}

// Next is i itself: a delegation pool excludes nothing.
func (s PrefixSpace) Next(i uint64) (uint64, netip.Prefix, bool) {
	if i >= s.PD.Count() {
		return 0, netip.Prefix{}, false
	}
	return i, s.PD.At(i), true
}

func (s PrefixSpace) Contains(p netip.Prefix) bool {
	_, ok := s.PD.Index(p)
	return ok
}
