//go:build integration

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	current "github.com/containernetworking/cni/pkg/types/100"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tenure-ipam/tenure/internal/ops/importwa"
	"github.com/tenure-ipam/tenure/test/controlplane"
	"github.com/tenure-ipam/tenure/test/controlplane/cptest"
	"github.com/tenure-ipam/tenure/test/testbed"
)

// TestImportNodeSlicePoolsKeepsAddresses: whereabouts v0.9.4's own binary
// allocates, with node_slice_size, for pods on two nodes (each node's
// slice as whereabouts' node-slice controller records it in the
// NodeSlicePool); `tenurectl import whereabouts --apply` imports the
// per-node pools; after the switch every old pod's next ADD returns the
// address whereabouts gave it, except one whereabouts handed out although
// exclude names it (node slicing drops exclude), which tenure neither
// imports nor hands out again; new pods get none of those addresses.
func TestImportNodeSlicePoolsKeepsAddresses(t *testing.T) {
	if bins.CLI == "" {
		t.Fatal("tenurectl is needed")
	}
	ctx := testContext(t, 5*time.Minute)
	wa := cachedTool(t, "build-whereabouts.sh")
	waBin := filepath.Join(wa, "whereabouts")
	cp := cptest.Current()
	if err := controlplane.InstallCRDs(ctx, cp.Config, controlplane.MultusCRDs()); err != nil {
		t.Fatal(err)
	}
	if err := controlplane.InstallCRDs(ctx, cp.Config, os.DirFS(filepath.Join(wa, "crds"))); err != nil {
		t.Fatal(err)
	}
	c := apiClient(t)
	const ns = "wa-slice"
	nodes := []string{"ws-node-1", "ws-node-2"}
	agents := startAgents(t, ctx, nodes...)
	flat := filepath.Join(t.TempDir(), "whereabouts.conf")
	if err := os.WriteFile(flat, fmt.Appendf(nil, `{"datastore":"kubernetes","kubernetes":{"kubeconfig":%q}}`, cp.KubeconfigPath), 0o600); err != nil {
		t.Fatal(err)
	}
	excluded := []string{"10.62.0.2", "10.62.0.65"}
	n := waNetwork{nad: "wa-slice", ipam: `"network_name":"wslice","range":"10.62.0.0/24","exclude":["10.62.0.2/32","10.62.0.65/32"],"node_slice_size":"/26"`}
	socket := func(node string) string { return agents[node].Socket }

	// The NodeSlicePool whereabouts' node-slice controller writes for the
	// network: a /26 per node, in whereabouts' namespace.
	slicePool := &unstructured.Unstructured{}
	slicePool.SetAPIVersion(importwa.Group + "/v1alpha1")
	slicePool.SetKind("NodeSlicePool")
	slicePool.SetNamespace("kube-system")
	slicePool.SetName("wslice")
	slicePool.Object["spec"] = map[string]any{"range": "10.62.0.0/24", "sliceSize": "/26"}
	slicePool.Object["status"] = map[string]any{"allocations": []any{
		map[string]any{"nodeName": nodes[0], "sliceRange": "10.62.0.0/26"},
		map[string]any{"nodeName": nodes[1], "sliceRange": "10.62.0.64/26"},
		map[string]any{"nodeName": "", "sliceRange": "10.62.0.128/26"},
		map[string]any{"nodeName": "", "sliceRange": "10.62.0.192/26"},
	}}
	if err := c.Create(ctx, slicePool); err != nil {
		t.Fatal(err)
	}
	if err := testbed.EnsureNamespace(ctx, c, ns); err != nil {
		t.Fatal(err)
	}
	nadObj := func(ipamType string) *unstructured.Unstructured {
		u := &unstructured.Unstructured{}
		u.SetAPIVersion("k8s.cni.cncf.io/v1")
		u.SetKind("NetworkAttachmentDefinition")
		u.SetNamespace(ns)
		u.SetName(n.nad)
		if err := unstructured.SetNestedField(u.Object, string(n.conf(ipamType, socket(nodes[0]), flat, cp.KubeconfigPath)), "spec", "config"); err != nil {
			t.Fatal(err)
		}
		return u
	}
	if err := c.Create(ctx, nadObj(importwa.WhereaboutsType)); err != nil {
		t.Fatal(err)
	}
	// The other whereabouts tests count and import every whereabouts
	// object of the cluster: leave none of this network's.
	t.Cleanup(func() {
		ctx := context.Background()
		for _, kind := range []string{"IPPoolList", "OverlappingRangeIPReservationList", "NodeSlicePoolList"} {
			for _, o := range waObjects(t, ctx, c, kind) {
				if strings.HasPrefix(o.GetName(), "wslice") {
					_ = c.Delete(ctx, &o)
				}
			}
		}
		_ = c.Delete(ctx, nadObj(importwa.WhereaboutsType))
	})

	// whereabouts allocates for three pods per node, each from its node's
	// slice.
	type oldPod struct {
		pod
		addr string
	}
	var old []oldPod
	for i := range 6 {
		p := newPod(t, ctx, c, ns, nodes[i%2], nil)
		call := p.call("ADD", n.conf(importwa.WhereaboutsType, socket(p.node), flat, cp.KubeconfigPath))
		call.Env = []string{"NODENAME=" + p.node}
		out, err := testbed.ExecShim(ctx, waBin, call)
		if err != nil {
			t.Fatalf("whereabouts ADD %s on %s: %v", p.name, p.node, err)
		}
		r := &current.Result{}
		if err := json.Unmarshal(out, r); err != nil {
			t.Fatalf("whereabouts result %s: %v", out, err)
		}
		a := addrs(r)[0]
		slice := map[string]string{nodes[0]: "10.62.0.0/26", nodes[1]: "10.62.0.64/26"}[p.node]
		if !netip.MustParsePrefix(slice).Contains(netip.MustParseAddr(a)) {
			t.Fatalf("whereabouts gave %s on %s %s, outside its slice %s", p.name, p.node, a, slice)
		}
		old = append(old, oldPod{p, a})
	}
	pools := waObjects(t, ctx, c, "IPPoolList")
	var names []string
	for _, p := range pools {
		names = append(names, p.GetName())
	}
	slices.Sort(names)
	if want := []string{"wslice-ws-node-1-10.62.0.0-26", "wslice-ws-node-2-10.62.0.64-26"}; !slices.Equal(names, want) {
		t.Fatalf("whereabouts' pools %v, want the per-node slice pools %v", names, want)
	}
	var gotExcluded []oldPod
	for _, p := range old {
		if slices.Contains(excluded, p.addr) {
			gotExcluded = append(gotExcluded, p)
		}
	}

	rep := importCLI(t, ctx, "--apply")
	t.Logf("import --apply: %s", rep.Summary())
	// Each excluded address is out of range in both of whereabouts'
	// records of it: its slice pool and its OverlappingRangeIPReservation.
	var outOfRange, wantOut []string
	for _, e := range rep.Entries {
		if e.Action == importwa.OutOfRange && !slices.Contains(outOfRange, e.Address) {
			outOfRange = append(outOfRange, e.Address)
		}
	}
	for _, p := range gotExcluded {
		wantOut = append(wantOut, p.addr)
	}
	if rep.Count(importwa.Created) != len(old)-len(gotExcluded) || !slices.Equal(sorted(outOfRange), sorted(wantOut)) || len(rep.Skipped) != 0 {
		t.Fatalf("import --apply: %s, out of range %v, skipped %v; want %d created, the excluded %v out of range", rep.Summary(), outOfRange, rep.Skipped, len(old)-len(gotExcluded), wantOut)
	}

	// The switch: the same configuration with type tenure.
	u := nadObj("tenure")
	cur := &unstructured.Unstructured{}
	cur.SetGroupVersionKind(u.GroupVersionKind())
	if err := c.Get(ctx, client.ObjectKeyFromObject(u), cur); err != nil {
		t.Fatal(err)
	}
	u.SetResourceVersion(cur.GetResourceVersion())
	if err := c.Update(ctx, u); err != nil {
		t.Fatal(err)
	}
	conf := func(p pod) []byte { return n.conf("tenure", socket(p.node), flat, cp.KubeconfigPath) }
	taken := map[string]bool{}
	for _, p := range old {
		r, err := add(ctx, p.pod, conf(p.pod))
		if err != nil {
			t.Fatalf("tenure ADD of old pod %s: %v", p.name, err)
		}
		got := addrs(r)[0]
		switch {
		case slices.Contains(excluded, p.addr):
			if got == p.addr || slices.Contains(excluded, got) {
				t.Errorf("old pod %s had the excluded %s from whereabouts; tenure gave it %s", p.name, p.addr, got)
			}
		case got != p.addr:
			t.Errorf("old pod %s: tenure returned %s, whereabouts gave %s", p.name, got, p.addr)
		}
		taken[got] = true
	}
	for range 20 {
		p := newPod(t, ctx, c, ns, nodes[0], nil)
		r, err := add(ctx, p, conf(p))
		if err != nil {
			t.Fatal(err)
		}
		a := addrs(r)[0]
		if taken[a] || slices.Contains(excluded, a) {
			t.Fatalf("a new pod got %s, which an old pod holds or exclude names", a)
		}
		taken[a] = true
	}
	t.Logf("whereabouts handed out the excluded %v", gotExcluded)
}
