package addrspace

import (
	"math"
	"net/netip"
	"slices"
	"testing"
)

var (
	addr = netip.MustParseAddr
	pfx  = netip.MustParsePrefix
)

func pfxs(ss ...string) (out []netip.Prefix) {
	for _, s := range ss {
		out = append(out, pfx(s))
	}
	return out
}

// roundTrip checks Offset(At(i)) == i over every offset of r and returns
// how many of those addresses r contains.
func roundTrip(t *testing.T, r Range) (contained uint64) {
	t.Helper()
	for off := range r.Size() {
		a := r.At(off)
		if o, ok := r.Offset(a); !ok || o != off {
			t.Fatalf("Offset(At(%d)=%s) = %d, %v", off, a, o, ok)
		}
		if r.Contains(a) {
			contained++
		}
	}
	return contained
}

// normalized is the Range over the whole of prefix, as internal/config
// builds it from a range key without range_start or range_end.
func normalized(prefix string, exclude ...string) Range {
	p := pfx(prefix).Masked()
	r := Range{Spec: prefix, Prefix: p, Exclude: pfxs(exclude...)}
	r.Start, r.End = UsableBounds(p)
	r.NormalizeExcludes()
	return r
}

func TestRangeAtOffsetCarry(t *testing.T) {
	r := normalized("10.0.0.0/16", "10.0.1.0/30", "10.0.1.2/32")
	// Start is 10.0.0.1: offset 254 is 10.0.0.255, 255 carries into 10.0.1.0.
	for _, tc := range []struct {
		off  uint64
		addr string
	}{
		{0, "10.0.0.1"}, {254, "10.0.0.255"}, {255, "10.0.1.0"}, {256, "10.0.1.1"}, {65532, "10.0.255.253"}, {65533, "10.0.255.254"},
	} {
		if got := r.At(tc.off); got != addr(tc.addr) {
			t.Errorf("At(%d) = %v, want %s", tc.off, got, tc.addr)
		}
		if off, ok := r.Offset(addr(tc.addr)); !ok || off != tc.off {
			t.Errorf("Offset(%s) = %d, %v, want %d", tc.addr, off, ok, tc.off)
		}
	}
	if r.Size() != 65534 || r.Capacity() != 65534-4 {
		t.Errorf("Size, Capacity = %d, %d", r.Size(), r.Capacity())
	}
	if got := r.At(r.Size()); got.IsValid() {
		t.Errorf("At(Size) = %v, want zero", got)
	}
	if got := r.At(math.MaxUint64); got.IsValid() {
		t.Errorf("At(MaxUint64) = %v, want zero", got)
	}
	for _, a := range []string{"10.0.0.0", "10.0.255.255", "10.1.0.1", "9.255.255.255", "::ffff:10.0.0.5", "fd00::1"} {
		if _, ok := r.Offset(addr(a)); ok {
			t.Errorf("Offset(%s) ok, want outside", a)
		}
		if r.Contains(addr(a)) {
			t.Errorf("Contains(%s)", a)
		}
	}
	if _, ok := r.Offset(netip.Addr{}); ok {
		t.Error("Offset(zero) ok")
	}
	for a, want := range map[string]bool{"10.0.0.255": true, "10.0.1.0": false, "10.0.1.2": false, "10.0.1.3": false, "10.0.1.4": true} {
		if r.Contains(addr(a)) != want {
			t.Errorf("Contains(%s) = %v, want %v", a, !want, want)
		}
	}
	// Round trip over every address: Contains matches the excludes, and
	// Capacity counts the contained addresses.
	n := roundTrip(t, r)
	if n != r.Capacity() {
		t.Errorf("contained %d, Capacity %d", n, r.Capacity())
	}
}

func TestRangeIPv6(t *testing.T) {
	r := normalized("2001:db8::/32", "2001:db8:0:1::/64", "2001:db8::1/128")
	if r.Start != addr("2001:db8::1") || r.End != addr("2001:db8:ffff:ffff:ffff:ffff:ffff:ffff") {
		t.Fatalf("range = [%s, %s]", r.Start, r.End)
	}
	if r.Size() != math.MaxUint64 || r.Capacity() != math.MaxUint64 {
		t.Errorf("Size, Capacity = %d, %d: want saturated", r.Size(), r.Capacity())
	}
	// Carry across the 64-bit halves: ::1 + (2^64-1) = 0:0:0:1::.
	if got := r.At(math.MaxUint64); got != addr("2001:db8:0:1::") {
		t.Errorf("At(MaxUint64) = %v", got)
	}
	if off, ok := r.Offset(addr("2001:db8:0:1::")); !ok || off != math.MaxUint64 {
		t.Errorf("Offset = %d, %v", off, ok)
	}
	if _, ok := r.Offset(addr("2001:db8:0:1::1")); ok {
		t.Error("Offset past 2^64-1 must not be representable")
	}
	if got := r.At(0xffff_ffff_ffff_fffe); got != addr("2001:db8::ffff:ffff:ffff:ffff") {
		t.Errorf("At = %v", got)
	}
	for a, want := range map[string]bool{
		"2001:db8::": false, "2001:db8::1": false, "2001:db8::2": true, "2001:db8::ffff:ffff:ffff:ffff": true,
		"2001:db8:0:1::": false, "2001:db8:0:1:ffff::": false, "2001:db8:0:2::": true, "2001:db9::1": false, "10.0.0.1": false,
		"2001:db8::2%eth0": false,
	} {
		if r.Contains(addr(a)) != want {
			t.Errorf("Contains(%s) = %v, want %v", a, !want, want)
		}
	}

	// A /64 has 2^64-1 candidates: exactly MaxUint64, the last one at offset
	// MaxUint64-1.
	r = normalized("fd00::/64", "fd00::ffff:ffff:ffff:ff00/120")
	if r.Size() != math.MaxUint64 || r.Capacity() != math.MaxUint64-256 {
		t.Errorf("Size, Capacity = %d, %d", r.Size(), r.Capacity())
	}
	if got := r.At(math.MaxUint64 - 1); got != addr("fd00::ffff:ffff:ffff:ffff") {
		t.Errorf("At(last) = %v", got)
	}
	if got := r.At(math.MaxUint64); got.IsValid() {
		t.Errorf("At(MaxUint64) = %v, want zero", got)
	}
	if off, ok := r.Offset(addr("fd00::ffff:ffff:ffff:ffff")); !ok || off != math.MaxUint64-1 {
		t.Errorf("Offset(last) = %d, %v", off, ok)
	}

	// /120: round trip over every address.
	r = normalized("fd00::100/120", "fd00::1f0/124", "fd00::101/128") // the last one a gateway
	n := roundTrip(t, r)
	if r.Size() != 255 || n != 255-16-1 || r.Capacity() != n {
		t.Errorf("Size %d, contained %d, Capacity %d", r.Size(), n, r.Capacity())
	}
}

func TestRangeHandBuilt(t *testing.T) {
	var zero Range
	if zero.Size() != 0 || zero.Capacity() != 0 || zero.At(0).IsValid() || zero.Contains(addr("10.0.0.1")) || zero.Family() != 0 {
		t.Error("zero Range must be empty")
	}
	if zero.String() != "<invalid range>" {
		t.Errorf("String = %q", zero.String())
	}
	// Unnormalised, nested and overlapping-the-edge excludes.
	r := Range{Prefix: pfx("10.0.0.0/24"), Start: addr("10.0.0.10"), End: addr("10.0.0.19"),
		Exclude: pfxs("10.0.0.16/30", "10.0.0.17/32", "10.0.0.0/29", "10.0.0.8/30", "fd00::/64")}
	// 10-19 minus 16-19 minus 10-11 (of 8-11).
	if r.Size() != 10 || r.Capacity() != 4 {
		t.Errorf("Size, Capacity = %d, %d", r.Size(), r.Capacity())
	}
	if r.String() != "10.0.0.10-10.0.0.19/24" || r.Family() != 4 {
		t.Errorf("String, Family = %q, %d", r.String(), r.Family())
	}
	// Everything excluded saturates at zero, never underflows.
	r.Exclude = pfxs("0.0.0.0/0", "10.0.0.0/8")
	if r.Capacity() != 0 {
		t.Errorf("Capacity = %d", r.Capacity())
	}
	// The whole IPv6 space.
	all := Range{Prefix: pfx("::/0"), Start: addr("::"), End: addr("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff")}
	if all.Size() != math.MaxUint64 || all.Capacity() != math.MaxUint64 || all.At(math.MaxUint64) != addr("::ffff:ffff:ffff:ffff") {
		t.Errorf("all: %d %d %v", all.Size(), all.Capacity(), all.At(math.MaxUint64))
	}
	// End before Start.
	bad := Range{Prefix: pfx("10.0.0.0/24"), Start: addr("10.0.0.9"), End: addr("10.0.0.1")}
	if bad.Size() != 0 || bad.At(0).IsValid() {
		t.Error("inverted Range must be empty")
	}
}

func TestPrefixDelegation(t *testing.T) {
	pd := PrefixDelegation{Range: pfx("2001:db8:100::/40"), PrefixLength: 56}
	for i, want := range map[uint64]string{
		0: "2001:db8:100::/56", 1: "2001:db8:100:100::/56", 255: "2001:db8:100:ff00::/56", 256: "2001:db8:101::/56", 65535: "2001:db8:1ff:ff00::/56",
	} {
		got := pd.At(i)
		if got != pfx(want) {
			t.Errorf("At(%d) = %v, want %s", i, got, want)
		}
		if idx, ok := pd.Index(got); !ok || idx != i {
			t.Errorf("Index(%v) = %d, %v, want %d", got, idx, ok, i)
		}
	}
	for _, q := range []string{"2001:db8:100::/64", "2001:db8:100::1/56", "2001:db8:200::/56", "10.0.0.0/24", "::ffff:10.0.0.0/120"} {
		if _, ok := pd.Index(pfx(q)); ok {
			t.Errorf("Index(%s) ok", q)
		}
	}
	if _, ok := pd.Index(netip.Prefix{}); ok {
		t.Error("Index(zero) ok")
	}

	// Carry across the 64-bit halves with /128 delegations from a /56.
	pd = PrefixDelegation{Range: pfx("2001:db8::/56"), PrefixLength: 128}
	if pd.Count() != math.MaxUint64 {
		t.Errorf("Count = %d, want saturated", pd.Count())
	}
	if got := pd.At(math.MaxUint64); got != pfx("2001:db8::ffff:ffff:ffff:ffff/128") {
		t.Errorf("At = %v", got)
	}
	if idx, ok := pd.Index(pfx("2001:db8:0:1::/128")); ok {
		t.Errorf("Index past 2^64 = %d, want not representable", idx)
	}
	if idx, ok := pd.Index(pfx("2001:db8::ffff:ffff:ffff:ffff/128")); !ok || idx != math.MaxUint64 {
		t.Errorf("Index = %d, %v", idx, ok)
	}

	pd = PrefixDelegation{Range: pfx("2001:db8::/48"), PrefixLength: 112}
	if pd.Count() != math.MaxUint64 {
		t.Errorf("Count of 2^64 = %d", pd.Count())
	}
	if got := pd.At(1 << 20); got != pfx("2001:db8::10:0:0/112") {
		t.Errorf("At(2^20) = %v", got)
	}
	pd = PrefixDelegation{Range: pfx("2001:db8::/48"), PrefixLength: 64}
	if pd.Count() != 65536 || pd.At(65536).IsValid() {
		t.Errorf("Count = %d", pd.Count())
	}

	var zero PrefixDelegation
	if zero.Count() != 0 || zero.At(0).IsValid() {
		t.Error("zero PrefixDelegation must be empty")
	}
	if _, ok := zero.Index(pfx("2001:db8::/64")); ok {
		t.Error("zero Index ok")
	}
}

func TestU128(t *testing.T) {
	if got := (u128{lo: 1}).shl(64); got != (u128{hi: 1}) {
		t.Errorf("shl 64 = %v", got)
	}
	if got := (u128{lo: 3}).shl(63); got != (u128{hi: 1, lo: 1 << 63}) {
		t.Errorf("shl 63 = %v", got)
	}
	if got := (u128{hi: 1, lo: 1 << 63}).shr(63); got != (u128{lo: 3}) {
		t.Errorf("shr 63 = %v", got)
	}
	if got := (u128{hi: 1 << 63}).shr(127); got != (u128{lo: 1}) {
		t.Errorf("shr 127 = %v", got)
	}
	if got := (u128{hi: 5}).shl(128); got != (u128{}) {
		t.Errorf("shl 128 = %v", got)
	}
	if _, ov := ones(128).add(u128{lo: 1}); !ov {
		t.Error("overflow not reported")
	}
	if _, un := (u128{}).sub(u128{lo: 1}); !un {
		t.Error("underflow not reported")
	}
	if got, _ := (u128{hi: 1}).sub(u128{lo: 1}); got != (u128{lo: math.MaxUint64}) {
		t.Errorf("borrow = %v", got)
	}
	if ones(64) != (u128{lo: math.MaxUint64}) || ones(65) != (u128{hi: 1, lo: math.MaxUint64}) || ones(0) != (u128{}) {
		t.Error("ones")
	}
}

func TestUsableBounds(t *testing.T) {
	for _, tc := range []struct{ prefix, lo, hi string }{
		{"10.0.0.0/24", "10.0.0.1", "10.0.0.254"},
		{"10.0.0.7/29", "10.0.0.1", "10.0.0.6"}, // masked first
		{"10.0.0.0/30", "10.0.0.1", "10.0.0.2"},
		{"10.0.0.0/31", "10.0.0.0", "10.0.0.1"}, // RFC 3021
		{"10.0.0.5/32", "10.0.0.5", "10.0.0.5"},
		{"fd00::/64", "fd00::1", "fd00::ffff:ffff:ffff:ffff"}, // no Subnet-Router anycast
		{"fd00::/126", "fd00::1", "fd00::3"},
		{"fd00::/127", "fd00::", "fd00::1"}, // RFC 6164
		{"fd00::1/128", "fd00::1", "fd00::1"},
	} {
		lo, hi := UsableBounds(pfx(tc.prefix))
		if lo != addr(tc.lo) || hi != addr(tc.hi) {
			t.Errorf("UsableBounds(%s) = %s, %s, want %s, %s", tc.prefix, lo, hi, tc.lo, tc.hi)
		}
	}
}

func TestNormalizeExcludes(t *testing.T) {
	r := Range{Prefix: pfx("10.0.0.0/24"), Start: addr("10.0.0.10"), End: addr("10.0.0.19"),
		Exclude: []netip.Prefix{
			pfx("10.0.0.17/30"), // masked to 10.0.0.16/30
			pfx("10.0.0.18/32"), // nested in it
			pfx("10.0.0.8/30"),  // meets Start
			pfx("10.0.0.0/29"),  // before Start
			pfx("10.0.0.20/32"), // after End
			pfx("fd00::/64"),    // other family
			pfx("10.0.0.12/31"), // inside
			{},                  // invalid
		}}
	r.NormalizeExcludes()
	want := pfxs("10.0.0.8/30", "10.0.0.12/31", "10.0.0.16/30")
	if !slices.Equal(r.Exclude, want) {
		t.Errorf("Exclude = %v, want %v", r.Exclude, want)
	}
	if r.Capacity() != 10-2-2-4 {
		t.Errorf("Capacity = %d", r.Capacity())
	}
}

func TestRangeNext(t *testing.T) {
	const top = math.MaxUint64
	v4 := func(exclude ...string) Range { return normalized("10.0.0.0/24", exclude...) } // .1 is offset 0
	unsorted := v4()
	unsorted.Exclude = pfxs("10.0.0.48/29", "10.0.0.32/28", "10.0.0.16/28", "fd00::/64")
	for _, tc := range []struct {
		name     string
		r        Range
		offset   uint64
		want     uint64
		wantNone bool
	}{
		{name: "no excludes: the offset itself", r: v4(), offset: 0, want: 0},
		{name: "no excludes: the last offset", r: v4(), offset: 253, want: 253},
		{name: "past the end", r: v4(), offset: 254, wantNone: true},
		{name: "far past the end", r: v4(), offset: top, wantNone: true},
		{name: "exclude at the start", r: v4("10.0.0.0/28"), offset: 0, want: 15},
		{name: "before an exclude", r: v4("10.0.0.16/28"), offset: 14, want: 14},
		{name: "inside an exclude", r: v4("10.0.0.16/28"), offset: 20, want: 31},
		{name: "exclude at the end", r: v4("10.0.0.240/28"), offset: 239, wantNone: true},
		{name: "just before an exclude at the end", r: v4("10.0.0.240/28"), offset: 238, want: 238},
		{name: "nested excludes", r: v4("10.0.0.16/28", "10.0.0.20/30", "10.0.0.24/32"), offset: 19, want: 31},
		{name: "adjacent excludes", r: v4("10.0.0.16/28", "10.0.0.32/28", "10.0.0.48/29"), offset: 15, want: 55},
		{name: "adjacent excludes, unsorted and not normalised", r: unsorted, offset: 15, want: 55},
		{name: "the whole range excluded", r: v4("10.0.0.0/24"), offset: 0, wantNone: true},
		{name: "an exclude wider than the range", r: v4("0.0.0.0/0"), offset: 100, wantNone: true},
		{name: "an exclude up to 255.255.255.255", r: normalized("255.255.255.0/24", "255.255.255.128/25"), offset: 127, wantNone: true},
		{name: "a /32", r: normalized("10.0.0.5/32"), offset: 0, want: 0},
		{name: "10.0.0.0/8 without 10.0.0.0/9 and 10.128.0.0/10",
			r: normalized("10.0.0.0/8", "10.0.0.0/9", "10.128.0.0/10"), offset: 1 << 22, want: 3<<22 - 1},

		{name: "IPv6 /64 without its first /65", r: normalized("2001:db8::/64", "2001:db8::/65"), offset: 0, want: 1<<63 - 1},
		{name: "IPv6 /64 without its first /65, from inside", r: normalized("2001:db8::/64", "2001:db8::/65"), offset: 1 << 40, want: 1<<63 - 1},
		{name: "IPv6 /64: the last address", r: normalized("fd00::/64"), offset: top - 1, want: top - 1},
		{name: "IPv6 /64: past the end", r: normalized("fd00::/64"), offset: top, wantNone: true},
		{name: "IPv6 /64: an exclude at the top", r: normalized("fd00::/64", "fd00::ffff:ffff:ffff:ff00/120"), offset: top - 256, wantNone: true},
		{name: "IPv6 /64: just below an exclude at the top", r: normalized("fd00::/64", "fd00::ffff:ffff:ffff:ff00/120"), offset: top - 257, want: top - 257},
		{name: "IPv6 /64: an exclude just below 2^64", r: normalized("fd00::/64", "fd00::ffff:ffff:fffe:0/112"), offset: 0xffff_ffff_fffe_0000 - 1, want: 0xffff_ffff_ffff_0000 - 1},
		{name: "IPv6 /127", r: normalized("fd00::/127", "fd00::/128"), offset: 0, want: 1},
		{name: "IPv6 the whole range excluded", r: normalized("fd00::/120", "fd00::/64"), offset: 0, wantNone: true},
		// Offsets stop at Size (2^64-1 saturated): what lies beyond is
		// out of reach.
		{name: "IPv6 /63 whose first 2^64-1 addresses are excluded", r: normalized("fd00::/63", "fd00::/64"), offset: 0, wantNone: true},
	} {
		got, ok := tc.r.Next(tc.offset)
		switch {
		case tc.wantNone && ok:
			t.Errorf("%s: Next(%d) = %d (%s), want none", tc.name, tc.offset, got, tc.r.At(got))
		case !tc.wantNone && (!ok || got != tc.want):
			t.Errorf("%s: Next(%d) = %d, %v, want %d", tc.name, tc.offset, got, ok, tc.want)
		case ok && !tc.r.Contains(tc.r.At(got)):
			t.Errorf("%s: Next(%d) = %d: %s is not in the range", tc.name, tc.offset, got, tc.r.At(got))
		}
	}
}

// TestRangeNextMatchesContains compares Next with a walk over every offset.
func TestRangeNextMatchesContains(t *testing.T) {
	for _, r := range []Range{
		normalized("10.0.0.0/16", "10.0.1.0/30", "10.0.1.2/32", "10.0.0.0/26", "10.0.255.0/24", "10.0.128.0/17"),
		normalized("fd00::100/120", "fd00::1f0/124", "fd00::101/128", "fd00::180/125", "fd00::188/125"),
		normalized("10.0.0.0/22", "10.0.0.0/22"),
	} {
		// Walking down, want is the first contained offset at or after off.
		want, wantOK := uint64(0), false
		for off := r.Size(); off > 0; off-- {
			if r.Contains(r.At(off - 1)) {
				want, wantOK = off-1, true
			}
			if got, ok := r.Next(off - 1); got != want || ok != wantOK {
				t.Fatalf("%s: Next(%d) = %d, %v, want %d, %v", r, off-1, got, ok, want, wantOK)
			}
		}
	}
}
