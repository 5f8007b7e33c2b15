package ops

import (
	"bytes"
	"slices"
	"strings"
	"testing"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/config"
	"github.com/tenure-ipam/tenure/internal/inventory"
)

const racksNAD = `{"cniVersion":"1.0.0","name":"racks","type":"macvlan","ipam":{"type":"tenure","network_name":"racks","pools":["rack-a","rack-b","shared","gone"]}}`

func rackPool(name, rng, rack string) tenurev1alpha1.IPPool {
	p := ipPool(name, "", rng)
	if rack != "" {
		p.Spec.NodeSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"rack": rack}}
	}
	return p
}

func racks() []tenurev1alpha1.IPPool {
	shared := rackPool("shared", "10.80.0.0/24", "")
	shared.Spec.NamespaceSelector = &metav1.LabelSelector{}
	return []tenurev1alpha1.IPPool{rackPool("rack-a", "10.80.1.0/24", "a"), rackPool("rack-b", "10.80.2.0/24", "b"), shared}
}

// A pools list's every listed pool is a space of the config's scope, and
// `tenurectl pools -o wide` says what each pool selects.
func TestPoolsShowsAPoolsListsPoolsWithTheirSelectors(t *testing.T) {
	inv := inventory.BuildInventory(racks(), []inventory.NetworkConfig{nad("ns", "racks", racksNAD)})
	want := []string{
		"racks 10.80.1.0/24 NetworkAttachmentDefinition ns/racks,IPPool rack-a",
		"racks 10.80.2.0/24 NetworkAttachmentDefinition ns/racks,IPPool rack-b",
		"racks 10.80.0.0/24 NetworkAttachmentDefinition ns/racks,IPPool shared",
	}
	if got := spaces(inv); !slices.Equal(got, want) {
		t.Errorf("spaces\n%q\nwant\n%q", got, want)
	}
	if len(inv.Notes) != 1 || !strings.Contains(inv.Notes[0], "NetworkAttachmentDefinition ns/racks: lists IPPool gone, which does not exist") {
		t.Errorf("notes %q", inv.Notes)
	}
	var b bytes.Buffer
	if err := (&PoolsReport{Rows: PoolRows(inv, nil)}).WriteTable(&b, true); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, line := range []string{
		"racks 10.80.0.0/24 254 0 254 [....................] 0% Address shared any namespace, any node",
		"racks 10.80.1.0/24 254 0 254 [....................] 0% Address rack-a any namespace, nodes rack=a",
		"racks 10.80.2.0/24 254 0 254 [....................] 0% Address rack-b any namespace, nodes rack=b",
	} {
		if !slices.ContainsFunc(strings.Split(out, "\n"), func(l string) bool { return strings.HasPrefix(strings.Join(strings.Fields(l), " "), line) }) {
			t.Errorf("no line %q in:\n%s", line, out)
		}
	}
}

// `tenurectl get` names the pools of the network with their selectors.
func TestGetShowsThePoolsSelectors(t *testing.T) {
	inv := inventory.BuildInventory(racks(), []inventory.NetworkConfig{nad("ns", "racks", racksNAD)})
	rep := &ReservationsReport{Query: "racks", Scopes: inv.Resolve("racks"), Pools: PoolsOf(inv, []string{"racks"})}
	var b bytes.Buffer
	if err := rep.WriteTable(&b, false); err != nil {
		t.Fatal(err)
	}
	want := "Network racks: allocation scope racks (allocation scope, CNI network name)\n" +
		"IPPool rack-a selects any namespace, nodes rack=a\n" +
		"IPPool rack-b selects any namespace, nodes rack=b\n" +
		"IPPool shared selects any namespace, any node\n" +
		"No reservation in network racks.\n"
	if b.String() != want {
		t.Errorf("get racks:\n%s\nwant:\n%s", b.String(), want)
	}
}

// `tenurectl why POD` says, per attachment of a pools list, which pool was
// chosen and why not the others; an address held keeps its pool.
func TestWhySaysWhichPoolWasChosenAndWhyNotTheOthers(t *testing.T) {
	cfg, err := config.Parse([]byte(racksNAD), nil)
	if err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web", UID: "u1", Annotations: map[string]string{
		nadv1.NetworkAttachmentAnnot: `[{"name":"racks"}]`}}, Spec: corev1.PodSpec{NodeName: "n2"}}
	onB := config.Placement{Namespace: "ns", Node: "n2", NodeLabels: map[string]string{"rack": "b"}}
	for _, tc := range []struct {
		name    string
		owned   []*tenurev1alpha1.IPReservation
		at      config.Placement
		want    map[string]string // pool -> "yes"/"no: reason"
		problem string
	}{
		{"by node", nil, onB, map[string]string{
			"rack-a": "no: spec.nodeSelector rack=a does not select node n2",
			"rack-b": "yes: the first pool of the list whose selectors select namespace ns (any) and node n2 (rack=b)",
			"shared": "no: comes after rack-b in the list; it selects the pod too",
			"gone":   "no: comes after rack-b in the list; no IPPool of that name",
		}, ""},
		{"a held address keeps its pool", []*tenurev1alpha1.IPReservation{withRange(podRes("racks", "10.80.1.9", "ns", "web", "u1", "n2"), "10.80.1.0/24")}, onB,
			map[string]string{
				"rack-a": "yes: holds 10.80.1.9, which the claim or attachment holds already: a held address keeps its pool wherever its pod runs and whatever the selectors say now",
				"rack-b": "no: the held address 10.80.1.9 is in rack-a; it selects the pod too",
				"shared": "no: the held address 10.80.1.9 is in rack-a; it selects the pod too",
			}, ""},
		{"no pool selects the node... but shared does", nil, config.Placement{Namespace: "ns", Node: "n3"}, map[string]string{
			"rack-a": "no: spec.nodeSelector rack=a does not select node n3",
			"rack-b": "no: spec.nodeSelector rack=b does not select node n3",
			"shared": "yes: the first pool of the list whose selectors select namespace ns (any) and node n3 (any)",
		}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, r := range tc.owned {
				r.Spec.Owner.Interface = "net1"
			}
			rep := Explain(pod, tc.owned, nil, nil, t0)
			ExplainPools(rep, map[string]*config.Config{"ns/racks": cfg}, racks(), tc.at)
			a := rep.Attachments[0]
			if a.PoolsProblem != tc.problem {
				t.Errorf("problem %q, want %q", a.PoolsProblem, tc.problem)
			}
			for _, v := range a.Pools {
				w, ok := tc.want[v.Pool]
				if !ok {
					continue
				}
				got := "no: " + v.Reason
				if v.Chosen {
					got = "yes: " + v.Reason
				}
				if got != w {
					t.Errorf("%s: %q, want %q", v.Pool, got, w)
				}
			}
			var b bytes.Buffer
			if err := rep.WriteTable(&b, false); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(b.String(), "Pools of net1 (ns/racks):") {
				t.Errorf("why:\n%s", b.String())
			}
		})
	}

	// A pod no pool selects: the problem names the pools tried.
	only := `{"cniVersion":"1.0.0","name":"racks","type":"macvlan","ipam":{"type":"tenure","pools":["rack-a","rack-b"]}}`
	c2, err := config.Parse([]byte(only), nil)
	if err != nil {
		t.Fatal(err)
	}
	rep := Explain(pod, nil, nil, nil, t0)
	ExplainPools(rep, map[string]*config.Config{"ns/racks": c2}, racks(), config.Placement{Namespace: "ns", Node: "n3"})
	if p := rep.Attachments[0].PoolsProblem; !strings.Contains(p, "no pool serves the IPv4 address of a pod in namespace ns on node n3") ||
		!strings.Contains(p, "rack-a (spec.nodeSelector rack=a does not select node n3)") {
		t.Errorf("problem %q", p)
	}
	var b bytes.Buffer
	if err := rep.WriteTable(&b, false); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "  none chosen: ipam.pools") {
		t.Errorf("why:\n%s", b.String())
	}
}

func TestParseAddressRange(t *testing.T) {
	for _, tc := range []struct {
		in         string
		max        int
		first, end string
		n          int
		err        string
	}{
		{"10.0.0.5", 10, "10.0.0.5", "10.0.0.5", 1, ""},
		{" 10.0.0.5 - 10.0.0.9 ", 10, "10.0.0.5", "10.0.0.9", 5, ""},
		{"10.0.0.0/30", 10, "10.0.0.0", "10.0.0.3", 4, ""},
		{"fd00::fe-fd00::101", 10, "fd00::fe", "fd00::101", 4, ""},
		{"::ffff:10.0.0.1", 10, "10.0.0.1", "10.0.0.1", 1, ""},
		{"10.0.0.0/24", 10, "", "", 0, `ADDR|RANGE "10.0.0.0/24": holds more than 10 addresses`},
		{"10.0.0.1/24", 10, "", "", 0, `ADDR|RANGE "10.0.0.1/24": has host bits set (did you mean 10.0.0.0/24?)`},
		{"10.0.0.9-10.0.0.1", 10, "", "", 0, "the last address comes before the first"},
		{"10.0.0.1-fd00::1", 10, "", "", 0, "different families"},
		{"10.0.0.x", 10, "", "", 0, `ADDR|RANGE "10.0.0.x": neither an IP address, a CIDR nor FIRST-LAST`},
		{"fe80::1%eth0", 10, "", "", 0, "zone"},
	} {
		got, err := ParseAddressRange(tc.in, tc.max)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: %v, want an error with %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || len(got) != tc.n || got[0].String() != tc.first || got[len(got)-1].String() != tc.end {
			t.Errorf("%q: %v %v, want %d addresses %s..%s", tc.in, got, err, tc.n, tc.first, tc.end)
		}
	}
}
