package claims_test

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tenure-ipam/tenure/internal/claims"
	"github.com/tenure-ipam/tenure/internal/dataplane"
)

// FuzzSelect feeds arbitrary k8s.v1.cni.cncf.io/networks and
// ipam.tenure.dev/prefix-delegation annotations and interface names to the
// two readers of the networks annotation: the agent's claims.Select and the
// dataplane's Compute. Neither may panic (a pod's annotations are anyone's
// to write, and a panic takes the node agent down), and what Select reads
// must be consistent with the input:
//   - the element it returns is the first one whose interface (its
//     "interface", else net1, net2, ... by position) is ifName, read
//     independently with encoding/json, and the claim is that element's
//     "ipam-claim-reference" exactly;
//   - a malformed annotation is an error naming the annotation, for Select
//     and for Compute alike;
//   - "true" or "*" in the prefix-delegation annotation asks for a prefix;
//   - Compute reports the claim Select found on the same interface.
func FuzzSelect(f *testing.F) {
	for _, s := range [][3]string{
		{`[{"name":"san","interface":"pod16367aacb67","ipam-claim-reference":"vm1.san"}]`, "", "pod16367aacb67"},
		{`[{"name":"a"},{"name":"san","ipam-claim-reference":"vm1.san"}]`, "", "net2"},
		{`[{"name":"a"},{"name":"san","ipam-claim-reference":"vm1.san"}]`, "net1, net2", "net1"},
		{`[{"name":"vm-net","namespace":"other","interface":"net1","ipam-claim-reference":"vm1.vm-net","mac":"02:00:00:aa:bb:01"}]`, "", "net1"},
		{`[{"name":"san","cni-args":{"tenure.dev/prefix-delegation":true}}]`, "", "net1"},
		{`[{"name":"san","cni-args":{"tenure.dev/prefix-delegation":"yes"}}]`, "", "net1"},
		{`[{"name":"san","interface":"net1","ipam-claim-reference":"a"},{"name":"san","interface":"net1","ipam-claim-reference":"b"}]`, "*", "net1"},
		{`other/san@eth9`, "true", "eth9"},
		{`san, other/blue@net5 ,red`, "false", "net3"},
		{`a/b/c`, "", "net1"},
		{`[{"name":`, "", "net1"},
		{`[null]`, "", "net1"},
		{`null`, "", "net1"},
		{`{"name":"san"}`, "", "net1"},
		{`[{"name":"san","IPAM-Claim-Reference":"vm1.san","Interface":"net1"}]`, "", "net1"},
		{`[{"name":"san","ipam-claim-reference":"vm1.san","ipam-claim-reference":"vm2.san"}]`, "", "net1"},
	} {
		f.Add(s[0], s[1], s[2])
	}
	f.Fuzz(func(t *testing.T, networks, prefix, ifName string) {
		ann := map[string]string{}
		if networks != "" {
			ann[nadv1.NetworkAttachmentAnnot] = networks
		}
		if prefix != "" {
			ann[claims.PrefixDelegationAnnotation] = prefix
		}
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "vms", Name: "virt-launcher-vm1", Annotations: ann},
			Spec:       corev1.PodSpec{NodeName: "node-a"},
		}
		sel, err := claims.Select(pod, ifName)
		_, skips := dataplane.Compute(dataplane.Inputs{Pods: []*corev1.Pod{pod}})
		malformed := networks != "" && err != nil && strings.Contains(err.Error(), "annotation "+nadv1.NetworkAttachmentAnnot+" is malformed")
		computeMalformed := len(skips) == 1 && strings.HasPrefix(skips[0].Reason, "annotation "+nadv1.NetworkAttachmentAnnot+":")
		if malformed != computeMalformed {
			t.Fatalf("Select: %v; Compute: %+v: they disagree on whether the annotation is malformed", err, skips)
		}
		if err != nil {
			if !malformed && !strings.Contains(err.Error(), claims.PrefixDelegationArg) {
				t.Fatalf("error %q names neither the annotation nor the cni-args key", err)
			}
			return
		}
		checkElement(t, networks, ifName, sel)
		if v := strings.TrimSpace(prefix); (v == "true" || v == "*") && !sel.WantsPrefix {
			t.Fatalf("prefix-delegation annotation %q, but no prefix asked for", prefix)
		}
		if sel.Claim == "" {
			return
		}
		for _, s := range skips {
			if s.PodInterface == ifName && s.Claim == pod.Namespace+"/"+sel.Claim {
				return
			}
		}
		t.Fatalf("Select found claim %q on %s, Compute reports %+v", sel.Claim, ifName, skips)
	})
}

// checkElement reads the annotation with encoding/json (its JSON form; the
// short form holds no claim) and compares the element Select chose.
func checkElement(t *testing.T, networks, ifName string, sel claims.Selection) {
	t.Helper()
	if sel.Element == nil && sel.Claim != "" {
		t.Fatalf("claim %q without an element", sel.Claim)
	}
	if sel.Element != nil && sel.Element.IPAMClaimReference != sel.Claim {
		t.Fatalf("claim %q, but the element says %q", sel.Claim, sel.Element.IPAMClaimReference)
	}
	if networks == "" || !strings.ContainsAny(networks, `[{"`) {
		if sel.Claim != "" {
			t.Fatalf("the short form %q holds no claim, Select found %q", networks, sel.Claim)
		}
		return
	}
	var elems []struct {
		Name      string `json:"name"`
		Interface string `json:"interface"`
		Claim     string `json:"ipam-claim-reference"`
	}
	if err := json.Unmarshal([]byte(networks), &elems); err != nil {
		t.Fatalf("Select accepted %q, encoding/json refuses it: %v", networks, err)
	}
	for i, e := range elems {
		name := e.Interface
		if name == "" {
			name = "net" + strconv.Itoa(i+1)
		}
		if name != ifName {
			continue
		}
		if sel.Element == nil || sel.Element.Name != e.Name || sel.Claim != e.Claim {
			t.Fatalf("element %d (%+v) is %s's, Select chose %+v with claim %q", i, e, ifName, sel.Element, sel.Claim)
		}
		return
	}
	if sel.Element != nil {
		t.Fatalf("no element is %s's, Select chose %+v", ifName, sel.Element)
	}
}
