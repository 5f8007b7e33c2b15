package claims

import (
	"fmt"
	"net/netip"
	"strings"

	ipamclaimsv1alpha1 "github.com/tenure-ipam/tenure/api/ipamclaims/v1alpha1"
)

// The annotations with which a claim made before its first ADD (as a
// migration tool makes a VM's) brings its addresses: upstream's IPAMClaim
// has no field for them (its spec.ipRequests is unmerged), and tenure
// does not change a CRD other projects install.
const (
	// RequestedIPsAnnotation lists the addresses, comma-separated, as IPs
	// or CIDRs ("10.0.0.5/24, fd00::5"), at most one per family.
	RequestedIPsAnnotation = "ipam.tenure.dev/requested-ips"
	// RequestedPrefixAnnotation is the delegated prefix, a CIDR.
	RequestedPrefixAnnotation = "ipam.tenure.dev/requested-prefix"
)

// Requested is what a claim asks for: its addresses, each as written with
// the prefix length it was written with (-1 for a bare IP), and its
// delegated prefix (zero if none).
type Requested struct {
	Addresses []RequestedIP
	Prefix    netip.Prefix
}

// RequestedIP is one requested address.
type RequestedIP struct {
	Addr netip.Addr
	Bits int
}

// Empty reports whether the claim asks for nothing.
func (r Requested) Empty() bool { return len(r.Addresses) == 0 && !r.Prefix.IsValid() }

// RequestedOf reads a claim's requests; an error names the annotation and
// the value.
func RequestedOf(c *ipamclaimsv1alpha1.IPAMClaim) (Requested, error) {
	var out Requested
	bad := func(key, value, why string, args ...any) error {
		return fmt.Errorf("IPAMClaim %s annotation %s: %q: %s", Key(c), key, value, fmt.Sprintf(why, args...))
	}
	if v, ok := c.Annotations[RequestedIPsAnnotation]; ok {
		for _, f := range strings.Split(v, ",") {
			f = strings.TrimSpace(f)
			q := RequestedIP{Bits: -1}
			if strings.Contains(f, "/") {
				p, err := netip.ParsePrefix(f)
				if err != nil {
					return Requested{}, bad(RequestedIPsAnnotation, v, "%q is not an IP address or CIDR: %v", f, err)
				}
				q.Addr, q.Bits = p.Addr(), p.Bits()
			} else {
				a, err := netip.ParseAddr(f)
				if err != nil {
					return Requested{}, bad(RequestedIPsAnnotation, v, "%q is not an IP address or CIDR: %v", f, err)
				}
				q.Addr = a
			}
			if q.Addr.Zone() != "" {
				return Requested{}, bad(RequestedIPsAnnotation, v, "%q has a zone", f)
			}
			q.Addr = q.Addr.Unmap()
			for _, prev := range out.Addresses {
				if prev.Addr.Is4() == q.Addr.Is4() {
					return Requested{}, bad(RequestedIPsAnnotation, v, "%s is a second address of its family after %s: one per family", q.Addr, prev.Addr)
				}
			}
			out.Addresses = append(out.Addresses, q)
		}
	}
	if v, ok := c.Annotations[RequestedPrefixAnnotation]; ok {
		p, err := netip.ParsePrefix(strings.TrimSpace(v))
		switch {
		case err != nil:
			return Requested{}, bad(RequestedPrefixAnnotation, v, "not a CIDR: %v", err)
		case !p.Addr().Is6() || p.Addr().Is4In6():
			return Requested{}, bad(RequestedPrefixAnnotation, v, "a delegated prefix is IPv6")
		case p != p.Masked():
			return Requested{}, bad(RequestedPrefixAnnotation, v, "has host bits set (did you mean %s?)", p.Masked())
		}
		out.Prefix = p
	}
	return out, nil
}
