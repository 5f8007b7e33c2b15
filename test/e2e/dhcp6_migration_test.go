//go:build integration

package e2e

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv6/nclient6"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipamclaimsv1alpha1 "github.com/tenure-ipam/tenure/api/ipamclaims/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/controlplane"
	"github.com/tenure-ipam/tenure/internal/controlplane/cptest"
	"github.com/tenure-ipam/tenure/internal/kubevirt"
	"github.com/tenure-ipam/tenure/internal/testbed"
)

// A KubeVirt live migration as the agents see it: the VM's claim is owned
// by its VirtualMachine, the VirtualMachineInstance of the same name says
// where the VM runs (status.nodeName) and how its migration goes
// (status.migrationState); the test plays KubeVirt's part by writing them.
// The guest is one network namespace whose eth0 is a veth; its other end is
// plugged into the bridge of the node the VM runs on and moved to the
// target node's bridge at the switchover, as the guest's traffic moves.
// One ISC dhclient runs in the guest throughout and renews at the T1 the
// server gives (2 s: preferred_lifetime 4).

const migIPAM = `{"ipRanges":[{"range":"10.97.0.0/24"},{"range":"fd00:97::/64"}],
	"prefix_delegation":{"range":"fd00:9700::/40","prefix_length":56},
	"network_name":"dhcpnet","dhcpv6":{"interfaces":["br0"],"preferred_lifetime":4,"valid_lifetime":60}}`

// TestDHCPv6FollowsTheVMThroughMigration: from the target pod's ADD until
// the switchover the source node answers the guest's Renews and holds the
// route and ownerPod stays on the source pod; at the switchover (VMI
// status.nodeName changes) the target answers the next Renew and holds the
// route, the source does neither, and ownerPod moves to the target pod. A
// later migration back that fails keeps all of it on the node the VM runs
// on.
func TestDHCPv6FollowsTheVMThroughMigration(t *testing.T) {
	ctx, c := dhcpTest(t, 4*time.Minute)
	installVMICRD(t, ctx)

	nodeA, nodeB, pathA, pathB := twoNodes(t, ctx, "tdm")
	guest := plugGuest(t, ctx, nodeA+"-g", nodeA, "vg", dhcpVMMAC)

	agentA, metricsA := startDataplaneAgent(t, ctx, "mig-a", pathA, "")
	agentB, metricsB := startDataplaneAgent(t, ctx, "mig-b", pathB, "")
	waitVMIsServed(t, ctx, agentA, agentB)

	const ns, vm = "dhcp6mig", "vm1"
	claimName := vm + ".dhcpnet"
	createVMClaim(t, ctx, c, ns, claimName, vm)
	vmi := createVMI(t, ctx, c, ns, vm, "mig-a")

	podA := newPod(t, ctx, c, ns, "mig-a", migAnnotations(claimName))
	if _, err := add(ctx, podA, netconf("dhcpnet", agentA.Socket, migIPAM)); err != nil {
		t.Fatalf("ADD of the source pod: %v", err)
	}
	wantAddr, wantPrefix := claimHolds(t, ctx, c, ns, claimName)
	wantOwner(t, ctx, c, ns, claimName, podA.name)

	dhc := startDhclient(t, guest)
	lease := dhc.waitLease(ctx)
	if lease.addr != wantAddr || lease.prefix != wantPrefix {
		t.Fatalf("dhclient leased %s and %s, the claim holds %s and %s", lease.addr, lease.prefix, wantAddr, wantPrefix)
	}
	wantRoute := fmt.Sprintf("%s via %s dev br0", wantPrefix, wantAddr)
	waitRoute(t, ctx, nodeA, wantPrefix, wantRoute, true)

	// The migration starts: KubeVirt creates the target pod on node-b, its
	// ADD runs, and the VMI records the migration; the VM still runs on
	// node-a.
	podB := newPod(t, ctx, c, ns, "mig-b", migAnnotations(claimName))
	if _, err := add(ctx, podB, netconf("dhcpnet", agentB.Socket, migIPAM)); err != nil {
		t.Fatalf("ADD of the target pod: %v", err)
	}
	if cl := getClaim(t, ctx, c, ns, claimName); cl.Status.OwnerPod == nil || cl.Status.OwnerPod.Name != podA.name {
		t.Fatalf("after the target's ADD ownerPod is %+v, want the source pod %s: the VM still runs on node-a", cl.Status.OwnerPod, podA.name)
	}
	vmi = setVMIStatus(t, ctx, c, vmi, "mig-a", map[string]any{"targetNode": "mig-b", "sourceNode": "mig-a"})
	// Node-b's agent has computed its bindings from this state when it
	// logs why its pod is not served.
	waitAgentLog(t, ctx, agentB, "this node is its migration target")
	waitRoute(t, ctx, nodeA, wantPrefix, wantRoute, true)
	if out, _ := testbed.IPIn(nodeB, "-6", "route", "show", wantPrefix.String()); out != "" {
		t.Fatalf("node-b routes the prefix while the VM runs on node-a: %s", out)
	}
	renewsA := counter(t, scrape(t, metricsA), "renew", "reply")
	waitRenewed(t, ctx, dhc, wantAddr, wantPrefix, "from node-a during the migration")
	if n := counter(t, scrape(t, metricsA), "renew", "reply"); n <= renewsA {
		t.Fatalf("node-a answered %v Renews, %v before: the guest's Renew was not answered by the source", n, renewsA)
	}
	wantOwner(t, ctx, c, ns, claimName, podA.name)

	// Switchover: the guest's traffic now reaches node-b's bridge, and
	// KubeVirt moves status.nodeName to the target.
	mustIP(t, nodeA, "link", "set", "vg", "netns", nodeB)
	mustIP(t, nodeB, "link", "set", "vg", "master", "br0", "up")
	vmi = setVMIStatus(t, ctx, c, vmi, "mig-b", map[string]any{"targetNode": "mig-b", "sourceNode": "mig-a", "completed": true})
	waitRoute(t, ctx, nodeB, wantPrefix, wantRoute, true)
	waitRoute(t, ctx, nodeA, wantPrefix, "", false)
	renewsB := counter(t, scrape(t, metricsB), "renew", "reply")
	waitRenewed(t, ctx, dhc, wantAddr, wantPrefix, "from node-b after the switchover")
	if n := counter(t, scrape(t, metricsB), "renew", "reply"); n <= renewsB {
		t.Fatalf("node-b answered %v Renews, %v before the switchover", n, renewsB)
	}
	waitOwner(t, ctx, c, ns, claimName, podB.name)
	// Node-a no longer answers the VM's identity: a client with the VM's MAC
	// now plugged into node-a's bridge gets nothing.
	probe := plugGuest(t, ctx, nodeA+"-p", nodeA, "vp", dhcpVMMAC)
	if adv, err := solicit(t, probe, 3*time.Second); !errors.Is(err, nclient6.ErrNoResponse) {
		t.Fatalf("node-a after the switchover: advertise %v, err %v; want no response", adv, err)
	}

	// A migration back to node-a starts, and fails: its target pod is
	// deleted and the VMI says failed. The VM never left node-b.
	podC := newPod(t, ctx, c, ns, "mig-a", migAnnotations(claimName))
	if _, err := add(ctx, podC, netconf("dhcpnet", agentA.Socket, migIPAM)); err != nil {
		t.Fatalf("ADD of the second migration's target pod: %v", err)
	}
	vmi = setVMIStatus(t, ctx, c, vmi, "mig-b", map[string]any{"targetNode": "mig-a", "sourceNode": "mig-b"})
	waitAgentLog(t, ctx, agentA, "runs on node mig-b; this node is its migration target")
	if err := testbed.ForceDeletePod(ctx, c, ns, podC.name); err != nil {
		t.Fatal(err)
	}
	setVMIStatus(t, ctx, c, vmi, "mig-b", map[string]any{"targetNode": "mig-a", "sourceNode": "mig-b", "completed": true, "failed": true})
	renewsB = counter(t, scrape(t, metricsB), "renew", "reply")
	waitRenewed(t, ctx, dhc, wantAddr, wantPrefix, "from node-b after the failed migration")
	if n := counter(t, scrape(t, metricsB), "renew", "reply"); n <= renewsB {
		t.Fatalf("node-b answered %v Renews, %v before the failed migration", n, renewsB)
	}
	waitRoute(t, ctx, nodeB, wantPrefix, wantRoute, true)
	if out, _ := testbed.IPIn(nodeA, "-6", "route", "show", wantPrefix.String()); out != "" {
		t.Fatalf("node-a routes the prefix after a failed migration to it: %s", out)
	}
	if adv, err := solicit(t, probe, 3*time.Second); !errors.Is(err, nclient6.ErrNoResponse) {
		t.Fatalf("node-a after the failed migration: advertise %v, err %v; want no response", adv, err)
	}
	wantOwner(t, ctx, c, ns, claimName, podB.name)
}

// TestDHCPv6VMIAPIAppearingPutsTheVMBackOnItsNode: without KubeVirt's API
// the claim's ownerPod decides, as before: the target pod's ADD moves the
// service, the route and ownerPod to the target. When the
// VirtualMachineInstance CRD appears later and says the VM runs on the
// source (the migration failed), the agents see it without a restart and
// put all three back on the source.
func TestDHCPv6VMIAPIAppearingPutsTheVMBackOnItsNode(t *testing.T) {
	ctx, c := dhcpTest(t, 4*time.Minute)
	waitVMICRDGone(t, ctx)

	nodeA, nodeB, pathA, pathB := twoNodes(t, ctx, "tdl")
	ga := plugGuest(t, ctx, nodeA+"-g", nodeA, "vga", dhcpVMMAC)
	gb := plugGuest(t, ctx, nodeB+"-g", nodeB, "vgb", dhcpVMMAC)
	agentA, _ := startDataplaneAgent(t, ctx, "late-a", pathA, "")
	agentB, _ := startDataplaneAgent(t, ctx, "late-b", pathB, "")

	const ns, vm = "dhcp6late", "vm2"
	claimName := vm + ".dhcpnet"
	createVMClaim(t, ctx, c, ns, claimName, vm)
	podA := newPod(t, ctx, c, ns, "late-a", migAnnotations(claimName))
	if _, err := add(ctx, podA, netconf("dhcpnet", agentA.Socket, migIPAM)); err != nil {
		t.Fatalf("ADD of the source pod: %v", err)
	}
	wantAddr, wantPrefix := claimHolds(t, ctx, c, ns, claimName)
	wantRoute := fmt.Sprintf("%s via %s dev br0", wantPrefix, wantAddr)
	waitRoute(t, ctx, nodeA, wantPrefix, wantRoute, true)

	// Without the API: the target's ADD moves everything to node-b.
	podB := newPod(t, ctx, c, ns, "late-b", migAnnotations(claimName))
	if _, err := add(ctx, podB, netconf("dhcpnet", agentB.Socket, migIPAM)); err != nil {
		t.Fatalf("ADD of the target pod: %v", err)
	}
	wantOwner(t, ctx, c, ns, claimName, podB.name)
	waitRoute(t, ctx, nodeB, wantPrefix, wantRoute, true)
	waitRoute(t, ctx, nodeA, wantPrefix, "", false)
	if adv, err := solicit(t, gb, 3*time.Second); err != nil || advertisedAddr(adv) != wantAddr {
		t.Fatalf("node-b without the VMI API: %v, %v; want an Advertise of %s", adv, err, wantAddr)
	}

	// The API appears; the VMI says the migration to node-b failed and the
	// VM runs on node-a.
	installVMICRD(t, ctx)
	waitVMIsServed(t, ctx, agentA, agentB)
	vmi := createVMI(t, ctx, c, ns, vm, "late-a")
	setVMIStatus(t, ctx, c, vmi, "late-a", map[string]any{"targetNode": "late-b", "sourceNode": "late-a", "completed": true, "failed": true})
	waitOwner(t, ctx, c, ns, claimName, podA.name)
	waitRoute(t, ctx, nodeA, wantPrefix, wantRoute, true)
	waitRoute(t, ctx, nodeB, wantPrefix, "", false)
	if adv, err := solicit(t, ga, 3*time.Second); err != nil || advertisedAddr(adv) != wantAddr {
		t.Fatalf("node-a, where the VMI says the VM runs: %v, %v; want an Advertise of %s", adv, err, wantAddr)
	}
	if adv, err := solicit(t, gb, 3*time.Second); !errors.Is(err, nclient6.ErrNoResponse) {
		t.Fatalf("node-b, the failed migration's target: advertise %v, err %v; want no response", adv, err)
	}
}

// twoNodes makes the namespaces of two "nodes" (dhcpNode) named after tag
// and this process, and returns their names and paths.
func twoNodes(t *testing.T, ctx context.Context, tag string) (nodeA, nodeB, pathA, pathB string) {
	t.Helper()
	sfx := strconv.Itoa(os.Getpid() % 100000)
	nodeA, nodeB = tag+"-a"+sfx, tag+"-b"+sfx
	pathA, pathB = dhcpNode(t, nodeA), dhcpNode(t, nodeB)
	waitLinkLocal(t, ctx, nodeA, "br0")
	waitLinkLocal(t, ctx, nodeB, "br0")
	return nodeA, nodeB, pathA, pathB
}

// plugGuest makes guest namespace name behind node's bridge (dhcpGuest) and
// waits for its link-local address; it returns name.
func plugGuest(t *testing.T, ctx context.Context, name, node, hostIf, mac string) string {
	t.Helper()
	dhcpGuest(t, name, node, hostIf, mac)
	waitLinkLocal(t, ctx, name, "eth0")
	return name
}

// dhcpTest checks the test can run (dhcpTools) and returns its context and
// API client.
func dhcpTest(t *testing.T, d time.Duration) (context.Context, client.WithWatch) {
	t.Helper()
	requireDHCPTools(t)
	return testContext(t, d), apiClient(t)
}

func requireDHCPTools(t *testing.T) {
	t.Helper()
	if ok, why := testbed.CanPlumb(); !ok {
		t.Fatal(why)
	}
	if _, err := exec.LookPath("dhclient"); err != nil {
		t.Fatal("no DHCPv6 client: install Debian's isc-dhcp-client (dhclient); make test does (hack/test-deps.sh)")
	}
}

func migAnnotations(claim string) map[string]string {
	return map[string]string{"k8s.v1.cni.cncf.io/networks": fmt.Sprintf(
		`[{"name":"dhcpnet","interface":"net1","ipam-claim-reference":%q,"mac":%q}]`, claim, dhcpVMMAC)}
}

// installVMICRD creates KubeVirt's VMI CRD (testdata, reduced to the fields
// tenure reads) and deletes it when the test ends: other tests run without
// it, as a cluster without KubeVirt does.
func installVMICRD(t *testing.T, ctx context.Context) {
	t.Helper()
	waitVMICRDGone(t, ctx)
	// Only this file: testdata holds other CRDs (the upstream IPAMClaim one).
	b, err := os.ReadFile("testdata/kubevirt-vmi-crd.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := controlplane.InstallCRDs(ctx, cptest.Current().Config, fstest.MapFS{"kubevirt-vmi-crd.yaml": {Data: b}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cs := crdClient(t)
		if err := cs.ApiextensionsV1().CustomResourceDefinitions().Delete(context.Background(), kubevirt.CRDName, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("deleting the VMI CRD: %v", err)
		}
	})
}

// waitVMICRDGone waits until an earlier test's VMI CRD is deleted.
func waitVMICRDGone(t *testing.T, ctx context.Context) {
	t.Helper()
	cs := crdClient(t)
	poll(t, ctx, time.Minute, "the VMI CRD of an earlier test to be gone", func() bool {
		_, err := cs.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, kubevirt.CRDName, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
}

func crdClient(t *testing.T) *apiextensionsclient.Clientset {
	t.Helper()
	cs, err := apiextensionsclient.NewForConfig(cptest.Current().Config)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// waitVMIsServed waits until each agent's VMI cache has synced (it logs
// so): nothing in the agent waits for it, an ADD before it follows the
// rules without KubeVirt.
func waitVMIsServed(t *testing.T, ctx context.Context, agents ...*testbed.Agent) {
	t.Helper()
	for _, a := range agents {
		waitAgentLog(t, ctx, a, "KubeVirt VirtualMachineInstances are served")
	}
}

func waitAgentLog(t *testing.T, ctx context.Context, a *testbed.Agent, substr string) {
	t.Helper()
	poll(t, ctx, 30*time.Second, fmt.Sprintf("agent %s to log %q", a.Node, substr), func() bool {
		b, _ := os.ReadFile(a.Log)
		return strings.Contains(string(b), substr)
	})
}

// createVMClaim creates the claim KubeVirt's IPAM extension makes for a VM:
// named <vm>.<network>, owned by the VirtualMachine.
func createVMClaim(t *testing.T, ctx context.Context, c client.Client, ns, name, vm string) {
	t.Helper()
	if err := testbed.EnsureNamespace(ctx, c, ns); err != nil {
		t.Fatal(err)
	}
	cl := &ipamclaimsv1alpha1.IPAMClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, OwnerReferences: []metav1.OwnerReference{{
			APIVersion: "kubevirt.io/v1", Kind: "VirtualMachine", Name: vm, UID: k8stypes.UID("vm-" + vm),
		}}},
		Spec: ipamclaimsv1alpha1.IPAMClaimSpec{Network: "dhcpnet", Interface: "net1"},
	}
	if err := c.Create(ctx, cl); err != nil {
		t.Fatal(err)
	}
}

// createVMI creates the VirtualMachineInstance of vm running on node.
func createVMI(t *testing.T, ctx context.Context, c client.Client, ns, vm, node string) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{Object: map[string]any{
		"metadata": map[string]any{"namespace": ns, "name": vm},
		"spec":     map[string]any{"domain": map[string]any{"devices": map[string]any{}}},
		"status":   map[string]any{"nodeName": node, "phase": "Running"},
	}}
	u.SetGroupVersionKind(kubevirt.VMIKind)
	if err := c.Create(ctx, u); err != nil {
		t.Fatal(err)
	}
	return u
}

// setVMIStatus writes status.nodeName and status.migrationState as
// KubeVirt does (the VMI has no status subresource: the whole object).
func setVMIStatus(t *testing.T, ctx context.Context, c client.Client, u *unstructured.Unstructured, node string, migration map[string]any) *unstructured.Unstructured {
	t.Helper()
	u = u.DeepCopy()
	if err := unstructured.SetNestedField(u.Object, node, "status", "nodeName"); err != nil {
		t.Fatal(err)
	}
	if err := unstructured.SetNestedMap(u.Object, migration, "status", "migrationState"); err != nil {
		t.Fatal(err)
	}
	if err := c.Update(ctx, u); err != nil {
		t.Fatal(err)
	}
	return u
}

// claimHolds returns the claim's IPv6 address and delegated /56.
func claimHolds(t *testing.T, ctx context.Context, c client.Client, ns, name string) (netip.Addr, netip.Prefix) {
	t.Helper()
	cl := getClaim(t, ctx, c, ns, name)
	var addr netip.Addr
	for _, s := range cl.Status.IPs {
		if p, err := netip.ParsePrefix(s); err == nil && p.Addr().Is6() {
			addr = p.Addr()
		}
	}
	if !addr.IsValid() || len(cl.Status.DelegatedPrefixes) != 1 {
		t.Fatalf("claim status %+v: want an IPv6 address and one prefix", cl.Status)
	}
	return addr, netip.MustParsePrefix(cl.Status.DelegatedPrefixes[0])
}

func wantOwner(t *testing.T, ctx context.Context, c client.Client, ns, claim, pod string) {
	t.Helper()
	if cl := getClaim(t, ctx, c, ns, claim); cl.Status.OwnerPod == nil || cl.Status.OwnerPod.Name != pod {
		t.Fatalf("claim %s/%s has ownerPod %+v, want %s", ns, claim, cl.Status.OwnerPod, pod)
	}
}

func waitOwner(t *testing.T, ctx context.Context, c client.Client, ns, claim, pod string) {
	t.Helper()
	poll(t, ctx, 20*time.Second, fmt.Sprintf("claim %s/%s ownerPod %s", ns, claim, pod), func() bool {
		cl := getClaim(t, ctx, c, ns, claim)
		return cl.Status.OwnerPod != nil && cl.Status.OwnerPod.Name == pod
	})
}

// waitRenewed waits for the guest's dhclient to report a Renew answered
// (RENEW6) with the claim's address and prefix, after every one it had
// reported when called.
func waitRenewed(t *testing.T, ctx context.Context, d *dhclientRun, addr netip.Addr, prefix netip.Prefix, what string) {
	t.Helper()
	renewed := func() (a, p int) {
		for _, l := range d.scriptCalls() {
			if !strings.HasPrefix(l, "reason=RENEW6 ") {
				continue
			}
			if strings.Contains(l, " address="+addr.String()+"/") {
				a++
			}
			if strings.HasSuffix(l, " prefix="+prefix.String()) {
				p++
			}
		}
		return a, p
	}
	a0, p0 := renewed()
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, false, func(context.Context) (bool, error) {
		a, p := renewed()
		return a > a0 && p > p0, nil
	}); err != nil {
		t.Fatalf("no Renew of %s and %s answered %s within 30s\n%s", addr, prefix, what, d.dump())
	}
}
