//go:build integration

package tenurectl

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/ops/importwa"
	"github.com/tenure-ipam/tenure/internal/reservation"
	"github.com/tenure-ipam/tenure/test/controlplane"
	"github.com/tenure-ipam/tenure/test/controlplane/cptest"
	"github.com/tenure-ipam/tenure/test/testbed"
)

// waNS is where whereabouts keeps its objects: the namespace of its
// kubeconfig's context, kube-system when the context names none.
const waNS = "kube-system"

// installWhereabouts installs whereabouts' CRDs from the cached build
// (hack/build-whereabouts.sh) and removes its objects now and when the
// test ends.
func (cl *cluster) installWhereabouts() {
	cl.t.Helper()
	out, err := exec.Command("bash", filepath.Join(testbed.RepoRoot(), "hack", "build-whereabouts.sh")).Output()
	if err != nil {
		cl.t.Fatalf("building whereabouts: %v", err)
	}
	crds := os.DirFS(filepath.Join(strings.TrimSpace(string(out)), "crds"))
	if err := controlplane.InstallCRDs(cl.ctx, cptest.Config(), crds); err != nil {
		cl.t.Fatal(err)
	}
	clean := func() {
		for _, kind := range []string{"IPPool", "OverlappingRangeIPReservation"} {
			u := &unstructured.Unstructured{}
			u.SetAPIVersion(importwa.Group + "/v1alpha1")
			u.SetKind(kind)
			if err := cl.c.DeleteAllOf(cl.ctx, u, client.InNamespace(waNS)); err != nil && !apierrors.IsNotFound(err) {
				cl.t.Fatal(err)
			}
		}
	}
	clean()
	cl.t.Cleanup(clean)
}

// waObject creates a whereabouts object of kind in waNS with spec.
func (cl *cluster) waObject(kind, name string, spec map[string]any) {
	cl.t.Helper()
	u := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
	u.SetAPIVersion(importwa.Group + "/v1alpha1")
	u.SetKind(kind)
	u.SetNamespace(waNS)
	u.SetName(name)
	cl.create(u)
}

// whereaboutsNAD creates a NetworkAttachmentDefinition with whereabouts
// IPAM keys ipam, and returns the same configuration switched to tenure.
func (cl *cluster) whereaboutsNAD(name, ipam string) string {
	cl.t.Helper()
	conf := fmt.Sprintf(`{"cniVersion":"1.0.0","name":%q,"type":"macvlan","master":"eth0","ipam":{"type":"whereabouts","kubernetes":{"kubeconfig":"/etc/cni/net.d/whereabouts.d/whereabouts.kubeconfig"},%s}}`, name, ipam)
	cl.createNAD(name, conf)
	return strings.Replace(conf, `"type":"whereabouts"`, `"type":"tenure"`, 1)
}

func alloc(podRef, containerID string) map[string]any {
	return map[string]any{"id": containerID, "podref": podRef, "ifname": "net1"}
}

// TestImportWhereabouts: the import's table and JSON against whereabouts
// objects, pods and a tenure reservation: a dry run writes nothing; --apply
// writes the live pods' reservations as the agent would have, skips the
// allocation whose pod is gone, refuses (exit 1) the address another tenure
// owner holds; a second --apply writes nothing; and the imported pod's next
// ADD returns its address.
func TestImportWhereabouts(t *testing.T) {
	cl := newCluster(t)
	cl.installWhereabouts()
	cl.node("node-a")
	cl.node("node-b")
	tenureConf := cl.whereaboutsNAD("wa", `"network_name":"wa","range":"10.60.0.0/24"`)
	alive1 := cl.pod("alive-1", "node-a", `[{"name":"wa"}]`)
	alive2 := cl.pod("alive-2", "node-b", `[{"name":"wa"}]`)
	clash := cl.pod("clash", "node-a", `[{"name":"wa"}]`)
	holder := cl.pod("holder", "node-b", "")
	// A pod whose first sandbox's DEL never reached whereabouts: Multus's
	// network-status says which address its interface has now.
	restarted := cl.pod("restarted", "node-a", `[{"name":"wa"}]`)
	restarted.Annotations["k8s.v1.cni.cncf.io/network-status"] = `[{"name":"ops/wa","interface":"net1","ips":["10.60.0.6"]}]`
	if err := cl.c.Update(cl.ctx, restarted); err != nil {
		t.Fatal(err)
	}
	cl.waObject("IPPool", "wa-10.60.0.0-24", map[string]any{"range": "10.60.0.0/24", "allocations": map[string]any{
		"1": alloc("ops/alive-1", "sandbox-alive-1"),
		"2": alloc("ops/gone", "sandbox-gone"),
		"3": alloc("ops/alive-2", "sandbox-alive-2"),
		"4": alloc("ops/clash", "sandbox-clash"),
		"5": alloc("ops/restarted", "sandbox-restarted-1"),
		"6": alloc("ops/restarted", "sandbox-restarted-2"),
	}})
	cl.waObject("OverlappingRangeIPReservation", "wa-10.60.0.1", map[string]any{"podref": "ops/alive-1", "ifname": "net1"})
	cl.waObject("IPPool", "10.99.0.0-24", map[string]any{"range": "10.99.0.0/24", "allocations": map[string]any{"1": alloc("ops/alive-1", "x")}})
	held := cl.reservation("wa", "10.60.0.4", "10.60.0.0/24", podOwner(holder))

	dry := ctl(t, "import", "whereabouts")
	if dry.code != int(importRefused) {
		t.Errorf("dry run with a refused address: exit %d, want %d", dry.code, importRefused)
	}
	hasRow(t, dry.stdout, "ACTION ADDRESS NETWORK POD INTERFACE NODE DETAIL")
	hasRow(t, dry.stdout, "Create 10.60.0.1 wa ops/alive-1 net1 node-a <none>")
	hasRow(t, dry.stdout, "PodGone 10.60.0.2 wa ops/gone net1 <none> pod ops/gone no longer exists")
	hasRow(t, dry.stdout, "Create 10.60.0.3 wa ops/alive-2 net1 node-b <none>")
	hasRow(t, dry.stdout, fmt.Sprintf("Conflict 10.60.0.4 wa ops/clash net1 node-a held by Pod ops/holder (uid %s)", holder.UID))
	hasRow(t, dry.stdout, "Stale 10.60.0.5 wa ops/restarted net1 node-a sandbox sandbox-restarted-1: the pod's network-status lists 10.60.0.6 for net1")
	hasRow(t, dry.stdout, "Create 10.60.0.6 wa ops/restarted net1 node-a <none>")
	hasRow(t, dry.stdout, "skipped IPPool kube-system/10.99.0.0-24: no whereabouts or tenure configuration")
	hasRow(t, dry.stdout, "3 to create (dry run: --apply writes them), 0 already imported, 1 skipped (pod gone), 0 skipped (out of range), 1 skipped (stale sandbox), 1 refused (another owner)")
	wide := ctl(t, "import", "whereabouts", "-o", "wide")
	hasRow(t, wide.stdout, fmt.Sprintf("Create 10.60.0.1 wa ops/alive-1 net1 node-a <none> sandbox-alive-1 10.60.0.0/24 %s IPPool kube-system/wa-10.60.0.0-24, NetworkAttachmentDefinition ops/wa, OverlappingRangeIPReservation kube-system/wa-10.60.0.1",
		reservation.AddressName("wa", netip.MustParseAddr("10.60.0.1"))))
	if n := len(cl.reservations()); n != 1 {
		t.Fatalf("the dry run wrote: %d reservations, want only the holder's", n)
	}

	rep := importJSON(t, cl, "--apply")
	want := map[string]importwa.Action{"10.60.0.1": importwa.Created, "10.60.0.2": importwa.PodGone, "10.60.0.3": importwa.Created, "10.60.0.4": importwa.Conflict,
		"10.60.0.5": importwa.Stale, "10.60.0.6": importwa.Created}
	if !rep.Applied || len(rep.Entries) != len(want) {
		t.Fatalf("--apply: applied %v, %d entries, want %d", rep.Applied, len(rep.Entries), len(want))
	}
	for _, e := range rep.Entries {
		if e.Action != want[e.Address] {
			t.Errorf("%s: %s, want %s", e.Address, e.Action, want[e.Address])
		}
		if e.Address == "10.60.0.4" && (e.Holder == nil || e.Holder.UID != string(holder.UID) || e.PodUID != string(clash.UID)) {
			t.Errorf("the refusal of 10.60.0.4 for pod %s names holder %+v, want %s for %s", e.PodUID, e.Holder, holder.UID, clash.UID)
		}
	}
	if len(rep.Skipped) != 1 || !strings.HasPrefix(rep.Skipped[0], "IPPool kube-system/10.99.0.0-24: ") {
		t.Errorf("skipped = %+v, want the pool no configuration maps", rep.Skipped)
	}
	got := map[string]tenurev1alpha1.IPReservation{}
	for _, r := range cl.reservations() {
		got[r.Spec.Address] = r
	}
	for addr, p := range map[string]string{"10.60.0.1": "alive-1", "10.60.0.3": "alive-2"} {
		pod := alive1
		if p == "alive-2" {
			pod = alive2
		}
		r, ok := got[addr]
		if !ok {
			t.Fatalf("no reservation of %s after --apply", addr)
		}
		wantOwner := podOwner(pod)
		if r.Spec.Owner != wantOwner || r.Spec.Network != "wa" || r.Spec.Range != "10.60.0.0/24" || r.Spec.CNINetwork != "wa" {
			t.Errorf("reservation of %s: %+v, want network wa, range 10.60.0.0/24, owner %+v", addr, r.Spec, wantOwner)
		}
		if r.Labels[reservation.LabelNode] != pod.Spec.NodeName || r.Labels[reservation.LabelOwnerUID] != string(pod.UID) {
			t.Errorf("reservation of %s: labels %v", addr, r.Labels)
		}
	}
	if _, ok := got["10.60.0.2"]; ok {
		t.Error("the gone pod's allocation was imported")
	}
	if _, ok := got["10.60.0.5"]; ok {
		t.Error("the stale sandbox's allocation was imported")
	}
	if r := got["10.60.0.6"]; r.Spec.Owner.UID != string(restarted.UID) || r.Spec.Owner.ContainerID != "sandbox-restarted-2" {
		t.Errorf("10.60.0.6 is held by %+v, want the restarted pod's current sandbox", r.Spec.Owner)
	}
	if r := got["10.60.0.4"]; r.Name != held.Name || r.Spec.Owner.UID != string(holder.UID) {
		t.Errorf("10.60.0.4 is now %+v, want it left to %s", r.Spec.Owner, holder.Name)
	}

	versions := map[string]string{}
	for _, r := range cl.reservations() {
		versions[r.Name] = r.ResourceVersion
	}
	again := importJSON(t, cl, "--apply")
	if again.Count(importwa.Created) != 0 || again.Count(importwa.Exists) != 3 {
		t.Errorf("second --apply: %s; want nothing created, 3 already imported", again.Summary())
	}
	for _, r := range cl.reservations() {
		if versions[r.Name] != r.ResourceVersion {
			t.Errorf("the second --apply wrote %s", r.Name)
		}
	}

	// After the switch, the imported pod's ADD of the same sandbox is
	// idempotent: it returns the imported address and writes nothing.
	agentA := cl.startAgent("node-a")
	resp := cl.add(agentA, alive1, tenureConf)
	if resp.Error != nil {
		t.Fatalf("ADD of alive-1 after the import: %d %s", resp.Error.Code, resp.Error.Msg)
	}
	if !strings.Contains(string(resp.Result), `"10.60.0.1/24"`) {
		t.Errorf("ADD of alive-1 after the import returned %s, want 10.60.0.1/24", resp.Result)
	}
	if n := len(cl.reservations()); n != 4 {
		t.Errorf("%d reservations after alive-1's ADD, want the 4 there were", n)
	}
}

// importJSON runs import with -o json and decodes the report; exit 1 (an
// address refused) still prints it.
func importJSON(t *testing.T, cl *cluster, args ...string) *importwa.Report {
	t.Helper()
	r := ctl(t, append([]string{"import", "whereabouts", "-o", "json"}, args...)...)
	if r.code != 0 && r.code != int(importRefused) {
		t.Fatalf("import %v: exit %d: %s", args, r.code, r.stderr)
	}
	rep := &importwa.Report{}
	if err := json.Unmarshal([]byte(r.stdout), rep); err != nil {
		t.Fatalf("import %v -o json: %v\n%s", args, err, r.stdout)
	}
	return rep
}

func (cl *cluster) reservations() []tenurev1alpha1.IPReservation {
	cl.t.Helper()
	l := &tenurev1alpha1.IPReservationList{}
	if err := cl.c.List(cl.ctx, l); err != nil {
		cl.t.Fatal(err)
	}
	return l.Items
}
