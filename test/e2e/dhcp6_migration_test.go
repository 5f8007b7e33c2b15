//go:build integration

package e2e

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv6/nclient6"
	corev1 "k8s.io/api/core/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	ipamclaimsv1alpha1 "github.com/tenure-ipam/tenure/api/ipamclaims/v1alpha1"
	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/controller"
	"github.com/tenure-ipam/tenure/internal/kubevirt"
	"github.com/tenure-ipam/tenure/test/controlplane/cptest"
	"github.com/tenure-ipam/tenure/test/testbed"
)

// A KubeVirt live migration as the agents see it, with KubeVirt's own
// CRDs and its objects as its controllers write them (kubevirt_test.go):
// the VM's claim is owned by its VirtualMachine, the VirtualMachineInstance
// of the same name says where the VM runs and how its migration goes; the
// test plays KubeVirt's part by writing them.
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
// route, and ownerPod stays on the source pod; at the switchover, signalled
// by the target virt-handler's targetNodeDomainReadyTimestamp before the
// migration completes, the target answers the next Renew and holds the
// route, the source does neither, and ownerPod moves to the target pod. A
// later migration back that fails keeps all of it on the node the VM runs
// on. A stopped VM keeps its claim; started again on the other node, it
// gets the same address and prefix there. The IPsAllocated condition names
// the owner pod throughout. A VM deleted in the foreground keeps everything
// while KubeVirt's finalizer holds its claim and the guest runs (Renews
// answered with the same address and prefix, the route in place, nothing
// released across controller sweeps); once the VMI is gone and KubeVirt
// removes its finalizer, the controller releases the claim's address and
// prefix reservations within seconds and the claim is gone.
func TestDHCPv6FollowsTheVMThroughMigration(t *testing.T) {
	ctx, c := dhcpTest(t, 5*time.Minute)
	installKubeVirtCRDs(t, ctx)

	nodeA, nodeB, pathA, pathB := twoNodes(t, ctx, "tdm")
	guest := plugGuest(t, ctx, nodeA+"-g", nodeA, "vg", dhcpVMMAC)

	agentA, metricsA := startDataplaneAgent(t, ctx, "mig-a", pathA, "")
	agentB, metricsB := startDataplaneAgent(t, ctx, "mig-b", pathB, "")
	waitVMIsServed(t, ctx, agentA, agentB)
	confA, confB := netconf("dhcpnet", agentA.Socket, migIPAM), netconf("dhcpnet", agentB.Socket, migIPAM)
	// The controller, as its Deployment's service account: it releases the
	// claim's items once the claim is deleted and nothing but its own
	// finalizer holds it.
	saKubeconfig := filepath.Join(t.TempDir(), "controller.kubeconfig")
	if err := testbed.ServiceAccountKubeconfig(ctx, cptest.Current().Config, "tenure-system", "tenure-controller", saKubeconfig); err != nil {
		t.Fatal(err)
	}
	ctrl := ctlStart(t, ctx, "e2e-dhcp6-migration", "--kubeconfig", saKubeconfig,
		"--leader-election-namespace", "tenure-system", "--leader-election-id", "tenure-controller", "--sweep-interval", "500ms")
	ctrl.waitLeading(t, ctx)

	vm := createVM(t, ctx, c, "dhcp6mig", "vm1", dhcpVMMAC)
	vm.Start(ctx, t, c)
	podA := launcher(t, ctx, c, vm, "mig-a", "")
	if _, err := add(ctx, podA, confA); err != nil {
		t.Fatalf("ADD of the source pod: %v", err)
	}
	vm.Running(ctx, t, c, podA.launcher())
	wantAddr, wantPrefix := claimHolds(t, ctx, c, vm.Namespace, vm.Claim)
	wantOwner(t, ctx, c, vm.Namespace, vm.Claim, podA.name)
	wantConditionNames(t, ctx, c, vm.Namespace, vm.Claim, podA.name)
	ctlPoll(t, ctx, "tenure's finalizer beside KubeVirt's", func() (bool, error) {
		return slices.Equal(getClaim(t, ctx, c, vm.Namespace, vm.Claim).Finalizers, []string{testbed.ClaimFinalizer, controller.ClaimFinalizer}), nil
	})

	dhc := startDhclient(t, guest)
	lease := dhc.waitLease(ctx)
	if lease.addr != wantAddr || lease.prefix != wantPrefix {
		t.Fatalf("dhclient leased %s and %s, the claim holds %s and %s", lease.addr, lease.prefix, wantAddr, wantPrefix)
	}
	wantRoute := fmt.Sprintf("%s via %s dev br0", wantPrefix, wantAddr)
	waitRoute(t, ctx, nodeA, wantPrefix, wantRoute, true)

	// The migration starts: virt-controller creates the target pod on
	// node-b, its ADD runs, and the VMI records the migration; the VM still
	// runs on node-a.
	m1 := kvMigration{uid: "migration-1", src: podA}
	m1.dst = launcher(t, ctx, c, vm, "mig-b", m1.uid)
	podB := m1.dst
	if _, err := add(ctx, podB, confB); err != nil {
		t.Fatalf("ADD of the target pod: %v", err)
	}
	wantOwner(t, ctx, c, vm.Namespace, vm.Claim, podA.name)
	wantConditionNames(t, ctx, c, vm.Namespace, vm.Claim, podA.name)
	vm.MigrationStart(ctx, t, c, m1.kv())
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
	wantOwner(t, ctx, c, vm.Namespace, vm.Claim, podA.name)

	// Switchover: the guest's traffic now reaches node-b's bridge, and the
	// target's virt-handler writes targetNodeDomainReadyTimestamp. Nothing
	// says completed yet.
	mustIP(t, nodeA, "link", "set", "vg", "netns", nodeB)
	mustIP(t, nodeB, "link", "set", "vg", "master", "br0", "up")
	signalled := vm.DomainReady(ctx, t, c)
	waitRoute(t, ctx, nodeB, wantPrefix, wantRoute, true)
	t.Logf("switchover: the prefix route on the target %v after targetNodeDomainReadyTimestamp was written", time.Since(signalled).Round(time.Millisecond))
	waitRoute(t, ctx, nodeA, wantPrefix, "", false)
	renewsB := counter(t, scrape(t, metricsB), "renew", "reply")
	waitRenewed(t, ctx, dhc, wantAddr, wantPrefix, "from node-b after the target's domain was ready")
	if n := counter(t, scrape(t, metricsB), "renew", "reply"); n <= renewsB {
		t.Fatalf("node-b answered %v Renews, %v before the switchover", n, renewsB)
	}
	waitOwner(t, ctx, c, vm.Namespace, vm.Claim, podB.name)
	wantConditionNames(t, ctx, c, vm.Namespace, vm.Claim, podB.name)
	mb := scrape(t, metricsB)
	if n := metricValue(t, mb, "tenure_kubevirt_switchovers_total", `outcome="target"`); n != 1 {
		t.Fatalf("node-b counted %v switchovers to it, want 1", n)
	}
	if n := metricValue(t, mb, "tenure_kubevirt_switchover_route_seconds_count"); n != 1 {
		t.Fatalf("node-b timed %v switchovers, want 1", n)
	}
	t.Logf("node-b's agent: switchover gap %vs after the signal (one-second resolution)", metricValue(t, mb, "tenure_kubevirt_switchover_route_seconds_sum"))
	vm.MigrationEnd(ctx, t, c, m1.kv(), false)
	if err := del(ctx, podA, confA); err != nil {
		t.Fatalf("DEL of the source pod: %v", err)
	}
	if err := testbed.ForceDeletePod(ctx, c, vm.Namespace, podA.name); err != nil {
		t.Fatal(err)
	}
	// Node-a no longer answers the VM's identity: a client with the VM's MAC
	// now plugged into node-a's bridge gets nothing.
	probe := plugGuest(t, ctx, nodeA+"-p", nodeA, "vp", dhcpVMMAC)
	if adv, err := solicit(t, probe, 3*time.Second); !errors.Is(err, nclient6.ErrNoResponse) {
		t.Fatalf("node-a after the switchover: advertise %v, err %v; want no response", adv, err)
	}

	// A migration back to node-a starts, and fails: the VMI says failed and
	// virt-controller deletes the target pod. The VM never left node-b.
	m2 := kvMigration{uid: "migration-2", src: podB}
	m2.dst = launcher(t, ctx, c, vm, "mig-a", m2.uid)
	if _, err := add(ctx, m2.dst, confA); err != nil {
		t.Fatalf("ADD of the second migration's target pod: %v", err)
	}
	vm.MigrationStart(ctx, t, c, m2.kv())
	waitAgentLog(t, ctx, agentA, "runs on node mig-b; this node is its migration target")
	vm.MigrationEnd(ctx, t, c, m2.kv(), true)
	if err := del(ctx, m2.dst, confA); err != nil {
		t.Fatalf("DEL of the failed migration's target pod: %v", err)
	}
	if err := testbed.ForceDeletePod(ctx, c, vm.Namespace, m2.dst.name); err != nil {
		t.Fatal(err)
	}
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
	wantOwner(t, ctx, c, vm.Namespace, vm.Claim, podB.name)
	wantConditionNames(t, ctx, c, vm.Namespace, vm.Claim, podB.name)

	// Stop: the VMI and its pod go; the claim stays with its addresses and
	// prefix, and ownerPod names the last pod that served the VM.
	if err := del(ctx, podB, confB); err != nil {
		t.Fatalf("DEL of the stopped VM's pod: %v", err)
	}
	if err := testbed.ForceDeletePod(ctx, c, vm.Namespace, podB.name); err != nil {
		t.Fatal(err)
	}
	vm.Stop(ctx, t, c)
	waitRoute(t, ctx, nodeB, wantPrefix, "", false)
	if a, p := claimHolds(t, ctx, c, vm.Namespace, vm.Claim); a != wantAddr || p != wantPrefix {
		t.Fatalf("the stopped VM's claim holds %s and %s, want %s and %s", a, p, wantAddr, wantPrefix)
	}
	wantOwner(t, ctx, c, vm.Namespace, vm.Claim, podB.name)

	// Start, on node-a: the new pod's ADD gets the same address and
	// prefix, ownerPod moves to it, and node-a serves the guest.
	mustIP(t, nodeB, "link", "set", "vg", "netns", nodeA)
	mustIP(t, nodeA, "link", "set", "vg", "master", "br0", "up")
	vm.Start(ctx, t, c)
	podD := launcher(t, ctx, c, vm, "mig-a", "")
	if _, err := add(ctx, podD, confA); err != nil {
		t.Fatalf("ADD of the restarted VM's pod: %v", err)
	}
	vm.Running(ctx, t, c, podD.launcher())
	if a, p := claimHolds(t, ctx, c, vm.Namespace, vm.Claim); a != wantAddr || p != wantPrefix {
		t.Fatalf("the restarted VM's claim holds %s and %s, want %s and %s", a, p, wantAddr, wantPrefix)
	}
	wantOwner(t, ctx, c, vm.Namespace, vm.Claim, podD.name)
	wantConditionNames(t, ctx, c, vm.Namespace, vm.Claim, podD.name)
	waitRoute(t, ctx, nodeA, wantPrefix, wantRoute, true)
	waitRenewed(t, ctx, dhc, wantAddr, wantPrefix, "from node-a after the VM restarted there")

	// Delete, as `kubectl delete vm --cascade=foreground` does. The test
	// control plane runs no garbage collector, so the test does its part:
	// the VM gets a deletionTimestamp and the foregroundDeletion finalizer
	// from the API server; the collector then deletes the VM's dependents,
	// the claim (it has none of its own: in the background) and the VMI (in
	// the foreground, for it has a blocking dependent, the launcher pod),
	// and the VMI's dependent, the launcher pod (gracefully: with no kubelet
	// it stays terminating). KubeVirt's finalizer holds the claim while the
	// guest still runs and shuts down.
	cl := getClaim(t, ctx, c, vm.Namespace, vm.Claim)
	claimUID := string(cl.UID)
	var wantItems []string
	for _, s := range cl.Status.IPs {
		wantItems = append(wantItems, netip.MustParsePrefix(s).Addr().String())
	}
	wantItems = append(wantItems, cl.Status.DelegatedPrefixes...)
	slices.Sort(wantItems)
	held := claimReservations(t, ctx, claimUID)
	if items := reservedItems(ownedBy(t, ctx, claimUID)); !slices.Equal(items, wantItems) || len(items) != 3 {
		t.Fatalf("before the delete the claim's reservations hold %v, its status records %v; want the same IPv4 and IPv6 address and /56", items, wantItems)
	}
	releasedBefore, _ := ctrl.metric(t, "tenure_releases_total", `reason="ClaimDeleted"`)
	vmObj := vm.Object()
	if err := c.Delete(ctx, vmObj, client.PropagationPolicy(metav1.DeletePropagationForeground)); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(vmObj), vmObj); err != nil || vmObj.GetDeletionTimestamp() == nil ||
		!slices.Contains(vmObj.GetFinalizers(), metav1.FinalizerDeleteDependents) {
		t.Fatalf("the VM after a foreground delete: %v, finalizers %v; want it deleting, held by %s", err, vmObj.GetFinalizers(), metav1.FinalizerDeleteDependents)
	}
	if err := c.Delete(ctx, cl); err != nil {
		t.Fatal(err)
	}
	deleted := time.Now()
	vmiObj := vm.VMI.DeepCopy()
	if err := c.Delete(ctx, vmiObj, client.PropagationPolicy(metav1.DeletePropagationForeground)); err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: vm.Namespace, Name: podD.name}}); err != nil {
		t.Fatal(err)
	}
	if cl = getClaim(t, ctx, c, vm.Namespace, vm.Claim); cl.DeletionTimestamp == nil || !slices.Equal(cl.Finalizers, []string{testbed.ClaimFinalizer, controller.ClaimFinalizer}) {
		t.Fatalf("the claim after the VM's delete: deletionTimestamp %v, finalizers %v; want it deleting, held by %s and %s",
			cl.DeletionTimestamp, cl.Finalizers, testbed.ClaimFinalizer, controller.ClaimFinalizer)
	}
	// While the guest runs: node-a answers its Renews with the same address
	// and prefix and keeps the route, and two full sweeps of the controller
	// that began after the claim's delete release nothing.
	renewsA = counter(t, scrape(t, metricsA), "renew", "reply")
	waitRenewed(t, ctx, dhc, wantAddr, wantPrefix, "from node-a while the VM is being deleted")
	if n := counter(t, scrape(t, metricsA), "renew", "reply"); n <= renewsA {
		t.Fatalf("node-a answered %v Renews, %v before the VM's delete", n, renewsA)
	}
	ctrl.waitSweepAfter(t, ctx, deleted)
	ctrl.waitSweepAfter(t, ctx, time.Now())
	waitRenewed(t, ctx, dhc, wantAddr, wantPrefix, "from node-a after two sweeps while the VM is being deleted")
	waitRoute(t, ctx, nodeA, wantPrefix, wantRoute, true)
	if got := claimReservations(t, ctx, claimUID); !maps.Equal(got, held) {
		t.Fatalf("reservations changed while KubeVirt's finalizer holds the claim: %v -> %v", held, got)
	}

	// The guest is shut down and the kubelet tears the launcher pod down
	// (DEL, then the pod is removed); the collector, the VMI's last
	// dependent gone, removes its foregroundDeletion finalizer and the VMI
	// is gone. The DEL releases nothing of the claim.
	dhc.stop()
	if err := del(ctx, podD, confA); err != nil {
		t.Fatalf("DEL of the deleted VM's pod: %v", err)
	}
	if err := testbed.ForceDeletePod(ctx, c, vm.Namespace, podD.name); err != nil {
		t.Fatal(err)
	}
	removeFinalizer(t, ctx, c, vmiObj, metav1.FinalizerDeleteDependents)
	if got := claimReservations(t, ctx, claimUID); !maps.Equal(got, held) {
		t.Fatalf("reservations changed before KubeVirt removed its finalizer: %v -> %v", held, got)
	}
	// ipam-extensions' VM controller: the VM is being deleted and its VMI
	// is gone, so it removes its finalizer from the VM's claims
	// (pkg/vmnetworkscontroller, claims.Cleanup); then everything of the
	// claim is released within seconds and the claim is gone.
	cl = getClaim(t, ctx, c, vm.Namespace, vm.Claim)
	controllerutil.RemoveFinalizer(cl, testbed.ClaimFinalizer)
	if err := c.Update(ctx, cl); err != nil {
		t.Fatal(err)
	}
	removed := time.Now()
	ctlPoll(t, testContext(t, 10*time.Second), "the claim's reservations released and the claim gone", func() (bool, error) {
		err := c.Get(ctx, client.ObjectKeyFromObject(cl), &ipamclaimsv1alpha1.IPAMClaim{})
		if err != nil && !apierrors.IsNotFound(err) {
			return false, err
		}
		for name := range held {
			switch err := c.Get(ctx, client.ObjectKey{Name: name}, &tenurev1alpha1.IPReservation{}); {
			case err == nil:
				return false, nil
			case !apierrors.IsNotFound(err):
				return false, err
			}
		}
		return apierrors.IsNotFound(err), nil
	})
	t.Logf("released %v and the claim gone %v after KubeVirt's finalizer was removed", wantItems, time.Since(removed).Round(time.Millisecond))
	if left := ownedBy(t, ctx, claimUID); len(left) != 0 {
		t.Fatalf("the deleted claim still owns %v", reservedItems(left))
	}
	if n, _ := ctrl.metric(t, "tenure_releases_total", `reason="ClaimDeleted"`); n-releasedBefore != float64(len(held)) {
		t.Errorf("tenure_releases_total{reason=ClaimDeleted} grew by %v, want the claim's %d", n-releasedBefore, len(held))
	}
	waitRoute(t, ctx, nodeA, wantPrefix, "", false)
	// The collector, the VM's dependents gone, lets the VM go.
	removeFinalizer(t, ctx, c, vmObj, metav1.FinalizerDeleteDependents)
}

// TestDHCPv6VMIAPIAppearingPutsTheVMBackOnItsNode: without KubeVirt's API
// the claim's ownerPod decides: the target pod's ADD moves the
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
	installKubeVirtCRDs(t, ctx)
	waitVMIsServed(t, ctx, agentA, agentB)
	vmi := createVMI(t, ctx, c, ns, vm, "late-a", podA, podB)
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
	testbed.NeedDhclient(t)
}

func migAnnotations(claim string) map[string]string {
	return map[string]string{"k8s.v1.cni.cncf.io/networks": fmt.Sprintf(
		`[{"name":"dhcpnet","interface":"net1","ipam-claim-reference":%q,"mac":%q}]`, claim, dhcpVMMAC)}
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

// createVMClaim creates the claim KubeVirt's IPAM extension makes for a VM
// (as createVM does) when the VirtualMachine cannot be created: before
// KubeVirt's CRDs are installed.
func createVMClaim(t *testing.T, ctx context.Context, c client.Client, ns, name, vm string) {
	t.Helper()
	if err := testbed.EnsureNamespace(ctx, c, ns); err != nil {
		t.Fatal(err)
	}
	cl := &ipamclaimsv1alpha1.IPAMClaim{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: ns, Name: name,
			Finalizers: []string{"kubevirt.io/persistent-ipam"},
			Labels:     map[string]string{"kubevirt.io/vm": vm},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "kubevirt.io/v1", Kind: "VirtualMachine", Name: vm, UID: k8stypes.UID("vm-" + vm),
				Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
			}},
		},
		Spec: ipamclaimsv1alpha1.IPAMClaimSpec{Network: "dhcpnet"},
	}
	if err := c.Create(ctx, cl); err != nil {
		t.Fatal(err)
	}
}

// createVMI creates the VirtualMachineInstance of vm running on node,
// with active as its pods (status.activePods, as virt-controller lists
// the pods of a VMI: only those present its claims).
func createVMI(t *testing.T, ctx context.Context, c client.Client, ns, vm, node string, active ...pod) *unstructured.Unstructured {
	t.Helper()
	pods := map[string]any{}
	for _, p := range active {
		pods[p.uid] = p.node
	}
	u := &unstructured.Unstructured{Object: map[string]any{
		"metadata": map[string]any{"namespace": ns, "name": vm},
		"spec":     (&testbed.VM{Network: kvNetwork, NAD: kvNAD, MAC: dhcpVMMAC}).VMISpec(),
		"status":   map[string]any{"nodeName": node, "phase": "Running", "activePods": pods},
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

// activatePod adds p to the VMI's status.activePods, as virt-controller
// does when it sees a new pod of the VMI (a migration's target).
func activatePod(t *testing.T, ctx context.Context, c client.Client, u *unstructured.Unstructured, p pod) *unstructured.Unstructured {
	t.Helper()
	u = u.DeepCopy()
	if err := unstructured.SetNestedField(u.Object, p.node, "status", "activePods", p.uid); err != nil {
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
	renewed := func() (a, p int) { return d.Renewals(addr, prefix) }
	a0, p0 := renewed()
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, false, func(context.Context) (bool, error) {
		a, p := renewed()
		return a > a0 && p > p0, nil
	}); err != nil {
		t.Fatalf("no Renew of %s and %s answered %s within 30s\n%s", addr, prefix, what, d.dump())
	}
}
