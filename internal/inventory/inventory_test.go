package inventory

import (
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
)

func nad(ns, name, config string) NetworkConfig {
	return NetworkConfig{Namespace: ns, Name: name, Config: config}
}

func ipPool(name, network string, ranges ...string) tenurev1alpha1.IPPool {
	p := tenurev1alpha1.IPPool{ObjectMeta: metav1.ObjectMeta{Name: name}}
	p.Spec.NetworkName = network
	for _, r := range ranges {
		p.Spec.Ranges = append(p.Spec.Ranges, tenurev1alpha1.PoolRange{Range: r})
	}
	return p
}

// spaces is "NETWORK RANGE [SOURCES]" per space.
func spaces(inv *Inventory) []string {
	var out []string
	for _, s := range inv.Spaces() {
		out = append(out, s.Scope+" "+s.Space.String()+" "+strings.Join(s.Sources, ","))
	}
	return out
}

func TestBuildInventory(t *testing.T) {
	for _, tc := range []struct {
		name  string
		pools []tenurev1alpha1.IPPool
		nads  []NetworkConfig
		want  []string
		notes []string
	}{
		{"an inline range",
			nil, []NetworkConfig{nad("ns", "san", `{"cniVersion":"1.0.0","name":"san","type":"macvlan","ipam":{"type":"tenure","range":"10.0.0.0/24","network_name":"san"}}`)},
			[]string{"san 10.0.0.0/24 NetworkAttachmentDefinition ns/san"}, nil},
		{"a configuration list, dual stack, overlapping ranges off, prefix delegation",
			nil, []NetworkConfig{nad("ns", "vm", `{"cniVersion":"1.0.0","name":"vm","plugins":[{"type":"bridge","ipam":{"type":"tenure","network_name":"vm",
				"enable_overlapping_ranges":false,"ipRanges":[{"range":"10.1.0.0/24"},{"range":"fd00::/64"}],
				"prefix_delegation":{"range":"2001:db8:100::/40","prefix_length":56}}},{"type":"tuning"}]}`)},
			[]string{"vm/10.1.0.0/24 10.1.0.0/24 NetworkAttachmentDefinition ns/vm", "vm/fd00::/64 fd00::/64 NetworkAttachmentDefinition ns/vm",
				"vm/2001:db8:100::/40 2001:db8:100::/40 as /56 NetworkAttachmentDefinition ns/vm"}, nil},
		{"another IPAM, no config, two NADs of one range",
			nil, []NetworkConfig{
				nad("ns", "wa", `{"cniVersion":"1.0.0","name":"wa","type":"macvlan","ipam":{"type":"whereabouts","range":"10.2.0.0/24"}}`),
				nad("ns", "empty", ""),
				nad("ns", "a", `{"name":"a","type":"macvlan","ipam":{"type":"tenure","range":"10.3.0.0/24"}}`),
				nad("other", "b", `{"name":"b","type":"ipvlan","ipam":{"type":"tenure","range":"10.3.0.0/24"}}`)},
			[]string{"default 10.3.0.0/24 NetworkAttachmentDefinition ns/a,NetworkAttachmentDefinition other/b"}, nil},
		{"a declared pool no configuration names",
			[]tenurev1alpha1.IPPool{ipPool("blue", "blue-net", "10.4.0.0/24", "10.5.0.10-10.5.0.20/24")}, nil,
			[]string{"blue-net 10.4.0.0/24 IPPool blue", "blue-net 10.5.0.10-10.5.0.20/24 IPPool blue"}, nil},
		{"a pool named by a configuration with overlapping ranges off",
			[]tenurev1alpha1.IPPool{ipPool("blue", "blue-net", "10.4.0.0/24")},
			[]NetworkConfig{nad("ns", "uses-blue", `{"name":"x","type":"macvlan","ipam":{"type":"tenure","pool":"blue","enable_overlapping_ranges":false}}`)},
			[]string{"blue-net/10.4.0.0/24 10.4.0.0/24 NetworkAttachmentDefinition ns/uses-blue,IPPool blue"}, nil},
		{"what does not read",
			[]tenurev1alpha1.IPPool{ipPool("bad", "", "0.0.0.0/0")},
			[]NetworkConfig{
				nad("ns", "json", `{not json`),
				nad("ns", "nopool", `{"name":"x","type":"macvlan","ipam":{"type":"tenure","pool":"missing"}}`),
				nad("ns", "badkey", `{"name":"x","type":"macvlan","ipam":{"type":"tenure","range":"10.6.0.0/24","rnage":"x"}}`)},
			nil, []string{"NetworkAttachmentDefinition ns/json: spec.config is not a JSON object", "NetworkAttachmentDefinition ns/nopool: names IPPool missing, which does not exist",
				"NetworkAttachmentDefinition ns/badkey: ", "IPPool bad: "}},
	} {
		inv := BuildInventory(tc.pools, tc.nads)
		if got := spaces(inv); !slices.Equal(got, tc.want) {
			t.Errorf("%s: spaces\n%q\nwant\n%q", tc.name, got, tc.want)
		}
		if len(inv.Notes) != len(tc.notes) {
			t.Errorf("%s: notes %q, want %d like %q", tc.name, inv.Notes, len(tc.notes), tc.notes)
			continue
		}
		for i, n := range tc.notes {
			if !strings.HasPrefix(inv.Notes[i], n) {
				t.Errorf("%s: note %q, want it to start %q", tc.name, inv.Notes[i], n)
			}
		}
	}
}

func TestTenureConfigs(t *testing.T) {
	confs, err := TenureConfigs(`{"cniVersion":"0.4.0","name":"list","plugins":[{"type":"macvlan","ipam":{"type":"tenure","range":"10.0.0.0/24"}},{"type":"tuning"},{"type":"x","ipam":{"type":"dhcp"}}]}`)
	if err != nil || len(confs) != 1 {
		t.Fatalf("configs %q, %v", confs, err)
	}
	for _, want := range []string{`"cniVersion":"0.4.0"`, `"name":"list"`, `"type":"macvlan"`} {
		if !strings.Contains(string(confs[0]), want) {
			t.Errorf("plugin config %s lacks %s", confs[0], want)
		}
	}
}
