package claims

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func pod(annotations map[string]string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "vms", Name: "virt-launcher-vm1-a", Annotations: annotations}}
}

func TestSelect(t *testing.T) {
	const nets = "k8s.v1.cni.cncf.io/networks"
	cases := []struct {
		name        string
		ann         map[string]string
		ifName      string
		wantClaim   string
		wantElement string
		wantPrefix  bool
		wantErr     string
	}{
		{name: "no annotation", ann: nil, ifName: "net1"},
		{name: "claim by interface request", ifName: "pod16367aacb67",
			ann:       map[string]string{nets: `[{"name":"san","interface":"pod16367aacb67","ipam-claim-reference":"vm1.san"}]`},
			wantClaim: "vm1.san", wantElement: "san"},
		{name: "claim by position", ifName: "net2",
			ann:       map[string]string{nets: `[{"name":"a"},{"name":"san","ipam-claim-reference":"vm1.san"}]`},
			wantClaim: "vm1.san", wantElement: "san"},
		{name: "other interface has the claim", ifName: "net1",
			ann:         map[string]string{nets: `[{"name":"a"},{"name":"san","ipam-claim-reference":"vm1.san"}]`},
			wantElement: "a"},
		{name: "short form", ifName: "eth9",
			ann:         map[string]string{nets: `other/san@eth9`},
			wantElement: "san"},
		{name: "malformed", ifName: "net1",
			ann:     map[string]string{nets: `[{"name":`},
			wantErr: "annotation k8s.v1.cni.cncf.io/networks is malformed"},
		// Found by FuzzSelect: the annotation library panicked on it.
		{name: "null element", ifName: "net1",
			ann:     map[string]string{nets: `[null]`},
			wantErr: "malformed: element 0 is null"},
		{name: "prefix via cni-args", ifName: "net1",
			ann:         map[string]string{nets: `[{"name":"san","cni-args":{"tenure.dev/prefix-delegation":true}}]`},
			wantElement: "san", wantPrefix: true},
		{name: "prefix cni-args not bool", ifName: "net1",
			ann:     map[string]string{nets: `[{"name":"san","cni-args":{"tenure.dev/prefix-delegation":"yes"}}]`},
			wantErr: "must be a boolean"},
		{name: "prefix via pod annotation list", ifName: "net3",
			ann: map[string]string{PrefixDelegationAnnotation: "net1, net3"}, wantPrefix: true},
		{name: "prefix via pod annotation other if", ifName: "net2",
			ann: map[string]string{PrefixDelegationAnnotation: "net1,net3"}},
		{name: "prefix via pod annotation true", ifName: "net2",
			ann: map[string]string{PrefixDelegationAnnotation: "true"}, wantPrefix: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			sel, err := Select(pod(c.ann), c.ifName)
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("err = %v, want %q", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if sel.Claim != c.wantClaim || sel.WantsPrefix != c.wantPrefix {
				t.Fatalf("got claim %q prefix %v, want %q %v", sel.Claim, sel.WantsPrefix, c.wantClaim, c.wantPrefix)
			}
			gotElem := ""
			if sel.Element != nil {
				gotElem = sel.Element.Name
			}
			if gotElem != c.wantElement {
				t.Fatalf("element %q, want %q", gotElem, c.wantElement)
			}
		})
	}
}
