package agent

import (
	"context"
	"net/netip"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/record"

	"github.com/tenure-ipam/tenure/internal/config"
	"github.com/tenure-ipam/tenure/internal/dataplane"
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
	d := withLinkInfo(cfg, []byte(`{"type":"bridge","bridge":"br0"}`))
	if !d.RouterAdvertisements || !slices.Equal(d.OnLink, []netip.Prefix{netip.MustParsePrefix("fd00:96::/64")}) ||
		d.Gateway != netip.MustParseAddr("fd00:96::1") {
		t.Errorf("learnt %+v: want router advertisements for fd00:96::/64 with gateway fd00:96::1", d)
	}
	if d.Link != "br0" {
		t.Errorf("link %q, want the bridge plugin's br0", d.Link)
	}
	if d := withLinkInfo(cfg, []byte(`{"type":"macvlan","master":"vlan10"}`)); d.Link != "vlan10" {
		t.Errorf("link %q, want the macvlan plugin's master vlan10", d.Link)
	}
	if cfg.DHCPv6.OnLink != nil {
		t.Error("the parsed config was modified")
	}
	cfg.DHCPv6 = nil
	if withLinkInfo(cfg, nil) != nil {
		t.Error("a config without dhcpv6 gives settings")
	}
}

// An ADD or DEL recomputes the node's bindings only on a network whose
// dhcpv6 settings the dataplane serves: elsewhere it changes no binding,
// and a storm of calls there must not cost a pass over every pod and a
// dump of the routes per 100 ms.
func TestOnlyCallsOnAServedNetworkReconcileTheDataplane(t *testing.T) {
	h := startAgent(t, pod("plain", thisNode, nil), pod("served", thisNode, map[string]string{
		"k8s.v1.cni.cncf.io/networks": `[{"name":"served","interface":"net1"}]`}))
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

// dhcpNetconf is a bridge plugin's config of CNI network "vmnet" on br0
// with these dhcpv6 settings (nil: none).
func dhcpNetconf(t *testing.T, dhcpv6 map[string]any) string {
	t.Helper()
	ipam := map[string]any{"type": "tenure", "range": "fd00:96::/120", "network_name": "vmnet"}
	if dhcpv6 != nil {
		ipam["dhcpv6"] = dhcpv6
	}
	return withKey(t, `{"cniVersion":"1.1.0","name":"vmnet","type":"bridge","bridge":"br0"}`, "ipam", ipam)
}

// TestANADOfAnotherNamespaceCannotRetuneDHCPv6: the settings an ADD gives
// are the NAD's its network-selection element names, kept under that NAD.
// A NAD of another namespace defining the same CNI network name (here
// referenced by a pod of the victim's namespace, as Multus allows) is
// learnt under its own name: it neither retunes nor switches off the
// victim NAD's settings, whatever it says, and it is not refused either,
// since NADs of two namespaces need not agree.
func TestANADOfAnotherNamespaceCannotRetuneDHCPv6(t *testing.T) {
	h := startAgent(t,
		pod("victim", thisNode, map[string]string{"k8s.v1.cni.cncf.io/networks": `[{"name":"vmnet","interface":"net1"}]`}),
		pod("retune", thisNode, map[string]string{"k8s.v1.cni.cncf.io/networks": `[{"namespace":"tenant","name":"vmnet","interface":"net1"}]`}),
		pod("disable", thisNode, map[string]string{"k8s.v1.cni.cncf.io/networks": `[{"namespace":"tenant","name":"vmnet","interface":"net1"}]`}))
	victim := dhcpNetconf(t, map[string]any{"interfaces": []string{"br0"}, "preferred_lifetime": 3600, "valid_lifetime": 7200})
	if r := h.do(call{cmd: "ADD", ctr: "c-victim", pod: "victim", conf: victim}); r.Error != nil {
		t.Fatalf("victim's ADD: %s", r.Error.Msg)
	}
	want := h.agent.dataplane.svc.Networks()["ns/vmnet"]
	if !want.Enabled || want.Network != "vmnet" || want.PreferredLifetime != time.Hour || want.Link != "br0" {
		t.Fatalf("settings of NAD ns/vmnet %+v: want vmnet's, enabled, preferred 1h, link br0", want)
	}
	for _, tc := range []struct{ pod, conf string }{
		{"retune", dhcpNetconf(t, map[string]any{"interfaces": []string{"br0"}, "preferred_lifetime": 60, "valid_lifetime": 60, "install_routes": false})},
		{"disable", dhcpNetconf(t, nil)},
	} {
		if r := h.do(call{cmd: "ADD", ctr: "c-" + tc.pod, pod: tc.pod, conf: tc.conf}); r.Error != nil {
			t.Fatalf("%s: ADD through the other namespace's NAD refused: %s", tc.pod, r.Error.Msg)
		}
		got := h.agent.dataplane.svc.Networks()
		if g := got["ns/vmnet"]; !sameLearnt(g, want) {
			t.Errorf("after %s's ADD through NAD tenant/vmnet, NAD ns/vmnet has %+v, want %+v", tc.pod, g, want)
		}
		if _, ok := got["tenant/vmnet"]; !ok {
			t.Errorf("after %s's ADD: NAD tenant/vmnet not learnt under its own name: %v", tc.pod, got)
		}
	}
	if !h.agent.dataplane.svc.Serves("vmnet") {
		t.Error("network vmnet is no longer served")
	}
}

func sameLearnt(a, b config.DHCPv6) bool {
	return a.Enabled == b.Enabled && a.Network == b.Network && a.Link == b.Link && a.PreferredLifetime == b.PreferredLifetime &&
		a.ValidLifetime == b.ValidLifetime && a.InstallRoutes == b.InstallRoutes && slices.Equal(a.Interfaces, b.Interfaces)
}

// TestTwoNADsOfANetworkThatDisagreeRefuseTheADD: two NADs of one namespace
// that define one CNI network must give it the same DHCPv6 settings: the
// ADD through the second is refused with a CNI error naming both NADs and
// the setting, and changes nothing; once no pod of the node names the
// first one any more, the second is accepted.
func TestTwoNADsOfANetworkThatDisagreeRefuseTheADD(t *testing.T) {
	first := pod("first", thisNode, map[string]string{"k8s.v1.cni.cncf.io/networks": `[{"name":"vmnet-a","interface":"net1"}]`})
	h := startAgent(t, first,
		pod("second", thisNode, map[string]string{"k8s.v1.cni.cncf.io/networks": `[{"name":"vmnet-b","interface":"net1"}]`}),
		pod("third", thisNode, map[string]string{"k8s.v1.cni.cncf.io/networks": `[{"name":"vmnet-c","interface":"net1"}]`}))
	a := dhcpNetconf(t, map[string]any{"interfaces": []string{"br0"}, "preferred_lifetime": 3600, "valid_lifetime": 7200})
	b := dhcpNetconf(t, map[string]any{"interfaces": []string{"br0"}, "preferred_lifetime": 600, "valid_lifetime": 7200})
	if r := h.do(call{cmd: "ADD", ctr: "c-first", pod: "first", conf: a}); r.Error != nil {
		t.Fatalf("first ADD: %s", r.Error.Msg)
	}
	before := h.agent.dataplane.svc.Networks()
	r := h.do(call{cmd: "ADD", ctr: "c-second", pod: "second", conf: b})
	if r.Error == nil {
		t.Fatal("ADD through NAD ns/vmnet-b, whose dhcpv6 differs from ns/vmnet-a's, succeeded")
	}
	for _, w := range []string{"ns/vmnet-a", "ns/vmnet-b", "dhcpv6.preferred_lifetime", "600", "3600"} {
		if !strings.Contains(r.Error.Msg, w) {
			t.Errorf("error %q does not name %q", r.Error.Msg, w)
		}
	}
	if r.Error.Code != 7 { // ErrInvalidNetworkConfig
		t.Errorf("error code %d, want 7 (invalid network config)", r.Error.Code)
	}
	if after := h.agent.dataplane.svc.Networks(); len(after) != len(before) || !sameLearnt(after["ns/vmnet-a"], before["ns/vmnet-a"]) {
		t.Errorf("the refused ADD changed the learnt settings: %+v, were %+v", after, before)
	}
	if held := h.agent.store.ByAttachment("c-second", "net1"); len(held) != 0 {
		t.Errorf("the refused ADD reserved %d items", len(held))
	}
	// A NAD that agrees is accepted.
	if r := h.do(call{cmd: "ADD", ctr: "c-third", pod: "third", conf: a}); r.Error != nil {
		t.Fatalf("ADD through NAD ns/vmnet-c, which agrees: %s", r.Error.Msg)
	}
	// The first NAD's pods leave the node: its settings no longer stand in
	// the way (nor does the agreeing third's: it is edited alike below).
	for _, p := range []string{"first", "third"} {
		if err := h.fake.Delete(h.ctx, pod(p, thisNode, nil)); err != nil {
			t.Fatal(err)
		}
	}
	if err := wait.PollUntilContextTimeout(h.ctx, 10*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		_, f, _ := h.agent.pods.GetIndexer().GetByKey("ns/first")
		_, g, _ := h.agent.pods.GetIndexer().GetByKey("ns/third")
		return !f && !g, nil
	}); err != nil {
		t.Fatal("the pods informer still holds the deleted pods")
	}
	if r := h.do(call{cmd: "ADD", ctr: "c-second", pod: "second", conf: b}); r.Error != nil {
		t.Fatalf("ADD through ns/vmnet-b once no pod names ns/vmnet-a: %s", r.Error.Msg)
	}
}

// A MAC conflict the dataplane reports becomes one Warning Event on each
// pod that holds one of its bindings, naming every binding and its pod.
func TestAMACConflictIsAnEventOnEachPod(t *testing.T) {
	rec := record.NewFakeRecorder(10)
	h := startAgentWith(t, Options{NodeName: thisNode, Recorder: rec, PodWait: 50 * time.Millisecond},
		pod("virt-launcher-a", thisNode, nil), pod("tenant-0", thisNode, nil))
	h.agent.dataplane.recordMACConflict(dataplane.MACConflict{MAC: "02:00:00:aa:bb:01", Interface: "br0", Holders: []dataplane.Holder{
		{Key: "ns/vm1.vmnet", Pod: "ns/virt-launcher-a", PodInterface: "net1"},
		{Key: "ns/tenant-0/net1", Pod: "ns/tenant-0", PodInterface: "net1"},
	}})
	var events []string
	for len(events) < 2 {
		select {
		case e := <-rec.Events:
			events = append(events, e)
		case <-time.After(5 * time.Second):
			t.Fatalf("events %q, want two", events)
		}
	}
	for _, e := range events {
		for _, w := range []string{"Warning " + EventMACConflict, "02:00:00:aa:bb:01", "br0",
			"ns/vm1.vmnet (pod ns/virt-launcher-a interface net1)", "ns/tenant-0/net1 (pod ns/tenant-0 interface net1)", thisNode} {
			if !strings.Contains(e, w) {
				t.Errorf("event %q does not name %q", e, w)
			}
		}
	}
}
