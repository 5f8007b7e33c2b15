package agent

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/tenure-ipam/tenure/internal/config"
)

// The dhcpv6 settings the dataplane learns at ADD carry what the network's
// Router Advertisements say: its IPv6 subnets and IPv6 gateway.
func TestWithLinkInfo(t *testing.T) {
	cfg, err := config.Parse([]byte(`{"cniVersion":"1.1.0","name":"vmnet","type":"bridge","ipam":{"type":"tenure",
		"ipRanges":[{"range":"10.9.0.0/24"},{"range":"fd00:96::/64"},{"range":"fd00:96::100-fd00:96::1ff/64"}],
		"gateway":"fd00:96::1","dhcpv6":{"interfaces":["br0"],"router_advertisements":true}}}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	d := withLinkInfo(cfg)
	if !d.RouterAdvertisements || !slices.Equal(d.OnLink, []netip.Prefix{netip.MustParsePrefix("fd00:96::/64")}) ||
		d.Gateway != netip.MustParseAddr("fd00:96::1") {
		t.Errorf("learnt %+v: want router advertisements for fd00:96::/64 with gateway fd00:96::1", d)
	}
	if cfg.DHCPv6.OnLink != nil {
		t.Error("the parsed config was modified")
	}
	cfg.DHCPv6 = nil
	if withLinkInfo(cfg) != nil {
		t.Error("a config without dhcpv6 gives settings")
	}
}
