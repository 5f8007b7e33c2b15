//go:build integration

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	current "github.com/containernetworking/cni/pkg/types/100"
	"golang.org/x/sync/errgroup"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/ops/importwa"
	"github.com/tenure-ipam/tenure/test/controlplane"
	"github.com/tenure-ipam/tenure/test/controlplane/cptest"
	"github.com/tenure-ipam/tenure/test/testbed"
)

// cachedTool runs a hack/build-*.sh script, which builds a test tool
// into the cache unless it is there, and returns the directory it prints.
func cachedTool(t *testing.T, script string) string {
	t.Helper()
	out, err := exec.Command("bash", filepath.Join(testbed.RepoRoot(), "hack", script)).Output()
	if err != nil {
		t.Fatalf("hack/%s: %v", script, err)
	}
	return strings.TrimSpace(string(out))
}

// waNetwork is one NetworkAttachmentDefinition of the switch test: its
// ipam keys besides type, as whereabouts reads them and, once its type
// says tenure, tenure does.
type waNetwork struct {
	nad  string // object name and CNI network name
	ipam string // JSON object members
	old  int    // pods whereabouts allocates for
	new  int    // pods tenure allocates for after the switch
}

// conf is the network configuration as Multus hands it to the IPAM plugin
// of ipamType: the same keys for both, so the switch changes the type
// alone. agent_socket is the node's agent (whereabouts ignores it);
// configuration_path is whereabouts' flat file with its kubeconfig (tenure
// reads the file too and ignores whereabouts' keys in it).
func (n waNetwork) conf(ipamType, socket, flat, kubeconfig string) []byte {
	return []byte(fmt.Sprintf(`{"cniVersion":"1.0.0","name":%q,"type":"macvlan","master":"eth0",
		"ipam":{"type":%q,"agent_socket":%q,"configuration_path":%q,"kubernetes":{"kubeconfig":%q},%s}}`,
		n.nad, ipamType, socket, flat, kubeconfig, n.ipam))
}

// TestSwitchFromWhereabouts is the switch of a running cluster: whereabouts
// v0.9.4's own binary allocates for running pods, `tenurectl import
// whereabouts --apply` imports, the configurations switch to tenure, and
// then every old pod's next ADD (same container) returns the address
// whereabouts gave it, 200 new pods never get one of those, and deleting
// the old pods (DEL through whereabouts, as Multus replays its cached
// delegate config, then the pod object) leaves nothing in either system
// once tenure-controller has swept.
func TestSwitchFromWhereabouts(t *testing.T) {
	if bins.CLI == "" || bins.Controller == "" {
		t.Fatal("tenurectl and tenure-controller are needed")
	}
	ctx := testContext(t, 15*time.Minute)
	// whereabouts' plugin `whereabouts` and its CRDs in crds/.
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
	const ns = "wa-switch"
	nodes := []string{"wa-node-1", "wa-node-2"}
	agents := startAgents(t, ctx, nodes...)
	ctlStart(t, ctx, "wa-switch").waitLeading(t, ctx)

	flat := filepath.Join(t.TempDir(), "whereabouts.conf")
	if err := os.WriteFile(flat, fmt.Appendf(nil, `{"datastore":"kubernetes","kubernetes":{"kubeconfig":%q}}`, cp.KubeconfigPath), 0o600); err != nil {
		t.Fatal(err)
	}
	networks := []waNetwork{
		// IPv4 and IPv6 in one attachment, no network_name, overlapping
		// protection off: pools named by range, tenure scopes "default/RANGE".
		{nad: "wa-dual", ipam: `"ipRanges":[{"range":"10.50.0.0/24"},{"range":"fd50::/120"}],"enable_overlapping_ranges":false`, old: 8, new: 20},
		// IPv6 with a network_name.
		{nad: "wa-v6", ipam: `"network_name":"wa6","range":"fd51::/120","enable_overlapping_ranges":false`, old: 8, new: 20},
		// IPv4 with a network_name and overlapping protection: whereabouts
		// also writes an OverlappingRangeIPReservation per address. The
		// new pods fill what the old ones left of the range.
		{nad: "wa-san", ipam: `"network_name":"wasan","range":"10.52.0.0/24","enable_overlapping_ranges":true`, old: 40, new: 200},
	}
	socket := func(node string) string { return agents[node].Socket }
	nadObj := func(n waNetwork, ipamType string) *unstructured.Unstructured {
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

	// whereabouts allocates for the old pods, one ADD at a time as its
	// leader election serializes them anyway.
	type oldPod struct {
		pod
		net  waNetwork
		addr []string
	}
	var old []oldPod
	if err := testbed.EnsureNamespace(ctx, c, ns); err != nil {
		t.Fatal(err)
	}
	for _, n := range networks {
		if err := c.Create(ctx, nadObj(n, importwa.WhereaboutsType)); err != nil {
			t.Fatal(err)
		}
		for i := range n.old {
			p := newPod(t, ctx, c, ns, nodes[i%len(nodes)], nil)
			out, err := testbed.ExecShim(ctx, waBin, p.call("ADD", n.conf(importwa.WhereaboutsType, socket(p.node), flat, cp.KubeconfigPath)))
			if err != nil {
				t.Fatalf("whereabouts ADD %s on %s: %v", p.name, n.nad, err)
			}
			r := &current.Result{}
			if err := json.Unmarshal(out, r); err != nil {
				t.Fatalf("whereabouts result %s: %v", out, err)
			}
			old = append(old, oldPod{p, n, addrs(r)})
		}
	}
	imported := map[string]string{} // address -> old pod
	for _, p := range old {
		for _, a := range p.addr {
			imported[p.net.nad+"|"+a] = p.name
		}
	}
	if want := 2*8 + 8 + 40; len(imported) != want {
		t.Fatalf("whereabouts handed out %d distinct addresses, want %d", len(imported), want)
	}
	if n := len(waObjects(t, ctx, c, "OverlappingRangeIPReservationList")); n != 40 {
		t.Fatalf("whereabouts wrote %d OverlappingRangeIPReservations, want 40 (one per wa-san address)", n)
	}

	// The dry run writes nothing and lists every allocation.
	dry := importCLI(t, ctx)
	if dry.Applied || dry.Count(importwa.Create) != len(imported) || len(reservationsIn(t, ctx, c, ns)) != 0 {
		t.Fatalf("dry run: applied %v, %d to create (want %d), %d reservations written", dry.Applied, dry.Count(importwa.Create), len(imported), len(reservationsIn(t, ctx, c, ns)))
	}
	rep := importCLI(t, ctx, "--apply")
	t.Logf("import --apply: %s", rep.Summary())
	if rep.Count(importwa.Created) != len(imported) || len(rep.Entries) != len(imported) {
		t.Fatalf("import --apply: %s; want %d created", rep.Summary(), len(imported))
	}
	if again := importCLI(t, ctx, "--apply"); again.Count(importwa.Created) != 0 || again.Count(importwa.Exists) != len(imported) {
		t.Fatalf("second import --apply: %s; want nothing created, %d already imported", again.Summary(), len(imported))
	}

	// The switch: the same configurations with type tenure.
	for _, n := range networks {
		u := nadObj(n, "tenure")
		cur := &unstructured.Unstructured{}
		cur.SetGroupVersionKind(u.GroupVersionKind())
		if err := c.Get(ctx, client.ObjectKeyFromObject(u), cur); err != nil {
			t.Fatal(err)
		}
		u.SetResourceVersion(cur.GetResourceVersion())
		if err := c.Update(ctx, u); err != nil {
			t.Fatal(err)
		}
	}
	tenureConf := func(n waNetwork, p pod) []byte { return n.conf("tenure", socket(p.node), flat, cp.KubeconfigPath) }

	// Every old pod's next ADD, same container, returns its address.
	for _, p := range old {
		r, err := add(ctx, p.pod, tenureConf(p.net, p.pod))
		if err != nil {
			t.Fatalf("tenure ADD of old pod %s (%s): %v", p.name, p.net.nad, err)
		}
		if got := addrs(r); !slices.Equal(got, p.addr) {
			t.Errorf("old pod %s on %s: tenure returned %v, whereabouts gave %v", p.name, p.net.nad, got, p.addr)
		}
	}
	if n := len(reservationsIn(t, ctx, c, ns)); n != len(imported) {
		t.Fatalf("%d reservations after the old pods' ADDs, want the %d imported (an ADD allocated anew)", n, len(imported))
	}

	// New pods never get an imported address.
	var fresh []pod
	freshNet := map[string]waNetwork{}
	for _, n := range networks {
		for i := range n.new {
			p := newPod(t, ctx, c, ns, nodes[i%len(nodes)], nil)
			fresh = append(fresh, p)
			freshNet[p.name] = n
		}
	}
	t.Logf("every old pod's tenure ADD returned whereabouts' addresses (%d addresses, %d pods)", len(imported), len(old))
	if len(fresh) < 200 {
		t.Fatalf("%d new pods, want at least 200", len(fresh))
	}
	results := make([]*current.Result, len(fresh))
	addAllResults(t, ctx, fresh, func(p pod) []byte { return tenureConf(freshNet[p.name], p) }, results)
	seen := map[string]string{}
	for i, p := range fresh {
		n := freshNet[p.name]
		for _, a := range addrs(results[i]) {
			if holder, ok := imported[n.nad+"|"+a]; ok {
				t.Errorf("new pod %s on %s got %s, whereabouts' allocation of %s", p.name, n.nad, a, holder)
			}
			if prev, ok := seen[n.nad+"|"+a]; ok {
				t.Errorf("new pods %s and %s both got %s on %s", prev, p.name, a, n.nad)
			}
			seen[n.nad+"|"+a] = p.name
		}
	}

	// The old pods go: their DEL still reaches whereabouts, then the pod
	// object is deleted; the controller releases the imported reservations.
	oldUIDs := map[string]bool{}
	for _, p := range old {
		oldUIDs[p.uid] = true
		if _, err := testbed.ExecShim(ctx, waBin, p.call("DEL", p.net.conf(importwa.WhereaboutsType, socket(p.node), flat, cp.KubeconfigPath))); err != nil {
			t.Fatalf("whereabouts DEL %s: %v", p.name, err)
		}
		if err := testbed.ForceDeletePod(ctx, c, p.ns, p.name); err != nil {
			t.Fatal(err)
		}
	}
	ctlPoll(t, ctx, "the old pods' reservations released", func() (bool, error) {
		for _, r := range reservationsIn(t, ctx, c, ns) {
			if oldUIDs[r.Spec.Owner.UID] {
				return false, nil
			}
		}
		return true, nil
	})
	for _, kind := range []string{"IPPoolList", "OverlappingRangeIPReservationList"} {
		for _, o := range waObjects(t, ctx, c, kind) {
			if allocs, _, _ := unstructured.NestedMap(o.Object, "spec", "allocations"); kind == "IPPoolList" && len(allocs) == 0 {
				continue
			}
			t.Errorf("whereabouts still holds %s %s/%s: %v", strings.TrimSuffix(kind, "List"), o.GetNamespace(), o.GetName(), o.Object["spec"])
		}
	}
	// The new pods go the tenure way; nothing is left.
	for _, p := range fresh {
		if err := del(ctx, p, tenureConf(freshNet[p.name], p)); err != nil {
			t.Fatal(err)
		}
	}
	if left := reservationsIn(t, ctx, c, ns); len(left) != 0 {
		t.Errorf("%d reservations left after every pod's DEL, first %s owned by %s/%s", len(left), left[0].Name, left[0].Spec.Owner.Namespace, left[0].Spec.Owner.Name)
	}
}

// addAllResults runs the tenure ADD of every pod, a few at a time, and
// keeps each result at its pod's index.
func addAllResults(t *testing.T, ctx context.Context, pods []pod, conf func(pod) []byte, out []*current.Result) {
	t.Helper()
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	for i, p := range pods {
		g.Go(func() error {
			r, err := add(gctx, p, conf(p))
			if err != nil {
				return fmt.Errorf("ADD %s on %s: %w", p.name, p.node, err)
			}
			out[i] = r
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
}

// importCLI runs the tenurectl binary's import with -o json.
func importCLI(t *testing.T, ctx context.Context, args ...string) *importwa.Report {
	t.Helper()
	args = append([]string{"import", "whereabouts", "-o", "json", "--kubeconfig", cptest.Current().KubeconfigPath}, args...)
	cmd := exec.CommandContext(ctx, bins.CLI, args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("tenurectl %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	rep := &importwa.Report{}
	if err := json.Unmarshal(out, rep); err != nil {
		t.Fatalf("tenurectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return rep
}

// reservationsIn lists the reservations owned in namespace ns: the other
// tests of the package share the control plane.
func reservationsIn(t *testing.T, ctx context.Context, c client.Client, ns string) []tenurev1alpha1.IPReservation {
	t.Helper()
	l := &tenurev1alpha1.IPReservationList{}
	if err := c.List(ctx, l); err != nil {
		t.Fatal(err)
	}
	return slices.DeleteFunc(l.Items, func(r tenurev1alpha1.IPReservation) bool { return r.Spec.Owner.Namespace != ns })
}

// waObjects lists whereabouts objects of every namespace (kind is the
// list kind).
func waObjects(t *testing.T, ctx context.Context, c client.Client, kind string) []unstructured.Unstructured {
	t.Helper()
	l := &unstructured.UnstructuredList{}
	l.SetAPIVersion(importwa.Group + "/v1alpha1")
	l.SetKind(kind)
	if err := c.List(ctx, l); err != nil {
		t.Fatal(err)
	}
	return l.Items
}
