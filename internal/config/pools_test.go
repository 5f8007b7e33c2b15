package config

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tenure-ipam/tenure/api/v1alpha1"
)

// rackPools are a rack-per-subnet fabric's pools: one IPv4 pool per rack
// chosen by node, a tenant's pool chosen by namespace, and a shared pool
// with IPv4 and IPv6 for everyone else.
func rackPools() map[string]*v1alpha1.IPPoolSpec {
	rack := func(r string) *metav1.LabelSelector {
		return &metav1.LabelSelector{MatchLabels: map[string]string{"node-restriction.kubernetes.io/rack": r}}
	}
	return map[string]*v1alpha1.IPPoolSpec{
		"rack-a": {Ranges: []v1alpha1.PoolRange{{Range: "10.1.0.0/24"}}, Gateway: "10.1.0.1", NodeSelector: rack("a")},
		"rack-b": {Ranges: []v1alpha1.PoolRange{{Range: "10.2.0.0/24"}}, Gateway: "10.2.0.1", NodeSelector: rack("b")},
		"tenant": {Ranges: []v1alpha1.PoolRange{{Range: "10.9.0.0/24"}},
			NamespaceSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
				{Key: "tenant", Operator: metav1.LabelSelectorOpIn, Values: []string{"blue"}}}}},
		"shared": {Ranges: []v1alpha1.PoolRange{{Range: "10.0.0.0/24"}, {Range: "fd00::/64"}}, Gateway: "fd00::1",
			PrefixDelegation: &v1alpha1.PrefixDelegationPool{Range: "2001:db8:100::/40", PrefixLength: 56}},
	}
}

func placed(ns string, nsLabels map[string]string, node string, nodeLabels map[string]string) Placement {
	return Placement{Namespace: ns, NamespaceLabels: nsLabels, Node: node, NodeLabels: nodeLabels}
}

var (
	onRackA = map[string]string{"node-restriction.kubernetes.io/rack": "a"}
	onRackB = map[string]string{"node-restriction.kubernetes.io/rack": "b"}
	blueNS  = map[string]string{"tenant": "blue"}
)

func TestSelectPoolsChoosesPerFamilyByNamespaceAndNode(t *testing.T) {
	for _, tc := range []struct {
		name   string
		pools  string
		at     Placement
		held   []netip.Addr
		chosen map[string]string
		ranges []string // the chosen config's ranges, in order
		spaces []string // each space's pool
		gws    []string // each range's gateway in a result, "" for none
		pd     string   // the delegation pool, "" for none
	}{
		{"a pod on rack a gets rack a's IPv4 and the shared IPv6", `["rack-a","rack-b","shared"]`, placed("web", nil, "n1", onRackA), nil,
			map[string]string{"IPv4": "rack-a", "IPv6": "shared"}, []string{"10.1.0.0/24", "fd00::/64"},
			[]string{"rack-a", "shared", "shared"}, []string{"10.1.0.1", "fd00::1"}, "2001:db8:100::/40"},
		{"a pod on rack b gets rack b's", `["rack-a","rack-b","shared"]`, placed("web", nil, "n2", onRackB), nil,
			map[string]string{"IPv4": "rack-b", "IPv6": "shared"}, []string{"10.2.0.0/24", "fd00::/64"},
			[]string{"rack-b", "shared", "shared"}, []string{"10.2.0.1", "fd00::1"}, "2001:db8:100::/40"},
		{"a pod on an unlabelled node falls through to the shared pool", `["rack-a","rack-b","shared"]`, placed("web", nil, "n3", nil), nil,
			map[string]string{"IPv4": "shared", "IPv6": "shared"}, []string{"10.0.0.0/24", "fd00::/64"},
			[]string{"shared", "shared", "shared"}, []string{"", "fd00::1"}, "2001:db8:100::/40"},
		{"a namespace the tenant selector selects gets the tenant's pool ByNamespace", `["tenant","shared"]`, placed("blue", blueNS, "n3", nil), nil,
			map[string]string{"IPv4": "tenant", "IPv6": "shared"}, []string{"10.9.0.0/24", "fd00::/64"},
			[]string{"tenant", "shared", "shared"}, []string{"", "fd00::1"}, "2001:db8:100::/40"},
		{"list order decides between two pools that both select", `["tenant","rack-a","shared"]`, placed("blue", blueNS, "n1", onRackA), nil,
			map[string]string{"IPv4": "tenant", "IPv6": "shared"}, []string{"10.9.0.0/24", "fd00::/64"},
			[]string{"tenant", "shared", "shared"}, []string{"", "fd00::1"}, "2001:db8:100::/40"},
		{"a claim's held address keeps its pool on a node the pool does not select", `["rack-a","rack-b","shared"]`, placed("vm", nil, "n2", onRackB),
			[]netip.Addr{addr("10.1.0.7")},
			map[string]string{"IPv4": "rack-a", "IPv6": "shared"}, []string{"10.1.0.0/24", "fd00::/64"},
			[]string{"rack-a", "shared", "shared"}, []string{"10.1.0.1", "fd00::1"}, "2001:db8:100::/40"},
		{"a single IPv4-only pool serves alone", `["rack-a"]`, placed("web", nil, "n1", onRackA), nil,
			map[string]string{"IPv4": "rack-a"}, []string{"10.1.0.0/24"}, []string{"rack-a"}, []string{"10.1.0.1"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := mustParse(t, `{"type":"tenure","pools":`+tc.pools+`}`)
			n, choice, err := c.SelectPools(rackPools(), tc.at, tc.held)
			if err != nil {
				t.Fatal(err)
			}
			if len(choice.Chosen) != len(tc.chosen) {
				t.Errorf("chosen = %v, want %v", choice.Chosen, tc.chosen)
			}
			for f, p := range tc.chosen {
				if choice.Chosen[f] != p {
					t.Errorf("chosen[%s] = %q, want %q", f, choice.Chosen[f], p)
				}
			}
			var ranges, spaces, gws []string
			for _, r := range n.Ranges {
				ranges = append(ranges, r.Prefix.String())
			}
			for _, s := range n.Spaces() {
				spaces = append(spaces, s.Pool)
				if s.Range != nil {
					gw := ""
					if s.Gateway.IsValid() {
						gw = s.Gateway.String()
					}
					gws = append(gws, gw)
				}
			}
			if !slices.Equal(ranges, tc.ranges) || !slices.Equal(spaces, tc.spaces) || !slices.Equal(gws, tc.gws) {
				t.Errorf("ranges %v pools %v gateways %v, want %v %v %v", ranges, spaces, gws, tc.ranges, tc.spaces, tc.gws)
			}
			pd := ""
			if n.PrefixDelegation != nil {
				pd = n.PrefixDelegation.Range.String()
			}
			if pd != tc.pd {
				t.Errorf("prefix delegation %q, want %q", pd, tc.pd)
			}
			if c.Ranges != nil || c.parts != nil {
				t.Errorf("SelectPools changed its receiver: %+v", c)
			}
			// Every pool of the list has a verdict per family, exactly the
			// chosen one saying so.
			for f, p := range choice.Chosen {
				for _, name := range c.Pools {
					i := slices.IndexFunc(choice.Verdicts, func(v PoolVerdict) bool { return v.Family == f && v.Pool == name })
					if i < 0 {
						t.Errorf("no %s verdict for %s", f, name)
						continue
					}
					if v := choice.Verdicts[i]; v.Chosen != (name == p) || v.Reason == "" {
						t.Errorf("%s verdict for %s = %+v", f, name, v)
					}
				}
			}
		})
	}
}

// The verdicts say why a pool was not chosen, in words naming the selector
// and the namespace or node.
func TestSelectPoolsSaysWhyNotTheOthers(t *testing.T) {
	c := mustParse(t, `{"type":"tenure","pools":["tenant","rack-a","gone","shared"]}`)
	_, choice, err := c.SelectPools(rackPools(), placed("web", nil, "n2", onRackB), nil)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"tenant": "spec.namespaceSelector tenant in (blue) does not select namespace web",
		"rack-a": "spec.nodeSelector node-restriction.kubernetes.io/rack=a does not select node n2",
		"gone":   "no IPPool of that name",
		"shared": "the first pool of the list whose selectors select namespace web (any) and node n2 (any)",
	}
	for _, v := range choice.Verdicts {
		if v.Family != "IPv4" {
			continue
		}
		if v.Reason != want[v.Pool] {
			t.Errorf("IPv4 %s: %q, want %q", v.Pool, v.Reason, want[v.Pool])
		}
	}
}

func TestSelectPoolsRefuses(t *testing.T) {
	bad := rackPools()
	bad["rack-a"].NodeSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "rack", Operator: "Near"}}}
	for _, tc := range []struct {
		name  string
		pools string
		specs map[string]*v1alpha1.IPPoolSpec
		at    Placement
		key   string
		has   []string
	}{
		{"no pool selects the pod", `["rack-a","rack-b"]`, rackPools(), placed("web", nil, "n3", nil), "ipam.pools",
			[]string{`["rack-a","rack-b"]`, "no pool serves the IPv4 address of a pod in namespace web on node n3",
				"rack-a (spec.nodeSelector node-restriction.kubernetes.io/rack=a does not select node n3)", "rack-b ("}},
		{"one family has no pool selecting the pod", `["rack-a","tenant-v6"]`, map[string]*v1alpha1.IPPoolSpec{
			"rack-a": rackPools()["rack-a"],
			"tenant-v6": {Ranges: []v1alpha1.PoolRange{{Range: "fd09::/64"}},
				NamespaceSelector: &metav1.LabelSelector{MatchLabels: blueNS}}}, placed("web", nil, "n1", onRackA), "ipam.pools",
			[]string{"no pool serves the IPv6 address", "rack-a (has no IPv6 range)", "tenant-v6 (spec.namespaceSelector tenant=blue does not select namespace web)"}},
		{"no listed pool exists", `["gone"]`, rackPools(), placed("web", nil, "n1", nil), "ipam.pools",
			[]string{"no listed pool has a range", "gone (no IPPool of that name)"}},
		{"a selector that does not parse", `["rack-a","shared"]`, bad, placed("web", nil, "n1", nil), "IPPool rack-a spec.nodeSelector",
			[]string{`"operator":"Near"`, "does not parse"}},
		{"a pool's range that does not parse", `["broken"]`, map[string]*v1alpha1.IPPoolSpec{"broken": {Ranges: []v1alpha1.PoolRange{{Range: "10.0.0.0/33"}}}},
			placed("web", nil, "n1", nil), "IPPool broken spec.ranges[0].range", []string{`"10.0.0.0/33"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := mustParse(t, `{"type":"tenure","pools":`+tc.pools+`}`)
			n, _, err := c.SelectPools(tc.specs, tc.at, nil)
			if n != nil {
				t.Errorf("a config came back with the error: %+v", n)
			}
			checkErr(t, err, tc.key, tc.has)
		})
	}
}

func TestParsePools(t *testing.T) {
	c := mustParse(t, `{"type":"tenure","pools":["rack-a","rack-b","shared"]}`)
	if !slices.Equal(c.Pools, []string{"rack-a", "rack-b", "shared"}) || c.Pool != "" || c.Ranges != nil {
		t.Errorf("Pools, Pool, Ranges = %v, %q, %v", c.Pools, c.Pool, c.Ranges)
	}
	for _, tc := range []struct {
		name, ipam, key string
		has             []string
	}{
		{"a pool list naming no pool", `{"type":"tenure","pools":[]}`, "ipam.pools", []string{"[]", "names no pool"}},
		{"a name that is no IPPool name", `{"type":"tenure","pools":["rack-a","Rack_B"]}`, "ipam.pools[1]", []string{`"Rack_B"`, "IPPool"}},
		{"a name twice", `{"type":"tenure","pools":["rack-a","shared","rack-a"]}`, "ipam.pools[2]", []string{`"rack-a"`, "second time, after ipam.pools[0]"}},
		{"pool beside pools", `{"type":"tenure","pool":"blue","pools":["rack-a"]}`, "ipam.pools", []string{`["rack-a"]`, `contradicts ipam.pool "blue"`}},
		{"pools beside a range", `{"type":"tenure","pools":["rack-a"],"range":"10.0.0.0/24"}`, "ipam.range", []string{`"10.0.0.0/24"`, `contradicts ipam.pools ["rack-a"]`}},
		{"pools not a list", `{"type":"tenure","pools":"rack-a"}`, "ipam.pools", []string{`"rack-a"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse(nad(tc.ipam), nil)
			checkErr(t, err, tc.key, tc.has)
		})
	}
}

// A requested address (runtimeConfig.ips) goes to the range of its family
// whichever pool serves it, and one outside the chosen pool's ranges is
// refused naming the key.
func TestSelectPoolsRequestedAddresses(t *testing.T) {
	c, err := Parse(withIPs(`["10.2.0.9","fd00::9"]`, `{"type":"tenure","pools":["rack-a","rack-b","shared"]}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	n, _, err := c.SelectPools(rackPools(), placed("web", nil, "n2", onRackB), nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(n.Requested, []netip.Addr{addr("10.2.0.9"), addr("fd00::9")}) {
		t.Errorf("Requested = %v", n.Requested)
	}
	_, _, err = c.SelectPools(rackPools(), placed("web", nil, "n1", onRackA), nil)
	checkErr(t, err, "runtimeConfig.ips[0]", []string{`"10.2.0.9"`, "outside every range"})
	if err != nil && !strings.Contains(err.Error(), "IPPool rack-a") {
		t.Errorf("error does not name the chosen pool's range: %v", err)
	}
}
