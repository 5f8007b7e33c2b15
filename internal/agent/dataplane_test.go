package agent

import (
	"net/netip"
	"slices"
	"sync/atomic"
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

// An ADD or DEL recomputes the node's bindings only on a network whose
// dhcpv6 settings the dataplane serves: elsewhere it changes no binding,
// and a storm of calls there must not cost a pass over every pod and a
// dump of the routes per 100 ms.
func TestOnlyCallsOnAServedNetworkReconcileTheDataplane(t *testing.T) {
	h := startAgent(t, pod("plain", thisNode, nil), pod("served", thisNode, nil))
	var triggers atomic.Int64
	h.agent.dataplane.trigger = func() { triggers.Add(1) }
	served := withKey(t, withKey(t, san29, "name", "served"), "ipam", map[string]any{"type": "tenure", "range": "10.9.0.0/29", "dhcpv6": map[string]any{"interfaces": []string{"br0"}}})

	for _, c := range []struct {
		call call
		want int64
	}{
		{call{cmd: "ADD", ctr: "c-plain", pod: "plain"}, 0},
		{call{cmd: "DEL", ctr: "c-plain", pod: "plain"}, 0},
		{call{cmd: "ADD", ctr: "c-served", pod: "served", conf: served}, 1},
		{call{cmd: "DEL", ctr: "c-served", pod: "served", conf: served}, 1},
		{call{cmd: "ADD", ctr: "c-plain2", pod: "plain"}, 0},
	} {
		triggers.Store(0)
		if r := h.do(c.call); r.Error != nil {
			t.Fatalf("%s %s: %s", c.call.cmd, c.call.ctr, r.Error.Msg)
		}
		if n := triggers.Load(); n != c.want {
			t.Errorf("%s of %s: %d dataplane reconciles asked for, want %d", c.call.cmd, c.call.ctr, n, c.want)
		}
	}
}
