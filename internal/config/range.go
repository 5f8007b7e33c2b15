package config

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/tenure-ipam/tenure/internal/addrspace"
)

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
	r  addrspace.Range
	in rangeInput
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

// minSegmentBits is the shortest prefix accepted for a range or a
// delegation pool: a /8, the largest block ever run as one network (an
// IPv4 class A; 10.0.0.0/8 and the IPv6 ULA fd00::/8 are the largest
// private blocks). An address handed out carries its range's prefix length
// and the interface holding it routes the whole prefix on-link, so a /0
// takes over the pod's default route.
const minSegmentBits = 8

// neverAssigned are the blocks no interface address is taken from: a range
// or a delegation pool overlapping one cannot be a segment.
var neverAssigned = []struct {
	block netip.Prefix
	what  string
}{
	{netip.MustParsePrefix("0.0.0.0/8"), `"this network"`},
	{netip.MustParsePrefix("127.0.0.0/8"), "loopback"},
	{netip.MustParsePrefix("224.0.0.0/4"), "multicast"},
	{netip.MustParsePrefix("255.255.255.255/32"), "limited broadcast"},
	{netip.MustParsePrefix("::/128"), "the unspecified address"},
	{netip.MustParsePrefix("::1/128"), "loopback"},
	{netip.MustParsePrefix("ff00::/8"), "multicast"},
}

// checkSegment refuses a prefix (masked) that cannot be a segment or a
// delegation pool, naming f.
func checkSegment(f field, p netip.Prefix) error {
	if p.Bits() < minSegmentBits {
		return f.errorf("is a /%d: tenure accepts /%d or longer, as no network segment or delegation pool is larger", p.Bits(), minSegmentBits)
	}
	for _, n := range neverAssigned {
		if p.Overlaps(n.block) {
			return f.errorf("overlaps %s (%s), whose addresses are never an interface's", n.block, n.what)
		}
	}
	return nil
}

func familyName(is4 bool) string {
	if is4 {
		return "IPv4"
	}
	return "IPv6"
}

func (f field) addr() (netip.Addr, error) {
	a, err := parseAddr(f.text)
	if err != nil {
		return netip.Addr{}, f.errorf("not an IP address: %v", err)
	}
	return a, nil
}

// excludePrefix parses an exclude entry: a CIDR (masked, as whereabouts
// does: 10.0.0.5/30 excludes 10.0.0.4-10.0.0.7) or a single address.
func (f field) excludePrefix() (netip.Prefix, error) {
	s := f.text
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
func buildRange(in rangeInput) (builtRange, error) {
	spec := in.rng.text
	if spec == "" {
		return builtRange{}, in.rng.errorf("is required")
	}
	r := addrspace.Range{Spec: spec}
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
	if err := checkSegment(in.rng, r.Prefix); err != nil {
		return builtRange{}, err
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
	lo, hi := addrspace.UsableBounds(r.Prefix)
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
	return builtRange{r: r, in: in}, nil
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
