package ops

import (
	"os"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	ipamclaimsv1alpha1 "github.com/tenure-ipam/tenure/api/ipamclaims/v1alpha1"
	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
)

func readCRD(t *testing.T, path string) *unstructured.Unstructured {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal(b, &u.Object); err != nil {
		t.Fatal(err)
	}
	return u
}

func TestCRDKeepsDelegatedPrefixes(t *testing.T) {
	if !CRDKeepsDelegatedPrefixes(readCRD(t, "../../deploy/crds/k8s.cni.cncf.io_ipamclaims.yaml")) {
		t.Error("tenure's CRD: want it to keep status.delegatedPrefixes")
	}
	upstream := readCRD(t, "../../test/e2e/testdata/upstream-ipamclaims/k8s.cni.cncf.io_ipamclaims.yaml")
	if CRDKeepsDelegatedPrefixes(upstream) {
		t.Error("the upstream v0.5.1-alpha CRD: want it to drop status.delegatedPrefixes")
	}
	wantFindings(t, "upstream CRD", FindCRDDropsPrefixes(false, true), []string{"PrefixNotRecorded CustomResourceDefinition ipamclaims.k8s.cni.cncf.io"},
		"has no status.delegatedPrefixes", "kubectl apply -f deploy/crds/k8s.cni.cncf.io_ipamclaims.yaml")
	wantFindings(t, "tenure's CRD", FindCRDDropsPrefixes(true, true), nil)
	wantFindings(t, "CRD not readable", FindCRDDropsPrefixes(false, false), nil)

	// A status that keeps unknown fields keeps this one too.
	vs, _, _ := unstructured.NestedSlice(upstream.Object, "spec", "versions")
	v := vs[0].(map[string]any)
	if err := unstructured.SetNestedField(v, true, "schema", "openAPIV3Schema", "properties", "status", "x-kubernetes-preserve-unknown-fields"); err != nil {
		t.Fatal(err)
	}
	if err := unstructured.SetNestedSlice(upstream.Object, []any{v}, "spec", "versions"); err != nil {
		t.Fatal(err)
	}
	if !CRDKeepsDelegatedPrefixes(upstream) {
		t.Error("a status with x-kubernetes-preserve-unknown-fields: want it kept")
	}
}

func TestFindPrefixesNotRecorded(t *testing.T) {
	held := claimRes("vm-net", "10.1.0.1", "ns", "vm", "c1", "launcher", "node-a")
	pd := claimRes("vm-pd", "2001:db8:100::/56", "ns", "vm", "c1", "launcher", "node-a")
	podPD := podRes("vm-pd", "2001:db8:300::/56", "ns", "web", "c1", "node-a")
	for _, tc := range []struct {
		name     string
		claim    ipamclaimsv1alpha1.IPAMClaim
		owned    []*tenurev1alpha1.IPReservation
		crdDrops bool
		want     []string
		has      []string
	}{
		{"recorded", claim("ns", "vm", "c1", []string{"10.1.0.1/24"}, "2001:db8:100::/56"), []*tenurev1alpha1.IPReservation{held, pd}, true, nil, nil},
		{"dropped by the CRD", claim("ns", "vm", "c1", []string{"10.1.0.1/24"}), []*tenurev1alpha1.IPReservation{held, pd}, true,
			[]string{"PrefixNotRecorded IPAMClaim ns/vm"}, []string{"reservation " + pd.Name + " holds the delegated prefix 2001:db8:100::/56",
				"CustomResourceDefinition ipamclaims.k8s.cni.cncf.io has no status.delegatedPrefixes", "kubectl apply -f deploy/crds/k8s.cni.cncf.io_ipamclaims.yaml"}},
		{"not recorded yet, the CRD keeps it", claim("ns", "vm", "c1", []string{"10.1.0.1/24"}), []*tenurev1alpha1.IPReservation{held, pd}, false,
			[]string{"PrefixNotRecorded IPAMClaim ns/vm"}, []string{"the claim's next ADD records it"}},
		{"no prefix held", claim("ns", "vm", "c1", []string{"10.1.0.1/24"}), []*tenurev1alpha1.IPReservation{held}, true, nil, nil},
		{"a pod's prefix is not the claim's", claim("ns", "vm", "c1", []string{"10.1.0.1/24"}), []*tenurev1alpha1.IPReservation{podPD}, true, nil, nil},
	} {
		owned := map[string][]*tenurev1alpha1.IPReservation{string(tc.claim.UID): tc.owned}
		wantFindings(t, tc.name, FindPrefixesNotRecorded([]ipamclaimsv1alpha1.IPAMClaim{tc.claim}, owned, tc.crdDrops), tc.want, tc.has...)
	}
}
