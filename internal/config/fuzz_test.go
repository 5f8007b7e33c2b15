package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/netip"
	"runtime"
	"strings"
	"testing"

	"github.com/tenure-ipam/tenure/api/v1alpha1"
)

// FuzzParse fuzzes Parse with both of its inputs, the network config and the
// flat file merged under its ipam section, as the agent calls it with what
// the shim read. It asserts:
//   - no panic, and every error is a complete *Error whose Key names a field
//     of the input: a "flatfile." key only for a key the flat file sets and
//     the ipam section does not (the ipam section wins key by key), an
//     "ipam." key only for a key the ipam section sets (or its required
//     type);
//   - Parse is deterministic, error included;
//   - the merge is a key-by-key overlay: Parse(netconf, flat) and Parse of
//     the netconf whose ipam section is that overlay, without a flat file,
//     agree (the same config, or the same error at the same key);
//   - a config that parses re-parses from its canonical form (canonical,
//     below) to the same canonical form;
//   - allocation is bounded by the input's size, whatever ranges it names;
//   - the ranges' and delegation pool's methods agree with each other.
func FuzzParse(f *testing.F) {
	f.Add([]byte(whereaboutsNAD), []byte(nil))
	f.Add(nad(`{"type":"tenure","range":"192.168.2.225-192.168.2.230/28","gateway":"192.168.2.226","ipRanges":[{"range":"fd00::/64","exclude":["fd00::2"]}]}`),
		[]byte(`{"datastore":"kubernetes","log_level":"debug"}`))
	f.Add(nad(`{"type":"tenure","range":"10.0.0.0/30","exclude":["10.0.0.1","10.0.0.2/31"]}`), []byte(`{"gateway":"10.0.0.1"}`))
	f.Add(nad(`{"type":"tenure","pool":"blue","dhcpv6":{"interfaces":["net1"],"preferred_lifetime":60}}`), []byte(nil))
	f.Add(nad(`{"type":"tenure","range":"2001:db8::/120","range_start":"2001:db8::","range_end":"2001:db8::ff","prefix_delegation":{"range":"2001:db9::/40","prefix_length":56}}`), []byte(nil))
	f.Add(nad(`{"type":"tenure","range":"10.0.0.0/24","routes":[{"dst":"0.0.0.0/0","gw":"10.0.0.1","table":5}],"dns":{"nameservers":["1.1.1.1"]}}`), []byte(`[]`))
	f.Add([]byte(`{"ipam":{"type":"tenure","range":"0.0.0.0/0","exclude":["0.0.0.0/1"]}}`), []byte(`{"range":1}`))
	f.Add([]byte(`{"ipam":{"type":"tenure","range":"::/0","exclude":["::/1"]}}`), []byte(`null`))
	// The flat file supplies what the ipam section leaves out; the ipam
	// section wins where both set a key.
	f.Add(nad(`{"type":"tenure","configuration_path":"/etc/cni/net.d/tenure.d/tenure.conf"}`),
		[]byte(`{"range":"10.1.0.0/16","exclude":["10.1.0.0/24"],"gateway":"10.1.0.1","network_name":"flat","agent_socket":"/run/t/agent.sock","configuration_path":"/x"}`))
	f.Add(nad(`{"type":"tenure","range":"10.2.0.0/24","network_name":"nad","range":null}`),
		[]byte(`{"range":"fd00::/64","network_name":"flat","enable_overlapping_ranges":false,"kubernetes":{"kubeconfig":"/k"}}`))
	f.Add(nad(`{"range":"10.3.0.0/24"}`), []byte(`{"type":"tenure","ipRanges":[{"range":"10.4.0.0/24"}],"dns":{"domain":"x"}}`))
	f.Add(nad(`{"type":"tenure","pool":"blue"}`), []byte(`{"range":"10.5.0.0/24"}`))
	f.Add(nad(`{"type":"tenure","range":"10.6.0.0/24"}`), []byte(`{"range":"10.6.0.0/24","bogus":1}`))
	f.Add(nad(`{"type":"tenure","ipRanges":[{"range":"10.7.0.0/24"}]}`), []byte(`{"exclude":["10.7.0.1"],"dhcpv6":{"enabled":false}}`))
	f.Add(nad(`{"type":"tenure","range":"10.8.0.0/24","network_name":"`+strings.Repeat("n", 240)+`"}`), []byte(`{"enable_overlapping_ranges":false}`))
	f.Add(nad(`{"type":"tenure","range":"10.9.0.0/24"}`), []byte(`{"configuration_path":5}`))
	f.Add(nad(`{"type":"tenure","range":"10.10.0.0/24"}`), []byte(" \n"))
	f.Add(nad(`{"type":"tenure","range":"10.11.0.0/24"}`), []byte(`{"prefix_delegation":{"range":"fd00:1::/48","prefix_length":64},"routes":[{"dst":"fd00::/8"}]}`))
	f.Fuzz(func(t *testing.T, netconf, flat []byte) {
		c, err := parseBounded(t, netconf, flat)
		checkDeterministic(t, netconf, flat, c, err)
		checkMerge(t, netconf, flat, c, err)
		if err != nil {
			checkErrorKey(t, netconf, flat, err)
			return
		}
		checkCanonical(t, c)
		if c.Pool != "" {
			_ = c.ApplyPool(c.Pool, v1alpha1.IPPoolSpec{Ranges: []v1alpha1.PoolRange{{Range: "10.0.0.0/24"}, {Range: "fd00::/120"}}, Gateway: "10.0.0.1"})
		}
		checkSpaces(t, c)
	})
}

// parseBounded runs Parse and fails when it allocates more than a fixed
// allowance plus a multiple of the input's size: a range of 2^64 addresses
// must cost what "fd00::/64" costs to read.
func parseBounded(t *testing.T, netconf, flat []byte) (*Config, error) {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	c, err := Parse(netconf, flat)
	runtime.ReadMemStats(&after)
	allowed := uint64(1<<20 + 256*(len(netconf)+len(flat)))
	if got := after.TotalAlloc - before.TotalAlloc; got > allowed {
		t.Fatalf("Parse allocated %d bytes for %d bytes of input (allowed %d)", got, len(netconf)+len(flat), allowed)
	}
	return c, err
}

func checkDeterministic(t *testing.T, netconf, flat []byte, c *Config, err error) {
	t.Helper()
	c2, err2 := Parse(netconf, flat)
	if errString(err) != errString(err2) {
		t.Fatalf("Parse is not deterministic: %v, then %v", err, err2)
	}
	if err == nil && !bytes.Equal(canonical(t, c), canonical(t, c2)) {
		t.Fatalf("Parse is not deterministic:\n%s\n%s", canonical(t, c), canonical(t, c2))
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// members decodes a JSON object's members, dropping null ones as Parse does;
// nil when raw is not an object.
func members(raw []byte) map[string]json.RawMessage {
	var m map[string]json.RawMessage
	if kindOf(raw) != kindObject || json.Unmarshal(raw, &m) != nil {
		return nil
	}
	for k, v := range m {
		if kindOf(v) == kindNull {
			delete(m, k)
		}
	}
	return m
}

// checkErrorKey checks that err is a complete *Error whose Key names a field
// of the input, attributed to the side of the merge that supplied it.
func checkErrorKey(t *testing.T, netconf, flat []byte, err error) {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) || e.Key == "" || e.Reason == "" {
		t.Fatalf("error %v (%T) is not a complete *Error", err, err)
	}
	var ipam, runtimeConfig, flatKeys map[string]json.RawMessage
	if top := members(netconf); top != nil {
		ipam = members(top["ipam"])
		runtimeConfig = members(top["runtimeConfig"])
	}
	flatKeys = members(flat)
	names := func(rest string, set map[string]json.RawMessage) bool {
		for k := range set {
			if rest == k || strings.HasPrefix(rest, k+".") || strings.HasPrefix(rest, k+"[") {
				return true
			}
		}
		return false
	}
	switch root, rest, _ := strings.Cut(e.Key, "."); {
	case e.Key == "netconf" || e.Key == "flatfile" || e.Key == "ipam" || e.Key == "ipam.type" || e.Key == "cniVersion" || e.Key == "name":
	case root == "ipam":
		if !names(rest, ipam) {
			t.Fatalf("error %q names ipam.%s, which the ipam section does not set", err, rest)
		}
	case root == "runtimeConfig":
		// What the runtime passes beside the configuration (requested ips).
		if !names(rest, runtimeConfig) {
			t.Fatalf("error %q names runtimeConfig.%s, which the configuration does not set", err, rest)
		}
	case root == "flatfile":
		if !names(rest, flatKeys) || (names(rest, ipam) && !strings.HasPrefix(rest, "configuration_path")) {
			t.Fatalf("error %q names flatfile.%s, but the flat file does not set it or the ipam section overrides it", err, rest)
		}
	default:
		t.Fatalf("error %q names no field of the input", err)
	}
}

// checkMerge compares Parse(netconf, flat) with Parse of netconf whose ipam
// section is the flat file's members overlaid with its own.
func checkMerge(t *testing.T, netconf, flat []byte, c *Config, err error) {
	t.Helper()
	top, flatM := members(netconf), members(flat)
	if top == nil || flatM == nil || members(top["ipam"]) == nil {
		return
	}
	if p, ok := flatM["configuration_path"]; ok {
		// The flat file's own configuration_path is only checked to be a
		// string and reported as ignored: not what the key means in the
		// ipam section.
		if kindOf(p) != kindString {
			return
		}
		delete(flatM, "configuration_path")
	}
	merged := flatM
	for k, v := range members(top["ipam"]) {
		merged[k] = v
	}
	top["ipam"] = marshalVerbatim(t, merged)
	netconf2 := marshalVerbatim(t, top)
	c2, err2 := Parse(netconf2, nil)
	switch {
	case err == nil && err2 == nil:
		if a, b := canonical(t, c), canonical(t, c2); !bytes.Equal(a, b) {
			t.Fatalf("with the flat file:\n%s\nmerged by hand:\n%s\n(%s)", a, b, netconf2)
		}
	case err != nil && err2 != nil:
		// The same fault, at the same key, wherever the key came from.
		unflat := func(err error) string { return strings.ReplaceAll(err.Error(), "flatfile.", "ipam.") }
		if unflat(err) != unflat(err2) {
			t.Fatalf("with the flat file: %v\nmerged by hand: %v\n(%s)", err, err2, netconf2)
		}
	default:
		t.Fatalf("with the flat file: %v; merged by hand: %v\n(%s)", err, err2, netconf2)
	}
}

// marshalVerbatim encodes members without escaping HTML characters, so that
// values read back as they were written (error messages show them).
func marshalVerbatim(t *testing.T, m map[string]json.RawMessage) json.RawMessage {
	t.Helper()
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(m); err != nil {
		t.Fatal(err)
	}
	return bytes.TrimSpace(b.Bytes())
}

// canonical renders c as a network config whose ipam section holds only
// what Parse derived, in normal form: each range as an ipRanges entry in
// its canonical spelling with its normalised excludes, every default
// written out. Ignored keys, having no effect, are left out.
func canonical(t *testing.T, c *Config) []byte {
	t.Helper()
	type rangeEntry struct {
		Range   string   `json:"range"`
		Exclude []string `json:"exclude,omitempty"`
	}
	ipam := map[string]any{
		"type":                      PluginType,
		"enable_overlapping_ranges": c.OverlappingRanges,
		"agent_socket":              c.AgentSocket,
		"dns":                       c.DNS,
	}
	var ranges []rangeEntry
	for _, r := range c.Ranges {
		e := rangeEntry{Range: r.String()}
		for _, x := range r.Exclude {
			e.Exclude = append(e.Exclude, x.String())
		}
		ranges = append(ranges, e)
	}
	if ranges != nil {
		ipam["ipRanges"] = ranges
	}
	if c.Gateway.IsValid() {
		ipam["gateway"] = c.Gateway.String()
	}
	if c.Routes != nil {
		ipam["routes"] = c.Routes
	}
	if c.NetworkName != "" {
		ipam["network_name"] = c.NetworkName
	}
	if c.Pool != "" {
		ipam["pool"] = c.Pool
	}
	if pd := c.PrefixDelegation; pd != nil {
		ipam["prefix_delegation"] = map[string]any{"range": pd.Range.String(), "prefix_length": pd.PrefixLength}
	}
	if d := c.DHCPv6; d != nil {
		ipam["dhcpv6"] = map[string]any{
			"enabled": d.Enabled, "interfaces": d.Interfaces, "install_routes": d.InstallRoutes, "router_advertisements": d.RouterAdvertisements,
			"preferred_lifetime": int64(d.PreferredLifetime.Seconds()), "valid_lifetime": int64(d.ValidLifetime.Seconds()),
		}
	}
	top := map[string]any{"ipam": ipam}
	if c.CNIVersion != "" {
		top["cniVersion"] = c.CNIVersion
	}
	if c.Name != "" {
		top["name"] = c.Name
	}
	b, err := json.Marshal(top)
	if err != nil {
		t.Fatalf("rendering %+v: %v", c, err)
	}
	return b
}

// checkCanonical re-parses c's canonical form, which must parse to the
// same canonical form.
func checkCanonical(t *testing.T, c *Config) {
	t.Helper()
	b := canonical(t, c)
	c2, err := Parse(b, nil)
	if err != nil {
		t.Fatalf("the canonical form does not parse: %v\n%s", err, b)
	}
	if b2 := canonical(t, c2); !bytes.Equal(b, b2) {
		t.Fatalf("the canonical form re-parses differently:\n%s\n%s", b, b2)
	}
}

func checkSpaces(t *testing.T, c *Config) {
	t.Helper()
	for _, r := range c.Ranges {
		if r.Capacity() == 0 || r.Capacity() > r.Size() {
			t.Fatalf("range %v: Capacity %d, Size %d", r, r.Capacity(), r.Size())
		}
		for _, off := range []uint64{0, r.Size() / 2, r.Size() - 1} {
			a := r.At(off)
			if o, ok := r.Offset(a); !ok || o != off {
				t.Fatalf("range %v: Offset(At(%d)=%v) = %d, %v", r, off, a, o, ok)
			}
		}
		_ = r.Contains(r.Start)
		_ = r.String()
		if c.Gateway.IsValid() && r.Contains(c.Gateway) {
			t.Fatalf("range %v hands out the gateway %v", r, c.Gateway)
		}
	}
	if pd := c.PrefixDelegation; pd != nil {
		for _, i := range []uint64{0, pd.Count() - 1} {
			q := pd.At(i)
			if j, ok := pd.Index(q); !ok || j != i {
				t.Fatalf("pd %+v: Index(At(%d)=%v) = %d, %v", pd, i, q, j, ok)
			}
		}
		_, _ = pd.Index(netip.Prefix{})
	}
}
