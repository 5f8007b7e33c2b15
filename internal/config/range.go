package config

import (
	"fmt"
	"math"
	"net/netip"
	"slices"
	"strings"
)

// Range is one address range: each ADD takes one address from each Range of
// a config.
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
	// Parse it is sorted, without prefixes nested in others, and holds only
	// the prefixes of the range's family that meet [Start, End] (an exclude
	// outside the range is dropped silently, as whereabouts tolerates it).
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
	lo, hi := usableBounds(r.Prefix)
	if r.Start == lo && r.End == hi {
		return r.Prefix.String()
	}
	return fmt.Sprintf("%s-%s/%d", r.Start, r.End, r.Prefix.Bits())
}

// usableBounds returns the first and last assignable address of p (masked).
func usableBounds(p netip.Prefix) (lo, hi netip.Addr) {
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

// normalizeExcludes keeps the excludes of r's family that meet [Start, End],
// sorted and merged.
func (r *Range) normalizeExcludes() {
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

// rangeInput is one range as written: in the ipam section (top-level or an
// ipRanges entry), the flat file, or an IPPool spec. Each field carries the
// path of its key for messages.
type rangeInput struct {
	rng        field
	start, end *field
	exclude    []field // entries, possibly from several lists
}

// builtRange is a parsed range with what messages need about it.
type builtRange struct {
	r      Range
	in     rangeInput
	origin string // path of the entry: "ipam", "ipam.ipRanges[1]", "IPPool x spec.ranges[0]"
}

// parseAddr parses a single address: no zone, IPv4-mapped IPv6 unmapped
// (whereabouts' net.IP treats ::ffff:a.b.c.d as a.b.c.d).
func parseAddr(s string) (netip.Addr, error) {
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Addr{}, err
	}
	if a.Zone() != "" {
		return netip.Addr{}, fmt.Errorf("zoned addresses are not allowed")
	}
	return a.Unmap(), nil
}

// parsePrefix parses a CIDR; IPv4-mapped IPv6 prefixes are refused.
func parsePrefix(s string) (netip.Prefix, error) {
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, err
	}
	if p.Addr().Is4In6() {
		return netip.Prefix{}, fmt.Errorf("IPv4-mapped IPv6 prefixes are not allowed; write the IPv4 prefix")
	}
	return p, nil
}

func familyName(is4 bool) string {
	if is4 {
		return "IPv4"
	}
	return "IPv6"
}

func (f field) addr() (netip.Addr, error) {
	s, err := f.str()
	if err != nil {
		return netip.Addr{}, err
	}
	a, err := parseAddr(s)
	if err != nil {
		return netip.Addr{}, f.errorf("not an IP address: %v", err)
	}
	return a, nil
}

// excludePrefix parses an exclude entry: a CIDR (masked, as whereabouts
// does: 10.0.0.5/30 excludes 10.0.0.4-10.0.0.7) or a single address.
func (f field) excludePrefix() (netip.Prefix, error) {
	s, err := f.str()
	if err != nil {
		return netip.Prefix{}, err
	}
	if strings.Contains(s, "/") {
		p, err := parsePrefix(s)
		if err != nil {
			return netip.Prefix{}, f.errorf("not a CIDR or IP address: %v", err)
		}
		return p.Masked(), nil
	}
	a, err := parseAddr(s)
	if err != nil {
		return netip.Prefix{}, f.errorf("not a CIDR or IP address: %v", err)
	}
	return netip.PrefixFrom(a, a.BitLen()), nil
}

// buildRange parses and validates one range. Excludes are parsed but not yet
// normalized; the gateway is not yet applied (see finishRanges).
func buildRange(in rangeInput, origin string) (builtRange, error) {
	spec, err := in.rng.str()
	if err != nil {
		return builtRange{}, err
	}
	if spec == "" {
		return builtRange{}, in.rng.errorf("is required")
	}
	r := Range{Spec: spec}
	var first, last netip.Addr
	dash := false
	if a, b, ok := strings.Cut(spec, "-"); ok {
		dash = true
		fa, err := parseAddr(strings.TrimSpace(a))
		if err != nil {
			return builtRange{}, in.rng.errorf("first-last/prefix form: first address %q: %v", a, err)
		}
		p, err := parsePrefix(strings.TrimSpace(b))
		if err != nil {
			return builtRange{}, in.rng.errorf("first-last/prefix form: %q is not a CIDR: %v", b, err)
		}
		if fa.Is4() != p.Addr().Is4() {
			return builtRange{}, in.rng.errorf("first address %s is %s but %s is %s", fa, familyName(fa.Is4()), p, familyName(p.Addr().Is4()))
		}
		if !p.Contains(fa) {
			return builtRange{}, in.rng.errorf("first address %s is outside %s", fa, p.Masked())
		}
		first, last = fa, p.Addr()
		if last.Less(first) {
			return builtRange{}, in.rng.errorf("first address %s is after last address %s", first, last)
		}
		r.Prefix = p.Masked()
	} else {
		p, err := parsePrefix(strings.TrimSpace(spec))
		if err != nil {
			return builtRange{}, in.rng.errorf("not a CIDR (want a.b.c.d/n, x::/n or first-last/n): %v", err)
		}
		r.Prefix = p.Masked()
	}
	is4 := r.Prefix.Addr().Is4()
	for _, f := range []*field{in.start, in.end} {
		if f == nil {
			continue
		}
		if dash {
			return builtRange{}, f.errorf("contradicts %s %s, whose first-last form already sets the start and end", in.rng.path, in.rng.show())
		}
		a, err := f.addr()
		if err != nil {
			return builtRange{}, err
		}
		if a.Is4() != is4 {
			return builtRange{}, f.errorf("is %s but %s %s is %s", familyName(a.Is4()), in.rng.path, in.rng.show(), familyName(is4))
		}
		if !r.Prefix.Contains(a) {
			return builtRange{}, f.errorf("is outside %s %s", in.rng.path, in.rng.show())
		}
		if f == in.start {
			first = a
		} else {
			last = a
		}
	}
	if in.start != nil && in.end != nil && last.Less(first) {
		return builtRange{}, in.start.errorf("is after %s %s", in.end.path, in.end.show())
	}
	lo, hi := usableBounds(r.Prefix)
	r.Start, r.End = lo, hi
	if first.IsValid() && lo.Less(first) {
		r.Start = first
	}
	if last.IsValid() && last.Less(hi) {
		r.End = last
	}
	if r.End.Less(r.Start) {
		what := "network and broadcast addresses are never assigned"
		if !is4 {
			what = "the Subnet-Router anycast address is never assigned"
		}
		return builtRange{}, in.rng.errorf("has no assignable address%s (%s)", in.boundsDesc(), what)
	}
	for _, f := range in.exclude {
		p, err := f.excludePrefix()
		if err != nil {
			return builtRange{}, err
		}
		r.Exclude = append(r.Exclude, p)
	}
	return builtRange{r: r, in: in, origin: origin}, nil
}

func (in rangeInput) boundsDesc() string {
	var parts []string
	for _, f := range []*field{in.start, in.end} {
		if f != nil {
			parts = append(parts, f.path+" "+f.show())
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return " with " + strings.Join(parts, " and ")
}

// excludeDesc describes the excludes for a "no assignable address" message:
// ipam.exclude ["10.0.0.1","10.0.0.2/31"].
func (in rangeInput) excludeDesc() string {
	var keys []string
	vals := map[string][]string{}
	for _, f := range in.exclude {
		k := f.path
		if i := strings.LastIndexByte(k, '['); i >= 0 {
			k = k[:i]
		}
		if _, ok := vals[k]; !ok {
			keys = append(keys, k)
		}
		vals[k] = append(vals[k], f.show())
	}
	var parts []string
	for _, k := range keys {
		parts = append(parts, k+" ["+strings.Join(vals[k], ",")+"]")
	}
	return strings.Join(parts, " and ")
}
