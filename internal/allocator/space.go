package allocator

import (
	"net/netip"
	"strconv"

	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/allocator/addrspace"
	"github.com/tenure-ipam/tenure/internal/reservation"
)

// AddressSpace is the assignable addresses of one configured range.
type AddressSpace struct{ Range addrspace.Range }

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
type PrefixSpace struct{ PD addrspace.PrefixDelegation }

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

// InSpace reports whether a reservation name is of an item of space: of
// its kind, and inside it. The name's allocation scope is not compared: a
// space is the same in every scope.
func InSpace(space Space, name string) bool {
	p, err := reservation.Parse(name)
	if err != nil || p.IsPrefix != (space.Kind() == tenurev1alpha1.KindDelegatedPrefix) {
		return false
	}
	return space.Contains(p.Prefix)
}
