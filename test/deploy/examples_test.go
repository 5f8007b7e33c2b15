//go:build integration

package deploy_test

import (
	"encoding/json"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipamclaimsv1alpha1 "github.com/tenure-ipam/tenure/api/ipamclaims/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/claims"
	"github.com/tenure-ipam/tenure/internal/config"
)

const examplesNamespace = "tenure-examples"

// examples reads every manifest in deploy/examples.
func examples(t *testing.T) []*unstructured.Unstructured {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(deployDir(), "examples", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no examples (%v)", err)
	}
	var out []*unstructured.Unstructured
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		docs, err := decodeYAML(data)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if len(docs) == 0 {
			t.Errorf("%s holds no object", f)
		}
		out = append(out, docs...)
	}
	return out
}

// nadConfig parses the IPAM config of the example attachment name with
// tenure's config parser, over the flat config the DaemonSet installs.
func nadConfig(t *testing.T, exs []*unstructured.Unstructured, flat []byte, name string) (*config.Config, []byte) {
	t.Helper()
	nad := find(t, exs, "NetworkAttachmentDefinition", name)
	if nad.GetAPIVersion() != "k8s.cni.cncf.io/v1" {
		t.Errorf("%s: apiVersion %s", name, nad.GetAPIVersion())
	}
	conf, ok, _ := unstructured.NestedString(nad.Object, "spec", "config")
	if !ok {
		t.Fatalf("NetworkAttachmentDefinition %s has no spec.config", name)
	}
	c, err := config.Parse([]byte(conf), flat)
	if err != nil {
		t.Fatalf("NetworkAttachmentDefinition %s: %v", name, err)
	}
	if c.Name != name {
		t.Errorf("NetworkAttachmentDefinition %s: CNI network name %q", name, c.Name)
	}
	if len(c.Ignored) > 0 {
		t.Errorf("NetworkAttachmentDefinition %s: keys without effect %v", name, c.Ignored)
	}
	return c, []byte(conf)
}

func TestExampleStorageSAN(t *testing.T) {
	_, flat := flatConfig(t, kustomizeBuild(t))
	c, raw := nadConfig(t, examples(t), flat, "storage-san")
	if len(c.Ranges) != 1 {
		t.Fatalf("ranges %v, want one", c.Ranges)
	}
	r := c.Ranges[0]
	if !r.Prefix.Addr().Is4() || r.Prefix.Bits() != 29 {
		t.Errorf("range %s, want an IPv4 /29", r.Prefix)
	}
	if c.Gateway.IsValid() || c.Routes != nil {
		t.Errorf("gateway %v routes %v: a storage SAN segment has neither", c.Gateway, c.Routes)
	}
	if c.DHCPv6 != nil || c.PrefixDelegation != nil {
		t.Error("storage SAN: no DHCP on the wire, no prefix delegation")
	}
	if c.AgentSocket != agentSocket {
		t.Errorf("agent socket %s", c.AgentSocket)
	}
	s := string(raw)
	for _, want := range []string{`"type": "macvlan"`, `"master": "eth1.100"`} {
		if !strings.Contains(s, want) {
			t.Errorf("storage-san config lacks %s", want)
		}
	}
}

func TestExampleKubeVirt(t *testing.T) {
	_, flat := flatConfig(t, kustomizeBuild(t))
	exs := examples(t)
	c, raw := nadConfig(t, exs, flat, "vm-net")
	fams := map[bool]int{}
	for _, r := range c.Ranges {
		fams[r.Prefix.Addr().Is4()]++
	}
	if fams[true] != 1 || fams[false] != 1 {
		t.Errorf("ranges %v: want one IPv4 and one IPv6 (dual stack)", c.Ranges)
	}
	pd := c.PrefixDelegation
	if pd == nil || pd.Range != netip.MustParsePrefix("2001:db8:100::/40") || pd.PrefixLength != 56 {
		t.Errorf("prefix_delegation %+v, want /56s from 2001:db8:100::/40", pd)
	}
	if c.DHCPv6 == nil || !c.DHCPv6.Enabled || len(c.DHCPv6.Interfaces) == 0 {
		t.Fatalf("dhcpv6 %+v, want enabled on listed interfaces", c.DHCPv6)
	}
	s := string(raw)
	for _, want := range []string{`"type": "bridge"`, `"allowPersistentIPs": true`} {
		if !strings.Contains(s, want) {
			t.Errorf("vm-net config lacks %s", want)
		}
	}

	// The claim, the pod presenting it and the VM fit together.
	claim := typed[ipamclaimsv1alpha1.IPAMClaim](t, find(t, exs, "IPAMClaim", ""))
	if claim.Spec.Network != c.Name {
		t.Errorf("IPAMClaim %s spec.network %q, the CNI network is %q", claim.Name, claim.Spec.Network, c.Name)
	}
	// The agent serves DHCPv6 on the node side: the bridge the VMs' pod
	// interfaces are plugged into.
	var main struct {
		Bridge string `json:"bridge"`
	}
	if err := json.Unmarshal(raw, &main); err != nil || main.Bridge == "" {
		t.Fatalf("vm-net names no bridge: %v", err)
	}
	if !slices.Contains(c.DHCPv6.Interfaces, main.Bridge) {
		t.Errorf("the node bridge %q is not among dhcpv6.interfaces %v", main.Bridge, c.DHCPv6.Interfaces)
	}
	pod := typed[corev1.Pod](t, find(t, exs, "Pod", ""))
	sel, err := claims.Select(pod, claim.Spec.Interface)
	if err != nil {
		t.Fatal(err)
	}
	if sel.Element == nil || sel.Element.Name != "vm-net" || sel.Claim != claim.Name {
		t.Errorf("pod %s on %s: element %+v claim %q, want network vm-net and claim %s", pod.Name, claim.Spec.Interface, sel.Element, sel.Claim, claim.Name)
	}
	vm := find(t, exs, "VirtualMachine", "")
	nets, _, _ := unstructured.NestedSlice(vm.Object, "spec", "template", "spec", "networks")
	ifaces, _, _ := unstructured.NestedSlice(vm.Object, "spec", "template", "spec", "domain", "devices", "interfaces")
	var logical string
	for _, n := range nets {
		if m, _, _ := unstructured.NestedString(n.(map[string]any), "multus", "networkName"); m == "vm-net" {
			logical, _, _ = unstructured.NestedString(n.(map[string]any), "name")
		}
	}
	bridged := false
	for _, i := range ifaces {
		m := i.(map[string]any)
		if _, ok := m["bridge"]; ok && m["name"] == logical {
			bridged = true
		}
	}
	if logical == "" || !bridged {
		t.Errorf("VirtualMachine %s does not attach vm-net with bridge binding", vm.GetName())
	}
	if want := vm.GetName() + "." + logical; claim.Name != want {
		t.Errorf("IPAMClaim %s: KubeVirt names the claim of VM %s on %s %q", claim.Name, vm.GetName(), logical, want)
	}
}

// TestExamplesDryRun: the API server accepts the example attachments (with
// Multus' CRD installed), the IPAMClaim and the pod.
func TestExamplesDryRun(t *testing.T) {
	ctx := testContext(t, time.Minute)
	c := adminClient(t)
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: examplesNamespace}}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	n := 0
	for _, o := range examples(t) {
		if o.GetKind() == "VirtualMachine" {
			continue // KubeVirt's CRD is not here
		}
		o.SetNamespace(examplesNamespace)
		if err := c.Create(ctx, o, client.DryRunAll, client.FieldValidation("Strict")); err != nil {
			t.Errorf("dry run of example %s: %v", objKey(o), err)
		}
		n++
	}
	if n < 4 {
		t.Errorf("dry-ran %d examples, want the two attachments, the claim and the pod", n)
	}
}
