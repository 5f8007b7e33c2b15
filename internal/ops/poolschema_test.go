package ops

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/inventory"
)

func TestFindStalePoolSchemaNamesEachListedPool(t *testing.T) {
	pool := func(name, cidr string) tenurev1alpha1.IPPool {
		return tenurev1alpha1.IPPool{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: tenurev1alpha1.IPPoolSpec{Ranges: []tenurev1alpha1.PoolRange{{Range: cidr}}}}
	}
	nad := func(name, ipam string) inventory.NetworkConfig {
		return inventory.NetworkConfig{Namespace: "ns", Name: name, Config: `{"cniVersion":"1.0.0","name":"` + name + `","type":"macvlan","ipam":{"type":"tenure",` + ipam + `}}`}
	}
	inv := inventory.BuildInventory([]tenurev1alpha1.IPPool{pool("rack-a", "10.1.0.0/24"), pool("rack-b", "10.2.0.0/24"), pool("single", "10.3.0.0/24"), pool("unnamed", "10.4.0.0/24")},
		[]inventory.NetworkConfig{
			nad("racks", `"pools":["rack-a","rack-b"],"network_name":"racks"`),
			nad("racks2", `"pools":["rack-b","gone"],"network_name":"racks2"`),
			nad("one", `"pool":"single"`),
		})
	both := []string{"spec.namespaceSelector", "spec.nodeSelector"}
	for _, tc := range []struct {
		name    string
		missing []string
		want    []string
		has     []string
	}{
		{"the CRD has the selectors", nil, nil, nil},
		{"the CRD lacks them: every listed pool, not one named by pool or by no config", both,
			[]string{"IPPoolSchemaStale IPPool rack-a", "IPPoolSchemaStale IPPool rack-b"},
			[]string{"NetworkAttachmentDefinition ns/racks, NetworkAttachmentDefinition ns/racks2", "lacks spec.namespaceSelector and spec.nodeSelector", "kubectl apply --server-side -f deploy/crds"}},
		{"the CRD lacks one", []string{"spec.nodeSelector"},
			[]string{"IPPoolSchemaStale IPPool rack-a", "IPPoolSchemaStale IPPool rack-b"}, []string{"lacks spec.nodeSelector, so the API server drops it"}},
	} {
		got := FindStalePoolSchema(inv, tc.missing)
		wantFindings(t, tc.name, got, tc.want, tc.has...)
		for _, f := range got {
			if f.Object == "IPPool rack-a" && (len(f.Related) != 1 || f.Related[0] != "NetworkAttachmentDefinition ns/racks") {
				t.Errorf("%s: rack-a's related %v, want the NAD racks alone", tc.name, f.Related)
			}
		}
	}
}
