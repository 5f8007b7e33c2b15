//go:build integration

package e2e

import (
	"context"
	"io/fs"
	"os"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/openapi"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/deploy"
	"github.com/tenure-ipam/tenure/internal/kube"
	"github.com/tenure-ipam/tenure/internal/ops"
	"github.com/tenure-ipam/tenure/test/controlplane"
	"github.com/tenure-ipam/tenure/test/controlplane/cptest"
)

const ipPoolCRDFile = "crds/ipam.tenure.dev_ippools.yaml"

// ipPoolCRD is deploy/crds' IPPool CRD, without the selector fields when
// old (as a cluster keeps it after `helm upgrade` from a release before
// them).
func ipPoolCRD(t *testing.T, old bool) fs.FS {
	t.Helper()
	b, err := fs.ReadFile(deploy.CRDs, ipPoolCRDFile)
	if err != nil {
		t.Fatal(err)
	}
	if old {
		crd := map[string]any{}
		if err := yaml.Unmarshal(b, &crd); err != nil {
			t.Fatal(err)
		}
		versions, _, _ := unstructured.NestedSlice(crd, "spec", "versions")
		for _, v := range versions {
			props, ok, _ := unstructured.NestedMap(v.(map[string]any), "schema", "openAPIV3Schema", "properties", "spec", "properties")
			if !ok || props["nodeSelector"] == nil || props["namespaceSelector"] == nil {
				t.Fatalf("deploy/crds' IPPool CRD has no spec.nodeSelector and spec.namespaceSelector to remove")
			}
			delete(props, "nodeSelector")
			delete(props, "namespaceSelector")
			if err := unstructured.SetNestedMap(v.(map[string]any), props, "schema", "openAPIV3Schema", "properties", "spec", "properties"); err != nil {
				t.Fatal(err)
			}
		}
		if err := unstructured.SetNestedSlice(crd, versions, "spec", "versions"); err != nil {
			t.Fatal(err)
		}
		if b, err = yaml.Marshal(crd); err != nil {
			t.Fatal(err)
		}
	}
	return fstest.MapFS{"ipam.tenure.dev_ippools.yaml": {Data: b}}
}

// installIPPoolCRD applies the IPPool CRD and waits until the API server
// publishes its schema: the selector fields missing exactly when old.
func installIPPoolCRD(t *testing.T, ctx context.Context, oc openapi.ClientWithContext, old bool) {
	t.Helper()
	if err := controlplane.InstallCRDs(ctx, cptest.Current().Config, ipPoolCRD(t, old)); err != nil {
		t.Fatal(err)
	}
	ctlPoll(t, ctx, "the API server's OpenAPI document to show the IPPool CRD applied", func() (bool, error) {
		missing, err := kube.ReadPoolSchema(ctx, oc)
		return err == nil && (len(missing) == 2) == old, nil
	})
}

// TestAPoolsListIsRefusedWhileTheIPPoolCRDLacksSelectors: with the IPPool
// CRD of a release before the selectors (what `helm upgrade` leaves), the
// API server prunes the racks' nodeSelectors, and an ADD whose network
// lists the racks' pools fails with code 7 naming the CRD, the fields and
// the fix, writing nothing; a network naming one pool still gets its
// address; tenurectl check and pools say so. Once deploy/crds is applied
// and the pools written again, the ADD gets its rack's pool.
func TestAPoolsListIsRefusedWhileTheIPPoolCRDLacksSelectors(t *testing.T) {
	ctx := testContext(t, 3*time.Minute)
	c := apiClient(t)
	dc, err := discovery.NewDiscoveryClientForConfig(cptest.Current().Config)
	if err != nil {
		t.Fatal(err)
	}
	oc := openapi.ToClientWithContext(dc.OpenAPIV3())
	installIPPoolCRD(t, ctx, oc, true)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		installIPPoolCRD(t, ctx, oc, false)
	})

	agents := startAgents(t, ctx, "crd-rack-a-1", "crd-rack-b-1")
	labelObject(t, ctx, c, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "crd-rack-a-1"}}, map[string]string{rackLabel: "a"})
	labelObject(t, ctx, c, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "crd-rack-b-1"}}, map[string]string{rackLabel: "b"})
	rackSpec := func(r, cidr string) tenurev1alpha1.IPPoolSpec {
		return tenurev1alpha1.IPPoolSpec{Ranges: []tenurev1alpha1.PoolRange{{Range: cidr}},
			NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{rackLabel: r}}}
	}
	createPool(t, ctx, c, "e2e-crd-rack-a", rackSpec("a", "10.83.1.0/24"))
	createPool(t, ctx, c, "e2e-crd-rack-b", rackSpec("b", "10.83.2.0/24"))
	// The symptom: the API server dropped rack b's nodeSelector, so a
	// list would hand rack a's subnet to rack b's pods.
	pruned := &tenurev1alpha1.IPPool{}
	if err := c.Get(ctx, client.ObjectKey{Name: "e2e-crd-rack-b"}, pruned); err != nil {
		t.Fatal(err)
	}
	if pruned.Spec.NodeSelector != nil {
		t.Fatalf("the old CRD kept e2e-crd-rack-b's nodeSelector %v", pruned.Spec.NodeSelector)
	}

	sock := agents["crd-rack-b-1"].Socket
	racks := netconf("crdracks", sock, `{"pools":["e2e-crd-rack-a","e2e-crd-rack-b"],"network_name":"crdracks"}`)
	single := netconf("crdsingle", sock, `{"pool":"e2e-crd-rack-b","network_name":"crdsingle"}`)
	const ns = "e2e-crd"
	p := newPod(t, ctx, c, ns, "crd-rack-b-1", nil)
	_, err = add(ctx, p, racks)
	if cniCode(err) != 7 {
		t.Fatalf("ADD with a pools list under the old CRD: %v, want code 7", err)
	}
	for _, want := range []string{"ipam.pools", "ippools.ipam.tenure.dev", "spec.namespaceSelector and spec.nodeSelector", "kubectl apply --server-side -f deploy/crds"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if left := ownedBy(t, ctx, p.uid); len(left) != 0 {
		t.Fatalf("the refused ADD wrote %v", reservedItems(left))
	}

	// One named pool involves no selector.
	one := newPod(t, ctx, c, ns, "crd-rack-b-1", nil)
	r, err := add(ctx, one, single)
	if err != nil {
		t.Fatalf("ADD naming one pool under the old CRD: %v", err)
	}
	if got := addrs(r); !in("10.83.2.0/24", got...) {
		t.Fatalf("ADD naming e2e-crd-rack-b got %v", got)
	}

	// tenurectl check names each listed pool; tenurectl pools notes it.
	if err := controlplane.InstallCRDs(ctx, cptest.Current().Config, controlplane.MultusCRDs()); err != nil {
		t.Fatal(err)
	}
	cli := apiClient(t) // discovers the NetworkAttachmentDefinition kind
	nad := &unstructured.Unstructured{}
	nad.SetAPIVersion("k8s.cni.cncf.io/v1")
	nad.SetKind("NetworkAttachmentDefinition")
	nad.SetNamespace(ns)
	nad.SetName("crdracks")
	if err := unstructured.SetNestedField(nad.Object, string(racks), "spec", "config"); err != nil {
		t.Fatal(err)
	}
	if err := cli.Create(ctx, nad); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Delete(context.Background(), nad) })
	oops := ops.New(cli)
	oops.OpenAPI = oc
	rep, err := oops.Check(ctx, ops.CheckOptions{})
	if err != nil {
		t.Fatal(err)
	}
	stale := map[string]string{}
	for _, f := range rep.Findings {
		if f.Rule == ops.RuleIPPoolSchemaStale {
			stale[f.Object] = f.Message
		}
	}
	for _, pool := range []string{"IPPool e2e-crd-rack-a", "IPPool e2e-crd-rack-b"} {
		if !strings.Contains(stale[pool], "NetworkAttachmentDefinition "+ns+"/crdracks") || !strings.Contains(stale[pool], "kubectl apply --server-side -f deploy/crds") {
			t.Errorf("check on %s: %q, want an IPPoolSchemaStale naming the NAD and the fix (all: %v)", pool, stale[pool], stale)
		}
	}
	pools, err := oops.Pools(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(pools.Notes, "\n"), "lacks spec.namespaceSelector and spec.nodeSelector") {
		t.Errorf("pools notes %q do not say the CRD lacks the selectors", pools.Notes)
	}

	// The operator applies deploy/crds, then the pools again: the API
	// server dropped their selectors when they were written. Its handler
	// takes up the new schema shortly after the OpenAPI document shows it:
	// until then a write is pruned again, so the pools are written until
	// one keeps the selector.
	installIPPoolCRD(t, ctx, oc, false)
	for _, tc := range []struct{ name, rack, cidr string }{{"e2e-crd-rack-a", "a", "10.83.1.0/24"}, {"e2e-crd-rack-b", "b", "10.83.2.0/24"}} {
		ctlPoll(t, ctx, "IPPool "+tc.name+" to keep its nodeSelector", func() (bool, error) {
			pool := &tenurev1alpha1.IPPool{}
			if err := c.Get(ctx, client.ObjectKey{Name: tc.name}, pool); err != nil {
				return false, err
			}
			if pool.Spec.NodeSelector != nil {
				return true, nil
			}
			pool.Spec = rackSpec(tc.rack, tc.cidr)
			return false, c.Update(ctx, pool)
		})
	}
	rep, err = oops.Check(ctx, ops.CheckOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range rep.Findings {
		if f.Rule == ops.RuleIPPoolSchemaStale {
			t.Errorf("check after the fix: %s %s", f.Object, f.Message)
		}
	}
	var refusedAfter error
	defer func() {
		if t.Failed() && refusedAfter != nil {
			t.Logf("last refusal after the fix: %v", refusedAfter)
		}
		if t.Failed() {
			b, _ := os.ReadFile(agents["crd-rack-b-1"].Log)
			t.Logf("agent log:\n%s", b)
		}
	}()
	// The agent asks again within kube.StalePoolSchemaTTL; until then the
	// same ADD is refused as before, writing nothing.
	ctlPoll(t, ctx, "the ADD with the pools list to succeed after deploy/crds was applied", func() (bool, error) {
		r, err = add(ctx, p, racks)
		if cniCode(err) == 7 && strings.Contains(err.Error(), "deploy/crds") {
			refusedAfter = err
			return false, nil
		}
		return err == nil, err
	})
	got := addrs(r)
	if !in("10.83.2.0/24", got...) {
		t.Fatalf("pod on rack b got %v, want an address of rack b's 10.83.2.0/24", got)
	}
	if pools := poolsOf(ownedBy(t, ctx, p.uid)); len(pools) != 1 || pools[got[0]] != "e2e-crd-rack-b" {
		t.Fatalf("the pod's reservations' spec.pool %v, want %s from e2e-crd-rack-b", pools, got[0])
	}
}
