package config

import (
	"fmt"
	"math"
	"net"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/tenure-ipam/tenure/internal/addrspace"
)

// DHCPv6 configures the node agent's DHCPv6 service for the attachment.
type DHCPv6 struct {
	Enabled           bool          // default true when the dhcpv6 object is present
	Interfaces        []string      // nil if unset
	PreferredLifetime time.Duration // default DefaultPreferredLifetime
	ValidLifetime     time.Duration // default DefaultValidLifetime, >= PreferredLifetime
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
	// Network is the CNI network name of the config (its "name").
	Network string
	// Link is the node-side interface the main plugin plugs the attachment
	// into (a bridge plugin's "bridge", a macvlan or ipvlan plugin's
	// "master"); "" when the config names none.
	Link string
}

// TrustedRelay is one element of dhcpv6.trusted_relays.
type TrustedRelay struct {
	Interface string           // interface (required): one of the dhcpv6 interfaces
	MAC       net.HardwareAddr // mac (required): the link-layer source of the relay's frames
	Address   netip.Addr       // address (optional): the IPv6 source of its messages; zero: any
}

// Defaults of the dhcpv6 object, and of the node's DHCPv6 server
// (internal/dhcp6) for a binding without lifetimes.
const (
	DefaultPreferredLifetime = 3600 * time.Second
	DefaultValidLifetime     = 7200 * time.Second
)

// maxLifetime is the largest DHCPv6 lifetime (32-bit seconds; 0xffffffff
// means infinity, RFC 8415 section 7.7).
const maxLifetime = math.MaxUint32

// parsePrefixDelegation reads prefix_delegation; it returns the range's
// key too, for messages.
func parsePrefixDelegation(v val[pdKeys]) (*addrspace.PrefixDelegation, field, error) {
	m := v.get()
	if !m.Range.ok() {
		return nil, field{}, &Error{Key: v.path + ".range", Reason: "is required"}
	}
	if !m.PrefixLength.ok() {
		return nil, field{}, &Error{Key: v.path + ".prefix_length", Reason: "is required"}
	}
	pd, err := buildPrefixDelegation(m.Range.field, m.PrefixLength.field, m.PrefixLength.get())
	return pd, m.Range.field, err
}

func buildPrefixDelegation(rf, lf field, n int64) (*addrspace.PrefixDelegation, error) {
	p, err := parsePrefix(strings.TrimSpace(rf.text))
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

func parseDHCPv6(v val[dhcpv6Keys]) (*DHCPv6, error) {
	m := v.get()
	var err error
	d := &DHCPv6{Enabled: true, PreferredLifetime: DefaultPreferredLifetime, ValidLifetime: DefaultValidLifetime, InstallRoutes: true}
	for _, b := range []struct {
		v   *val[bool]
		dst *bool
	}{{&m.Enabled, &d.Enabled}, {&m.InstallRoutes, &d.InstallRoutes}, {&m.RouterAdvertisements, &d.RouterAdvertisements}} {
		if b.v.ok() {
			*b.dst = b.v.get()
		}
	}
	if m.Interfaces.ok() {
		seen := map[string]string{}
		for _, e := range m.Interfaces.get() {
			name := e.get()
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
	if m.TrustedRelays.ok() {
		if d.TrustedRelays, err = parseTrustedRelays(m.TrustedRelays, v.path+".interfaces", d.Interfaces); err != nil {
			return nil, err
		}
	}
	for _, l := range []struct {
		v   *val[int64]
		dst *time.Duration
	}{{&m.PreferredLifetime, &d.PreferredLifetime}, {&m.ValidLifetime, &d.ValidLifetime}} {
		if l.v.ok() {
			if *l.dst, err = lifetime(l.v); err != nil {
				return nil, err
			}
		}
	}
	if d.ValidLifetime < d.PreferredLifetime {
		pf, vf := m.PreferredLifetime, m.ValidLifetime
		pDesc := fmt.Sprintf("the default %d", int64(DefaultPreferredLifetime.Seconds()))
		if pf.ok() {
			pDesc = pf.path + " " + pf.show()
		}
		if vf.ok() {
			return nil, vf.errorf("must not be less than %s", pDesc)
		}
		return nil, pf.errorf("exceeds the default valid_lifetime %d (%s.valid_lifetime must be >= preferred_lifetime)", int64(DefaultValidLifetime.Seconds()), v.path)
	}
	return d, nil
}

// parseTrustedRelays reads dhcpv6.trusted_relays: each relay is on one of
// the dhcpv6 interfaces and has a unicast MAC, and an IPv6 unicast address
// if any.
func parseTrustedRelays(v val[[]val[relayKeys]], interfacesPath string, interfaces []string) ([]TrustedRelay, error) {
	var out []TrustedRelay
	seen := map[string]string{}
	for _, e := range v.get() {
		m := e.get()
		var r TrustedRelay
		if !m.Interface.ok() {
			return nil, &Error{Key: e.path + ".interface", Reason: "is required"}
		}
		r.Interface = m.Interface.get()
		if !slices.Contains(interfaces, r.Interface) {
			return nil, m.Interface.errorf("is not one of %s %q", interfacesPath, interfaces)
		}
		if !m.MAC.ok() {
			return nil, &Error{Key: e.path + ".mac", Reason: "is required: the bridge ties a MAC, not an IP address, to one sender"}
		}
		var err error
		if r.MAC, err = net.ParseMAC(m.MAC.get()); err != nil || len(r.MAC) != 6 || r.MAC[0]&1 != 0 || isZeroMAC(r.MAC) {
			return nil, m.MAC.errorf("not a unicast Ethernet MAC address")
		}
		if m.Address.ok() {
			a, err := netip.ParseAddr(m.Address.get())
			if err != nil || !a.Is6() || a.Is4In6() || a.Zone() != "" || a.IsUnspecified() || a.IsMulticast() || a.IsLoopback() {
				return nil, m.Address.errorf("not an IPv6 unicast address")
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

func lifetime(v *val[int64]) (time.Duration, error) {
	n := v.get()
	if n <= 0 || n > maxLifetime {
		return 0, v.errorf("must be a number of seconds from 1 to %d", int64(maxLifetime))
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
