package config

import (
	"net/netip"
	"strings"
)

// requestedIP is one entry of runtimeConfig.ips.
type requestedIP struct {
	addr netip.Addr
	bits int // the prefix length written, -1 for a bare address
	f    field
}

// parseRequested reads runtimeConfig.ips: libcni puts it in the network
// config when the delegate declares the "ips" capability, Multus fills it
// from the network-selection element's "ips". Entries are CIDRs
// ("10.0.0.5/24") or bare addresses, as host-local accepts them, at most one
// per family. Other runtimeConfig keys belong to other plugins.
func parseRequested(m runtimeConfig) ([]requestedIP, error) {
	var out []requestedIP
	for _, e := range m.IPs.get() {
		s := e.get()
		q := requestedIP{bits: -1, f: e.field}
		if strings.Contains(s, "/") {
			p, err := parsePrefix(strings.TrimSpace(s))
			if err != nil {
				return nil, e.errorf("not an IP address or CIDR: %v", err)
			}
			q.addr, q.bits = p.Addr(), p.Bits()
		} else {
			a, err := parseAddr(strings.TrimSpace(s))
			if err != nil {
				return nil, e.errorf("not an IP address or CIDR: %v", err)
			}
			q.addr = a
		}
		for _, prev := range out {
			if prev.addr.Is4() == q.addr.Is4() {
				return nil, e.errorf("is a second %s address after %s %s: one address per family", familyName(q.addr.Is4()), prev.f.path, prev.f.show())
			}
		}
		out = append(out, q)
	}
	return out, nil
}

// assignRequested gives each requested address the first range that can
// hand it out, and refuses one that no range can, naming why.
func (c *Config) assignRequested(built []builtRange, src sources) ([]netip.Addr, error) {
	if len(src.requested) == 0 {
		return nil, nil
	}
	out := make([]netip.Addr, len(built))
	for _, q := range src.requested {
		i := 0
		for i < len(built) && !built[i].r.Contains(q.addr) {
			i++
		}
		if i == len(built) {
			return nil, c.refuseRequested(q, built, src.gatewayKey)
		}
		b := built[i]
		if q.bits >= 0 && q.bits != b.r.Prefix.Bits() {
			return nil, q.f.errorf("has prefix length /%d, but %s %s, the range it is in, is a /%d", q.bits, b.in.rng.path, b.in.rng.show(), b.r.Prefix.Bits())
		}
		out[i] = q.addr
	}
	return out, nil
}

// refuseRequested says why no range hands out q.
func (c *Config) refuseRequested(q requestedIP, built []builtRange, gatewayKey field) *Error {
	var ranges []string
	for _, b := range built {
		ranges = append(ranges, b.in.rng.path+" "+b.in.rng.show())
		if !b.r.Prefix.Contains(q.addr) {
			continue
		}
		rng := b.in.rng.path + " " + b.in.rng.show()
		if q.addr == c.Gateway {
			return q.f.errorf("is the gateway (%s %s) of %s, which is never handed out", gatewayKey.path, gatewayKey.show(), rng)
		}
		if q.addr.Less(b.r.Start) || b.r.End.Less(q.addr) {
			return q.f.errorf("is not assignable in %s, whose addresses run from %s to %s", rng, b.r.Start, b.r.End)
		}
		for _, e := range b.in.exclude {
			if p, err := e.excludePrefix(); err == nil && p.Contains(q.addr) {
				return q.f.errorf("is excluded from %s by %s %s", rng, e.path, e.show())
			}
		}
		return q.f.errorf("is excluded from %s", rng)
	}
	return q.f.errorf("is outside every range (%s)", strings.Join(ranges, ", "))
}
