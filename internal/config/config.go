// Package config parses and validates tenure's IPAM configuration: the ipam
// section of a CNI network config, merged over the optional flat
// configuration file, and (for configs naming a pool) an IPPool spec.
//
// The keys are those of whereabouts v0.9, so a whereabouts config works with
// only its ipam type changed to "tenure"; whereabouts keys that mean nothing
// to tenure (datastore, kubernetes, etcd_*, log_*, leader_*, ...) are
// accepted and listed in Config.Ignored. Any other unknown key is an error.
// Every error is a *Error naming the key and the value.
//
// The keys are structs with json tags (keys.go). Parse decodes the whole
// config into them first, with encoding/json splitting out each key's value
// as written, so every fault in the JSON (syntax, a value's type, an
// unknown key) is reported there; it then checks and converts the decoded
// values, in a fixed order, without decoding anything more.
package config

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/containernetworking/cni/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/addrspace"
	"github.com/tenure-ipam/tenure/internal/cniwire"
)

// PluginType is the only accepted ipam "type".
const PluginType = "tenure"

// MaxFlatFileSize bounds the flat configuration file the installer writes.
const MaxFlatFileSize = 1 << 20

// maxScopeLen is the MaxLength of IPReservation spec.network
// (api/v1alpha1 IPReservationSpec.Network), which holds
// reservation.Scope: the API refuses every reservation of a longer key.
const maxScopeLen = 253

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
	// Pools is the ordered pools list ("pools"), nil if none: each ADD
	// takes per family the first listed pool whose selectors select the
	// pod's namespace and node (SelectPools). Ranges stays empty until
	// SelectPools.
	Pools            []string
	AgentSocket      string // default cniwire.DefaultSocket
	PrefixDelegation *addrspace.PrefixDelegation
	DHCPv6           *DHCPv6
	Ignored          []string // whereabouts keys accepted but without effect, sorted

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
	// Probe (probe, default true): the agent hands out an address only
	// once a probe on ProbeInterface found nothing answering for it
	// (internal/probe). ProbeInterface is probe_interface, else the main
	// plugin's parent interface (mainPlugin); "" with ProbeDefaultRoute
	// is the interface of the node's default route (a macvlan or ipvlan
	// config without master); "" without it is a segment tenure cannot
	// reach from the node (see ProbeSkipped).
	Probe             bool
	ProbeInterface    string
	ProbeDefaultRoute bool
	// ProbeSkipped says why a config with probe on has no interface to
	// probe on ("" when it has one).
	ProbeSkipped string

	own sources // what the config itself set, for ApplyPool and messages
	// parts are the single-pool configs SelectPools joined when the
	// families of an ADD come from different pools; Spaces reads them.
	parts []*Config
}

// sources are the values an IPPool may supply too, each with the key it
// came from for messages, the declared pool's key, and the requested
// addresses, which ApplyPool checks again against the pool's ranges.
type sources struct {
	gateway        netip.Addr
	gatewayKey     field
	networkName    string
	networkNameKey field
	pd             *addrspace.PrefixDelegation
	pdRangeKey     field
	pool           field
	requested      []requestedIP
}

// allKeys are the ipam keys, sorted: those "did you mean" suggests.
var allKeys = func() []string {
	k := slices.Concat(keysOf(reflect.TypeFor[ipamKeys]()), keysOf(reflect.TypeFor[whereaboutsKeys]()))
	slices.Sort(k)
	return k
}()

// Parse parses the CNI network config netconf (the plugin's stdin) over the
// flat configuration file's bytes flat (nil or empty if none): the flat
// file's JSON object supplies defaults, the ipam section's keys win key by
// key. For a config naming a pool, Ranges stays empty and the checks that
// need ranges wait for ApplyPool.
//
// Parse decodes the whole config first (decodeConfig), then checks the
// decoded keys; both steps run in a fixed order, so a config with several
// faults always reports the same one.
func Parse(netconf []byte, flat []byte) (*Config, error) {
	d, err := decodeConfig(netconf, flat)
	if err != nil {
		return nil, err
	}
	c := &Config{CNIVersion: d.top.CNIVersion.get(), Name: d.top.Name.get(), Ignored: d.ignored,
		OverlappingRanges: true, AgentSocket: cniwire.DefaultSocket}
	k := &d.ipam
	if c.own.requested, err = parseRequested(d.top.RuntimeConfig.get()); err != nil {
		return nil, err
	}
	if !k.Type.ok() {
		return nil, &Error{Key: "ipam.type", Reason: fmt.Sprintf("is required (%q)", PluginType)}
	}
	if k.Type.get() != PluginType {
		return nil, k.Type.errorf("must be %q", PluginType)
	}
	if k.Pool.ok() {
		if c.Pool = k.Pool.get(); !validName(c.Pool) {
			return nil, k.Pool.errorf("must be the name of an IPPool (a lowercase RFC 1123 subdomain)")
		}
		c.own.pool = k.Pool.field
	}
	if k.Pools.ok() {
		if err := c.parsePools(k); err != nil {
			return nil, err
		}
	}
	built, err := parseRanges(c, k)
	if err == nil {
		err = c.parseResultKeys(k)
	}
	if err == nil {
		err = c.parseAgentKeys(k)
	}
	if err == nil {
		err = c.parseDelegationKeys(k)
	}
	if err == nil {
		err = c.parseProbeKeys(k, netconf)
	}
	if err == nil && c.Pool == "" && c.Pools == nil {
		err = c.finish(built, c.own)
	}
	if err != nil {
		return nil, err
	}
	return c, nil
}

// decodedConfig is a config's keys, decoded: the network config's top
// level, its ipam section merged over the flat file, and the whereabouts
// keys present that tenure ignores (sorted).
type decodedConfig struct {
	top     netconfKeys
	ipam    ipamKeys
	ignored []string
}

// decodeConfig decodes netconf and flat into their keys; every error in
// the JSON (syntax, a value's type, an unknown key) is reported here.
func decodeConfig(netconf, flat []byte) (*decodedConfig, error) {
	if !json.Valid(netconf) {
		err := json.Unmarshal(netconf, new(any))
		return nil, &Error{Key: "netconf", Reason: fmt.Sprintf("not valid JSON: %v", err)}
	}
	if k := kindOf(netconf); k != kindObject {
		return nil, &Error{Key: "netconf", Value: show(netconf), Reason: fmt.Sprintf("must be a JSON object, not %s", k)}
	}
	d := &decodedConfig{}
	var err error
	if d.top, err = decodeKeys[netconfKeys](field{raw: netconf}); err != nil {
		return nil, err
	}
	if !d.top.IPAM.ok() {
		return nil, &Error{Key: "ipam", Reason: "is required"}
	}
	fields, ignored, err := mergeFlatFile(d.top.IPAM.get(), flat)
	if err != nil {
		return nil, err
	}
	if d.ignored, err = checkKnownKeys(fields, ignored); err != nil {
		return nil, err
	}
	if err := decodeMembers(fields, reflect.ValueOf(&d.ipam).Elem()); err != nil {
		return nil, err
	}
	return d, nil
}

// mergeFlatFile lays the ipam section's keys over the flat file's. The
// file's own configuration_path is checked and then reported as ignored
// (ignored[key]) unless the ipam section sets one too.
func mergeFlatFile(ipamFields objectMembers, flat []byte) (fields map[string]field, ignored map[string]bool, err error) {
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

// checkKnownKeys refuses unknown keys, decodes the whereabouts keys tenure
// ignores, and returns the ignored keys present (sorted), with those the
// flat-file merge already set aside.
func checkKnownKeys(fields map[string]field, ignored map[string]bool) ([]string, error) {
	var w whereaboutsKeys
	wv := reflect.ValueOf(&w).Elem()
	tenure, whereabouts := keysOf(reflect.TypeFor[ipamKeys]()), keysOf(wv.Type())
	for _, k := range sortedKeys(fields) {
		if i := slices.Index(whereabouts, k); i >= 0 {
			if err := decode(fields[k], wv.Field(i)); err != nil {
				return nil, err
			}
			ignored[k] = true
		} else if !slices.Contains(tenure, k) {
			return nil, unknownKey(fields[k], k, allKeys)
		}
	}
	var out []string
	for k := range ignored {
		out = append(out, k)
	}
	slices.Sort(out)
	return out, nil
}

// parsePools reads the pools list: at least one IPPool name, none twice,
// and not beside pool.
func (c *Config) parsePools(k *ipamKeys) error {
	if c.Pool != "" {
		return k.Pools.errorf("contradicts %s %s: a config names one pool or a list of pools", c.own.pool.path, c.own.pool.show())
	}
	list := k.Pools.get()
	if len(list) == 0 {
		return k.Pools.errorf("names no pool: list at least one IPPool")
	}
	c.Pools = make([]string, 0, len(list))
	for _, e := range list {
		name := e.get()
		if !validName(name) {
			return e.errorf("must be the name of an IPPool (a lowercase RFC 1123 subdomain)")
		}
		if j := slices.Index(c.Pools, name); j >= 0 {
			return e.errorf("names IPPool %s a second time, after %s[%d]", name, k.Pools.path, j)
		}
		c.Pools = append(c.Pools, name)
	}
	c.own.pool = k.Pools.field
	return nil
}

// parseResultKeys reads what goes into the CNI result besides the
// addresses: gateway, routes and dns.
func (c *Config) parseResultKeys(k *ipamKeys) error {
	var err error
	if k.Gateway.get() != "" { // whereabouts treats "" as unset
		if c.Gateway, err = k.Gateway.addr(); err != nil {
			return err
		}
		c.own.gateway, c.own.gatewayKey = c.Gateway, k.Gateway.field
	}
	if c.Routes, err = parseRoutes(k.Routes); err != nil {
		return err
	}
	c.DNS, err = parseDNS(k.DNS.get())
	return err
}

// parseAgentKeys reads how the agent names and reaches the network:
// network_name, enable_overlapping_ranges, agent_socket,
// sticky_statefulsets, and checks configuration_path, which the shim has
// already acted on.
func (c *Config) parseAgentKeys(k *ipamKeys) error {
	if k.NetworkName.ok() {
		var err error
		if c.NetworkName, err = networkName(k.NetworkName.field); err != nil {
			return err
		}
		c.own.networkName, c.own.networkNameKey = c.NetworkName, k.NetworkName.field
	}
	if k.EnableOverlappingRanges.ok() {
		c.OverlappingRanges = k.EnableOverlappingRanges.get()
	}
	if k.AgentSocket.ok() {
		s := k.AgentSocket.get()
		if !filepath.IsAbs(s) || len(s) > maxSocketPath || strings.IndexByte(s, 0) >= 0 {
			return k.AgentSocket.errorf("must be an absolute path of at most %d bytes", maxSocketPath)
		}
		c.AgentSocket = s
	}
	// "" is unset. The shim reads the file configuration_path names; the
	// agent only gets the file's bytes.
	if s := k.ConfigurationPath.get(); s != "" && !filepath.IsAbs(s) {
		return k.ConfigurationPath.errorf("must be an absolute path")
	}
	c.StickyStatefulSets = k.StickyStatefulSets.get()
	return nil
}

// parseDelegationKeys reads prefix_delegation and dhcpv6.
func (c *Config) parseDelegationKeys(k *ipamKeys) error {
	var err error
	if k.PrefixDelegation.ok() {
		if c.PrefixDelegation, c.own.pdRangeKey, err = parsePrefixDelegation(k.PrefixDelegation); err != nil {
			return err
		}
		c.own.pd = c.PrefixDelegation
	}
	if k.DHCPv6.ok() {
		c.DHCPv6, err = parseDHCPv6(k.DHCPv6)
	}
	return err
}

// parseRanges handles range, range_start, range_end, exclude, ipRanges and
// their contradictions with pool. Like whereabouts, the top-level range is
// the first entry, before the ipRanges entries. Whereabouts tests these
// keys against their zero value, so "" and [] are unset.
func parseRanges(c *Config, k *ipamKeys) ([]builtRange, error) {
	var set [5]*field // range, range_start, range_end, exclude, ipRanges
	for i, f := range [...]struct {
		f  *field
		ok bool
	}{
		{&k.Range.field, k.Range.get() != ""}, {&k.RangeStart.field, k.RangeStart.get() != ""},
		{&k.RangeEnd.field, k.RangeEnd.get() != ""}, {&k.Exclude.field, len(k.Exclude.get()) > 0},
		{&k.IPRanges.field, len(k.IPRanges.get()) > 0},
	} {
		if f.ok {
			set[i] = f.f
		}
	}
	rng, start, end, exclude, ipRanges := set[0], set[1], set[2], set[3], set[4]
	if c.Pool != "" || c.Pools != nil {
		for _, f := range set {
			if f != nil {
				return nil, f.errorf("contradicts %s %s: a config takes its ranges either from a declared pool or from its own range/ipRanges keys", c.own.pool.path, c.own.pool.show())
			}
		}
		return nil, nil
	}
	if rng == nil && ipRanges == nil {
		return nil, &Error{Key: "ipam", Reason: "one of range, ipRanges or pool is required"}
	}
	var topExclude []field
	if exclude != nil {
		topExclude = fieldsOf(k.Exclude.get())
	}
	var built []builtRange
	if rng != nil {
		b, err := buildRange(rangeInput{rng: *rng, start: start, end: end, exclude: topExclude})
		if err != nil {
			return nil, err
		}
		built = append(built, b)
	} else {
		for _, b := range []struct {
			f   *field
			key string
		}{{start, "range_start"}, {end, "range_end"}} {
			if b.f != nil {
				return nil, b.f.errorf("needs a top-level range; with ipRanges, set %s inside each entry", b.key)
			}
		}
	}
	for _, e := range k.IPRanges.get() {
		// whereabouts drops a top-level exclude when there is no
		// top-level range; tenure applies it to every entry rather
		// than silently hand out addresses the user excluded.
		var inherited []field
		if rng == nil {
			inherited = topExclude
		}
		b, err := ipRangesEntry(e, inherited)
		if err != nil {
			return nil, err
		}
		built = append(built, b)
	}
	return built, nil
}

// ipRangesEntry builds the range of one ipRanges entry; inherited excludes
// follow the entry's own.
func ipRangesEntry(e val[rangeKeys], inherited []field) (builtRange, error) {
	m := e.get()
	if !m.Range.ok() {
		return builtRange{}, &Error{Key: e.path + ".range", Reason: "is required"}
	}
	in := rangeInput{rng: m.Range.field, exclude: append(fieldsOf(m.Exclude.get()), inherited...)}
	if m.RangeStart.get() != "" {
		in.start = &m.RangeStart.field
	}
	if m.RangeEnd.get() != "" {
		in.end = &m.RangeEnd.field
	}
	return buildRange(in)
}

// fieldsOf returns the fields of vals.
func fieldsOf[T any](vals []val[T]) []field {
	out := make([]field, len(vals))
	for i, v := range vals {
		out[i] = v.field
	}
	return out
}

// finish runs the checks that need both the ranges and the rest of the
// config, and sets c.Ranges; src names the keys c's values came from.
func (c *Config) finish(built []builtRange, src sources) error {
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
			return src.gatewayKey.errorf("is %s but no range is %s (%s %s)", fam, fam, built[0].in.rng.path, built[0].in.rng.show())
		}
	}
	for i := range built {
		if err := c.excludeGateway(&built[i], src.gatewayKey); err != nil {
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
				return src.pdRangeKey.errorf("overlaps %s %s: delegated prefixes must lie outside the address ranges", b.in.rng.path, b.in.rng.show())
			}
		}
	}
	if err := c.checkScopeLengths(built, src); err != nil {
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
	requested, err := c.assignRequested(built, src)
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
// its own (reservation.Scope), so nothing stops the address shared by
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

// checkScopeLengths refuses a network_name that makes a reservation's
// spec.network (reservation.Scope, as the agent computes it for each
// range and the delegation pool) longer than the API accepts: with
// enable_overlapping_ranges false the key is the name, "/" and the range,
// and a name valid on its own would fail every ADD.
func (c *Config) checkScopeLengths(built []builtRange, src sources) error {
	type scope struct {
		spec string
		f    field
	}
	scopes := make([]scope, 0, len(built)+1)
	for _, b := range built {
		scopes = append(scopes, scope{b.r.String(), b.in.rng})
	}
	if pd := c.PrefixDelegation; pd != nil {
		scopes = append(scopes, scope{pd.Range.String(), src.pdRangeKey})
	}
	for _, sc := range scopes {
		key := c.scope(sc.spec)
		if len(key) <= maxScopeLen {
			continue
		}
		// Only a set network_name can make the key this long: "default"
		// and a range are far shorter.
		suffix := len(key) - len(c.NetworkName)
		return src.networkNameKey.errorf("is %d bytes, too long with enable_overlapping_ranges false: the spec.network of the reservations of %s %s is the name, \"/\" and %q, %d bytes, over the API's limit of %d; use a name of at most %d bytes",
			len(c.NetworkName), sc.f.path, sc.f.show(), sc.spec, len(key), maxScopeLen, maxScopeLen-suffix)
	}
	return nil
}

// excludeGateway adds the gateway to b's excludes when b's subnet holds it,
// normalises the excludes, and refuses a range left without an address;
// gatewayKey is the gateway's key.
func (c *Config) excludeGateway(b *builtRange, gatewayKey field) error {
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
		parts = append(parts, gatewayKey.path+" "+gatewayKey.show())
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
	if c.Pools != nil && !slices.Contains(c.Pools, name) {
		return &Error{Key: c.own.pool.path, Value: c.own.pool.show(), Reason: fmt.Sprintf("the config's pools list does not name IPPool %s", name)}
	}
	if c.Pool != "" && c.Pool != name && c.Pools == nil {
		key := c.own.pool.path
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
	src, err := c.own.withPool(prefix, spec)
	if err != nil {
		return err
	}
	n := *c
	n.Gateway, n.NetworkName, n.PrefixDelegation = src.gateway, src.networkName, src.pd
	if err := n.finish(built, src); err != nil {
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

// withPool returns src with gateway, network_name and prefix_delegation
// taken from the pool's spec where the config does not set them.
func (src sources) withPool(prefix string, spec v1alpha1.IPPoolSpec) (sources, error) {
	if !src.gateway.IsValid() && spec.Gateway != "" {
		f := jsonString(prefix+".gateway", spec.Gateway)
		a, err := f.addr()
		if err != nil {
			return src, err
		}
		src.gateway, src.gatewayKey = a, f
	}
	if src.networkName == "" && spec.NetworkName != "" {
		f := jsonString(prefix+".network_name", spec.NetworkName)
		s, err := networkName(f)
		if err != nil {
			return src, err
		}
		src.networkName, src.networkNameKey = s, f
	}
	if src.pd == nil && spec.PrefixDelegation != nil {
		pd := spec.PrefixDelegation
		rf := jsonString(prefix+".prefix_delegation.range", pd.Range)
		lf := field{path: prefix + ".prefix_delegation.prefix_length", raw: []byte(strconv.Itoa(int(pd.PrefixLength)))}
		p, err := buildPrefixDelegation(rf, lf, int64(pd.PrefixLength))
		if err != nil {
			return src, err
		}
		src.pd, src.pdRangeKey = p, rf
	}
	return src, nil
}

func networkName(f field) (string, error) {
	s := f.text
	if s == "" {
		return "", nil
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

func parseRoutes(v val[[]val[routeKeys]]) ([]*types.Route, error) {
	if !v.ok() {
		return nil, nil
	}
	routes := make([]*types.Route, 0, len(v.get()))
	for _, e := range v.get() {
		m := e.get()
		if !m.Dst.ok() {
			return nil, &Error{Key: e.path + ".dst", Reason: "is required"}
		}
		df := m.Dst.field
		p, err := parsePrefix(strings.TrimSpace(m.Dst.get()))
		if err != nil {
			return nil, df.errorf("not a CIDR: %v", err)
		}
		if p != p.Masked() {
			return nil, df.errorf("has host bits set (did you mean %q?)", p.Masked().String())
		}
		rt := &types.Route{Dst: net.IPNet{IP: net.IP(p.Addr().AsSlice()), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}}
		if m.GW.ok() {
			a, err := m.GW.addr()
			if err != nil {
				return nil, err
			}
			if a.Is4() != p.Addr().Is4() {
				return nil, m.GW.errorf("is %s but %s %s is %s", familyName(a.Is4()), df.path, df.show(), familyName(p.Addr().Is4()))
			}
			rt.GW = net.IP(a.AsSlice())
		}
		for _, n := range []struct {
			v   *val[int64]
			dst func(int)
			max int64
		}{
			{&m.MTU, func(i int) { rt.MTU = i }, 1<<32 - 1},
			{&m.AdvMSS, func(i int) { rt.AdvMSS = i }, 1<<32 - 1},
			{&m.Priority, func(i int) { rt.Priority = i }, 1<<32 - 1},
			{&m.Table, func(i int) { rt.Table = &i }, 1<<32 - 1},
			{&m.Scope, func(i int) { rt.Scope = &i }, 255},
		} {
			if !n.v.ok() {
				continue
			}
			i := n.v.get()
			if i < 0 || i > 1<<32-1 {
				return nil, n.v.errorf("must be from 0 to %d", int64(1<<32-1))
			}
			if i > n.max {
				return nil, n.v.errorf("must be from 0 to %d", n.max)
			}
			n.dst(int(i))
		}
		routes = append(routes, rt)
	}
	return routes, nil
}

func parseDNS(m dnsKeys) (types.DNS, error) {
	d := types.DNS{Domain: m.Domain.get(), Search: m.Search.get(), Options: m.Options.get()}
	for _, e := range m.Nameservers.get() {
		s := e.get()
		if _, err := netip.ParseAddr(s); err != nil { // zones allowed: fe80::1%eth0
			return d, e.errorf("not an IP address: %v", err)
		}
		d.Nameservers = append(d.Nameservers, s)
	}
	return d, nil
}
