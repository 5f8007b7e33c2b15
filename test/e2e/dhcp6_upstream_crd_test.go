//go:build integration

package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipamclaimsv1alpha1 "github.com/tenure-ipam/tenure/api/ipamclaims/v1alpha1"
	"github.com/tenure-ipam/tenure/deploy"
	"github.com/tenure-ipam/tenure/internal/ops"
	"github.com/tenure-ipam/tenure/test/controlplane"
	"github.com/tenure-ipam/tenure/test/controlplane/cptest"
	"github.com/tenure-ipam/tenure/test/testbed"
)

const upstreamClaimCRD = "testdata/upstream-ipamclaims/k8s.cni.cncf.io_ipamclaims.yaml"

// TestUpstreamCRDDropsOnlyThePrefixRecord: the IPAMClaim CRD of
// k8snetworkplumbingwg/ipamclaims v0.5.1-alpha (no status.delegatedPrefixes)
// is applied over tenure's while a VM runs with its prefix recorded, as
// another component's install does. The guest keeps being answered with its
// prefix and the route stays on its node. With that CRD in place, a
// migration target's ADD holds the same prefix (no second one is made) and,
// after the switchover, the target node answers and routes it; a new
// claim's ADD gets one prefix that its retry and a second pod keep. Each
// claim says once, with a Warning Event and the condition
// DelegatedPrefixesRecorded=False/FieldPrunedByCRD, that the record is
// dropped, the agent logs and counts it, and tenurectl check names the CRD
// and the fix.
func TestUpstreamCRDDropsOnlyThePrefixRecord(t *testing.T) {
	ctx, c := dhcpTest(t, 5*time.Minute)
	installKubeVirtCRDs(t, ctx)
	t.Cleanup(func() { restoreTenureClaimCRD(t) })

	nodeA, nodeB, pathA, pathB := twoNodes(t, ctx, "tuc")
	guest := plugGuest(t, ctx, nodeA+"-g", nodeA, "vg", dhcpVMMAC)
	agentA, metricsA := startDataplaneAgent(t, ctx, "upc-a", pathA, "")
	agentB, metricsB := startDataplaneAgent(t, ctx, "upc-b", pathB, "")
	waitVMIsServed(t, ctx, agentA, agentB)

	// The VM starts with tenure's CRD: the claim records its prefix.
	// A namespace of its own each run: the test may run again in one binary.
	ns, vm := fmt.Sprintf("upstreamcrd-%d", podSeq.Add(1)), "vm1"
	// Its pods go with it: a later run's agents on these nodes must not
	// find another binding of the guest's MAC.
	var pods []pod
	t.Cleanup(func() {
		for _, p := range pods {
			if err := testbed.ForceDeletePod(context.Background(), c, p.ns, p.name); err != nil {
				t.Errorf("deleting pod %s/%s: %v", p.ns, p.name, err)
			}
		}
	})
	claimName := vm + ".dhcpnet"
	createVMClaim(t, ctx, c, ns, claimName, vm)
	podA := newPod(t, ctx, c, ns, "upc-a", migAnnotations(claimName))
	pods = append(pods, podA)
	vmi := createVMI(t, ctx, c, ns, vm, "upc-a", podA)
	if _, err := add(ctx, podA, netconf("dhcpnet", agentA.Socket, migIPAM)); err != nil {
		t.Fatalf("ADD of the source pod: %v", err)
	}
	wantAddr, wantPrefix := claimHolds(t, ctx, c, ns, claimName)
	claim := getClaim(t, ctx, c, ns, claimName)
	heldBefore := claimReservationNames(t, ctx, string(claim.UID))
	dhc := startDhclient(t, guest)
	if lease := dhc.waitLease(ctx); lease.addr != wantAddr || lease.prefix != wantPrefix {
		t.Fatalf("dhclient leased %s and %s, the claim holds %s and %s", lease.addr, lease.prefix, wantAddr, wantPrefix)
	}
	wantRoute := fmt.Sprintf("%s via %s dev br0", wantPrefix, wantAddr)
	waitRoute(t, ctx, nodeA, wantPrefix, wantRoute, true)

	// Another component applies the upstream CRD over tenure's.
	applyClaimCRD(t, ctx, upstreamCRDFiles(t), false)
	if got := getClaim(t, ctx, c, ns, claimName); len(got.Status.DelegatedPrefixes) != 0 {
		t.Fatalf("with the upstream CRD the claim still reads status.delegatedPrefixes %v", got.Status.DelegatedPrefixes)
	}
	// A change of the claim hands every agent the claim without its
	// record; a Renew answered after it shows what node-a serves since.
	touchClaim(t, ctx, c, ns, claimName)
	waitRenewed(t, ctx, dhc, wantAddr, wantPrefix, "from node-a after the upstream CRD was applied")
	waitRenewed(t, ctx, dhc, wantAddr, wantPrefix, "from node-a, again")
	waitRoute(t, ctx, nodeA, wantPrefix, wantRoute, true)
	if out, _ := testbed.IPIn(nodeB, "-6", "route", "show", wantPrefix.String()); out != "" {
		t.Fatalf("node-b routes the prefix while the VM runs on node-a: %s", out)
	}

	// The migration target's ADD, with the record gone: the same prefix,
	// no second one.
	podB := newPod(t, ctx, c, ns, "upc-b", migAnnotations(claimName))
	pods = append(pods, podB)
	vmi = activatePod(t, ctx, c, vmi, podB)
	if _, err := add(ctx, podB, netconf("dhcpnet", agentB.Socket, migIPAM)); err != nil {
		t.Fatalf("ADD of the target pod: %v", err)
	}
	if after := claimReservationNames(t, ctx, string(claim.UID)); !slices.Equal(after, heldBefore) {
		t.Fatalf("after the target's ADD the claim holds %v, before %v: want the same reservations", after, heldBefore)
	}
	wantPrunedReported(t, ctx, c, ns, claimName, wantPrefix.String())
	vmi = setVMIStatus(t, ctx, c, vmi, "upc-a", map[string]any{"targetNode": "upc-b", "sourceNode": "upc-a"})
	waitAgentLog(t, ctx, agentB, "this node is its migration target")

	// Switchover: node-b answers the guest with the same prefix and routes it.
	mustIP(t, nodeA, "link", "set", "vg", "netns", nodeB)
	mustIP(t, nodeB, "link", "set", "vg", "master", "br0", "up")
	setVMIStatus(t, ctx, c, vmi, "upc-b", map[string]any{"targetNode": "upc-b", "sourceNode": "upc-a", "completed": true})
	waitRoute(t, ctx, nodeB, wantPrefix, wantRoute, true)
	waitRoute(t, ctx, nodeA, wantPrefix, "", false)
	renewsB := counter(t, scrape(t, metricsB), "renew", "reply")
	waitRenewed(t, ctx, dhc, wantAddr, wantPrefix, "from node-b after the switchover")
	if n := counter(t, scrape(t, metricsB), "renew", "reply"); n <= renewsB {
		t.Fatalf("node-b answered %v Renews, %v before the switchover", n, renewsB)
	}

	// A claim's first ADD with the upstream CRD in place: one prefix,
	// which the runtime's retry and another pod of the claim get again.
	const fresh = "vm2.dhcpnet"
	createVMClaim(t, ctx, c, ns, fresh, "vm2")
	freshAnn := map[string]string{"k8s.v1.cni.cncf.io/networks": fmt.Sprintf(
		`[{"name":"dhcpnet","interface":"net1","ipam-claim-reference":%q,"mac":"02:00:00:00:be:ef"}]`, fresh)}
	podF := newPod(t, ctx, c, ns, "upc-a", freshAnn)
	pods = append(pods, podF)
	vmi2 := createVMI(t, ctx, c, ns, "vm2", "upc-a", podF)
	if _, err := add(ctx, podF, netconf("dhcpnet", agentA.Socket, migIPAM)); err != nil {
		t.Fatalf("first ADD of %s: %v", fresh, err)
	}
	freshClaim := getClaim(t, ctx, c, ns, fresh)
	freshHeld := claimReservationNames(t, ctx, string(freshClaim.UID))
	freshPrefix := onlyPrefix(t, freshHeld)
	if _, err := add(ctx, podF, netconf("dhcpnet", agentA.Socket, migIPAM)); err != nil {
		t.Fatalf("retried ADD of %s: %v", fresh, err)
	}
	podF2 := newPod(t, ctx, c, ns, "upc-b", freshAnn)
	pods = append(pods, podF2)
	activatePod(t, ctx, c, vmi2, podF2)
	if _, err := add(ctx, podF2, netconf("dhcpnet", agentB.Socket, migIPAM)); err != nil {
		t.Fatalf("second pod's ADD of %s: %v", fresh, err)
	}
	if after := claimReservationNames(t, ctx, string(freshClaim.UID)); !slices.Equal(after, freshHeld) {
		t.Fatalf("claim %s holds %v after the retry and the second pod, %v after its first ADD", fresh, after, freshHeld)
	}
	wantPrunedReported(t, ctx, c, ns, fresh, freshPrefix)

	// Said once per claim: each agent logged it for the claims whose
	// record it saw dropped first, and the counters add up to the claims.
	waitAgentLog(t, ctx, agentA, "claim's delegated prefix not recorded")
	pruned := prunedCount(t, metricsA) + prunedCount(t, metricsB)
	if pruned != 2 {
		t.Fatalf("tenure_claim_prefix_record_pruned_total is %v over both agents, want 2 (one per claim)", pruned)
	}

	// tenurectl check names the CRD and each claim, with the fix.
	rep := tenurectlCheck(t, ctx)
	for _, object := range []string{"CustomResourceDefinition " + ops.ClaimCRDName, "IPAMClaim " + ns + "/" + claimName, "IPAMClaim " + ns + "/" + fresh} {
		if !slices.ContainsFunc(rep.Findings, func(f ops.Finding) bool {
			return f.Rule == ops.RulePrefixNotRecorded && f.Object == object && strings.Contains(f.Message, "deploy/crds/k8s.cni.cncf.io_ipamclaims.yaml")
		}) {
			t.Errorf("tenurectl check has no PrefixNotRecorded finding on %s naming the fix: %+v", object, rep.Findings)
		}
	}
}

// claimReservations is "name address uid" of each reservation the claim
// owns, sorted.
func claimReservationNames(t *testing.T, ctx context.Context, uid string) []string {
	t.Helper()
	var out []string
	for _, r := range ownedBy(t, ctx, uid) {
		out = append(out, fmt.Sprintf("%s %s %s", r.Name, r.Spec.Address, r.UID))
	}
	slices.Sort(out)
	return out
}

// onlyPrefix is the one delegated prefix among a claim's reservations.
func onlyPrefix(t *testing.T, held []string) string {
	t.Helper()
	var prefixes []string
	for _, h := range held {
		if f := strings.Fields(h); strings.Contains(f[1], "/") {
			prefixes = append(prefixes, f[1])
		}
	}
	if len(prefixes) != 1 {
		t.Fatalf("the claim holds %v: want exactly one delegated prefix", held)
	}
	return prefixes[0]
}

// wantPrunedReported waits for the claim's condition
// DelegatedPrefixesRecorded=False/FieldPrunedByCRD naming the prefix and the
// fix, and its one Warning Event; IPsAllocated stays True.
func wantPrunedReported(t *testing.T, ctx context.Context, c client.Client, ns, name, prefix string) {
	t.Helper()
	var cond *metav1.Condition
	poll(t, ctx, 20*time.Second, "condition DelegatedPrefixesRecorded on "+name, func() bool {
		cond = meta.FindStatusCondition(getClaim(t, ctx, c, ns, name).Status.Conditions, ipamclaimsv1alpha1.ConditionDelegatedPrefixesRecorded)
		return cond != nil
	})
	if cond.Status != metav1.ConditionFalse || cond.Reason != ipamclaimsv1alpha1.ReasonFieldPrunedByCRD ||
		!strings.Contains(cond.Message, prefix) || !strings.Contains(cond.Message, "deploy/crds/k8s.cni.cncf.io_ipamclaims.yaml") {
		t.Fatalf("claim %s condition %+v: want False/FieldPrunedByCRD naming %s and the fix", name, cond, prefix)
	}
	if ok := meta.FindStatusCondition(getClaim(t, ctx, c, ns, name).Status.Conditions, ipamclaimsv1alpha1.ConditionIPsAllocated); ok == nil || ok.Status != metav1.ConditionTrue {
		t.Fatalf("claim %s IPsAllocated %+v: the addresses are allocated", name, ok)
	}
	var events []string
	poll(t, ctx, 20*time.Second, "the FieldPrunedByCRD Event on "+name, func() bool {
		events = nil
		for _, e := range claimEvents(t, ctx, c, ns, name) {
			if e.Reason == ipamclaimsv1alpha1.ReasonFieldPrunedByCRD && e.Type == "Warning" {
				events = append(events, fmt.Sprintf("%d× %s", e.Count, e.Message))
			}
		}
		return len(events) > 0
	})
	if len(events) != 1 || !strings.HasPrefix(events[0], "1× ") || !strings.Contains(events[0], prefix) {
		t.Fatalf("claim %s Events %q: want one FieldPrunedByCRD Warning, once, naming %s", name, events, prefix)
	}
}

// touchClaim changes the claim's labels, as any controller may.
func touchClaim(t *testing.T, ctx context.Context, c client.Client, ns, name string) {
	t.Helper()
	cl := getClaim(t, ctx, c, ns, name)
	patch := client.MergeFrom(cl.DeepCopy())
	if cl.Labels == nil {
		cl.Labels = map[string]string{}
	}
	cl.Labels["e2e.tenure.dev/touched"] = "true"
	if err := c.Patch(ctx, cl, patch); err != nil {
		t.Fatal(err)
	}
}

func prunedCount(t *testing.T, url string) float64 {
	t.Helper()
	m, err := testbed.ParseMetrics(scrape(t, url))
	if err != nil {
		t.Fatal(err)
	}
	v, found := m.Sum("tenure_claim_prefix_record_pruned_total")
	if !found {
		t.Fatalf("%s has no tenure_claim_prefix_record_pruned_total", url)
	}
	return v
}

// tenurectlCheck runs `tenurectl check -o json` as an administrator would.
func tenurectlCheck(t *testing.T, ctx context.Context) *ops.CheckReport {
	t.Helper()
	if bins.CLI == "" {
		t.Fatal("tenurectl is not built")
	}
	cmd := exec.CommandContext(ctx, bins.CLI, "check", "--kubeconfig", cptest.Current().KubeconfigPath, "-o", "json")
	out, err := cmd.Output()
	var exit *exec.ExitError
	if err != nil && !(errors.As(err, &exit) && exit.ExitCode() == 1) {
		t.Fatalf("tenurectl check: %v\n%s", err, out)
	}
	rep := &ops.CheckReport{}
	if err := json.Unmarshal(out, rep); err != nil {
		t.Fatalf("tenurectl check output: %v\n%s", err, out)
	}
	return rep
}

func upstreamCRDFiles(t *testing.T) fs.FS {
	t.Helper()
	b, err := os.ReadFile(upstreamClaimCRD)
	if err != nil {
		t.Fatal(err)
	}
	return fstest.MapFS{"k8s.cni.cncf.io_ipamclaims.yaml": {Data: b}}
}

func tenureClaimCRDFiles(t *testing.T) fs.FS {
	t.Helper()
	b, err := fs.ReadFile(deploy.CRDs, "crds/k8s.cni.cncf.io_ipamclaims.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return fstest.MapFS{"k8s.cni.cncf.io_ipamclaims.yaml": {Data: b}}
}

// restoreTenureClaimCRD puts tenure's IPAMClaim CRD back, for the tests
// that follow in this binary, and waits until the API server stores
// status.delegatedPrefixes again.
func restoreTenureClaimCRD(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	applyClaimCRD(t, ctx, tenureClaimCRDFiles(t), true)
}

// applyClaimCRD applies an IPAMClaim CRD and waits until it is Established
// and the API server's handler uses its schema: a probe claim's status
// write keeps status.delegatedPrefixes exactly when keeps.
func applyClaimCRD(t *testing.T, ctx context.Context, files fs.FS, keeps bool) {
	t.Helper()
	if err := controlplane.InstallCRDs(ctx, cptest.Current().Config, files); err != nil {
		t.Fatal(err)
	}
	c := apiClient(t)
	const ns = "crd-probe"
	if err := testbed.EnsureNamespace(ctx, c, ns); err != nil {
		t.Fatal(err)
	}
	probe := &ipamclaimsv1alpha1.IPAMClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, GenerateName: "probe-"},
		Spec: ipamclaimsv1alpha1.IPAMClaimSpec{Network: "probe", Interface: "net1"}}
	if err := c.Create(ctx, probe); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Delete(context.Background(), probe) }()
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		cl := &ipamclaimsv1alpha1.IPAMClaim{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(probe), cl); err != nil {
			return false, nil
		}
		cl.Status.IPs = []string{}
		cl.Status.DelegatedPrefixes = []string{"fd00:ffff::/56"}
		if err := c.Status().Update(ctx, cl); err != nil {
			return false, nil
		}
		got := &ipamclaimsv1alpha1.IPAMClaim{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(probe), got); err != nil {
			return false, nil
		}
		return (len(got.Status.DelegatedPrefixes) == 1) == keeps, nil
	})
	if err != nil {
		t.Fatalf("the API server did not take up the IPAMClaim CRD (keeps status.delegatedPrefixes: %v): %v", keeps, err)
	}
}
