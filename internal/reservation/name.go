// Package reservation is the IPReservation contract in one place: the
// object's name derived from (network, address) and back, the labels every
// reader selects by, the constructor every writer uses, and the compaction
// the caches apply. The name is the lock: two agents that pick the same
// address on the same network compute the same name, and the API server lets
// only one Create succeed.
package reservation

import (
	"fmt"
	"hash/fnv"
	"net/netip"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// DefaultScope is the scope of configs without network_name, as in
// whereabouts: every such range shares one cluster-wide address space, so
// the same IP is never handed out twice by two attachments.
const DefaultScope = "default"

// maxLabel is DNS-1123's bound on a label; a hashed label keeps its
// readable prefix short enough for the hash suffix to fit.
const maxLabel = validation.DNS1123LabelMaxLength

// Scope is the allocation scope of a range. With overlapping-range
// protection on (the default) it is the network name alone, so overlapping
// ranges of one network collide on the same object names. With it off, the
// range is part of the scope and overlapping ranges allocate independently.
func Scope(networkName, rangeSpec string, overlappingProtection bool) string {
	if networkName == "" {
		networkName = DefaultScope
	}
	if overlappingProtection {
		return networkName
	}
	return networkName + "/" + rangeSpec
}

// NetworkNameOf is the network_name an allocation scope was made of, read
// back from Scope's format: the scope itself, or its part before the
// range. Two scopes of one network_name share it whatever their
// enable_overlapping_ranges.
func NetworkNameOf(key string) string {
	name, _, _ := strings.Cut(key, "/")
	return name
}

// ScopeLabel maps an allocation scope to one DNS-1123 label: the scope
// itself when it is one, otherwise a readable prefix plus a hash of the
// whole scope.
func ScopeLabel(key string) string {
	if isDNS1123Label(key) && !strings.Contains(key, "--") {
		return key
	}
	h := fnv.New64a()
	h.Write([]byte(key))
	sum := strconv.FormatUint(h.Sum64(), 36)
	var b strings.Builder
	for _, r := range strings.ToLower(key) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
		case b.Len() > 0 && !strings.HasSuffix(b.String(), "-"):
			b.WriteByte('-')
		}
		if b.Len() >= maxLabel-len(sum)-3 {
			break
		}
	}
	readable := strings.Trim(b.String(), "-")
	if readable == "" {
		readable = "n"
	}
	// "--" marks a hashed label so it can never equal a plain network name.
	return readable + "--" + sum
}

// AddressName is the object name for one address of a network.
func AddressName(scope string, addr netip.Addr) string {
	return addressName(ScopeLabel(scope), addr)
}

func addressName(scopeLabel string, addr netip.Addr) string {
	return scopeLabel + "." + encodeAddr(addr)
}

// PrefixName is the object name for one delegated prefix of a network.
// Prefixes of one pool share a length, so equal base addresses are the only
// way two of them can overlap, and they collide here.
func PrefixName(scope string, p netip.Prefix) string {
	return prefixName(ScopeLabel(scope), p)
}

func prefixName(scopeLabel string, p netip.Prefix) string {
	p = p.Masked()
	if p.Addr().Is4In6() {
		// The IPv4 prefix it is, as AddressName unmaps an address: the
		// length must count the IPv4 bits for Parse to read it back.
		// Masked to fewer than 96 bits, no prefix is IPv4-mapped.
		p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
	}
	return scopeLabel + ".pd." + encodeAddr(p.Addr()) + "." + strconv.Itoa(p.Bits())
}

func encodeAddr(a netip.Addr) string {
	a = a.Unmap()
	if a.Is4() {
		return a.String()
	}
	// Colons are not allowed in object names; the full 8x4 hex form keeps
	// the encoding one-to-one (no "::" ambiguity) and every label legal.
	b := a.As16()
	out := make([]byte, 0, 8*5-1)
	for i := 0; i < 16; i += 2 {
		if i > 0 {
			out = append(out, '-')
		}
		out = append(out, hexDigits[b[i]>>4], hexDigits[b[i]&15], hexDigits[b[i+1]>>4], hexDigits[b[i+1]&15])
	}
	return string(out)
}

const hexDigits = "0123456789abcdef"

// isDNS1123Label is validation.IsDNS1123Label(s) finding nothing, without
// its regular expression: every ADD checks a scope and a node this way.
func isDNS1123Label(s string) bool {
	if s == "" || len(s) > maxLabel {
		return false
	}
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case 'a' <= c && c <= 'z', '0' <= c && c <= '9':
		case c == '-' && i > 0 && i < len(s)-1:
		default:
			return false
		}
	}
	return true
}

// isLabelValue is validation.IsValidLabelValue(s) finding nothing, without
// its regular expression.
func isLabelValue(s string) bool {
	if len(s) > validation.LabelValueMaxLength {
		return false
	}
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case (c == '-' || c == '_' || c == '.') && i > 0 && i < len(s)-1:
		default:
			return false
		}
	}
	return true
}

// ScopeLabelOf is the scope label a reservation name starts with, what
// Parse(name).ScopeLabel says, without decoding the rest.
func ScopeLabelOf(name string) string {
	label, _, _ := strings.Cut(name, ".")
	return label
}

// Parsed is what a name says.
type Parsed struct {
	ScopeLabel string
	Prefix     netip.Prefix // Bits()==32/128 for an address
	IsPrefix   bool         // a delegated prefix, not an address
}

// Parse reverses AddressName and PrefixName.
func Parse(name string) (Parsed, error) {
	label, rest, ok := strings.Cut(name, ".")
	if !ok || label == "" {
		return Parsed{}, fmt.Errorf("reservation name %q: no scope label", name)
	}
	out := Parsed{ScopeLabel: label}
	if r, isPD := strings.CutPrefix(rest, "pd."); isPD {
		out.IsPrefix = true
		i := strings.LastIndexByte(r, '.')
		if i < 0 {
			return Parsed{}, fmt.Errorf("reservation name %q: prefix without length", name)
		}
		bits, err := strconv.Atoi(r[i+1:])
		if err != nil {
			return Parsed{}, fmt.Errorf("reservation name %q: bad prefix length: %v", name, err)
		}
		addr, err := decodeAddr(r[:i])
		if err != nil {
			return Parsed{}, fmt.Errorf("reservation name %q: %v", name, err)
		}
		p, err := addr.Prefix(bits)
		if err != nil || p.Addr() != addr {
			return Parsed{}, fmt.Errorf("reservation name %q: %s/%d is not a prefix", name, addr, bits)
		}
		out.Prefix = p
		return out, nil
	}
	addr, err := decodeAddr(rest)
	if err != nil {
		return Parsed{}, fmt.Errorf("reservation name %q: %v", name, err)
	}
	out.Prefix = netip.PrefixFrom(addr, addr.BitLen())
	return out, nil
}

func decodeAddr(s string) (netip.Addr, error) {
	if strings.Contains(s, "-") {
		groups := strings.Split(s, "-")
		if len(groups) != 8 {
			return netip.Addr{}, fmt.Errorf("%q is not 8 hex groups", s)
		}
		var b [16]byte
		for i, g := range groups {
			if len(g) != 4 {
				return netip.Addr{}, fmt.Errorf("%q: group %q is not 4 hex digits", s, g)
			}
			v, err := strconv.ParseUint(g, 16, 16)
			if err != nil {
				return netip.Addr{}, fmt.Errorf("%q: %v", s, err)
			}
			b[2*i], b[2*i+1] = byte(v>>8), byte(v)
		}
		return netip.AddrFrom16(b), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil || !a.Is4() {
		return netip.Addr{}, fmt.Errorf("%q is not an IPv4 address", s)
	}
	return a, nil
}
