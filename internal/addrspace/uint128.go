package addrspace

import (
	"encoding/binary"
	"math"
	"math/bits"
	"net/netip"
)

// u128 is an unsigned 128-bit integer used for address arithmetic. IPv4
// addresses are held in the low 32 bits, IPv6 addresses use all 128 (from
// As16), so arithmetic never mixes the two families.
type u128 struct{ hi, lo uint64 }

func u128From(a netip.Addr) u128 {
	if a.Is4() {
		b := a.As4()
		return u128{lo: uint64(binary.BigEndian.Uint32(b[:]))}
	}
	b := a.As16()
	return u128{hi: binary.BigEndian.Uint64(b[:8]), lo: binary.BigEndian.Uint64(b[8:])}
}

// addr converts back to an address of the given family. The caller keeps
// IPv4 values below 2^32.
func (u u128) addr(is4 bool) netip.Addr {
	if is4 {
		var b [4]byte
		binary.BigEndian.PutUint32(b[:], uint32(u.lo))
		return netip.AddrFrom4(b)
	}
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], u.hi)
	binary.BigEndian.PutUint64(b[8:], u.lo)
	return netip.AddrFrom16(b)
}

func (u u128) add(v u128) (sum u128, overflow bool) {
	lo, c := bits.Add64(u.lo, v.lo, 0)
	hi, c := bits.Add64(u.hi, v.hi, c)
	return u128{hi, lo}, c != 0
}

func (u u128) sub(v u128) (diff u128, underflow bool) {
	lo, b := bits.Sub64(u.lo, v.lo, 0)
	hi, b := bits.Sub64(u.hi, v.hi, b)
	return u128{hi, lo}, b != 0
}

func (u u128) cmp(v u128) int {
	switch {
	case u.hi < v.hi:
		return -1
	case u.hi > v.hi:
		return 1
	case u.lo < v.lo:
		return -1
	case u.lo > v.lo:
		return 1
	}
	return 0
}

func (u u128) or(v u128) u128 { return u128{u.hi | v.hi, u.lo | v.lo} }

func (u u128) shl(n int) u128 {
	switch {
	case n <= 0:
		return u
	case n >= 128:
		return u128{}
	case n >= 64:
		return u128{hi: u.lo << (n - 64)}
	}
	return u128{hi: u.hi<<n | u.lo>>(64-n), lo: u.lo << n}
}

func (u u128) shr(n int) u128 {
	switch {
	case n <= 0:
		return u
	case n >= 128:
		return u128{}
	case n >= 64:
		return u128{lo: u.hi >> (n - 64)}
	}
	return u128{hi: u.hi >> n, lo: u.lo>>n | u.hi<<(64-n)}
}

// ones returns a value with the low n bits set (0 <= n <= 128).
func ones(n int) u128 {
	switch {
	case n <= 0:
		return u128{}
	case n >= 128:
		return u128{math.MaxUint64, math.MaxUint64}
	case n >= 64:
		return u128{hi: 1<<(n-64) - 1, lo: math.MaxUint64}
	}
	return u128{lo: 1<<n - 1}
}

// sat64 saturates to math.MaxUint64.
func (u u128) sat64() uint64 {
	if u.hi != 0 {
		return math.MaxUint64
	}
	return u.lo
}

// prefixBounds returns the first and last address of p (p need not be masked).
func prefixBounds(p netip.Prefix) (first, last u128) {
	m := p.Masked()
	first = u128From(m.Addr())
	last = first.or(ones(m.Addr().BitLen() - m.Bits()))
	return first, last
}
