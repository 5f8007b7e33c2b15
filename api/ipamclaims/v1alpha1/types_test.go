package v1alpha1

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
)

func TestDeepCopyCopiesDelegatedPrefixes(t *testing.T) {
	orig := &IPAMClaim{Status: IPAMClaimStatus{
		IPs:               []string{"10.0.0.5/24"},
		DelegatedPrefixes: []string{"2001:db8:100:ab00::/56"},
	}}
	cp := orig.DeepCopy()
	cp.Status.DelegatedPrefixes[0] = "2001:db8:100:ff00::/56"
	cp.Status.DelegatedPrefixes = append(cp.Status.DelegatedPrefixes, "2001:db8:100:fe00::/56")
	if got := orig.Status.DelegatedPrefixes; len(got) != 1 || got[0] != "2001:db8:100:ab00::/56" {
		t.Fatalf("mutating the copy changed the original: %v", got)
	}
}

func TestDelegatedPrefixesIsOptionalOnTheWire(t *testing.T) {
	b, err := json.Marshal(IPAMClaimStatus{IPs: []string{"10.0.0.5/24"}})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "delegatedPrefixes") {
		t.Fatalf("an empty field must be omitted: %s", b)
	}
	var st IPAMClaimStatus
	if err := json.Unmarshal([]byte(`{"ips":["10.0.0.5/24"]}`), &st); err != nil || st.DelegatedPrefixes != nil {
		t.Fatalf("a status written without the field must decode: %+v %v", st, err)
	}
}

func TestCRDCarriesDelegatedPrefixes(t *testing.T) {
	b, err := os.ReadFile("../../../deploy/crds/k8s.cni.cncf.io_ipamclaims.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "delegatedPrefixes:") {
		t.Fatal("the generated IPAMClaim CRD lacks status.delegatedPrefixes")
	}
}
