package reservation

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
)

func TestAddressNameRoundTrip(t *testing.T) {
	cases := []struct {
		network string
		addr    string
		want    string
	}{
		{"default", "10.0.0.1", "default.10.0.0.1"},
		{"san", "192.168.255.254", "san.192.168.255.254"},
		{"vm-net", "2001:db8::1", "vm-net.2001-0db8-0000-0000-0000-0000-0000-0001"},
		{"vm-net", "::", "vm-net.0000-0000-0000-0000-0000-0000-0000-0000"},
		{"vm-net", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "vm-net.ffff-ffff-ffff-ffff-ffff-ffff-ffff-ffff"},
	}
	for _, c := range cases {
		addr := netip.MustParseAddr(c.addr)
		name := AddressName(c.network, addr)
		if name != c.want {
			t.Errorf("AddressName(%q, %s) = %q, want %q", c.network, addr, name, c.want)
		}
		if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
			t.Errorf("%q is not a valid object name: %v", name, errs)
		}
		p, err := Parse(name)
		if err != nil {
			t.Fatalf("Parse(%q): %v", name, err)
		}
		if p.IsPrefix || p.Prefix.Addr() != addr || p.Prefix.Bits() != addr.BitLen() || p.ScopeLabel != c.network {
			t.Errorf("Parse(%q) = %+v, want %s on %s", name, p, addr, c.network)
		}
	}
}

func TestPrefixNameRoundTrip(t *testing.T) {
	p := netip.MustParsePrefix("2001:db8:100:ab00::/56")
	name := PrefixName("vm-net", p)
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		t.Fatalf("%q is not a valid object name: %v", name, errs)
	}
	got, err := Parse(name)
	if err != nil {
		t.Fatal(err)
	}
	if !got.IsPrefix || got.Prefix != p {
		t.Fatalf("Parse(%q) = %+v, want prefix %s", name, got, p)
	}
	if AddressName("vm-net", p.Addr()) == name {
		t.Fatal("a prefix and an address of the same base must not share a name")
	}
}

func TestScopeLabelIsAlwaysAValidLabel(t *testing.T) {
	keys := []string{
		"default", "SAN_Storage", "a/b", "net/10.0.0.0/24", "--", "", strings.Repeat("x", 200),
		"tenant-a/2001:db8::/64", "éé",
	}
	seen := map[string]string{}
	for _, k := range keys {
		l := ScopeLabel(k)
		if errs := validation.IsDNS1123Label(l); len(errs) > 0 {
			t.Errorf("ScopeLabel(%q) = %q: %v", k, l, errs)
		}
		if other, dup := seen[l]; dup {
			t.Errorf("ScopeLabel(%q) and ScopeLabel(%q) are both %q", k, other, l)
		}
		seen[l] = k
		if name := AddressName(k, netip.MustParseAddr("2001:db8::1")); len(validation.IsDNS1123Subdomain(name)) > 0 {
			t.Errorf("AddressName on %q = %q is invalid", k, name)
		}
	}
}

func TestScopeOfOverlappingRanges(t *testing.T) {
	a := Scope("san", "10.0.0.0/24", true)
	b := Scope("san", "10.0.0.0/25", true)
	if a != b {
		t.Fatalf("with overlap protection, two ranges of one network must share a scope: %q vs %q", a, b)
	}
	a = Scope("san", "10.0.0.0/24", false)
	b = Scope("san", "10.0.0.0/25", false)
	if a == b {
		t.Fatalf("without overlap protection, ranges must have their own scope: both %q", a)
	}
	if Scope("", "10.0.0.0/24", true) != DefaultScope {
		t.Fatal("no network_name must mean the default network")
	}
}

func TestParseRejectsGarbage(t *testing.T) {
	for _, n := range []string{"", "nolabel", "x.300.1.1.1", "x.2001-db8", "x.pd.10.0.0.0", "x.pd.2001-0db8-0000-0000-0000-0000-0000-0001.56", "x.zzzz-0000-0000-0000-0000-0000-0000-0000"} {
		if p, err := Parse(n); err == nil {
			t.Errorf("Parse(%q) = %+v, want an error", n, p)
		}
	}
}

// TestPrefixNameOfAnIPv4MappedPrefix (found by FuzzName): an IPv4-mapped
// prefix is named as the IPv4 prefix it is, as an IPv4-mapped address is,
// so Parse reads the name back instead of refusing a /120 of IPv4.
func TestPrefixNameOfAnIPv4MappedPrefix(t *testing.T) {
	mapped := netip.MustParsePrefix("::ffff:10.0.0.0/120")
	name := PrefixName("vm-net", mapped)
	if want := PrefixName("vm-net", netip.MustParsePrefix("10.0.0.0/24")); name != want {
		t.Fatalf("PrefixName(%v) = %q, want %q, the name of 10.0.0.0/24", mapped, name, want)
	}
	got, err := Parse(name)
	if err != nil || !got.IsPrefix || got.Prefix != netip.MustParsePrefix("10.0.0.0/24") {
		t.Fatalf("Parse(%q) = %+v, %v, want the prefix 10.0.0.0/24", name, got, err)
	}
}

// The label checks every ADD makes agree with the API machinery's, which
// the API server applies to what tenure writes.
func FuzzLabelChecksAgreeWithAPIMachinery(f *testing.F) {
	for _, s := range []string{"", "a", "-", "a-", "-a", "a-b", "A", "a.b", "a_b", "_a", "a_", "0", "vm-net", "node-1.example.com", "Node_1", strings.Repeat("a", 63), strings.Repeat("a", 64), "a\x00", "é"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := isDNS1123Label(s), len(validation.IsDNS1123Label(s)) == 0; got != want {
			t.Errorf("isDNS1123Label(%q) = %v, validation.IsDNS1123Label says %v", s, got, want)
		}
		if got, want := isLabelValue(s), len(validation.IsValidLabelValue(s)) == 0; got != want {
			t.Errorf("isLabelValue(%q) = %v, validation.IsValidLabelValue says %v", s, got, want)
		}
	})
}

func TestIPv6AddressesAreWrittenAsEightGroupsOfFourHexDigits(t *testing.T) {
	for _, a := range []string{"::", "::1", "2001:db8::1", "fe80::abcd:ef01:2345:6789", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "2001:DB8:0:0:8:800:200C:417A"} {
		addr := netip.MustParseAddr(a)
		b := addr.As16()
		var groups []string
		for i := 0; i < 16; i += 2 {
			groups = append(groups, fmt.Sprintf("%02x%02x", b[i], b[i+1]))
		}
		if got, want := encodeAddr(addr), strings.Join(groups, "-"); got != want {
			t.Errorf("encodeAddr(%s) = %q, want %q", a, got, want)
		}
	}
}
