// Package config parses and validates tenure's IPAM configuration: the ipam
// section of a CNI network config, merged over the optional flat
// configuration file, and (for configs naming a pool) an IPPool spec.
//
// The keys are those of whereabouts v0.9, so a whereabouts config works with
// only its ipam type changed to "tenure"; whereabouts keys that mean nothing
// to tenure (datastore, kubernetes, etcd_*, log_*, leader_*, ...) are
// accepted and listed in Config.Ignored. Any other unknown key is an error.
// Every error is a *Error naming the key and the value.
package config

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/containernetworking/cni/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/allocator/addrspace"
	"github.com/tenure-ipam/tenure/internal/cniwire"
	"github.com/tenure-ipam/tenure/internal/reservation"
)

// PluginType is the only accepted ipam "type".
const PluginType = "tenure"

// MaxFlatFileSize bounds the flat configuration file the installer writes.
const MaxFlatFileSize = 1 << 20

// maxNetworkKey is the MaxLength of IPReservation spec.network
// (api/v1alpha1 IPReservationSpec.Network), which holds
// reservation.NetworkKey: the API refuses every reservation of a longer key.
const maxNetworkKey = 253

// maxSocketPath is the longest path a unix socket address holds (sun_path is
// 108 bytes with its terminating NUL).
const maxSocketPath = 107

// Config is a validated, normalised tenure IPAM configuration.
type Config struct {
	CNIVersion        string
	Name              string            // top-level CNI network name
	Ranges            []addrspace.Range // one address per entry per ADD, in config order
	Gateway           netip.Addr        // zero if unset
	Routes            []*types.Route    // nil if unset
	DNS               types.DNS
	NetworkName       string // "" if unset
	OverlappingRanges bool   // enable_overlapping_ranges, default true
	Pool              string // declared pool name, "" if none
	AgentSocket       string // default cniwire.DefaultSocket
	PrefixDelegation  *addrspace.PrefixDelegation
	DHCPv6            *DHCPv6
	Ignored           []string // whereabouts keys accepted but without effect, sorted

	// Requested[i] is the address the network config's runtimeConfig.ips
	// (Multus' "ips" of the network-selection element, for a delegate with
	// the "ips" capability) asks for from Ranges[i], the zero Addr where it
	// asks for none; nil when it asks for nothing. Every requested address
	// has its range: one outside every range is an Error.
	Requested []netip.Addr
	// StickyStatefulSets (sticky_statefulsets): every StatefulSet pod on
	// this network keeps its addresses in a claim of its own, as if its
	// template carried the sticky annotation (internal/claims).
	StickyStatefulSets bool

	// Where values came from, for messages and for re-applying a pool.
	gwField         field
	nameField       field // network_name
	pdRange         field
	gwFromPool      bool
	networkFromPool bool
	pdFromPool      bool
	poolField       field
	requested       []requestedIP // runtimeConfig.ips as written
}

// tenureKeys are the ipam keys tenure acts on.
var tenureKeys = []string{
	"type", "range", "range_start", "range_end", "exclude", "ipRanges", "gateway",
	"routes", "dns", "network_name", "enable_overlapping_ranges", "configuration_path",
	"pool", "agent_socket", "prefix_delegation", "dhcpv6", "sticky_statefulsets",
}

// ignoredKeys are the keys whereabouts v0.9 accepts (pkg/types/types.go,
// IPAMConfig and the alias its UnmarshalJSON decodes into) that mean nothing
// to tenure, with the JSON type whereabouts decodes them as: a value
// whereabouts would have refused is refused here too.
var ignoredKeys = map[string]jsonKind{
	"name":                       kindString, // whereabouts overwrites it with the network name
	"datastore":                  kindString,
	"kubernetes":                 kindObject, // kubeconfig, k8s_api_root
	"etcd_host":                  kindString,
	"etcd_username":              kindString,
	"etcd_password":              kindString,
	"etcd_key_file":              kindString,
	"etcd_cert_file":             kindString,
	"etcd_ca_cert_file":          kindString,
	"log_file":                   kindString,
	"log_level":                  kindString,
	"reconciler_cron_expression": kindString,
	"sleep_for_race":             kindNumber,
	"leader_lease_duration":      kindNumber,
	"leader_renew_deadline":      kindNumber,
	"leader_retry_period":        kindNumber,
	"node_slice_size":            kindString,
	"addresses":                  kindArray, // static addresses; whereabouts never puts them in results
}

var (
	rangeKeys = []string{"range", "range_start", "range_end", "exclude"}
	routeKeys = []string{"dst", "gw", "mtu", "advmss", "priority", "table", "scope"}
	dnsKeys   = []string{"nameservers", "domain", "search", "options"}
	allKeys   = func() []string {
		k := slices.Clone(tenureKeys)
		for n := range ignoredKeys {
			k = append(k, n)
		}
		slices.Sort(k)
		return k
	}()
)

func isKnown(k string) bool {
	_, ign := ignoredKeys[k]
	return ign || slices.Contains(tenureKeys, k)
}

func checkKeys(m map[string]field, allowed []string) error {
	for _, k := range sortedKeys(m) {
		if !slices.Contains(allowed, k) {
			return unknownKey(m[k], k, allowed)
		}
	}
	return nil
}

func sortedKeys(m map[string]field) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// Parse parses the CNI network config netconf (the plugin's stdin) over the
// flat configuration file's bytes flat (nil or empty if none): the flat
// file's JSON object supplies defaults, the ipam section's keys win key by
// key. For a config naming a pool, Ranges stays empty and the checks that
// need ranges wait for ApplyPool.
//
// The steps run in a fixed order, so a config with several faults always
// reports the same one.
func Parse(netconf []byte, flat []byte) (*Config, error) {
	c := &Config{OverlappingRanges: true, AgentSocket: cniwire.DefaultSocket}
	ipamFields, err := c.parseNetconf(netconf)
	if err != nil {
		return nil, err
	}
	fields, ignored, err := mergeFlatFile(ipamFields, flat)
	if err != nil {
		return nil, err
	}
	if c.Ignored, err = checkKnownKeys(fields, ignored); err != nil {
		return nil, err
	}
	if err := checkType(fields); err != nil {
		return nil, err
	}
	if err := c.parsePool(fields); err != nil {
		return nil, err
	}
	built, err := parseRanges(c, fields)
	if err != nil {
		return nil, err
	}
	if err := c.parseResultKeys(fields); err != nil {
		return nil, err
	}
	if err := c.parseAgentKeys(fields); err != nil {
		return nil, err
	}
	if err := c.parseDelegationKeys(fields); err != nil {
		return nil, err
	}
	if c.Pool == "" {
		if err := c.finish(built); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// parseNetconf reads the top level of the network config: cniVersion, name
// and the ipam object, whose members it returns.
func (c *Config) parseNetconf(netconf []byte) (map[string]field, error) {
	if !json.Valid(netconf) {
		err := json.Unmarshal(netconf, new(any))
		return nil, &Error{Key: "netconf", Reason: fmt.Sprintf("not valid JSON: %v", err)}
	}
	if k := kindOf(netconf); k != kindObject {
		return nil, &Error{Key: "netconf", Value: show(netconf), Reason: fmt.Sprintf("must be a JSON object, not %s", k)}
	}
	top, err := field{raw: netconf}.object()
	if err != nil {
		return nil, err
	}
	if f, ok := top["cniVersion"]; ok {
		if c.CNIVersion, err = f.str(); err != nil {
			return nil, err
		}
	}
	if f, ok := top["name"]; ok {
		if c.Name, err = f.str(); err != nil {
			return nil, err
		}
	}
	if f, ok := top["runtimeConfig"]; ok {
		if c.requested, err = parseRequested(f); err != nil {
			return nil, err
		}
	}
	ipam, ok := top["ipam"]
	if !ok {
		return nil, &Error{Key: "ipam", Reason: "is required"}
	}
	return ipam.object()
}

// mergeFlatFile lays the ipam section's keys over the flat file's. The
// file's own configuration_path is checked and then reported as ignored
// (ignored[key]) unless the ipam section sets one too.
func mergeFlatFile(ipamFields map[string]field, flat []byte) (fields map[string]field, ignored map[string]bool, err error) {
	fields = map[string]field{}
	ignored = map[string]bool{}
	if len(bytes.TrimSpace(flat)) > 0 {
		if !json.Valid(flat) {
			err := json.Unmarshal(flat, new(any))
			return nil, nil, &Error{Key: "flatfile", Reason: fmt.Sprintf("not valid JSON: %v", err)}
		}
		flatFields, err := field{path: "flatfile", raw: flat}.object()
		if err != nil {
			return nil, nil, err
		}
		for k, f := range flatFields {
			if k == "configuration_path" {
				// The file was already chosen; whereabouts ignores it here too.
				if _, err := f.str(); err != nil {
					return nil, nil, err
				}
				if _, nad := ipamFields[k]; !nad {
					ignored[k] = true
				}
				continue
			}
			fields[k] = f
		}
	}
	for k, f := range ipamFields {
		fields[k] = f
	}
	return fields, ignored, nil
}

// checkKnownKeys refuses unknown keys, checks the types of the whereabouts
// keys tenure ignores, and returns the ignored keys present (sorted), with
// those the flat-file merge already set aside.
func checkKnownKeys(fields map[string]field, ignored map[string]bool) ([]string, error) {
	for _, k := range sortedKeys(fields) {
		if !isKnown(k) {
			return nil, unknownKey(fields[k], k, allKeys)
		}
		if kind, ok := ignoredKeys[k]; ok {
			if err := checkIgnored(fields[k], k, kind); err != nil {
				return nil, err
			}
			ignored[k] = true
		}
	}
	var out []string
	for k := range ignored {
		out = append(out, k)
	}
	slices.Sort(out)
	return out, nil
}

func checkType(fields map[string]field) error {
	f, ok := fields["type"]
	if !ok {
		return &Error{Key: "ipam.type", Reason: fmt.Sprintf("is required (%q)", PluginType)}
	}
	typ, err := f.str()
	if err != nil {
		return err
	}
	if typ != PluginType {
		return f.errorf("must be %q", PluginType)
	}
	return nil
}

func (c *Config) parsePool(fields map[string]field) error {
	f, ok := fields["pool"]
	if !ok {
		return nil
	}
	var err error
	if c.Pool, err = f.str(); err != nil {
		return err
	}
	if !validName(c.Pool) {
		return f.errorf("must be the name of an IPPool (a lowercase RFC 1123 subdomain)")
	}
	c.poolField = f
	return nil
}

// parseResultKeys reads what goes into the CNI result besides the
// addresses: gateway, routes and dns.
func (c *Config) parseResultKeys(fields map[string]field) error {
	var err error
	if f, ok := fields["gateway"]; ok {
		s, err := f.str()
		if err != nil {
			return err
		}
		if s != "" { // whereabouts treats "" as unset
			if c.Gateway, err = f.addr(); err != nil {
				return err
			}
			c.gwField = f
		}
	}
	if f, ok := fields["routes"]; ok {
		if c.Routes, err = parseRoutes(f); err != nil {
			return err
		}
	}
	if f, ok := fields["dns"]; ok {
		if c.DNS, err = parseDNS(f); err != nil {
			return err
		}
	}
	return nil
}

// parseAgentKeys reads how the agent names and reaches the network:
// network_name, enable_overlapping_ranges, agent_socket,
// sticky_statefulsets, and checks configuration_path, which the shim has
// already acted on.
func (c *Config) parseAgentKeys(fields map[string]field) error {
	var err error
	if f, ok := fields["network_name"]; ok {
		if c.NetworkName, err = networkName(f); err != nil {
			return err
		}
		c.nameField = f
	}
	if f, ok := fields["enable_overlapping_ranges"]; ok {
		if c.OverlappingRanges, err = f.boolean(); err != nil {
			return err
		}
	}
	if f, ok := fields["agent_socket"]; ok {
		s, err := f.str()
		if err != nil {
			return err
		}
		if !filepath.IsAbs(s) || len(s) > maxSocketPath || strings.IndexByte(s, 0) >= 0 {
			return f.errorf("must be an absolute path of at most %d bytes", maxSocketPath)
		}
		c.AgentSocket = s
	}
	if f, ok := fields["configuration_path"]; ok {
		if err := checkConfigurationPath(f); err != nil {
			return err
		}
	}
	if f, ok := fields["sticky_statefulsets"]; ok {
		if c.StickyStatefulSets, err = f.boolean(); err != nil {
			return err
		}
	}
	return nil
}

// checkConfigurationPath checks configuration_path ("" is unset). The shim
// reads the file it names; the agent only gets the file's bytes.
func checkConfigurationPath(f field) error {
	s, err := f.str()
	if err != nil || s == "" {
		return err
	}
	if !filepath.IsAbs(s) {
		return f.errorf("must be an absolute path")
	}
	return nil
}

// parseDelegationKeys reads prefix_delegation and dhcpv6.
func (c *Config) parseDelegationKeys(fields map[string]field) error {
	var err error
	if f, ok := fields["prefix_delegation"]; ok {
		if c.PrefixDelegation, err = parsePrefixDelegation(f); err != nil {
			return err
		}
		c.pdRange = field{path: f.path + ".range"}
		if m, err := f.object(); err == nil {
			c.pdRange = m["range"]
		}
	}
	if f, ok := fields["dhcpv6"]; ok {
		if c.DHCPv6, err = parseDHCPv6(f); err != nil {
			return err
		}
	}
	return nil
}

func checkIgnored(f field, key string, kind jsonKind) error {
	if err := f.wantKind(kind, kind.String()); err != nil {
		return err
	}
	switch key {
	case "kubernetes":
		m, err := f.object()
		if err != nil {
			return err
		}
		for _, k := range []string{"kubeconfig", "k8s_api_root"} {
			if v, ok := m[k]; ok {
				if _, err := v.str(); err != nil {
					return err
				}
			}
		}
	case "sleep_for_race", "leader_lease_duration", "leader_renew_deadline", "leader_retry_period":
		if _, err := f.integer(); err != nil {
			return err
		}
	case "addresses":
		elems, err := f.array()
		if err != nil {
			return err
		}
		for _, e := range elems {
			if err := e.wantKind(kindObject, "an object"); err != nil {
				return err
			}
		}
	}
	return nil
}

// present returns the field for key unless it is absent or, for the range
// keys whereabouts tests against their zero value, empty ("" or []).
func present(fields map[string]field, key string) (field, bool, error) {
	f, ok := fields[key]
	if !ok {
		return field{}, false, nil
	}
	switch kindOf(f.raw) {
	case kindString:
		s, err := f.str()
		if err != nil {
			return field{}, false, err
		}
		return f, s != "", nil
	case kindArray:
		elems, err := f.array()
		if err != nil {
			return field{}, false, err
		}
		return f, len(elems) > 0, nil
	}
	return f, true, nil
}

// parseRanges handles range, range_start, range_end, exclude, ipRanges and
// their contradictions with pool. Like whereabouts, the top-level range is
// the first entry, before the ipRanges entries.
func parseRanges(c *Config, fields map[string]field) ([]builtRange, error) {
	var (
		got   = map[string]field{}
		order = []string{"range", "range_start", "range_end", "exclude", "ipRanges"}
	)
	for _, k := range order {
		f, ok, err := present(fields, k)
		if err != nil {
			return nil, err
		}
		if ok {
			got[k] = f
		}
	}
	if c.Pool != "" {
		for _, k := range order {
			if f, ok := got[k]; ok {
				return nil, f.errorf("contradicts %s %s: a config takes its ranges either from a declared pool or from its own range/ipRanges keys", c.poolField.path, c.poolField.show())
			}
		}
		return nil, nil
	}
	rng, hasRange := got["range"]
	ipr, hasIPR := got["ipRanges"]
	if !hasRange && !hasIPR {
		return nil, &Error{Key: "ipam", Reason: "one of range, ipRanges or pool is required"}
	}
	var topExclude []field
	if f, ok := got["exclude"]; ok {
		elems, err := f.array()
		if err != nil {
			return nil, err
		}
		topExclude = elems
	}
	var built []builtRange
	if hasRange {
		b, err := topLevelRange(rng, got, topExclude)
		if err != nil {
			return nil, err
		}
		built = append(built, b)
	} else {
		for _, k := range []string{"range_start", "range_end"} {
			if f, ok := got[k]; ok {
				return nil, f.errorf("needs a top-level range; with ipRanges, set %s inside each entry", k)
			}
		}
	}
	if hasIPR {
		entries, err := ipr.array()
		if err != nil {
			return nil, err
		}
		for _, e := range entries {
			// whereabouts drops a top-level exclude when there is no
			// top-level range; tenure applies it to every entry rather
			// than silently hand out addresses the user excluded.
			var inherited []field
			if !hasRange {
				inherited = topExclude
			}
			b, err := ipRangesEntry(e, inherited)
			if err != nil {
				return nil, err
			}
			built = append(built, b)
		}
	}
	return built, nil
}

// topLevelRange builds the range of the ipam section's own range,
// range_start, range_end and exclude keys (those present in got).
func topLevelRange(rng field, got map[string]field, exclude []field) (builtRange, error) {
	in := rangeInput{rng: rng, exclude: exclude}
	if f, ok := got["range_start"]; ok {
		in.start = &f
	}
	if f, ok := got["range_end"]; ok {
		in.end = &f
	}
	return buildRange(in)
}

// ipRangesEntry builds the range of one ipRanges entry; inherited excludes
// follow the entry's own.
func ipRangesEntry(e field, inherited []field) (builtRange, error) {
	m, err := e.object()
	if err != nil {
		return builtRange{}, err
	}
	if err := checkKeys(m, rangeKeys); err != nil {
		return builtRange{}, err
	}
	in := rangeInput{}
	f, ok := m["range"]
	if !ok {
		return builtRange{}, &Error{Key: e.path + ".range", Reason: "is required"}
	}
	in.rng = f
	if f, ok, err := present(m, "range_start"); err != nil {
		return builtRange{}, err
	} else if ok {
		in.start = &f
	}
	if f, ok, err := present(m, "range_end"); err != nil {
		return builtRange{}, err
	} else if ok {
		in.end = &f
	}
	if f, ok := m["exclude"]; ok {
		if in.exclude, err = f.array(); err != nil {
			return builtRange{}, err
		}
	}
	in.exclude = append(in.exclude, inherited...)
	return buildRange(in)
}

// finish runs the checks that need both the ranges and the rest of the
// config, and sets c.Ranges.
func (c *Config) finish(built []builtRange) error {
	if len(built) == 0 {
		return &Error{Key: "ipam", Reason: "one of range, ipRanges or pool is required"}
	}
	if c.Gateway.IsValid() {
		ok := false
		for _, b := range built {
			ok = ok || b.r.Prefix.Addr().Is4() == c.Gateway.Is4()
		}
		if !ok {
			fam := familyName(c.Gateway.Is4())
			return c.gwField.errorf("is %s but no range is %s (%s %s)", fam, fam, built[0].in.rng.path, built[0].in.rng.show())
		}
	}
	for i := range built {
		if err := c.excludeGateway(&built[i]); err != nil {
			return err
		}
	}
	for i := range built {
		for j := range i {
			a, b := built[i].r, built[j].r
			if a.Prefix == b.Prefix && a.Start == b.Start && a.End == b.End {
				return built[i].in.rng.errorf("is the same address range as %s %s", built[j].in.rng.path, built[j].in.rng.show())
			}
		}
	}
	if err := c.checkDisjointRanges(built); err != nil {
		return err
	}
	if pd := c.PrefixDelegation; pd != nil {
		for _, b := range built {
			if pd.Range.Overlaps(b.r.Prefix) {
				return c.pdRange.errorf("overlaps %s %s: delegated prefixes must lie outside the address ranges", b.in.rng.path, b.in.rng.show())
			}
		}
	}
	if err := c.checkNetworkKeys(built); err != nil {
		return err
	}
	switch c.CNIVersion {
	case "", "0.1.0", "0.2.0":
		seen := map[bool]bool{}
		for _, b := range built {
			is4 := b.r.Prefix.Addr().Is4()
			if seen[is4] {
				return &Error{Key: "cniVersion", Value: quote(c.CNIVersion), Reason: fmt.Sprintf(
					"allows one address per family, but %s %s is a second %s range", b.in.rng.path, b.in.rng.show(), familyName(is4))}
			}
			seen[is4] = true
		}
	}
	requested, err := c.assignRequested(built)
	if err != nil {
		return err
	}
	c.Ranges = make([]addrspace.Range, len(built))
	for i, b := range built {
		c.Ranges[i] = b.r
	}
	c.Requested = requested
	return nil
}

// checkDisjointRanges refuses, with enable_overlapping_ranges false, two
// ranges that can both hand out one address. Each range is then a scope of
// its own (reservation.NetworkKey), so nothing stops the address shared by
// both from going to one attachment twice, or to two attachments of the
// network at once. With the default (true) the ranges share one scope, and
// an address is reserved once whichever range it came from: whereabouts
// accepts such configs, and so does tenure.
func (c *Config) checkDisjointRanges(built []builtRange) error {
	if c.OverlappingRanges {
		return nil
	}
	for i := range built {
		for j := range i {
			if a, ok := sharedAddr(built[j].r, built[i].r); ok {
				return built[i].in.rng.errorf("overlaps %s %s: both can hand out %s, and with %s false each range allocates on its own, so one address could go to two attachments, or twice to one; make the ranges disjoint (range_start, range_end, exclude) or leave enable_overlapping_ranges at true",
					built[j].in.rng.path, built[j].in.rng.show(), a, "enable_overlapping_ranges")
			}
		}
	}
	return nil
}

// sharedAddr returns the first address both a and b hand out (in bounds
// and excluded by neither), if any. a and b have normalised excludes.
func sharedAddr(a, b addrspace.Range) (netip.Addr, bool) {
	if a.Family() != b.Family() {
		return netip.Addr{}, false
	}
	both := addrspace.Range{Prefix: a.Prefix, Start: a.Start, End: a.End}
	if both.Start.Less(b.Start) {
		both.Start = b.Start
	}
	if b.End.Less(both.End) {
		both.End = b.End
	}
	if both.End.Less(both.Start) {
		return netip.Addr{}, false
	}
	both.Exclude = append(slices.Clone(a.Exclude), b.Exclude...)
	both.NormalizeExcludes()
	off, ok := both.Next(0)
	if !ok {
		return netip.Addr{}, false
	}
	return both.At(off), true
}

// checkNetworkKeys refuses a network_name that makes a reservation's
// spec.network (reservation.NetworkKey, as the agent computes it for each
// range and the delegation pool) longer than the API accepts: with
// enable_overlapping_ranges false the key is the name, "/" and the range,
// and a name valid on its own would fail every ADD.
func (c *Config) checkNetworkKeys(built []builtRange) error {
	type scope struct {
		spec string
		f    field
	}
	scopes := make([]scope, 0, len(built)+1)
	for _, b := range built {
		scopes = append(scopes, scope{b.r.String(), b.in.rng})
	}
	if pd := c.PrefixDelegation; pd != nil {
		scopes = append(scopes, scope{pd.Range.String(), c.pdRange})
	}
	for _, sc := range scopes {
		key := reservation.Scope(c.NetworkName, sc.spec, c.OverlappingRanges)
		if len(key) <= maxNetworkKey {
			continue
		}
		// Only a set network_name can make the key this long: "default"
		// and a range are far shorter.
		suffix := len(key) - len(c.NetworkName)
		return c.nameField.errorf("is %d bytes, too long with enable_overlapping_ranges false: the spec.network of the reservations of %s %s is the name, \"/\" and %q, %d bytes, over the API's limit of %d; use a name of at most %d bytes",
			len(c.NetworkName), sc.f.path, sc.f.show(), sc.spec, len(key), maxNetworkKey, maxNetworkKey-suffix)
	}
	return nil
}

// excludeGateway adds the gateway to b's excludes when b's subnet holds it,
// normalises the excludes, and refuses a range left without an address.
func (c *Config) excludeGateway(b *builtRange) error {
	r := &b.r
	gwIn := c.Gateway.IsValid() && r.Prefix.Contains(c.Gateway)
	if gwIn {
		r.Exclude = append(r.Exclude, netip.PrefixFrom(c.Gateway, c.Gateway.BitLen()))
	}
	r.NormalizeExcludes()
	// Next, not Capacity: a range of more than 2^64 addresses is allocated
	// from its first 2^64-1 (the allocator's indexes are 64-bit), and
	// excludes covering all of those leave nothing to hand out.
	if _, ok := r.Next(0); ok {
		return nil
	}
	var parts []string
	if d := strings.TrimPrefix(b.in.boundsDesc(), " with "); d != "" {
		parts = append(parts, d)
	}
	if d := b.in.excludeDesc(); d != "" {
		parts = append(parts, d)
	}
	if gwIn {
		parts = append(parts, c.gwField.path+" "+c.gwField.show())
	}
	if r.Capacity() > 0 {
		return b.in.rng.errorf("has no assignable address among its first 2^64-1, the ones tenure hands out, with %s", strings.Join(parts, " and "))
	}
	return b.in.rng.errorf("has no assignable address with %s", strings.Join(parts, " and "))
}

// ApplyPool fills Ranges from the declared IPPool name, and NetworkName,
// Gateway and PrefixDelegation from it where the config did not set them,
// with the same validation as Parse; errors name "IPPool NAME spec.…". It may
// be called again with a newer spec. On error c is unchanged.
func (c *Config) ApplyPool(name string, spec v1alpha1.IPPoolSpec) error {
	if name == "" {
		return &Error{Key: "IPPool", Value: `""`, Reason: "a pool name is required"}
	}
	if c.Pool != "" && c.Pool != name {
		key := c.poolField.path
		if key == "" {
			key = "ipam.pool"
		}
		return &Error{Key: key, Value: quote(c.Pool), Reason: fmt.Sprintf("the config names this pool, not IPPool %s", name)}
	}
	if c.Pool == "" && len(c.Ranges) > 0 {
		return &Error{Key: "IPPool " + name, Reason: fmt.Sprintf("cannot apply: the config has its own ranges (%s)", c.Ranges[0].Spec)}
	}
	prefix := "IPPool " + name + " spec"
	if len(spec.Ranges) == 0 {
		return &Error{Key: prefix + ".ranges", Value: "[]", Reason: "at least one range is required"}
	}
	var built []builtRange
	for i, pr := range spec.Ranges {
		b, err := poolRange(fmt.Sprintf("%s.ranges[%d]", prefix, i), pr)
		if err != nil {
			return err
		}
		built = append(built, b)
	}
	n := *c
	if err := n.applyPoolDefaults(prefix, spec); err != nil {
		return err
	}
	if err := n.finish(built); err != nil {
		return err
	}
	n.Pool = name
	*c = n
	return nil
}

// poolRange builds one range of an IPPool spec; base is its path.
func poolRange(base string, pr v1alpha1.PoolRange) (builtRange, error) {
	in := rangeInput{rng: jsonString(base+".range", pr.Range)}
	if pr.RangeStart != "" {
		f := jsonString(base+".range_start", pr.RangeStart)
		in.start = &f
	}
	if pr.RangeEnd != "" {
		f := jsonString(base+".range_end", pr.RangeEnd)
		in.end = &f
	}
	for j, e := range pr.Exclude {
		in.exclude = append(in.exclude, jsonString(fmt.Sprintf("%s.exclude[%d]", base, j), e))
	}
	return buildRange(in)
}

// applyPoolDefaults takes gateway, network_name and prefix_delegation from
// the pool's spec where the config does not set them, first dropping what an
// earlier spec supplied.
func (c *Config) applyPoolDefaults(prefix string, spec v1alpha1.IPPoolSpec) error {
	if c.gwFromPool {
		c.Gateway, c.gwField, c.gwFromPool = netip.Addr{}, field{}, false
	}
	if !c.Gateway.IsValid() && spec.Gateway != "" {
		f := jsonString(prefix+".gateway", spec.Gateway)
		a, err := f.addr()
		if err != nil {
			return err
		}
		c.Gateway, c.gwField, c.gwFromPool = a, f, true
	}
	if c.networkFromPool {
		c.NetworkName, c.nameField, c.networkFromPool = "", field{}, false
	}
	if c.NetworkName == "" && spec.NetworkName != "" {
		f := jsonString(prefix+".network_name", spec.NetworkName)
		s, err := networkName(f)
		if err != nil {
			return err
		}
		c.NetworkName, c.nameField, c.networkFromPool = s, f, true
	}
	if c.pdFromPool {
		c.PrefixDelegation, c.pdRange, c.pdFromPool = nil, field{}, false
	}
	if c.PrefixDelegation == nil && spec.PrefixDelegation != nil {
		pd := spec.PrefixDelegation
		rf := jsonString(prefix+".prefix_delegation.range", pd.Range)
		lf := field{path: prefix + ".prefix_delegation.prefix_length", raw: []byte(strconv.Itoa(int(pd.PrefixLength)))}
		p, err := buildPrefixDelegation(rf, lf, int64(pd.PrefixLength))
		if err != nil {
			return err
		}
		c.PrefixDelegation, c.pdRange, c.pdFromPool = p, rf, true
	}
	return nil
}

func networkName(f field) (string, error) {
	s, err := f.str()
	if err != nil || s == "" {
		return "", err
	}
	if !validName(s) {
		return "", f.errorf("must be a lowercase RFC 1123 subdomain (a-z, 0-9, '-', '.'; at most 253 bytes), as it names Kubernetes objects")
	}
	return s, nil
}

// validName reports whether s is a lowercase RFC 1123 subdomain, the form of
// Kubernetes object names. It is validation.IsDNS1123Subdomain plus RFC 1123's
// bound of 63 bytes per dot-separated label, which that check (what the API
// server applies to object names) leaves out: the bound is kept so the set of
// accepted configs stays what it was.
func validName(s string) bool {
	if len(validation.IsDNS1123Subdomain(s)) > 0 {
		return false
	}
	for label := range strings.SplitSeq(s, ".") {
		if len(label) > validation.DNS1123LabelMaxLength {
			return false
		}
	}
	return true
}

func parseRoutes(f field) ([]*types.Route, error) {
	elems, err := f.array()
	if err != nil {
		return nil, err
	}
	routes := make([]*types.Route, 0, len(elems))
	for _, e := range elems {
		m, err := e.object()
		if err != nil {
			return nil, err
		}
		if err := checkKeys(m, routeKeys); err != nil {
			return nil, err
		}
		df, ok := m["dst"]
		if !ok {
			return nil, &Error{Key: e.path + ".dst", Reason: "is required"}
		}
		s, err := df.str()
		if err != nil {
			return nil, err
		}
		p, err := parsePrefix(strings.TrimSpace(s))
		if err != nil {
			return nil, df.errorf("not a CIDR: %v", err)
		}
		if p != p.Masked() {
			return nil, df.errorf("has host bits set (did you mean %q?)", p.Masked().String())
		}
		rt := &types.Route{Dst: net.IPNet{IP: net.IP(p.Addr().AsSlice()), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}}
		if gf, ok := m["gw"]; ok {
			a, err := gf.addr()
			if err != nil {
				return nil, err
			}
			if a.Is4() != p.Addr().Is4() {
				return nil, gf.errorf("is %s but %s %s is %s", familyName(a.Is4()), df.path, df.show(), familyName(p.Addr().Is4()))
			}
			rt.GW = net.IP(a.AsSlice())
		}
		for _, k := range []string{"mtu", "advmss", "priority", "table", "scope"} {
			v, ok := m[k]
			if !ok {
				continue
			}
			n, err := v.integer()
			if err != nil {
				return nil, err
			}
			if n < 0 || n > 1<<32-1 {
				return nil, v.errorf("must be from 0 to %d", int64(1<<32-1))
			}
			i := int(n)
			switch k {
			case "mtu":
				rt.MTU = i
			case "advmss":
				rt.AdvMSS = i
			case "priority":
				rt.Priority = i
			case "table":
				rt.Table = &i
			case "scope":
				if n > 255 {
					return nil, v.errorf("must be from 0 to 255")
				}
				rt.Scope = &i
			}
		}
		routes = append(routes, rt)
	}
	return routes, nil
}

func parseDNS(f field) (types.DNS, error) {
	var d types.DNS
	m, err := f.object()
	if err != nil {
		return d, err
	}
	if err := checkKeys(m, dnsKeys); err != nil {
		return d, err
	}
	if v, ok := m["nameservers"]; ok {
		elems, err := v.array()
		if err != nil {
			return d, err
		}
		for _, e := range elems {
			s, err := e.str()
			if err != nil {
				return d, err
			}
			if _, err := netip.ParseAddr(s); err != nil { // zones allowed: fe80::1%eth0
				return d, e.errorf("not an IP address: %v", err)
			}
			d.Nameservers = append(d.Nameservers, s)
		}
	}
	if v, ok := m["domain"]; ok {
		if d.Domain, err = v.str(); err != nil {
			return d, err
		}
	}
	if v, ok := m["search"]; ok {
		if d.Search, err = v.strList(); err != nil {
			return d, err
		}
	}
	if v, ok := m["options"]; ok {
		if d.Options, err = v.strList(); err != nil {
			return d, err
		}
	}
	return d, nil
}
