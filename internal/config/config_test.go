package config

import (
	"errors"
	"math"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"

	"github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/deploy"
	"github.com/tenure-ipam/tenure/internal/addrspace"
	"github.com/tenure-ipam/tenure/internal/cniwire"
	"github.com/tenure-ipam/tenure/internal/reservation"
)

// nad wraps an ipam section in a macvlan network config, as Multus passes it.
func nad(ipam string) []byte {
	return []byte(`{"cniVersion":"1.0.0","name":"net1","type":"macvlan","master":"eth0","mode":"bridge",` +
		`"runtimeConfig":{"portMappings":[]},"args":{"cni":{"x":1}},"ipam":` + ipam + `}`)
}

func mustParse(t *testing.T, ipam string) *Config {
	t.Helper()
	c, err := Parse(nad(ipam), nil)
	if err != nil {
		t.Fatalf("Parse(%s): %v", ipam, err)
	}
	return c
}

func addr(s string) netip.Addr  { return netip.MustParseAddr(s) }
func pfx(s string) netip.Prefix { return netip.MustParsePrefix(s) }
func pfxs(s ...string) []netip.Prefix {
	out := make([]netip.Prefix, len(s))
	for i, p := range s {
		out[i] = pfx(p)
	}
	return out
}

// wantRange checks the normalised form of a range.
func wantRange(t *testing.T, r addrspace.Range, prefix, start, end string, size, capacity uint64) {
	t.Helper()
	if r.Prefix != pfx(prefix) || r.Start != addr(start) || r.End != addr(end) {
		t.Errorf("range %q = %s [%s, %s], want %s [%s, %s]", r.Spec, r.Prefix, r.Start, r.End, prefix, start, end)
	}
	if r.Size() != size {
		t.Errorf("range %q Size = %d, want %d", r.Spec, r.Size(), size)
	}
	if r.Capacity() != capacity {
		t.Errorf("range %q Capacity = %d, want %d", r.Spec, r.Capacity(), capacity)
	}
}

// A real-looking whereabouts v0.9 NetworkAttachmentDefinition config, with
// only the type changed.
const whereaboutsNAD = `{
  "cniVersion": "0.3.1",
  "name": "whereaboutsexample",
  "type": "macvlan",
  "master": "eth0",
  "mode": "bridge",
  "ipam": {
    "type": "tenure",
    "datastore": "kubernetes",
    "kubernetes": {
      "kubeconfig": "/etc/cni/net.d/whereabouts.d/whereabouts.kubeconfig",
      "k8s_api_root": "https://10.96.0.1:443"
    },
    "range": "192.168.2.225/28",
    "exclude": [
      "192.168.2.229/30",
      "192.168.2.236/32"
    ],
    "log_file": "/tmp/whereabouts.log",
    "log_level": "debug",
    "gateway": "192.168.2.225",
    "network_name": "blue-net",
    "enable_overlapping_ranges": false,
    "reconciler_cron_expression": "30 4 * * *",
    "leader_lease_duration": 1500,
    "leader_renew_deadline": 1000,
    "leader_retry_period": 500,
    "sleep_for_race": 0,
    "node_slice_size": "/30",
    "routes": [{"dst": "0.0.0.0/0"}, {"dst": "10.10.0.0/16", "gw": "192.168.2.1"}],
    "dns": {"nameservers": ["10.96.0.10"], "domain": "cluster.local", "search": ["svc.cluster.local"], "options": ["ndots:5"]}
  }
}`

func TestParseWhereaboutsNAD(t *testing.T) {
	c, err := Parse([]byte(whereaboutsNAD), nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.CNIVersion != "0.3.1" || c.Name != "whereaboutsexample" {
		t.Errorf("CNIVersion, Name = %q, %q", c.CNIVersion, c.Name)
	}
	wantIgnored := []string{"datastore", "kubernetes", "leader_lease_duration", "leader_renew_deadline", "leader_retry_period",
		"log_file", "log_level", "node_slice_size", "reconciler_cron_expression", "sleep_for_race"}
	if !slices.Equal(c.Ignored, wantIgnored) {
		t.Errorf("Ignored = %q, want %q", c.Ignored, wantIgnored)
	}
	if len(c.Ranges) != 1 {
		t.Fatalf("Ranges = %v", c.Ranges)
	}
	r := c.Ranges[0]
	// 192.168.2.224/28: .225-.238; excluded .228-.231, .236 and the gateway .225.
	wantRange(t, r, "192.168.2.224/28", "192.168.2.225", "192.168.2.238", 14, 14-4-1-1)
	if r.Spec != "192.168.2.225/28" || r.String() != "192.168.2.224/28" {
		t.Errorf("Spec, String = %q, %q", r.Spec, r.String())
	}
	if !slices.Equal(r.Exclude, pfxs("192.168.2.225/32", "192.168.2.228/30", "192.168.2.236/32")) {
		t.Errorf("Exclude = %v", r.Exclude)
	}
	if c.Gateway != addr("192.168.2.225") || c.NetworkName != "blue-net" || c.OverlappingRanges {
		t.Errorf("Gateway, NetworkName, OverlappingRanges = %v, %q, %v", c.Gateway, c.NetworkName, c.OverlappingRanges)
	}
	if len(c.Routes) != 2 || c.Routes[0].Dst.String() != "0.0.0.0/0" || c.Routes[0].GW != nil ||
		c.Routes[1].Dst.String() != "10.10.0.0/16" || !c.Routes[1].GW.Equal(net.ParseIP("192.168.2.1")) {
		t.Errorf("Routes = %v", c.Routes)
	}
	if !slices.Equal(c.DNS.Nameservers, []string{"10.96.0.10"}) || c.DNS.Domain != "cluster.local" ||
		!slices.Equal(c.DNS.Search, []string{"svc.cluster.local"}) || !slices.Equal(c.DNS.Options, []string{"ndots:5"}) {
		t.Errorf("DNS = %+v", c.DNS)
	}
	if c.AgentSocket != cniwire.DefaultSocket || c.Pool != "" || c.PrefixDelegation != nil || c.DHCPv6 != nil {
		t.Errorf("defaults: %+v", c)
	}
}

func TestParseIgnoredKeys(t *testing.T) {
	c := mustParse(t, `{"type":"tenure","range":"10.0.0.0/24","name":"x","datastore":"etcd",
		"etcd_host":"etcd:2379","etcd_username":"u","etcd_password":"p","etcd_key_file":"/k","etcd_cert_file":"/c","etcd_ca_cert_file":"/ca",
		"addresses":[{"address":"10.0.0.5/24","gateway":"10.0.0.1"}]}`)
	want := []string{"addresses", "datastore", "etcd_ca_cert_file", "etcd_cert_file", "etcd_host", "etcd_key_file", "etcd_password", "etcd_username", "name"}
	if !slices.Equal(c.Ignored, want) {
		t.Errorf("Ignored = %q, want %q", c.Ignored, want)
	}
	if got := mustParse(t, `{"type":"tenure","range":"10.0.0.0/24"}`).Ignored; got != nil {
		t.Errorf("Ignored = %q, want none", got)
	}
}

func TestParseRanges(t *testing.T) {
	type rng struct {
		prefix, start, end string
		size, capacity     uint64
		str                string
	}
	cases := []struct {
		name string
		ipam string
		want []rng
	}{
		{"ipv4 /24", `{"type":"tenure","range":"10.0.0.0/24"}`,
			[]rng{{"10.0.0.0/24", "10.0.0.1", "10.0.0.254", 254, 254, "10.0.0.0/24"}}},
		{"host bits are masked like whereabouts", `{"type":"tenure","range":"10.0.0.77/24"}`,
			[]rng{{"10.0.0.0/24", "10.0.0.1", "10.0.0.254", 254, 254, "10.0.0.0/24"}}},
		{"ipv4 /30", `{"type":"tenure","range":"10.0.0.4/30"}`,
			[]rng{{"10.0.0.4/30", "10.0.0.5", "10.0.0.6", 2, 2, "10.0.0.4/30"}}},
		{"ipv4 /31 keeps both", `{"type":"tenure","range":"10.0.0.4/31"}`,
			[]rng{{"10.0.0.4/31", "10.0.0.4", "10.0.0.5", 2, 2, "10.0.0.4/31"}}},
		{"ipv4 /32 keeps the one", `{"type":"tenure","range":"10.0.0.4/32"}`,
			[]rng{{"10.0.0.4/32", "10.0.0.4", "10.0.0.4", 1, 1, "10.0.0.4/32"}}},
		{"first-last/prefix", `{"type":"tenure","range":"192.168.2.225-192.168.2.230/28"}`,
			[]rng{{"192.168.2.224/28", "192.168.2.225", "192.168.2.230", 6, 6, "192.168.2.225-192.168.2.230/28"}}},
		{"first-last/prefix clamps the broadcast", `{"type":"tenure","range":"10.0.0.0-10.0.0.255/24"}`,
			[]rng{{"10.0.0.0/24", "10.0.0.1", "10.0.0.254", 254, 254, "10.0.0.0/24"}}},
		{"range_start and range_end", `{"type":"tenure","range":"10.0.0.0/24","range_start":"10.0.0.10","range_end":"10.0.0.19"}`,
			[]rng{{"10.0.0.0/24", "10.0.0.10", "10.0.0.19", 10, 10, "10.0.0.10-10.0.0.19/24"}}},
		{"range_start at the network address is clamped", `{"type":"tenure","range":"10.0.0.0/24","range_start":"10.0.0.0"}`,
			[]rng{{"10.0.0.0/24", "10.0.0.1", "10.0.0.254", 254, 254, "10.0.0.0/24"}}},
		{"range_end only", `{"type":"tenure","range":"10.0.0.0/24","range_end":"10.0.0.9"}`,
			[]rng{{"10.0.0.0/24", "10.0.0.1", "10.0.0.9", 9, 9, "10.0.0.1-10.0.0.9/24"}}},
		{"ipv6 /64: no /65 cap, anycast removed", `{"type":"tenure","range":"2001:db8::/64"}`,
			[]rng{{"2001:db8::/64", "2001:db8::1", "2001:db8::ffff:ffff:ffff:ffff", math.MaxUint64, math.MaxUint64, "2001:db8::/64"}}},
		{"ipv6 /63 saturates", `{"type":"tenure","range":"2001:db8::/63"}`,
			[]rng{{"2001:db8::/63", "2001:db8::1", "2001:db8:0:1:ffff:ffff:ffff:ffff", math.MaxUint64, math.MaxUint64, "2001:db8::/63"}}},
		{"ipv6 /120: 255, anycast removed, last address kept", `{"type":"tenure","range":"fd00::100/120"}`,
			[]rng{{"fd00::100/120", "fd00::101", "fd00::1ff", 255, 255, "fd00::100/120"}}},
		{"ipv6 /126 removes anycast", `{"type":"tenure","range":"fd00::/126"}`,
			[]rng{{"fd00::/126", "fd00::1", "fd00::3", 3, 3, "fd00::/126"}}},
		{"ipv6 /127 keeps both (RFC 6164)", `{"type":"tenure","range":"fd00::/127"}`,
			[]rng{{"fd00::/127", "fd00::", "fd00::1", 2, 2, "fd00::/127"}}},
		{"ipv6 /128", `{"type":"tenure","range":"fd00::7/128"}`,
			[]rng{{"fd00::7/128", "fd00::7", "fd00::7", 1, 1, "fd00::7/128"}}},
		{"ipv6 first-last/prefix", `{"type":"tenure","range":"fd00::10-fd00::1f/64"}`,
			[]rng{{"fd00::/64", "fd00::10", "fd00::1f", 16, 16, "fd00::10-fd00::1f/64"}}},
		{"ipv6 range_start at the anycast address is clamped", `{"type":"tenure","range":"fd00::/120","range_start":"fd00::","range_end":"fd00::3"}`,
			[]rng{{"fd00::/120", "fd00::1", "fd00::3", 3, 3, "fd00::1-fd00::3/120"}}},
		{"excludes: CIDR masked like whereabouts, single IPs", `{"type":"tenure","range":"10.0.0.0/24","exclude":["10.0.0.5/30","10.0.0.10","10.0.0.11/32"]}`,
			[]rng{{"10.0.0.0/24", "10.0.0.1", "10.0.0.254", 254, 248, "10.0.0.0/24"}}},
		{"exclude outside every range is ignored", `{"type":"tenure","range":"10.0.0.0/24","exclude":["10.1.0.0/16","fd00::1"]}`,
			[]rng{{"10.0.0.0/24", "10.0.0.1", "10.0.0.254", 254, 254, "10.0.0.0/24"}}},
		{"ipv6 exclude", `{"type":"tenure","range":"fd00::/120","exclude":["fd00::80/121","fd00::1"]}`,
			[]rng{{"fd00::/120", "fd00::1", "fd00::ff", 255, 255 - 128 - 1, "fd00::/120"}}},
		{"dual-stack ipRanges", `{"type":"tenure","ipRanges":[{"range":"10.0.0.0/24"},{"range":"fd00::/120","exclude":["fd00::2"]}]}`,
			[]rng{
				{"10.0.0.0/24", "10.0.0.1", "10.0.0.254", 254, 254, "10.0.0.0/24"},
				{"fd00::/120", "fd00::1", "fd00::ff", 255, 254, "fd00::/120"},
			}},
		{"ipRanges entries with range_start/range_end and first-last", `{"type":"tenure","ipRanges":[
			{"range":"10.0.0.0/24","range_start":"10.0.0.100","range_end":"10.0.0.109","exclude":["10.0.0.100"]},
			{"range":"fd00::5-fd00::9/64"}]}`,
			[]rng{
				{"10.0.0.0/24", "10.0.0.100", "10.0.0.109", 10, 9, "10.0.0.100-10.0.0.109/24"},
				{"fd00::/64", "fd00::5", "fd00::9", 5, 5, "fd00::5-fd00::9/64"},
			}},
		{"range then ipRanges, range first", `{"type":"tenure","range":"10.0.0.0/24","exclude":["10.0.0.1"],"ipRanges":[{"range":"fd00::/64"}]}`,
			[]rng{
				{"10.0.0.0/24", "10.0.0.1", "10.0.0.254", 254, 253, "10.0.0.0/24"},
				{"fd00::/64", "fd00::1", "fd00::ffff:ffff:ffff:ffff", math.MaxUint64, math.MaxUint64, "fd00::/64"},
			}},
		{"top-level exclude without range applies to every entry", `{"type":"tenure","exclude":["10.0.0.1","fd00::1"],"ipRanges":[{"range":"10.0.0.0/24"},{"range":"fd00::/120"}]}`,
			[]rng{
				{"10.0.0.0/24", "10.0.0.1", "10.0.0.254", 254, 253, "10.0.0.0/24"},
				{"fd00::/120", "fd00::1", "fd00::ff", 255, 254, "fd00::/120"},
			}},
		{"empty range with ipRanges, like whereabouts", `{"type":"tenure","range":"","range_start":"","exclude":[],"ipRanges":[{"range":"10.0.0.0/24","range_start":""}]}`,
			[]rng{{"10.0.0.0/24", "10.0.0.1", "10.0.0.254", 254, 254, "10.0.0.0/24"}}},
		{"null values are absent", `{"type":"tenure","range":"10.0.0.0/24","gateway":null,"exclude":null,"routes":null,"dhcpv6":null}`,
			[]rng{{"10.0.0.0/24", "10.0.0.1", "10.0.0.254", 254, 254, "10.0.0.0/24"}}},
		{"overlapping but different ranges are allowed", `{"type":"tenure","ipRanges":[{"range":"10.0.0.0/24"},{"range":"10.0.0.0/25"}]}`,
			[]rng{
				{"10.0.0.0/24", "10.0.0.1", "10.0.0.254", 254, 254, "10.0.0.0/24"},
				{"10.0.0.0/25", "10.0.0.1", "10.0.0.126", 126, 126, "10.0.0.0/25"},
			}},
		{"IPv4-mapped range_start is unmapped", `{"type":"tenure","range":"10.0.0.0/24","range_start":"::ffff:10.0.0.9"}`,
			[]rng{{"10.0.0.0/24", "10.0.0.9", "10.0.0.254", 246, 246, "10.0.0.9-10.0.0.254/24"}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := mustParse(t, tc.ipam)
			if len(c.Ranges) != len(tc.want) {
				t.Fatalf("Ranges = %v, want %d", c.Ranges, len(tc.want))
			}
			for i, w := range tc.want {
				r := c.Ranges[i]
				wantRange(t, r, w.prefix, w.start, w.end, w.size, w.capacity)
				if r.String() != w.str {
					t.Errorf("String = %q, want %q", r.String(), w.str)
				}
				if fam := map[bool]int{true: 4, false: 6}[r.Start.Is4()]; r.Family() != fam {
					t.Errorf("Family = %d, want %d", r.Family(), fam)
				}
			}
		})
	}
}

func TestParseGateway(t *testing.T) {
	c := mustParse(t, `{"type":"tenure","range":"10.0.0.0/24","gateway":"10.0.0.1","exclude":["10.0.0.1"]}`)
	r := c.Ranges[0]
	if c.Gateway != addr("10.0.0.1") || r.Contains(addr("10.0.0.1")) || r.Capacity() != 253 {
		t.Errorf("gateway inside the range must be excluded once: %v %v cap %d", c.Gateway, r.Exclude, r.Capacity())
	}
	if !slices.Equal(r.Exclude, pfxs("10.0.0.1/32")) {
		t.Errorf("Exclude = %v", r.Exclude)
	}

	// Gateway in the range's prefix but outside [range_start, range_end]:
	// nothing to exclude.
	c = mustParse(t, `{"type":"tenure","range":"10.0.0.100-10.0.0.110/24","gateway":"10.0.0.1"}`)
	if len(c.Ranges[0].Exclude) != 0 || c.Ranges[0].Capacity() != 11 {
		t.Errorf("Exclude = %v", c.Ranges[0].Exclude)
	}

	// Off-subnet gateway of a family a range has: kept, nothing excluded.
	c = mustParse(t, `{"type":"tenure","range":"10.0.0.0/24","gateway":"10.1.0.1"}`)
	if c.Gateway != addr("10.1.0.1") || len(c.Ranges[0].Exclude) != 0 {
		t.Errorf("Gateway %v, Exclude %v", c.Gateway, c.Ranges[0].Exclude)
	}

	// Dual-stack: an IPv6 gateway is excluded from the IPv6 range only.
	c = mustParse(t, `{"type":"tenure","ipRanges":[{"range":"10.0.0.0/24"},{"range":"fd00::/120"}],"gateway":"fd00::1"}`)
	if len(c.Ranges[0].Exclude) != 0 || !slices.Equal(c.Ranges[1].Exclude, pfxs("fd00::1/128")) {
		t.Errorf("Exclude = %v, %v", c.Ranges[0].Exclude, c.Ranges[1].Exclude)
	}

	// /31 with the gateway inside leaves one address.
	c = mustParse(t, `{"type":"tenure","range":"10.0.0.0/31","gateway":"10.0.0.0"}`)
	if c.Ranges[0].Capacity() != 1 || !c.Ranges[0].Contains(addr("10.0.0.1")) {
		t.Errorf("Capacity = %d", c.Ranges[0].Capacity())
	}

	// "" is unset, like whereabouts.
	if c := mustParse(t, `{"type":"tenure","range":"10.0.0.0/24","gateway":""}`); c.Gateway.IsValid() {
		t.Errorf("Gateway = %v", c.Gateway)
	}
}

func TestParseOtherKeys(t *testing.T) {
	c := mustParse(t, `{"type":"tenure","range":"10.0.0.0/24"}`)
	if !c.OverlappingRanges || c.AgentSocket != "/run/tenure/agent.sock" || c.NetworkName != "" ||
		c.Routes != nil || !c.DNS.IsEmpty() || c.Gateway.IsValid() {
		t.Errorf("defaults = %+v", c)
	}
	c = mustParse(t, `{"type":"tenure","range":"10.0.0.0/24","enable_overlapping_ranges":true,"network_name":"a.b-c",
		"agent_socket":"/var/run/t.sock","configuration_path":"/etc/x/../tenure.conf",
		"routes":[{"dst":"fd00:1::/64","gw":"fd00::1","mtu":1400,"advmss":1360,"priority":10,"table":100,"scope":0}],
		"dns":{"nameservers":["10.0.0.53","fe80::1%eth0"]}}`)
	if !c.OverlappingRanges || c.NetworkName != "a.b-c" || c.AgentSocket != "/var/run/t.sock" {
		t.Errorf("got %+v", c)
	}
	rt := c.Routes[0]
	if rt.Dst.String() != "fd00:1::/64" || !rt.GW.Equal(net.ParseIP("fd00::1")) || rt.MTU != 1400 || rt.AdvMSS != 1360 ||
		rt.Priority != 10 || rt.Table == nil || *rt.Table != 100 || rt.Scope == nil || *rt.Scope != 0 {
		t.Errorf("route = %v", rt)
	}
	if !slices.Equal(c.DNS.Nameservers, []string{"10.0.0.53", "fe80::1%eth0"}) {
		t.Errorf("DNS = %+v", c.DNS)
	}
}

func TestParsePrefixDelegationAndDHCPv6(t *testing.T) {
	c := mustParse(t, `{"type":"tenure","range":"2001:db8::/64","prefix_delegation":{"range":"2001:db8:100::/40","prefix_length":56},"dhcpv6":{}}`)
	pd := c.PrefixDelegation
	if pd == nil || pd.Range != pfx("2001:db8:100::/40") || pd.PrefixLength != 56 || pd.Count() != 1<<16 {
		t.Fatalf("PrefixDelegation = %+v", pd)
	}
	if got := pd.At(0); got != pfx("2001:db8:100::/56") {
		t.Errorf("At(0) = %v", got)
	}
	if got := pd.At(1); got != pfx("2001:db8:100:100::/56") {
		t.Errorf("At(1) = %v", got)
	}
	if got := pd.At(1<<16 - 1); got != pfx("2001:db8:1ff:ff00::/56") {
		t.Errorf("At(last) = %v", got)
	}
	if got := pd.At(1 << 16); got.IsValid() {
		t.Errorf("At(Count) = %v, want zero", got)
	}
	d := c.DHCPv6
	if d == nil || !d.Enabled || !d.InstallRoutes || d.PreferredLifetime != time.Hour || d.ValidLifetime != 2*time.Hour || d.Interfaces != nil ||
		d.RouterAdvertisements {
		t.Errorf("DHCPv6 defaults = %+v", d)
	}

	c = mustParse(t, `{"type":"tenure","range":"2001:db8::/64","dhcpv6":{"enabled":false,"interfaces":["net1","eth0.100"],
		"preferred_lifetime":600,"valid_lifetime":600,"install_routes":false,"router_advertisements":true}}`)
	d = c.DHCPv6
	if d.Enabled || d.InstallRoutes || d.PreferredLifetime != 10*time.Minute || d.ValidLifetime != 10*time.Minute || !d.RouterAdvertisements ||
		!slices.Equal(d.Interfaces, []string{"net1", "eth0.100"}) {
		t.Errorf("DHCPv6 = %+v", d)
	}
	if c.PrefixDelegation != nil {
		t.Errorf("PrefixDelegation = %+v", c.PrefixDelegation)
	}
	if d.TrustedRelays != nil {
		t.Errorf("TrustedRelays = %+v, want none by default", d.TrustedRelays)
	}
	c = mustParse(t, `{"type":"tenure","range":"2001:db8::/64","dhcpv6":{"interfaces":["br-vm","br-b"],
		"trusted_relays":[{"interface":"br-b","mac":"02:00:5E:00:53:01","address":"fe80::1"},{"interface":"br-vm","mac":"02:00:5e:00:53:02"}]}}`)
	want := []TrustedRelay{
		{Interface: "br-b", MAC: net.HardwareAddr{2, 0, 0x5e, 0, 0x53, 1}, Address: netip.MustParseAddr("fe80::1")},
		{Interface: "br-vm", MAC: net.HardwareAddr{2, 0, 0x5e, 0, 0x53, 2}},
	}
	if got := c.DHCPv6.TrustedRelays; !slices.EqualFunc(got, want, func(a, b TrustedRelay) bool {
		return a.Interface == b.Interface && a.MAC.String() == b.MAC.String() && a.Address == b.Address
	}) {
		t.Errorf("TrustedRelays = %+v, want %+v", got, want)
	}
	// PD next to an IPv4-only config, host bits masked, /128 delegations.
	c = mustParse(t, `{"type":"tenure","range":"10.0.0.0/24","prefix_delegation":{"range":"2001:db8::1/120","prefix_length":128}}`)
	if pd := c.PrefixDelegation; pd.Range != pfx("2001:db8::/120") || pd.Count() != 256 {
		t.Errorf("PrefixDelegation = %+v", pd)
	}
}

// errCase expects Parse to fail with a *Error whose Key is key and whose
// message contains every string of has (the value, the other key, …).
type errCase struct {
	name string
	conf string // a whole netconf if it does not start with `{"type"`; else an ipam section
	key  string
	has  []string
}

func (tc errCase) netconf() []byte {
	if strings.HasPrefix(tc.conf, `{"type"`) {
		return nad(tc.conf)
	}
	return []byte(tc.conf)
}

func checkErr(t *testing.T, err error, key string, has []string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want one on %s", key)
	}
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("error %v is %T, not *config.Error", err, err)
	}
	if e.Key != key {
		t.Errorf("Key = %q, want %q (error: %v)", e.Key, key, err)
	}
	msg := err.Error()
	if !strings.HasPrefix(msg, key+": ") {
		t.Errorf("error %q does not start with the key %q", msg, key)
	}
	for _, h := range has {
		if !strings.Contains(msg, h) {
			t.Errorf("error %q does not contain %q", msg, h)
		}
	}
}

func TestParseErrors(t *testing.T) {
	cases := []errCase{
		// Whole config.
		{"not JSON", `{"ipam":`, "netconf", []string{"not valid JSON"}},
		{"not an object", `[1,2]`, "netconf", []string{"[1,2]", "must be a JSON object"}},
		{"no ipam", `{"cniVersion":"1.0.0","name":"x"}`, "ipam", []string{"is required"}},
		{"ipam not an object", `{"cniVersion":"1.0.0","ipam":"tenure"}`, "ipam", []string{`"tenure"`, "must be an object"}},
		{"cniVersion type", `{"cniVersion":1,"ipam":{"type":"tenure","range":"10.0.0.0/24"}}`, "cniVersion", []string{"1", "must be a string"}},
		{"name type", `{"name":["a"],"ipam":{"type":"tenure","range":"10.0.0.0/24"}}`, "name", []string{`["a"]`, "must be a string"}},
		{"no type", `{"ipam":{"range":"10.0.0.0/24"}}`, "ipam.type", []string{"required"}},
		{"type whereabouts", `{"type":"whereabouts","range":"10.0.0.0/24"}`, "ipam.type", []string{`"whereabouts"`, `"tenure"`}},
		{"type wrong JSON type", `{"type":5,"range":"10.0.0.0/24"}`, "ipam.type", []string{"5", "must be a string"}},
		{"no range no pool", `{"type":"tenure"}`, "ipam", []string{"ipam: one of range, ipRanges or pool is required"}},
		{"empty ipRanges", `{"type":"tenure","ipRanges":[]}`, "ipam", []string{"one of range, ipRanges or pool is required"}},

		// Unknown keys.
		{"unknown key", `{"type":"tenure","range":"10.0.0.0/24","rnage":"10.0.0.0/24"}`, "ipam.rnage", []string{`"10.0.0.0/24"`, "unknown key", `did you mean "range"`}},
		{"unknown key, case", `{"type":"tenure","range":"10.0.0.0/24","Gateway":"10.0.0.1"}`, "ipam.Gateway", []string{`"10.0.0.1"`, `did you mean "gateway"`}},
		{"unknown key far from any", `{"type":"tenure","range":"10.0.0.0/24","zzzzzzzz":1}`, "ipam.zzzzzzzz", []string{"1", "unknown key"}},
		{"post-v0.9 whereabouts key", `{"type":"tenure","range":"10.0.0.0/24","enable_l3":true}`, "ipam.enable_l3", []string{"true", "unknown key"}},
		{"unknown ipRanges key", `{"type":"tenure","ipRanges":[{"range":"10.0.0.0/24"},{"range":"fd00::/64","rnage":"x"}]}`, "ipam.ipRanges[1].rnage", []string{`"x"`, "unknown key"}},
		{"unknown prefix_delegation key", `{"type":"tenure","range":"10.0.0.0/24","prefix_delegation":{"range":"fd00::/48","prefix_length":64,"length":64}}`, "ipam.prefix_delegation.length", []string{"64", "unknown key"}},
		{"unknown dhcpv6 key", `{"type":"tenure","range":"10.0.0.0/24","dhcpv6":{"enable":true}}`, "ipam.dhcpv6.enable", []string{"true", `did you mean "enabled"`}},
		{"unknown route key", `{"type":"tenure","range":"10.0.0.0/24","routes":[{"dst":"0.0.0.0/0","gateway":"10.0.0.1"}]}`, "ipam.routes[0].gateway", []string{`"10.0.0.1"`, "unknown key"}},
		{"unknown dns key", `{"type":"tenure","range":"10.0.0.0/24","dns":{"nameserver":["1.1.1.1"]}}`, "ipam.dns.nameserver", []string{`["1.1.1.1"]`, `did you mean "nameservers"`}},

		// range.
		{"range type", `{"type":"tenure","range":["10.0.0.0/24"]}`, "ipam.range", []string{`["10.0.0.0/24"]`, "must be a string"}},
		{"range bad CIDR", `{"type":"tenure","range":"10.0.0.0/33"}`, "ipam.range", []string{`"10.0.0.0/33"`, "not a CIDR"}},
		// Ranges that cannot be a segment.
		{"range /0", `{"type":"tenure","range":"0.0.0.0/0"}`, "ipam.range", []string{`"0.0.0.0/0"`, "is a /0", "/8 or longer"}},
		{"range ::/0", `{"type":"tenure","ipRanges":[{"range":"10.0.0.0/24"},{"range":"::/0"}]}`, "ipam.ipRanges[1].range", []string{`"::/0"`, "is a /0"}},
		{"range /7", `{"type":"tenure","range":"10.0.0.0/7"}`, "ipam.range", []string{`"10.0.0.0/7"`, "is a /7"}},
		{"range IPv6 /7", `{"type":"tenure","range":"fc00::/7"}`, "ipam.range", []string{`"fc00::/7"`, "is a /7"}},
		{"first-last range /0", `{"type":"tenure","range":"10.0.0.10-10.0.0.20/0"}`, "ipam.range", []string{`"10.0.0.10-10.0.0.20/0"`, "is a /0"}},
		{"range this network", `{"type":"tenure","range":"0.0.0.0/24"}`, "ipam.range", []string{`"0.0.0.0/24"`, "overlaps 0.0.0.0/8"}},
		{"range loopback", `{"type":"tenure","range":"127.0.0.0/24"}`, "ipam.range", []string{`"127.0.0.0/24"`, "overlaps 127.0.0.0/8 (loopback)"}},
		{"range multicast", `{"type":"tenure","range":"239.1.0.0/16"}`, "ipam.range", []string{`"239.1.0.0/16"`, "overlaps 224.0.0.0/4 (multicast)"}},
		{"range limited broadcast", `{"type":"tenure","range":"255.255.255.0/24"}`, "ipam.range", []string{`"255.255.255.0/24"`, "overlaps 255.255.255.255/32"}},
		{"range IPv6 unspecified", `{"type":"tenure","range":"::/120"}`, "ipam.range", []string{`"::/120"`, "overlaps ::/128"}},
		{"range IPv6 loopback", `{"type":"tenure","range":"::1/128"}`, "ipam.range", []string{`"::1/128"`, "overlaps ::1/128 (loopback)"}},
		{"range IPv6 multicast", `{"type":"tenure","range":"ff02::/64"}`, "ipam.range", []string{`"ff02::/64"`, "overlaps ff00::/8 (multicast)"}},
		{"range without prefix", `{"type":"tenure","range":"10.0.0.1"}`, "ipam.range", []string{`"10.0.0.1"`, "not a CIDR"}},
		{"range 4in6", `{"type":"tenure","range":"::ffff:10.0.0.0/120"}`, "ipam.range", []string{`"::ffff:10.0.0.0/120"`, "IPv4-mapped"}},
		{"first-last bad first", `{"type":"tenure","range":"10.0.0.x-10.0.0.9/24"}`, "ipam.range", []string{`"10.0.0.x-10.0.0.9/24"`, "first address"}},
		{"first-last bad prefix", `{"type":"tenure","range":"10.0.0.1-10.0.0.9"}`, "ipam.range", []string{`"10.0.0.1-10.0.0.9"`, "not a CIDR"}},
		{"first-last first outside", `{"type":"tenure","range":"10.0.1.1-10.0.0.9/24"}`, "ipam.range", []string{`"10.0.1.1-10.0.0.9/24"`, "outside 10.0.0.0/24"}},
		{"first-last first after last", `{"type":"tenure","range":"10.0.0.9-10.0.0.1/24"}`, "ipam.range", []string{`"10.0.0.9-10.0.0.1/24"`, "after last"}},
		{"first-last families", `{"type":"tenure","range":"fd00::1-10.0.0.9/24"}`, "ipam.range", []string{`"fd00::1-10.0.0.9/24"`, "IPv6", "IPv4"}},
		{"first-last and range_start", `{"type":"tenure","range":"10.0.0.2-10.0.0.9/24","range_start":"10.0.0.2"}`, "ipam.range_start", []string{`"10.0.0.2"`, "contradicts ipam.range", `"10.0.0.2-10.0.0.9/24"`}},
		{"first-last and range_end", `{"type":"tenure","ipRanges":[{"range":"10.0.0.2-10.0.0.9/24","range_end":"10.0.0.5"}]}`, "ipam.ipRanges[0].range_end", []string{`"10.0.0.5"`, "contradicts ipam.ipRanges[0].range"}},
		{"ipRanges entry without range", `{"type":"tenure","ipRanges":[{"range_start":"10.0.0.2"}]}`, "ipam.ipRanges[0].range", []string{"is required"}},
		{"ipRanges entry empty range", `{"type":"tenure","ipRanges":[{"range":""}]}`, "ipam.ipRanges[0].range", []string{`""`, "is required"}},
		{"ipRanges not an array", `{"type":"tenure","ipRanges":{"range":"10.0.0.0/24"}}`, "ipam.ipRanges", []string{`{"range":"10.0.0.0/24"}`, "must be an array"}},
		{"ipRanges entry not an object", `{"type":"tenure","ipRanges":["10.0.0.0/24"]}`, "ipam.ipRanges[0]", []string{`"10.0.0.0/24"`, "must be an object"}},

		// range_start / range_end.
		{"range_start bad", `{"type":"tenure","range":"10.0.0.0/24","range_start":"10.0.0"}`, "ipam.range_start", []string{`"10.0.0"`, "not an IP address"}},
		{"range_start outside", `{"type":"tenure","range":"10.0.0.0/24","range_start":"10.0.1.5"}`, "ipam.range_start", []string{`"10.0.1.5"`, "outside ipam.range", `"10.0.0.0/24"`}},
		{"range_end family", `{"type":"tenure","range":"10.0.0.0/24","range_end":"fd00::5"}`, "ipam.range_end", []string{`"fd00::5"`, "IPv6", "ipam.range"}},
		{"range_start after range_end", `{"type":"tenure","range":"10.0.0.0/24","range_start":"10.0.0.9","range_end":"10.0.0.5"}`, "ipam.range_start", []string{`"10.0.0.9"`, "after ipam.range_end", `"10.0.0.5"`}},
		{"range_start without range", `{"type":"tenure","range_start":"10.0.0.9","ipRanges":[{"range":"10.0.0.0/24"}]}`, "ipam.range_start", []string{`"10.0.0.9"`, "needs a top-level range"}},
		{"range_start zoned", `{"type":"tenure","range":"fe80::/64","range_start":"fe80::5%eth0"}`, "ipam.range_start", []string{`"fe80::5%eth0"`, "zone"}},
		{"range_start wrong type", `{"type":"tenure","range":"10.0.0.0/24","range_start":167772161}`, "ipam.range_start", []string{"167772161", "must be a string"}},

		// exclude.
		{"exclude bad entry", `{"type":"tenure","range":"10.0.0.0/24","exclude":["10.0.0.1","10.0.0.x"]}`, "ipam.exclude[1]", []string{`"10.0.0.x"`, "not a CIDR or IP address"}},
		{"exclude not a list", `{"type":"tenure","range":"10.0.0.0/24","exclude":"10.0.0.1"}`, "ipam.exclude", []string{`"10.0.0.1"`, "must be an array"}},
		{"exclude entry type", `{"type":"tenure","range":"10.0.0.0/24","exclude":[5]}`, "ipam.exclude[0]", []string{"5", "must be a string"}},
		{"ipRanges exclude bad", `{"type":"tenure","ipRanges":[{"range":"fd00::/64","exclude":["fd00::/129"]}]}`, "ipam.ipRanges[0].exclude[0]", []string{`"fd00::/129"`}},

		// Empty ranges.
		{"all excluded", `{"type":"tenure","range":"10.0.0.0/30","exclude":["10.0.0.1","10.0.0.2"]}`, "ipam.range",
			[]string{`"10.0.0.0/30"`, "has no assignable address", `ipam.exclude ["10.0.0.1","10.0.0.2"]`}},
		{"all excluded by a covering CIDR", `{"type":"tenure","ipRanges":[{"range":"fd00::/120","exclude":["fd00::/64"]}]}`, "ipam.ipRanges[0].range",
			[]string{`"fd00::/120"`, "has no assignable address", `ipam.ipRanges[0].exclude ["fd00::/64"]`}},
		{"top-level exclude empties an entry", `{"type":"tenure","exclude":["10.0.0.0/8"],"ipRanges":[{"range":"10.0.0.0/30"}]}`, "ipam.ipRanges[0].range",
			[]string{`"10.0.0.0/30"`, `ipam.exclude ["10.0.0.0/8"]`}},
		{"/32 is the gateway", `{"type":"tenure","range":"10.0.0.1/32","gateway":"10.0.0.1"}`, "ipam.range",
			[]string{`"10.0.0.1/32"`, "has no assignable address", `ipam.gateway "10.0.0.1"`}},
		{"range_start on the broadcast", `{"type":"tenure","range":"10.0.0.0/30","range_start":"10.0.0.3"}`, "ipam.range",
			[]string{`"10.0.0.0/30"`, "has no assignable address", `ipam.range_start "10.0.0.3"`}},
		{"ipv6 range_end on the anycast", `{"type":"tenure","range":"fd00::/64","range_end":"fd00::"}`, "ipam.range",
			[]string{`"fd00::/64"`, "has no assignable address", "anycast"}},
		{"IPv6 range whose first 2^64-1 addresses are excluded", `{"type":"tenure","range":"fd00::/48","exclude":["fd00::/64"]}`, "ipam.range",
			[]string{`"fd00::/48"`, "no assignable address among its first 2^64-1", `ipam.exclude ["fd00::/64"]`}},
		{"range_start..range_end all excluded", `{"type":"tenure","range":"10.0.0.0/24","range_start":"10.0.0.8","range_end":"10.0.0.9","exclude":["10.0.0.8/31"]}`, "ipam.range",
			[]string{`"10.0.0.0/24"`, `ipam.range_start "10.0.0.8"`, `ipam.range_end "10.0.0.9"`, `ipam.exclude ["10.0.0.8/31"]`}},

		// gateway.
		{"gateway bad", `{"type":"tenure","range":"10.0.0.0/24","gateway":"10.0.0.256"}`, "ipam.gateway", []string{`"10.0.0.256"`, "not an IP address"}},
		{"gateway type", `{"type":"tenure","range":"10.0.0.0/24","gateway":true}`, "ipam.gateway", []string{"true", "must be a string"}},
		{"gateway family no range has", `{"type":"tenure","range":"10.0.0.0/24","gateway":"fd00::1"}`, "ipam.gateway", []string{`"fd00::1"`, "no range is IPv6", `ipam.range "10.0.0.0/24"`}},

		// Duplicates.
		{"identical ipRanges", `{"type":"tenure","ipRanges":[{"range":"10.0.0.0/24"},{"range":"fd00::/64"},{"range":"10.0.0.9/24"}]}`, "ipam.ipRanges[2].range",
			[]string{`"10.0.0.9/24"`, "same address range as ipam.ipRanges[0].range", `"10.0.0.0/24"`}},
		{"range identical to an ipRanges entry", `{"type":"tenure","range":"10.0.0.0/24","ipRanges":[{"range":"10.0.0.0/24"}]}`, "ipam.ipRanges[0].range",
			[]string{`"10.0.0.0/24"`, "same address range as ipam.range"}},
		{"identical after clamping", `{"type":"tenure","ipRanges":[{"range":"10.0.0.0-10.0.0.255/24"},{"range":"10.0.0.0/24"}]}`, "ipam.ipRanges[1].range",
			[]string{`"10.0.0.0/24"`, "same address range as ipam.ipRanges[0].range"}},
		// With enable_overlapping_ranges false each range is its
		// own scope, so an address both can hand out would go out twice.
		{"overlapping ranges, enable_overlapping_ranges false", `{"type":"tenure","ipRanges":[{"range":"10.36.0.0/30"},{"range":"10.36.0.0/29","range_end":"10.36.0.2"}],"enable_overlapping_ranges":false}`,
			"ipam.ipRanges[1].range", []string{`"10.36.0.0/29"`, `overlaps ipam.ipRanges[0].range "10.36.0.0/30"`, "both can hand out 10.36.0.1", "enable_overlapping_ranges false"}},
		{"top-level range overlapping an ipRanges entry, enable_overlapping_ranges false", `{"type":"tenure","range":"10.0.0.0/24","ipRanges":[{"range":"fd00::/64"},{"range":"10.0.0.128/25","exclude":["10.0.0.129"]}],"enable_overlapping_ranges":false}`,
			"ipam.ipRanges[1].range", []string{`"10.0.0.128/25"`, `overlaps ipam.range "10.0.0.0/24"`, "both can hand out 10.0.0.130"}},
		{"overlapping IPv6 ranges, enable_overlapping_ranges false", `{"type":"tenure","ipRanges":[{"range":"fd00::10-fd00::20/64"},{"range":"fd00::/120","range_start":"fd00::20"}],"enable_overlapping_ranges":false}`,
			"ipam.ipRanges[1].range", []string{`"fd00::/120"`, "both can hand out fd00::20"}},

		// pool.
		{"pool and range", `{"type":"tenure","pool":"blue","range":"10.0.0.0/24"}`, "ipam.range", []string{`"10.0.0.0/24"`, `contradicts ipam.pool "blue"`}},
		{"pool and ipRanges", `{"type":"tenure","pool":"blue","ipRanges":[{"range":"10.0.0.0/24"}]}`, "ipam.ipRanges", []string{`[{"range":"10.0.0.0/24"}]`, `contradicts ipam.pool "blue"`}},
		{"pool and range_start", `{"type":"tenure","pool":"blue","range_start":"10.0.0.5"}`, "ipam.range_start", []string{`"10.0.0.5"`, `contradicts ipam.pool "blue"`}},
		{"pool and range_end", `{"type":"tenure","pool":"blue","range_end":"10.0.0.5"}`, "ipam.range_end", []string{`"10.0.0.5"`, `contradicts ipam.pool "blue"`}},
		{"pool and exclude", `{"type":"tenure","pool":"blue","exclude":["10.0.0.5"]}`, "ipam.exclude", []string{`["10.0.0.5"]`, `contradicts ipam.pool "blue"`}},
		{"pool name", `{"type":"tenure","pool":"Blue_Pool"}`, "ipam.pool", []string{`"Blue_Pool"`, "IPPool"}},
		{"pool empty", `{"type":"tenure","pool":""}`, "ipam.pool", []string{`""`}},
		{"pool type", `{"type":"tenure","pool":1}`, "ipam.pool", []string{"1", "must be a string"}},

		// routes and dns.
		{"routes not a list", `{"type":"tenure","range":"10.0.0.0/24","routes":{"dst":"0.0.0.0/0"}}`, "ipam.routes", []string{`{"dst":"0.0.0.0/0"}`, "must be an array"}},
		{"route without dst", `{"type":"tenure","range":"10.0.0.0/24","routes":[{"gw":"10.0.0.1"}]}`, "ipam.routes[0].dst", []string{"is required"}},
		{"route dst bad", `{"type":"tenure","range":"10.0.0.0/24","routes":[{"dst":"default"}]}`, "ipam.routes[0].dst", []string{`"default"`, "not a CIDR"}},
		{"route dst host bits", `{"type":"tenure","range":"10.0.0.0/24","routes":[{"dst":"10.1.0.5/16"}]}`, "ipam.routes[0].dst", []string{`"10.1.0.5/16"`, "host bits", "10.1.0.0/16"}},
		{"route gw family", `{"type":"tenure","range":"10.0.0.0/24","routes":[{"dst":"0.0.0.0/0","gw":"fd00::1"}]}`, "ipam.routes[0].gw", []string{`"fd00::1"`, "IPv6", `"0.0.0.0/0"`}},
		{"route mtu", `{"type":"tenure","range":"10.0.0.0/24","routes":[{"dst":"0.0.0.0/0","mtu":-1}]}`, "ipam.routes[0].mtu", []string{"-1"}},
		{"route table type", `{"type":"tenure","range":"10.0.0.0/24","routes":[{"dst":"0.0.0.0/0","table":"main"}]}`, "ipam.routes[0].table", []string{`"main"`, "must be an integer"}},
		{"dns type", `{"type":"tenure","range":"10.0.0.0/24","dns":["1.1.1.1"]}`, "ipam.dns", []string{`["1.1.1.1"]`, "must be an object"}},
		{"dns nameserver bad", `{"type":"tenure","range":"10.0.0.0/24","dns":{"nameservers":["dns.google"]}}`, "ipam.dns.nameservers[0]", []string{`"dns.google"`, "not an IP address"}},
		{"dns search type", `{"type":"tenure","range":"10.0.0.0/24","dns":{"search":"a.b"}}`, "ipam.dns.search", []string{`"a.b"`, "must be an array"}},

		// network_name too long for the reservations' spec.network.
		{"network_name too long for the range's reservations", `{"type":"tenure","range":"10.0.0.0/24","network_name":"` + dnsName(253) + `","enable_overlapping_ranges":false}`,
			"ipam.network_name", []string{`"aaaa`, "…", "is 253 bytes", "enable_overlapping_ranges false", `ipam.range "10.0.0.0/24"`, "limit of 253", "at most 241 bytes"}},
		{"network_name too long for an ipRanges entry's reservations", `{"type":"tenure","ipRanges":[{"range":"10.0.0.0/24"},{"range":"10.0.1.10-10.0.1.20/24"}],"network_name":"` + dnsName(241) + `","enable_overlapping_ranges":false}`,
			"ipam.network_name", []string{"is 241 bytes", `ipam.ipRanges[1].range "10.0.1.10-10.0.1.20/24"`, "at most 230 bytes"}},
		{"network_name too long for the delegated prefixes' reservations", `{"type":"tenure","range":"10.0.0.0/24","prefix_delegation":{"range":"2001:db8:100::/40","prefix_length":56},"network_name":"` + dnsName(241) + `","enable_overlapping_ranges":false}`,
			"ipam.network_name", []string{"is 241 bytes", `ipam.prefix_delegation.range "2001:db8:100::/40"`, "at most 235 bytes"}},

		// Scalars.
		{"network_name", `{"type":"tenure","range":"10.0.0.0/24","network_name":"Net_1"}`, "ipam.network_name", []string{`"Net_1"`, "RFC 1123"}},
		{"network_name type", `{"type":"tenure","range":"10.0.0.0/24","network_name":7}`, "ipam.network_name", []string{"7", "must be a string"}},
		{"enable_overlapping_ranges type", `{"type":"tenure","range":"10.0.0.0/24","enable_overlapping_ranges":"false"}`, "ipam.enable_overlapping_ranges", []string{`"false"`, "true or false"}},
		{"agent_socket relative", `{"type":"tenure","range":"10.0.0.0/24","agent_socket":"agent.sock"}`, "ipam.agent_socket", []string{`"agent.sock"`, "absolute path"}},
		{"agent_socket empty", `{"type":"tenure","range":"10.0.0.0/24","agent_socket":""}`, "ipam.agent_socket", []string{`""`, "absolute path"}},
		{"agent_socket too long", `{"type":"tenure","range":"10.0.0.0/24","agent_socket":"/` + strings.Repeat("a", 107) + `"}`, "ipam.agent_socket", []string{"aaaa", "at most 107 bytes"}},
		{"configuration_path relative", `{"type":"tenure","range":"10.0.0.0/24","configuration_path":"tenure.conf"}`, "ipam.configuration_path", []string{`"tenure.conf"`, "absolute path"}},
		{"configuration_path not a string", `{"type":"tenure","range":"10.0.0.0/24","configuration_path":["/x"]}`, "ipam.configuration_path", []string{`["/x"]`, "must be a string"}},

		// prefix_delegation.
		{"pd not an object", `{"type":"tenure","range":"10.0.0.0/24","prefix_delegation":"fd00::/48"}`, "ipam.prefix_delegation", []string{`"fd00::/48"`, "must be an object"}},
		{"pd IPv4", `{"type":"tenure","range":"fd00::/64","prefix_delegation":{"range":"10.0.0.0/8","prefix_length":24}}`, "ipam.prefix_delegation.range", []string{`"10.0.0.0/8"`, "IPv6"}},
		{"pd bad range", `{"type":"tenure","range":"fd00::/64","prefix_delegation":{"range":"fd00::","prefix_length":64}}`, "ipam.prefix_delegation.range", []string{`"fd00::"`, "not a CIDR"}},
		{"pd ::/0", `{"type":"tenure","range":"10.0.0.0/24","prefix_delegation":{"range":"::/0","prefix_length":64}}`, "ipam.prefix_delegation.range", []string{`"::/0"`, "is a /0"}},
		{"pd multicast", `{"type":"tenure","range":"10.0.0.0/24","prefix_delegation":{"range":"ff00::/16","prefix_length":64}}`, "ipam.prefix_delegation.range", []string{`"ff00::/16"`, "multicast"}},
		{"pd missing range", `{"type":"tenure","range":"fd00::/64","prefix_delegation":{"prefix_length":64}}`, "ipam.prefix_delegation.range", []string{"is required"}},
		{"pd missing length", `{"type":"tenure","range":"fd00::/64","prefix_delegation":{"range":"fd01::/48"}}`, "ipam.prefix_delegation.prefix_length", []string{"is required"}},
		{"pd length shorter than range", `{"type":"tenure","range":"fd00::/64","prefix_delegation":{"range":"fd01::/48","prefix_length":47}}`, "ipam.prefix_delegation.prefix_length", []string{"47", "at least the /48", `"fd01::/48"`}},
		{"pd length over 128", `{"type":"tenure","range":"fd00::/64","prefix_delegation":{"range":"fd01::/48","prefix_length":129}}`, "ipam.prefix_delegation.prefix_length", []string{"129", "at most 128"}},
		{"pd length type", `{"type":"tenure","range":"fd00::/64","prefix_delegation":{"range":"fd01::/48","prefix_length":"56"}}`, "ipam.prefix_delegation.prefix_length", []string{`"56"`, "must be an integer"}},
		{"pd length fraction", `{"type":"tenure","range":"fd00::/64","prefix_delegation":{"range":"fd01::/48","prefix_length":56.5}}`, "ipam.prefix_delegation.prefix_length", []string{"56.5", "must be an integer"}},
		{"pd overlaps a range", `{"type":"tenure","ipRanges":[{"range":"10.0.0.0/24"},{"range":"fd00:0:0:5::/64"}],"prefix_delegation":{"range":"fd00::/48","prefix_length":64}}`, "ipam.prefix_delegation.range",
			[]string{`"fd00::/48"`, "overlaps ipam.ipRanges[1].range", `"fd00:0:0:5::/64"`}},
		{"pd inside a range", `{"type":"tenure","range":"fd00::/48","prefix_delegation":{"range":"fd00:0:0:8000::/49","prefix_length":64}}`, "ipam.prefix_delegation.range",
			[]string{`"fd00:0:0:8000::/49"`, "overlaps ipam.range", `"fd00::/48"`}},

		// dhcpv6.
		{"dhcpv6 not an object", `{"type":"tenure","range":"fd00::/64","dhcpv6":true}`, "ipam.dhcpv6", []string{"true", "must be an object"}},
		{"dhcpv6 enabled type", `{"type":"tenure","range":"fd00::/64","dhcpv6":{"enabled":"yes"}}`, "ipam.dhcpv6.enabled", []string{`"yes"`, "true or false"}},
		{"dhcpv6 router_advertisements type", `{"type":"tenure","range":"fd00::/64","dhcpv6":{"router_advertisements":"on"}}`, "ipam.dhcpv6.router_advertisements", []string{`"on"`, "true or false"}},
		{"dhcpv6 install_routes type", `{"type":"tenure","range":"fd00::/64","dhcpv6":{"install_routes":1}}`, "ipam.dhcpv6.install_routes", []string{"1", "true or false"}},
		{"dhcpv6 valid < preferred", `{"type":"tenure","range":"fd00::/64","dhcpv6":{"preferred_lifetime":600,"valid_lifetime":300}}`, "ipam.dhcpv6.valid_lifetime",
			[]string{"300", "ipam.dhcpv6.preferred_lifetime 600"}},
		{"dhcpv6 preferred > default valid", `{"type":"tenure","range":"fd00::/64","dhcpv6":{"preferred_lifetime":10000}}`, "ipam.dhcpv6.preferred_lifetime",
			[]string{"10000", "valid_lifetime 7200"}},
		{"dhcpv6 valid < default preferred", `{"type":"tenure","range":"fd00::/64","dhcpv6":{"valid_lifetime":60}}`, "ipam.dhcpv6.valid_lifetime",
			[]string{"60", "default 3600"}},
		{"dhcpv6 lifetime zero", `{"type":"tenure","range":"fd00::/64","dhcpv6":{"preferred_lifetime":0}}`, "ipam.dhcpv6.preferred_lifetime", []string{"0", "seconds"}},
		{"dhcpv6 lifetime huge", `{"type":"tenure","range":"fd00::/64","dhcpv6":{"valid_lifetime":4294967296}}`, "ipam.dhcpv6.valid_lifetime", []string{"4294967296"}},
		{"dhcpv6 lifetime type", `{"type":"tenure","range":"fd00::/64","dhcpv6":{"valid_lifetime":"2h"}}`, "ipam.dhcpv6.valid_lifetime", []string{`"2h"`, "must be an integer"}},
		{"dhcpv6 interfaces type", `{"type":"tenure","range":"fd00::/64","dhcpv6":{"interfaces":"net1"}}`, "ipam.dhcpv6.interfaces", []string{`"net1"`, "must be an array"}},
		{"dhcpv6 interface name", `{"type":"tenure","range":"fd00::/64","dhcpv6":{"interfaces":["net1","a/b"]}}`, "ipam.dhcpv6.interfaces[1]", []string{`"a/b"`, "interface name"}},
		{"dhcpv6 interface long", `{"type":"tenure","range":"fd00::/64","dhcpv6":{"interfaces":["abcdefghijklmnop"]}}`, "ipam.dhcpv6.interfaces[0]", []string{`"abcdefghijklmnop"`}},
		{"dhcpv6 interface duplicate", `{"type":"tenure","range":"fd00::/64","dhcpv6":{"interfaces":["net1","net1"]}}`, "ipam.dhcpv6.interfaces[1]", []string{`"net1"`, "duplicates ipam.dhcpv6.interfaces[0]"}},
		{"dhcpv6 trusted_relays type", `{"type":"tenure","range":"fd00::/64","dhcpv6":{"interfaces":["br0"],"trusted_relays":{"interface":"br0"}}}`,
			"ipam.dhcpv6.trusted_relays", []string{`{"interface":"br0"}`, "must be an array"}},
		{"dhcpv6 trusted relay unknown key", `{"type":"tenure","range":"fd00::/64","dhcpv6":{"interfaces":["br0"],"trusted_relays":[{"interface":"br0","mac":"02:00:00:00:00:01","adress":"fe80::1"}]}}`,
			"ipam.dhcpv6.trusted_relays[0].adress", []string{`"fe80::1"`, `did you mean "address"`}},
		{"dhcpv6 trusted relay without interface", `{"type":"tenure","range":"fd00::/64","dhcpv6":{"interfaces":["br0"],"trusted_relays":[{"mac":"02:00:00:00:00:01"}]}}`,
			"ipam.dhcpv6.trusted_relays[0].interface", []string{"is required"}},
		{"dhcpv6 trusted relay on an unserved interface", `{"type":"tenure","range":"fd00::/64","dhcpv6":{"interfaces":["br0"],"trusted_relays":[{"interface":"br1","mac":"02:00:00:00:00:01"}]}}`,
			"ipam.dhcpv6.trusted_relays[0].interface", []string{`"br1"`, `is not one of ipam.dhcpv6.interfaces ["br0"]`}},
		{"dhcpv6 trusted relay without interfaces", `{"type":"tenure","range":"fd00::/64","dhcpv6":{"trusted_relays":[{"interface":"br0","mac":"02:00:00:00:00:01"}]}}`,
			"ipam.dhcpv6.trusted_relays[0].interface", []string{`"br0"`, "is not one of ipam.dhcpv6.interfaces"}},
		{"dhcpv6 trusted relay without mac", `{"type":"tenure","range":"fd00::/64","dhcpv6":{"interfaces":["br0"],"trusted_relays":[{"interface":"br0","address":"fe80::1"}]}}`,
			"ipam.dhcpv6.trusted_relays[0].mac", []string{"is required"}},
		{"dhcpv6 trusted relay bad mac", `{"type":"tenure","range":"fd00::/64","dhcpv6":{"interfaces":["br0"],"trusted_relays":[{"interface":"br0","mac":"02:00:00:00:01"}]}}`,
			"ipam.dhcpv6.trusted_relays[0].mac", []string{`"02:00:00:00:01"`, "unicast Ethernet MAC"}},
		{"dhcpv6 trusted relay multicast mac", `{"type":"tenure","range":"fd00::/64","dhcpv6":{"interfaces":["br0"],"trusted_relays":[{"interface":"br0","mac":"33:33:00:01:00:02"}]}}`,
			"ipam.dhcpv6.trusted_relays[0].mac", []string{`"33:33:00:01:00:02"`, "unicast Ethernet MAC"}},
		{"dhcpv6 trusted relay IPv4 address", `{"type":"tenure","range":"fd00::/64","dhcpv6":{"interfaces":["br0"],"trusted_relays":[{"interface":"br0","mac":"02:00:00:00:00:01","address":"192.0.2.1"}]}}`,
			"ipam.dhcpv6.trusted_relays[0].address", []string{`"192.0.2.1"`, "IPv6 unicast"}},
		{"dhcpv6 trusted relay duplicate", `{"type":"tenure","range":"fd00::/64","dhcpv6":{"interfaces":["br0"],"trusted_relays":[{"interface":"br0","mac":"02:00:00:00:00:01"},{"interface":"br0","mac":"02:00:00:00:00:01"}]}}`,
			"ipam.dhcpv6.trusted_relays[1]", []string{"duplicates ipam.dhcpv6.trusted_relays[0]"}},

		// Ignored whereabouts keys keep whereabouts' JSON types.
		{"log_level type", `{"type":"tenure","range":"10.0.0.0/24","log_level":5}`, "ipam.log_level", []string{"5", "must be a string"}},
		{"kubernetes type", `{"type":"tenure","range":"10.0.0.0/24","kubernetes":"/etc/kubeconfig"}`, "ipam.kubernetes", []string{`"/etc/kubeconfig"`, "must be an object"}},
		{"kubernetes.kubeconfig type", `{"type":"tenure","range":"10.0.0.0/24","kubernetes":{"kubeconfig":1}}`, "ipam.kubernetes.kubeconfig", []string{"1", "must be a string"}},
		{"sleep_for_race fraction", `{"type":"tenure","range":"10.0.0.0/24","sleep_for_race":1.5}`, "ipam.sleep_for_race", []string{"1.5", "must be an integer"}},
		{"leader_lease_duration type", `{"type":"tenure","range":"10.0.0.0/24","leader_lease_duration":"1500"}`, "ipam.leader_lease_duration", []string{`"1500"`}},
		{"addresses type", `{"type":"tenure","range":"10.0.0.0/24","addresses":["10.0.0.5/24"]}`, "ipam.addresses[0]", []string{`"10.0.0.5/24"`, "must be an object"}},
		{"datastore type", `{"type":"tenure","range":"10.0.0.0/24","datastore":{}}`, "ipam.datastore", []string{"{}", "must be a string"}},

		// CNI versions before 0.3.0 carry one address per family.
		{"cniVersion 0.2.0 two IPv4", `{"cniVersion":"0.2.0","ipam":{"type":"tenure","ipRanges":[{"range":"10.0.0.0/24"},{"range":"10.1.0.0/24"}]}}`, "cniVersion",
			[]string{`"0.2.0"`, `ipam.ipRanges[1].range "10.1.0.0/24"`, "second IPv4"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse(tc.netconf(), nil)
			if c != nil {
				t.Errorf("Parse returned a config with an error")
			}
			checkErr(t, err, tc.key, tc.has)
		})
	}
}

func TestParseOldCNIVersionDualStack(t *testing.T) {
	c, err := Parse([]byte(`{"cniVersion":"0.2.0","ipam":{"type":"tenure","ipRanges":[{"range":"10.0.0.0/24"},{"range":"fd00::/64"}]}}`), nil)
	if err != nil || len(c.Ranges) != 2 {
		t.Fatalf("one address per family is fine for 0.2.0: %v", err)
	}
}

func TestParseFlatFile(t *testing.T) {
	flat := []byte(`{
		"datastore": "kubernetes",
		"kubernetes": {"kubeconfig": "/etc/cni/net.d/whereabouts.d/whereabouts.kubeconfig"},
		"log_file": "/tmp/whereabouts.log",
		"log_level": "debug",
		"reconciler_cron_expression": "30 4 * * *",
		"configuration_path": "/somewhere/else.conf",
		"gateway": "10.0.0.1",
		"range": "192.168.0.0/16",
		"network_name": "from-file",
		"enable_overlapping_ranges": false,
		"agent_socket": "/run/file/agent.sock"
	}`)
	// The NAD's keys win; the file supplies the rest.
	c, err := Parse(nad(`{"type":"tenure","range":"10.0.0.0/24","network_name":"from-nad","log_level":"error"}`), flat)
	if err != nil {
		t.Fatal(err)
	}
	if c.Ranges[0].Prefix != pfx("10.0.0.0/24") || c.NetworkName != "from-nad" {
		t.Errorf("NAD must win: %v %q", c.Ranges, c.NetworkName)
	}
	if c.Gateway != addr("10.0.0.1") || c.OverlappingRanges || c.AgentSocket != "/run/file/agent.sock" {
		t.Errorf("file must supply defaults: %v %v %q", c.Gateway, c.OverlappingRanges, c.AgentSocket)
	}
	if !c.Ranges[0].Contains(addr("10.0.0.2")) || c.Ranges[0].Contains(addr("10.0.0.1")) {
		t.Errorf("gateway from the file must be excluded: %v", c.Ranges[0].Exclude)
	}
	want := []string{"configuration_path", "datastore", "kubernetes", "log_file", "log_level", "reconciler_cron_expression"}
	if !slices.Equal(c.Ignored, want) {
		t.Errorf("Ignored = %q, want %q", c.Ignored, want)
	}

	// The file may supply the range itself.
	c, err = Parse(nad(`{"type":"tenure"}`), flat)
	if err != nil || c.Ranges[0].Prefix != pfx("192.168.0.0/16") {
		t.Fatalf("range from the file: %v %v", c, err)
	}
	// Empty flat file bytes are no file.
	if _, err := Parse(nad(`{"type":"tenure","range":"10.0.0.0/24"}`), []byte(" \n")); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name string
		ipam string
		flat string
		key  string
		has  []string
	}{
		{"unknown key in the file", `{"type":"tenure","range":"10.0.0.0/24"}`, `{"rnage":"10.0.0.0/24"}`, "flatfile.rnage", []string{`"10.0.0.0/24"`, "unknown key"}},
		{"bad value from the file", `{"type":"tenure","range":"10.0.0.0/24"}`, `{"gateway":"nope"}`, "flatfile.gateway", []string{`"nope"`, "not an IP address"}},
		{"file not JSON", `{"type":"tenure","range":"10.0.0.0/24"}`, `{"datastore":`, "flatfile", []string{"not valid JSON"}},
		{"file not an object", `{"type":"tenure","range":"10.0.0.0/24"}`, `["x"]`, "flatfile", []string{`["x"]`, "must be an object"}},
		{"file pool contradicts NAD range", `{"type":"tenure","range":"10.0.0.0/24"}`, `{"pool":"blue"}`, "ipam.range", []string{`contradicts flatfile.pool "blue"`}},
		{"file configuration_path type", `{"type":"tenure","range":"10.0.0.0/24"}`, `{"configuration_path":1}`, "flatfile.configuration_path", []string{"1", "must be a string"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse(nad(tc.ipam), []byte(tc.flat))
			checkErr(t, err, tc.key, tc.has)
		})
	}
}

func bluePool() v1alpha1.IPPoolSpec {
	return v1alpha1.IPPoolSpec{
		Ranges: []v1alpha1.PoolRange{
			{Range: "10.1.0.0/24", RangeStart: "10.1.0.10", RangeEnd: "10.1.0.100", Exclude: []string{"10.1.0.50/31"}},
			{Range: "fd01::10-fd01::ff/64"},
		},
		NetworkName:      "blue",
		Gateway:          "10.1.0.10",
		PrefixDelegation: &v1alpha1.PrefixDelegationPool{Range: "2001:db8:100::/40", PrefixLength: 56},
	}
}

func TestApplyPool(t *testing.T) {
	c := mustParse(t, `{"type":"tenure","pool":"blue","dhcpv6":{}}`)
	if c.Pool != "blue" || len(c.Ranges) != 0 {
		t.Fatalf("Pool, Ranges = %q, %v", c.Pool, c.Ranges)
	}
	if err := c.ApplyPool("blue", bluePool()); err != nil {
		t.Fatal(err)
	}
	if len(c.Ranges) != 2 {
		t.Fatalf("Ranges = %v", c.Ranges)
	}
	// .10-.100 minus .50-.51 minus the gateway .10.
	wantRange(t, c.Ranges[0], "10.1.0.0/24", "10.1.0.10", "10.1.0.100", 91, 88)
	wantRange(t, c.Ranges[1], "fd01::/64", "fd01::10", "fd01::ff", 240, 240)
	if c.NetworkName != "blue" || c.Gateway != addr("10.1.0.10") || c.PrefixDelegation == nil ||
		c.PrefixDelegation.Range != pfx("2001:db8:100::/40") || c.PrefixDelegation.PrefixLength != 56 || c.DHCPv6 == nil {
		t.Errorf("from the pool: %+v", c)
	}

	// Re-applying a newer spec replaces what came from the pool.
	spec := bluePool()
	spec.Gateway = ""
	spec.NetworkName = "blue2"
	spec.PrefixDelegation = nil
	spec.Ranges = spec.Ranges[1:]
	if err := c.ApplyPool("blue", spec); err != nil {
		t.Fatal(err)
	}
	if len(c.Ranges) != 1 || c.Gateway.IsValid() || c.NetworkName != "blue2" || c.PrefixDelegation != nil {
		t.Errorf("re-applied: %+v", c)
	}

	// The config's own gateway, network_name and prefix_delegation win.
	c = mustParse(t, `{"type":"tenure","pool":"blue","gateway":"10.1.0.1","network_name":"mine",
		"prefix_delegation":{"range":"2001:db8:200::/40","prefix_length":48}}`)
	if err := c.ApplyPool("blue", bluePool()); err != nil {
		t.Fatal(err)
	}
	if c.Gateway != addr("10.1.0.1") || c.NetworkName != "mine" || c.PrefixDelegation.Range != pfx("2001:db8:200::/40") {
		t.Errorf("config must win: %+v", c)
	}
	if c.Ranges[0].Capacity() != 89 { // the config's gateway is outside .10-.100
		t.Errorf("Capacity = %d", c.Ranges[0].Capacity())
	}

	// A hand-built config without pool or ranges takes the pool's name.
	var hb Config
	if err := hb.ApplyPool("blue", bluePool()); err != nil || hb.Pool != "blue" || len(hb.Ranges) != 2 {
		t.Errorf("hand-built: %+v %v", hb, err)
	}
}

func TestApplyPoolErrors(t *testing.T) {
	spec := func(f func(*v1alpha1.IPPoolSpec)) v1alpha1.IPPoolSpec {
		s := bluePool()
		f(&s)
		return s
	}
	cases := []struct {
		name string
		ipam string
		pool string
		spec v1alpha1.IPPoolSpec
		key  string
		has  []string
	}{
		{"bad range", `{"type":"tenure","pool":"blue"}`, "blue", spec(func(s *v1alpha1.IPPoolSpec) { s.Ranges[1].Range = "fd01::/129" }),
			"IPPool blue spec.ranges[1].range", []string{`"fd01::/129"`, "not a CIDR"}},
		{"empty range", `{"type":"tenure","pool":"blue"}`, "blue", spec(func(s *v1alpha1.IPPoolSpec) { s.Ranges[0].Range = "" }),
			"IPPool blue spec.ranges[0].range", []string{`""`, "is required"}},
		{"range_start outside", `{"type":"tenure","pool":"blue"}`, "blue", spec(func(s *v1alpha1.IPPoolSpec) { s.Ranges[0].RangeStart = "10.2.0.1" }),
			"IPPool blue spec.ranges[0].range_start", []string{`"10.2.0.1"`, "outside IPPool blue spec.ranges[0].range"}},
		{"range_end first-last contradiction", `{"type":"tenure","pool":"blue"}`, "blue", spec(func(s *v1alpha1.IPPoolSpec) { s.Ranges[1].RangeEnd = "fd01::20" }),
			"IPPool blue spec.ranges[1].range_end", []string{`"fd01::20"`, "contradicts IPPool blue spec.ranges[1].range"}},
		{"bad exclude", `{"type":"tenure","pool":"blue"}`, "blue", spec(func(s *v1alpha1.IPPoolSpec) { s.Ranges[0].Exclude = []string{"x"} }),
			"IPPool blue spec.ranges[0].exclude[0]", []string{`"x"`}},
		{"all excluded", `{"type":"tenure","pool":"blue"}`, "blue", spec(func(s *v1alpha1.IPPoolSpec) { s.Ranges[0].Exclude = []string{"10.1.0.0/24"} }),
			"IPPool blue spec.ranges[0].range", []string{`"10.1.0.0/24"`, "has no assignable address", `IPPool blue spec.ranges[0].exclude ["10.1.0.0/24"]`}},
		{"no ranges", `{"type":"tenure","pool":"blue"}`, "blue", v1alpha1.IPPoolSpec{},
			"IPPool blue spec.ranges", []string{"[]", "at least one range"}},
		{"duplicate ranges", `{"type":"tenure","pool":"blue"}`, "blue", spec(func(s *v1alpha1.IPPoolSpec) { s.Ranges[0] = s.Ranges[1]; s.Gateway = "" }),
			"IPPool blue spec.ranges[1].range", []string{"same address range as IPPool blue spec.ranges[0].range"}},
		{"overlapping pool ranges, enable_overlapping_ranges false", `{"type":"tenure","pool":"blue","enable_overlapping_ranges":false}`, "blue",
			spec(func(s *v1alpha1.IPPoolSpec) { s.Ranges[1] = v1alpha1.PoolRange{Range: "10.1.0.96/28"} }),
			"IPPool blue spec.ranges[1].range", []string{`"10.1.0.96/28"`, `overlaps IPPool blue spec.ranges[0].range "10.1.0.0/24"`, "both can hand out 10.1.0.97"}},
		{"bad gateway", `{"type":"tenure","pool":"blue"}`, "blue", spec(func(s *v1alpha1.IPPoolSpec) { s.Gateway = "gw" }),
			"IPPool blue spec.gateway", []string{`"gw"`, "not an IP address"}},
		{"config gateway family", `{"type":"tenure","pool":"blue","gateway":"fd09::1"}`, "blue", spec(func(s *v1alpha1.IPPoolSpec) { s.Ranges = s.Ranges[:1] }),
			"ipam.gateway", []string{`"fd09::1"`, "no range is IPv6", `IPPool blue spec.ranges[0].range "10.1.0.0/24"`}},
		{"bad network_name", `{"type":"tenure","pool":"blue"}`, "blue", spec(func(s *v1alpha1.IPPoolSpec) { s.NetworkName = "BLUE" }),
			"IPPool blue spec.network_name", []string{`"BLUE"`}},
		{"pool network_name too long for the pool's ranges", `{"type":"tenure","pool":"blue","enable_overlapping_ranges":false}`, "blue", spec(func(s *v1alpha1.IPPoolSpec) { s.NetworkName = dnsName(240) }),
			"IPPool blue spec.network_name", []string{"is 240 bytes", `IPPool blue spec.ranges[0].range "10.1.0.0/24"`, `"10.1.0.10-10.1.0.100/24"`, "at most 229 bytes"}},
		{"pool range /0", `{"type":"tenure","pool":"blue"}`, "blue", spec(func(s *v1alpha1.IPPoolSpec) { s.Ranges[0] = v1alpha1.PoolRange{Range: "0.0.0.0/0"}; s.Gateway = "" }),
			"IPPool blue spec.ranges[0].range", []string{`"0.0.0.0/0"`, "is a /0"}},
		{"pool pd ::/0", `{"type":"tenure","pool":"blue"}`, "blue", spec(func(s *v1alpha1.IPPoolSpec) { s.PrefixDelegation.Range = "::/0" }),
			"IPPool blue spec.prefix_delegation.range", []string{`"::/0"`, "is a /0"}},
		{"bad pd", `{"type":"tenure","pool":"blue"}`, "blue", spec(func(s *v1alpha1.IPPoolSpec) { s.PrefixDelegation.PrefixLength = 32 }),
			"IPPool blue spec.prefix_delegation.prefix_length", []string{"32", "at least the /40"}},
		{"pd overlaps a pool range", `{"type":"tenure","pool":"blue"}`, "blue", spec(func(s *v1alpha1.IPPoolSpec) { s.PrefixDelegation.Range = "fd01::/16" }),
			"IPPool blue spec.prefix_delegation.range", []string{`"fd01::/16"`, "overlaps IPPool blue spec.ranges[1].range"}},
		{"config pd overlaps a pool range", `{"type":"tenure","pool":"blue","prefix_delegation":{"range":"fd01::/32","prefix_length":48}}`, "blue", bluePool(),
			"ipam.prefix_delegation.range", []string{`"fd01::/32"`, "overlaps IPPool blue spec.ranges[1].range"}},
		{"other pool", `{"type":"tenure","pool":"blue"}`, "red", bluePool(),
			"ipam.pool", []string{`"blue"`, "IPPool red"}},
		{"config with ranges", `{"type":"tenure","range":"10.0.0.0/24"}`, "blue", bluePool(),
			"IPPool blue", []string{"own ranges", "10.0.0.0/24"}},
		{"no name", `{"type":"tenure","pool":"blue"}`, "", bluePool(),
			"IPPool", []string{"name"}},
		{"cniVersion 0.1.0", `{"type":"tenure","pool":"blue"}`, "blue", spec(func(s *v1alpha1.IPPoolSpec) { s.Ranges[1] = v1alpha1.PoolRange{Range: "10.2.0.0/24"} }),
			"cniVersion", []string{"second IPv4"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := mustParse(t, tc.ipam)
			if tc.key == "cniVersion" {
				c.CNIVersion = "0.1.0"
			}
			before := *c
			err := c.ApplyPool(tc.pool, tc.spec)
			checkErr(t, err, tc.key, tc.has)
			if len(c.Ranges) != len(before.Ranges) || c.Gateway != before.Gateway || c.NetworkName != before.NetworkName ||
				c.PrefixDelegation != before.PrefixDelegation || c.Pool != before.Pool {
				t.Errorf("config changed on error: %+v", c)
			}
		})
	}
}

// Ranges that share no assignable address allocate on their own without
// handing one address out twice, and with enable_overlapping_ranges true
// (the default) overlapping ranges share one scope: both are accepted.
func TestOverlappingRangesAccepted(t *testing.T) {
	for _, ipam := range []string{
		// Overlapping ranges with the default: one scope for both.
		`{"type":"tenure","ipRanges":[{"range":"10.36.0.0/30"},{"range":"10.36.0.0/29","range_end":"10.36.0.2"}]}`,
		`{"type":"tenure","ipRanges":[{"range":"10.36.0.0/30"},{"range":"10.36.0.0/29","range_end":"10.36.0.2"}],"enable_overlapping_ranges":true}`,
		// Overlapping prefixes, disjoint bounds.
		`{"type":"tenure","ipRanges":[{"range":"10.36.0.0/30"},{"range":"10.36.0.0/29","range_start":"10.36.0.3"}],"enable_overlapping_ranges":false}`,
		`{"type":"tenure","ipRanges":[{"range":"10.36.0.1-10.36.0.2/29"},{"range":"10.36.0.3-10.36.0.6/29"}],"enable_overlapping_ranges":false}`,
		// Overlapping bounds whose shared addresses are all excluded.
		`{"type":"tenure","ipRanges":[{"range":"10.36.0.0/30"},{"range":"10.36.0.0/29","exclude":["10.36.0.0/30"]}],"enable_overlapping_ranges":false}`,
		`{"type":"tenure","ipRanges":[{"range":"10.36.0.0/29","exclude":["10.36.0.1","10.36.0.2"]},{"range":"10.36.0.0/30"}],"enable_overlapping_ranges":false}`,
		// A gateway excluded from both ranges is the only shared address.
		`{"type":"tenure","ipRanges":[{"range":"10.36.0.1-10.36.0.2/29"},{"range":"10.36.0.2-10.36.0.6/29"}],"gateway":"10.36.0.2","enable_overlapping_ranges":false}`,
		// Dual-stack.
		`{"type":"tenure","ipRanges":[{"range":"10.36.0.0/24"},{"range":"fd00::/64"}],"enable_overlapping_ranges":false}`,
	} {
		c, err := Parse(nad(ipam), nil)
		if err != nil {
			t.Errorf("Parse(%s): %v", ipam, err)
			continue
		}
		if len(c.Ranges) != 2 {
			t.Errorf("Parse(%s): %d ranges, want 2", ipam, len(c.Ranges))
		}
	}
}

// dnsName is a valid network_name of n bytes (n >= 1): labels of at most
// 63 bytes joined by dots.
func dnsName(n int) string {
	var b strings.Builder
	for n-b.Len() > 63 {
		b.WriteString(strings.Repeat("a", 50) + ".")
	}
	b.WriteString(strings.Repeat("a", n-b.Len()))
	return b.String()
}

// A network_name is accepted exactly when every
// reservation's spec.network fits the API's limit.
func TestNetworkNameFitsTheReservations(t *testing.T) {
	for _, tc := range []struct {
		ipam string
		ok   bool
	}{
		{`{"type":"tenure","range":"10.0.0.0/24","network_name":"` + dnsName(241) + `","enable_overlapping_ranges":false}`, true},
		{`{"type":"tenure","range":"10.0.0.0/24","network_name":"` + dnsName(242) + `","enable_overlapping_ranges":false}`, false},
		{`{"type":"tenure","range":"10.0.0.0/24","network_name":"` + dnsName(253) + `"}`, true}, // the key is the name alone
		{`{"type":"tenure","range":"10.0.0.0/24","network_name":"` + dnsName(253) + `","enable_overlapping_ranges":true}`, true},
	} {
		c, err := Parse(nad(tc.ipam), nil)
		if ok := err == nil; ok != tc.ok {
			t.Errorf("%.80s…: error %v, want ok %v", tc.ipam, err, tc.ok)
			continue
		}
		if err != nil {
			continue
		}
		if key := reservation.Scope(c.NetworkName, c.Ranges[0].String(), c.OverlappingRanges); len(key) > maxScopeLen {
			t.Errorf("accepted an allocation scope of %d bytes", len(key))
		}
	}
}

// maxScopeLen must be what the CRD the API server enforces says.
func TestMaxScopeLenIsTheCRDs(t *testing.T) {
	b, err := deploy.CRDs.ReadFile("crds/ipam.tenure.dev_ipreservations.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.UnmarshalStrict(b, &crd); err != nil {
		t.Fatal(err)
	}
	for _, v := range crd.Spec.Versions {
		network := v.Schema.OpenAPIV3Schema.Properties["spec"].Properties["network"]
		if network.MaxLength == nil || *network.MaxLength != maxScopeLen {
			t.Errorf("CRD %s spec.network maxLength = %v, config checks %d", v.Name, network.MaxLength, maxScopeLen)
		}
	}
}

// The largest segments and the blocks next to the refused ones are
// accepted.
func TestSegmentBounds(t *testing.T) {
	for _, r := range []string{"10.0.0.0/8", "1.0.0.0/8", "126.255.255.0/24", "128.0.0.0/8", "223.255.255.0/24", "fd00::/8", "2000::/8", "fe80::/64", "feff::/16"} {
		if _, err := Parse(nad(`{"type":"tenure","range":"`+r+`"}`), nil); err != nil {
			t.Errorf("range %s: %v", r, err)
		}
	}
	if _, err := Parse(nad(`{"type":"tenure","range":"10.0.0.0/24","prefix_delegation":{"range":"2000::/8","prefix_length":48}}`), nil); err != nil {
		t.Errorf("prefix_delegation 2000::/8: %v", err)
	}
}
