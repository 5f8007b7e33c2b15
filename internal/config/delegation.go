package config

import (
	"math"
	"net"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/tenure-ipam/tenure/internal/allocator/addrspace"
)

// DHCPv6 configures the node agent's DHCPv6 service for the attachment.
type DHCPv6 struct {
	Enabled           bool          // default true when the dhcpv6 object is present
	Interfaces        []string      // nil if unset
	PreferredLifetime time.Duration // default 3600s
	ValidLifetime     time.Duration // default 7200s, >= PreferredLifetime
	InstallRoutes     bool          // default true
	// RouterAdvertisements (router_advertisements, default false): the
	// node serving a guest also sends it Router Advertisements (M and O
	// flags, the network's IPv6 on-link prefixes), so clients with stock
	// settings start DHCPv6.
	RouterAdvertisements bool
	// TrustedRelays (trusted_relays, default none): the DHCPv6 relay agents
	// whose Relay-forward messages are answered, each on one of Interfaces.
	// A Relay-forward from anyone else, a guest included, is dropped.
	TrustedRelays []TrustedRelay

	// Not keys of the dhcpv6 object: the agent fills them in from the
	// network's config (ranges, gateway) for the Router Advertisements.

	// OnLink are the IPv6 subnets of the network's ranges.
	OnLink []netip.Prefix
	// Gateway is the network's IPv6 gateway; the zero Addr when it has none.
	Gateway netip.Addr
}

// TrustedRelay is one element of dhcpv6.trusted_relays.
type TrustedRelay struct {
	Interface string           // interface (required): one of the dhcpv6 interfaces
	MAC       net.HardwareAddr // mac (required): the link-layer source of the relay's frames
	Address   netip.Addr       // address (optional): the IPv6 source of its messages; zero: any
}

// Defaults of the dhcpv6 object.
const (
	DefaultPreferredLifetime = 3600 * time.Second
	DefaultValidLifetime     = 7200 * time.Second
)

// maxLifetime is the largest DHCPv6 lifetime (32-bit seconds; 0xffffffff
// means infinity, RFC 8415 section 7.7).
const maxLifetime = math.MaxUint32

var pdKeys = []string{"range", "prefix_length"}

func parsePrefixDelegation(f field) (*addrspace.PrefixDelegation, error) {
	m, err := f.object()
	if err != nil {
		return nil, err
	}
	if err := checkKeys(m, pdKeys); err != nil {
		return nil, err
	}
	rf, ok := m["range"]
	if !ok {
		return nil, &Error{Key: f.path + ".range", Reason: "is required"}
	}
	lf, ok := m["prefix_length"]
	if !ok {
		return nil, &Error{Key: f.path + ".prefix_length", Reason: "is required"}
	}
	n, err := lf.integer()
	if err != nil {
		return nil, err
	}
	return buildPrefixDelegation(rf, lf, n)
}

func buildPrefixDelegation(rf, lf field, n int64) (*addrspace.PrefixDelegation, error) {
	s, err := rf.str()
	if err != nil {
		return nil, err
	}
	p, err := parsePrefix(strings.TrimSpace(s))
	if err != nil {
		return nil, rf.errorf("not a CIDR: %v", err)
	}
	if !p.Addr().Is6() {
		return nil, rf.errorf("must be an IPv6 prefix")
	}
	p = p.Masked()
	if err := checkSegment(rf, p); err != nil {
		return nil, err
	}
	// Equal lengths are a pool of one prefix: legitimate for a single VM.
	if n < int64(p.Bits()) || n > 128 {
		return nil, lf.errorf("must be at least the /%d of %s %s and at most 128", p.Bits(), rf.path, rf.show())
	}
	return &addrspace.PrefixDelegation{Range: p, PrefixLength: int(n)}, nil
}

var (
	dhcpv6Keys = []string{"enabled", "interfaces", "preferred_lifetime", "valid_lifetime", "install_routes", "router_advertisements", "trusted_relays"}
	relayKeys  = []string{"interface", "mac", "address"}
)

func parseDHCPv6(f field) (*DHCPv6, error) {
	m, err := f.object()
	if err != nil {
		return nil, err
	}
	if err := checkKeys(m, dhcpv6Keys); err != nil {
		return nil, err
	}
	d := &DHCPv6{Enabled: true, PreferredLifetime: DefaultPreferredLifetime, ValidLifetime: DefaultValidLifetime, InstallRoutes: true}
	if v, ok := m["enabled"]; ok {
		if d.Enabled, err = v.boolean(); err != nil {
			return nil, err
		}
	}
	if v, ok := m["install_routes"]; ok {
		if d.InstallRoutes, err = v.boolean(); err != nil {
			return nil, err
		}
	}
	if v, ok := m["router_advertisements"]; ok {
		if d.RouterAdvertisements, err = v.boolean(); err != nil {
			return nil, err
		}
	}
	if v, ok := m["interfaces"]; ok {
		elems, err := v.array()
		if err != nil {
			return nil, err
		}
		seen := map[string]string{}
		for _, e := range elems {
			name, err := e.str()
			if err != nil {
				return nil, err
			}
			if !validIfName(name) {
				return nil, e.errorf("not a valid interface name (1-15 bytes, no '/', ':', whitespace, not \".\" or \"..\")")
			}
			if prev, dup := seen[name]; dup {
				return nil, e.errorf("duplicates %s", prev)
			}
			seen[name] = e.path
			d.Interfaces = append(d.Interfaces, name)
		}
	}
	if v, ok := m["trusted_relays"]; ok {
		if d.TrustedRelays, err = parseTrustedRelays(v, f.path+".interfaces", d.Interfaces); err != nil {
			return nil, err
		}
	}
	var pf, vf *field
	if v, ok := m["preferred_lifetime"]; ok {
		pf = &v
		if d.PreferredLifetime, err = lifetime(v); err != nil {
			return nil, err
		}
	}
	if v, ok := m["valid_lifetime"]; ok {
		vf = &v
		if d.ValidLifetime, err = lifetime(v); err != nil {
			return nil, err
		}
	}
	if d.ValidLifetime < d.PreferredLifetime {
		pDesc := "the default 3600"
		if pf != nil {
			pDesc = pf.path + " " + pf.show()
		}
		if vf != nil {
			return nil, vf.errorf("must not be less than %s", pDesc)
		}
		return nil, pf.errorf("exceeds the default valid_lifetime 7200 (%s.valid_lifetime must be >= preferred_lifetime)", f.path)
	}
	return d, nil
}

// parseTrustedRelays reads dhcpv6.trusted_relays: each relay is on one of
// the dhcpv6 interfaces and has a unicast MAC, and an IPv6 unicast address
// if any.
func parseTrustedRelays(f field, interfacesPath string, interfaces []string) ([]TrustedRelay, error) {
	elems, err := f.array()
	if err != nil {
		return nil, err
	}
	var out []TrustedRelay
	seen := map[string]string{}
	for _, e := range elems {
		m, err := e.object()
		if err != nil {
			return nil, err
		}
		if err := checkKeys(m, relayKeys); err != nil {
			return nil, err
		}
		var r TrustedRelay
		iff, ok := m["interface"]
		if !ok {
			return nil, &Error{Key: e.path + ".interface", Reason: "is required"}
		}
		if r.Interface, err = iff.str(); err != nil {
			return nil, err
		}
		if !slices.Contains(interfaces, r.Interface) {
			return nil, iff.errorf("is not one of %s %q", interfacesPath, interfaces)
		}
		mf, ok := m["mac"]
		if !ok {
			return nil, &Error{Key: e.path + ".mac", Reason: "is required: the bridge ties a MAC, not an IP address, to one sender"}
		}
		s, err := mf.str()
		if err != nil {
			return nil, err
		}
		if r.MAC, err = net.ParseMAC(s); err != nil || len(r.MAC) != 6 || r.MAC[0]&1 != 0 || isZeroMAC(r.MAC) {
			return nil, mf.errorf("not a unicast Ethernet MAC address")
		}
		if af, ok := m["address"]; ok {
			s, err := af.str()
			if err != nil {
				return nil, err
			}
			a, err := netip.ParseAddr(s)
			if err != nil || !a.Is6() || a.Is4In6() || a.Zone() != "" || a.IsUnspecified() || a.IsMulticast() || a.IsLoopback() {
				return nil, af.errorf("not an IPv6 unicast address")
			}
			r.Address = a
		}
		key := r.Interface + "|" + r.MAC.String() + "|" + r.Address.String()
		if prev, dup := seen[key]; dup {
			return nil, e.errorf("duplicates %s", prev)
		}
		seen[key] = e.path
		out = append(out, r)
	}
	return out, nil
}

func isZeroMAC(mac net.HardwareAddr) bool {
	for _, b := range mac {
		if b != 0 {
			return false
		}
	}
	return true
}

func lifetime(f field) (time.Duration, error) {
	n, err := f.integer()
	if err != nil {
		return 0, err
	}
	if n <= 0 || n > maxLifetime {
		return 0, f.errorf("must be a number of seconds from 1 to %d", int64(maxLifetime))
	}
	return time.Duration(n) * time.Second, nil
}

// validIfName follows the kernel's dev_valid_name.
func validIfName(s string) bool {
	if s == "" || len(s) > 15 || s == "." || s == ".." {
		return false
	}
	for _, c := range []byte(s) {
		if c == '/' || c == ':' || c <= ' ' || c == 0x7f {
			return false
		}
	}
	return true
}
