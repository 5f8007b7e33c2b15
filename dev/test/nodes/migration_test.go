//go:build integration

package nodes_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	ipamclaimsv1alpha1 "github.com/tenure-ipam/tenure/api/ipamclaims/v1alpha1"
	"github.com/tenure-ipam/tenure/dev/devnode"
	"github.com/tenure-ipam/tenure/dev/localnode"
	"github.com/tenure-ipam/tenure/dev/nodetest"
	"github.com/tenure-ipam/tenure/internal/kubevirt"
	"github.com/tenure-ipam/tenure/test/controlplane"
	"github.com/tenure-ipam/tenure/test/testbed"
)

const (
	// migVMMAC is the guest's MAC: the launcher pods' network-selection
	// element carries it, and the guest namespace's eth0 has it.
	migVMMAC = "02:00:00:00:97:01"
	// migNetwork is the VM spec's network name, migNAD its NAD and CNI
	// network name (the claim's spec.network).
	migNetwork = "blue"
	migNAD     = "vm-san"
)

// A VM migrates between two real nodes, KubeVirt's part played by writing
// its objects (the VirtualMachine, its VirtualMachineInstance and claim,
// the virt-launcher pods) as its controllers do, against KubeVirt's own
// CRDs. The launcher pods present the VM's claim on a macvlan network over
// the SAN whose tenure config delegates /56s and serves DHCPv6 on each
// node's SAN leg; the guest is a network namespace plugged into the SAN
// bridge, where an ISC dhclient renews every 2 s (preferred_lifetime 4)
// throughout.
//   - The launcher pods on node 1 and node 2, run by their kubelets, get
//     the claim's addresses; the guest leases the claim's IPv6 address and
//     /56, node 1 routes the /56 to it and answers its Renews.
//   - A migration to node 2 that fails (target pod Running, the VMI's
//     migrationState failed, the target pod deleted) keeps the route, the
//     Renew answers and ownerPod on node 1.
//   - A migration to node 2: until the target's virt-handler writes
//     targetNodeDomainReadyTimestamp, node 1 serves and routes; from then
//     on node 2 does, node 1 does neither, and ownerPod moves to the
//     target pod. The guest keeps its address and prefix all along.
func vmMigratesBetweenTwoNodes(t *testing.T) {
	ctx := nodetest.Context(t, 8*time.Minute)
	testbed.NeedDhclient(t)
	n1, n2 := cluster.Nodes[0], cluster.Nodes[1]
	ns1, ns2 := filepath.Base(n1.Netns()), filepath.Base(n2.Netns())
	installKubeVirtCRDs(ctx, t)
	for i := range 2 {
		waitAgentLog(ctx, t, cluster.Nodes[i].Name, "KubeVirt VirtualMachineInstances are served")
	}

	ns := migNamespace(ctx, t, "mig3")
	vm := createMigVM(ctx, t, ns, "vm1")
	vm.Start(ctx, t, cl)
	src := launcher(ctx, t, vm, n1.Name, "")
	vm.Running(ctx, t, cl, testbed.LauncherOf(src))
	wantIPs := claimOf(ctx, t, ns, vm.Claim).Status.IPs
	slices.Sort(wantIPs)
	wantAddr, wantPrefix := claimV6(ctx, t, ns, vm.Claim)
	onlyClaimHolds(ctx, t, ns, vm.Claim, src)
	waitClaimOwner(ctx, t, ns, vm.Claim, src.Name)

	guest := plugGuestOnSAN(ctx, t)
	dhc := startGuestDhclient(t, guest)
	lease := dhc.waitLease(ctx)
	if lease.Addr != wantAddr || lease.Prefix != wantPrefix {
		t.Fatalf("the guest leased %s and %s, the claim holds %s and %s", lease.Addr, lease.Prefix, wantAddr, wantPrefix)
	}
	wantRoute := fmt.Sprintf("%s via %s dev %s", wantPrefix, wantAddr, devnode.SANLink)
	waitPrefixRoute(ctx, t, ns1, wantPrefix, wantRoute)
	noPrefixRoute(ctx, t, ns2, wantPrefix)
	renewedBy := func(node int, what string) {
		t.Helper()
		before := renewReplies(ctx, t, node)
		dhc.waitRenewed(ctx, wantAddr, wantPrefix, what)
		if n := renewReplies(ctx, t, node); n <= before {
			t.Fatalf("node-%d answered %v Renews, %v before: the guest's Renew %s was not answered there", node, n, before, what)
		}
	}
	renewedBy(1, "before any migration")

	// A migration to node 2 that fails before the target's domain is ready:
	// the target pod runs and gets the claim's addresses, but everything
	// stays on node 1.
	failedDst := launcher(ctx, t, vm, n2.Name, "migration-failed")
	failed := migration("migration-failed", src, failedDst)
	onlyClaimHolds(ctx, t, ns, vm.Claim, failedDst)
	vm.MigrationStart(ctx, t, cl, failed)
	waitAgentLog(ctx, t, n2.Name, "runs on node "+n1.Name+"; this node is its migration target")
	renewedBy(1, "during the migration that fails")
	noPrefixRoute(ctx, t, ns2, wantPrefix)
	vm.MigrationEnd(ctx, t, cl, failed, true)
	deletePod(ctx, t, failedDst)
	renewedBy(1, "after the failed migration")
	waitPrefixRoute(ctx, t, ns1, wantPrefix, wantRoute)
	noPrefixRoute(ctx, t, ns2, wantPrefix)
	waitClaimOwner(ctx, t, ns, vm.Claim, src.Name)
	if a, p := claimV6(ctx, t, ns, vm.Claim); a != wantAddr || p != wantPrefix {
		t.Fatalf("after the failed migration the claim holds %s and %s, want %s and %s", a, p, wantAddr, wantPrefix)
	}
	onlyClaimHolds(ctx, t, ns, vm.Claim, src)

	// A migration to node 2 that completes.
	dst := launcher(ctx, t, vm, n2.Name, "migration-ok")
	m := migration("migration-ok", src, dst)
	onlyClaimHolds(ctx, t, ns, vm.Claim, dst)
	vm.MigrationStart(ctx, t, cl, m)
	waitAgentLog(ctx, t, n2.Name, "runs on node "+n1.Name+"; this node is its migration target")
	renewedBy(1, "during the migration, before the switchover")
	noPrefixRoute(ctx, t, ns2, wantPrefix)
	waitClaimOwner(ctx, t, ns, vm.Claim, src.Name)

	signalled := vm.DomainReady(ctx, t, cl)
	waitPrefixRoute(ctx, t, ns2, wantPrefix, wantRoute)
	t.Logf("switchover: the prefix route on node-2 %v after targetNodeDomainReadyTimestamp was written", time.Since(signalled).Round(time.Millisecond))
	noPrefixRoute(ctx, t, ns1, wantPrefix)
	waitClaimOwner(ctx, t, ns, vm.Claim, dst.Name)
	before1 := renewReplies(ctx, t, 1)
	renewedBy(2, "after the switchover")
	if n := renewReplies(ctx, t, 1); n != before1 {
		t.Errorf("node-1 answered %v Renews after the switchover, %v before", n, before1)
	}
	vm.MigrationEnd(ctx, t, cl, m, false)
	deletePod(ctx, t, src)
	renewedBy(2, "after the migration completed and the source pod left")
	waitPrefixRoute(ctx, t, ns2, wantPrefix, wantRoute)
	noPrefixRoute(ctx, t, ns1, wantPrefix)
	if a, p := claimV6(ctx, t, ns, vm.Claim); a != wantAddr || p != wantPrefix {
		t.Fatalf("after the migration the claim holds %s and %s, want %s and %s", a, p, wantAddr, wantPrefix)
	}
	onlyClaimHolds(ctx, t, ns, vm.Claim, dst)
	if got := claimOf(ctx, t, ns, vm.Claim).Status.IPs; !slices.Equal(ipsOnly(got), ipsOnly(wantIPs)) {
		t.Errorf("after the migration the claim holds %v, before it %v", got, wantIPs)
	}
	if got := dhc.leasedAddrs(); len(got) != 1 || got[0] != wantAddr.String() {
		t.Errorf("the guest was given %v over the whole run, want only %s\n%s", got, wantAddr, dhc.Dump())
	}

	// The VM is deleted: its dependents go with it (the garbage collector),
	// ipam-extensions lets the claim go, and the claim's items are released.
	dhc.Stop()
	if err := cl.Delete(ctx, vm.Object(), client.PropagationPolicy(metav1.DeletePropagationForeground)); err != nil {
		t.Fatal(err)
	}
	if err := releaseClaim(ctx, ns, vm.Claim); err != nil {
		t.Fatal(err)
	}
	kc.Poll(ctx, t, "the VM's pods gone and its reservations released", func() error {
		if left := kc.Reservations(ctx, t, ns); len(left) > 0 {
			return fmt.Errorf("%d left, e.g. %s", len(left), left[0].Spec.Address)
		}
		var pods corev1.PodList
		if err := cl.List(ctx, &pods, client.InNamespace(ns)); err != nil || len(pods.Items) > 0 {
			return fmt.Errorf("%d pods left (%v)", len(pods.Items), err)
		}
		return nil
	})
	noPrefixRoute(ctx, t, ns2, wantPrefix)
}

// installKubeVirtCRDs creates KubeVirt's VirtualMachine and
// VirtualMachineInstance CRDs (test/e2e's copies) and deletes them when
// the part ends.
func installKubeVirtCRDs(ctx context.Context, t *testing.T) {
	t.Helper()
	if err := controlplane.InstallCRDs(ctx, cp.Config, os.DirFS(filepath.Join("..", "..", "..", "test", "e2e", "testdata", "kubevirt"))); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cs, err := apiextensionsclient.NewForConfig(cp.Config)
		if err != nil {
			t.Error(err)
			return
		}
		crds := cs.ApiextensionsV1().CustomResourceDefinitions()
		for _, name := range []string{kubevirt.CRDName, "virtualmachines.kubevirt.io"} {
			if err := crds.Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				t.Errorf("deleting CRD %s: %v", name, err)
			}
		}
		// Gone before the next part installs them again: a CRD being
		// deleted cannot be updated, and vanishes under the install.
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		kc.Poll(ctx, t, "KubeVirt's CRDs to be gone", func() error {
			for _, name := range []string{kubevirt.CRDName, "virtualmachines.kubevirt.io"} {
				if _, err := crds.Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
					return fmt.Errorf("CRD %s still there (%v)", name, err)
				}
			}
			return nil
		})
	})
}

// waitAgentLog waits until the agent pod on node has logged substr, read
// as kubectl logs does.
func waitAgentLog(ctx context.Context, t *testing.T, node, substr string) {
	t.Helper()
	waitAgentLogLast(ctx, t, node, substr, "")
}

// waitAgentLogLast waits until the agent pod on node has logged substr
// after the last time it logged undone (none when empty).
func waitAgentLogLast(ctx context.Context, t *testing.T, node, substr, undone string) {
	t.Helper()
	what := fmt.Sprintf("the agent on %s to log %q", node, substr)
	if undone != "" {
		what += fmt.Sprintf(" after its last %q", undone)
	}
	kc.Poll(ctx, t, what, func() error {
		var pods corev1.PodList
		if err := cl.List(ctx, &pods, client.InNamespace(localnode.Namespace), client.MatchingLabels{"app.kubernetes.io/name": "tenure-agent"}); err != nil {
			return err
		}
		for _, p := range pods.Items {
			if p.Spec.NodeName != node || p.DeletionTimestamp != nil {
				continue
			}
			b, err := cs.CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{Container: "agent"}).DoRaw(ctx)
			if err != nil {
				return err
			}
			last := strings.LastIndex(string(b), substr)
			if last >= 0 && (undone == "" || last > strings.LastIndex(string(b), undone)) {
				return nil
			}
		}
		return fmt.Errorf("not logged")
	})
}

// migNamespace makes a namespace with the NAD migNAD: macvlan over each
// node's SAN leg, tenure IPAM with IPv4, IPv6, delegated prefixes and
// DHCPv6 on the SAN link.
func migNamespace(ctx context.Context, t *testing.T, name string) string {
	t.Helper()
	ns := kc.Namespace(ctx, t, name)
	kc.NAD(ctx, t, ns, migNAD, `{
		"cniVersion": "1.0.0", "name": "`+migNAD+`", "type": "macvlan", "master": "`+devnode.SANLink+`", "mode": "bridge",
		"ipam": {"type": "tenure", "ipRanges": [{"range": "10.102.0.0/24"}, {"range": "fd00:102::/64"}],
			"prefix_delegation": {"range": "fd00:1020::/40", "prefix_length": 56}, "network_name": "vmsan",
			"dhcpv6": {"interfaces": ["`+devnode.SANLink+`"], "preferred_lifetime": 4, "valid_lifetime": 60}}}`)
	return ns
}

// createMigVM creates a VirtualMachine with one bridge interface on the
// Multus network migNAD, and its claim as ipam-extensions creates it.
func createMigVM(ctx context.Context, t *testing.T, ns, name string) *testbed.VM {
	t.Helper()
	v := testbed.CreateVM(ctx, t, cl, testbed.VM{Namespace: ns, Name: name, Network: migNetwork, NAD: migNAD, MAC: migVMMAC}, migNAD)
	// Were the part to fail, the namespace's deletion must not wait on
	// ipam-extensions, which does not run here.
	t.Cleanup(func() { _ = releaseClaim(context.Background(), ns, v.Claim) })
	return v
}

// releaseClaim is ipam-extensions' removal of its finalizer from a VM's
// claim, read fresh and retried on a conflict (the agents and the
// controller write the claim too).
func releaseClaim(ctx context.Context, ns, name string) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var c ipamclaimsv1alpha1.IPAMClaim
		if err := cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &c); err != nil {
			return client.IgnoreNotFound(err)
		}
		if !controllerutil.RemoveFinalizer(&c, testbed.ClaimFinalizer) {
			return nil
		}
		return cl.Update(ctx, &c)
	})
}

// launcher creates a virt-launcher pod of the VM's VMI on node (a
// migration target carries the migration's UID), lists it in the VMI's
// active pods as virt-controller does, and waits for its kubelet to run it.
func launcher(ctx context.Context, t *testing.T, v *testbed.VM, node, migrationUID string) *corev1.Pod {
	t.Helper()
	name := "virt-launcher-" + v.Name + "-" + strings.TrimPrefix(node, "tenure-dev-")
	if migrationUID != "" {
		name += "-" + migrationUID
	}
	p := localnode.Pod(v.Namespace, name, "")
	v.DressLauncher(p, migrationUID)
	p.Spec.NodeName = node
	if err := cl.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	// virt-controller lists the pod among the VMI's active pods as soon as
	// it sees it; only then does the pod present the VM's claim.
	v.PodCreated(ctx, t, cl, testbed.LauncherOf(p))
	return kc.WaitRunning(ctx, t, v.Namespace, name)
}

// migration is one live migration from src to dst, as KubeVirt's
// writers take it.
func migration(uid string, src, dst *corev1.Pod) testbed.Migration {
	return testbed.Migration{UID: uid, Src: testbed.LauncherOf(src), Dst: testbed.LauncherOf(dst)}
}

func deletePod(ctx context.Context, t *testing.T, p *corev1.Pod) {
	t.Helper()
	if err := cl.Delete(ctx, p); err != nil {
		t.Fatal(err)
	}
	kc.WaitGone(ctx, t, p.Namespace, p.Name)
}

func claimOf(ctx context.Context, t *testing.T, ns, name string) *ipamclaimsv1alpha1.IPAMClaim {
	t.Helper()
	var c ipamclaimsv1alpha1.IPAMClaim
	if err := cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &c); err != nil {
		t.Fatal(err)
	}
	return &c
}

// claimV6 returns the claim's IPv6 address and its one delegated prefix.
func claimV6(ctx context.Context, t *testing.T, ns, name string) (netip.Addr, netip.Prefix) {
	t.Helper()
	c := claimOf(ctx, t, ns, name)
	var addr netip.Addr
	for _, s := range c.Status.IPs {
		if p, err := netip.ParsePrefix(s); err == nil && p.Addr().Is6() {
			addr = p.Addr()
		}
	}
	if !addr.IsValid() || len(c.Status.DelegatedPrefixes) != 1 {
		t.Fatalf("claim status %+v: want an IPv6 address and one prefix", c.Status)
	}
	return addr, netip.MustParsePrefix(c.Status.DelegatedPrefixes[0])
}

func waitClaimOwner(ctx context.Context, t *testing.T, ns, claim, pod string) {
	t.Helper()
	kc.Poll(ctx, t, fmt.Sprintf("claim %s/%s ownerPod %s", ns, claim, pod), func() error {
		if c := claimOf(ctx, t, ns, claim); c.Status.OwnerPod == nil || c.Status.OwnerPod.Name != pod {
			return fmt.Errorf("ownerPod %+v", c.Status.OwnerPod)
		}
		return nil
	})
}

// onlyClaimHolds checks that the namespace's reservations are exactly the
// claim's: its addresses and its prefix, each owned by the claim, and that
// the launcher p has those addresses on its interface, as Multus recorded.
func onlyClaimHolds(ctx context.Context, t *testing.T, ns, claim string, p *corev1.Pod) {
	t.Helper()
	c := claimOf(ctx, t, ns, claim)
	want := append(ipsOnly(c.Status.IPs), c.Status.DelegatedPrefixes...)
	slices.Sort(want)
	var got []string
	for _, r := range kc.Reservations(ctx, t, ns) {
		if r.Spec.Owner.UID != string(c.UID) {
			t.Errorf("reservation of %s owned by %s %s, not the claim", r.Spec.Address, r.Spec.Owner.Kind, r.Spec.Owner.Name)
		}
		got = append(got, r.Spec.Address)
	}
	slices.Sort(got)
	if !slices.Equal(got, want) || len(want) != 3 {
		t.Errorf("the namespace's reservations hold %v, the claim records %v; want its IPv4 and IPv6 address and /56", got, want)
	}
	if rec := attachmentIPs(t, p); !slices.Equal(rec, ipsOnly(c.Status.IPs)) {
		t.Errorf("launcher %s on %s: Multus recorded %v, the claim holds %v", p.Name, p.Spec.NodeName, rec, c.Status.IPs)
	}
	inside, _ := nodetest.AddrsIn(t, podNetns(t, p), testbed.LauncherInterface(migNetwork))
	if in := ipsOnly(inside); !slices.Equal(in, ipsOnly(c.Status.IPs)) {
		t.Errorf("launcher %s on %s: its interface holds %v, the claim %v", p.Name, p.Spec.NodeName, in, c.Status.IPs)
	}
}

// ipsOnly drops the prefix lengths of a claim's status.ips.
func ipsOnly(cidrs []string) []string {
	var out []string
	for _, s := range cidrs {
		out = append(out, strings.SplitN(s, "/", 2)[0])
	}
	slices.Sort(out)
	return out
}

// attachmentIPs is what Multus recorded for the launcher's interface.
func attachmentIPs(t *testing.T, p *corev1.Pod) []string {
	t.Helper()
	ips, err := localnode.AttachmentIPs(p, testbed.LauncherInterface(migNetwork))
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(ips)
	return ips
}

// plugGuestOnSAN makes the guest: a network namespace whose eth0, with the
// VM's MAC, is a veth plugged into the SAN bridge in the fabric's
// namespace.
func plugGuestOnSAN(ctx context.Context, t *testing.T) string {
	t.Helper()
	fabricPath, err := cluster.FabricNetns()
	if err != nil {
		t.Fatal(err)
	}
	fabric := filepath.Base(fabricPath)
	guest := fmt.Sprintf("tenure-guest-%d", os.Getpid()%100000)
	if _, remove, err := testbed.AddNetns(guest); err != nil {
		t.Fatal(err)
	} else {
		t.Cleanup(remove)
	}
	out, err := exec.Command("ip", "netns", "exec", guest, "sh", "-c",
		"echo 0 > /proc/sys/net/ipv6/conf/all/accept_dad && echo 0 > /proc/sys/net/ipv6/conf/default/accept_dad").CombinedOutput()
	if err != nil {
		t.Fatalf("disabling DAD in %s: %v: %s", guest, err, out)
	}
	for _, c := range []struct {
		ns   string
		args []string
	}{
		{fabric, []string{"link", "add", "san-guest", "type", "veth", "peer", "name", "eth0", "netns", guest}},
		{fabric, []string{"link", "set", "san-guest", "master", "san0", "up"}},
		{guest, []string{"link", "set", "eth0", "address", migVMMAC, "up"}},
	} {
		if out, err := testbed.IPIn(c.ns, c.args...); err != nil {
			t.Fatalf("ip -n %s %s: %v: %s", c.ns, strings.Join(c.args, " "), err, out)
		}
	}
	kc.Poll(ctx, t, "a link-local address on the guest's eth0", func() error {
		out, _ := testbed.IPIn(guest, "-6", "addr", "show", "dev", "eth0", "scope", "link")
		if strings.Contains(out, "fe80::") && !strings.Contains(out, "tentative") {
			return nil
		}
		return fmt.Errorf("%q", out)
	})
	return guest
}

// waitPrefixRoute waits until the node namespace ns routes prefix as want
// (on-link, to the guest's address).
func waitPrefixRoute(ctx context.Context, t *testing.T, ns string, prefix netip.Prefix, want string) {
	t.Helper()
	kc.Poll(ctx, t, fmt.Sprintf("route %q in %s", want, ns), func() error {
		out, _ := testbed.IPIn(ns, "-6", "route", "show", prefix.String())
		if strings.Contains(out, want) && strings.Contains(out, "onlink") {
			return nil
		}
		return fmt.Errorf("route: %q", out)
	})
}

// noPrefixRoute waits until the node namespace ns has no route to prefix.
func noPrefixRoute(ctx context.Context, t *testing.T, ns string, prefix netip.Prefix) {
	t.Helper()
	kc.Poll(ctx, t, fmt.Sprintf("no route to %s in %s", prefix, ns), func() error {
		if out, _ := testbed.IPIn(ns, "-6", "route", "show", prefix.String()); out != "" {
			return fmt.Errorf("route: %q", out)
		}
		return nil
	})
}

// renewReplies is tenure_dhcpv6_messages_total{type="renew",
// outcome="reply"} of node i's agent (from 1), scraped from inside that
// node's network namespace, where the agent's metrics port is.
func renewReplies(ctx context.Context, t *testing.T, i int) float64 {
	t.Helper()
	m, err := scrapeInNode(ctx, cluster.Nodes[i-1], net.JoinHostPort(devnode.NodeIP(i), "9467"))
	if err != nil {
		t.Fatalf("node-%d's agent metrics: %v", i, err)
	}
	v, _ := m.Sum("tenure_dhcpv6_messages_total", `type="renew"`, `outcome="reply"`)
	return v
}

// scrapeInNode reads the metrics served at hostPort in node's network
// namespace, from inside it.
func scrapeInNode(ctx context.Context, node *devnode.Node, hostPort string) (testbed.Metrics, error) {
	ns := filepath.Base(node.Netns())
	tr := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		var conn net.Conn
		err := testbed.InNetns(ns, func() error {
			var err error
			conn, err = (&net.Dialer{}).DialContext(ctx, network, addr)
			return err
		})
		return conn, err
	}}
	defer tr.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+hostPort+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s", hostPort, resp.Status)
	}
	return testbed.ParseMetrics(string(b))
}

// guestDhclient is a testbed.Dhclient in the guest, stopped when the part
// ends.
type guestDhclient struct {
	t *testing.T
	*testbed.Dhclient
}

var reAddress = regexp.MustCompile(` address=([0-9a-fA-F:]+)/`)

func startGuestDhclient(t *testing.T, ns string) *guestDhclient {
	t.Helper()
	d, err := testbed.StartDhclient(ns, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Stop)
	return &guestDhclient{t: t, Dhclient: d}
}

// leasedAddrs lists every distinct address the client script was given.
func (d *guestDhclient) leasedAddrs() []string {
	var out []string
	for _, l := range d.ScriptCalls() {
		if m := reAddress.FindStringSubmatch(l); m != nil && !slices.Contains(out, m[1]) {
			out = append(out, m[1])
		}
	}
	return out
}

// waitLease waits until the lease file holds an address and a prefix and
// the script has installed the address.
func (d *guestDhclient) waitLease(ctx context.Context) testbed.DhclientLease {
	t := d.t
	t.Helper()
	var lease testbed.DhclientLease
	kc.Poll(ctx, t, "the guest's dhclient to lease an address and a prefix", func() error {
		var ok bool
		if lease, ok = d.Lease(); !ok {
			if exited, err := d.Exited(); exited {
				t.Fatalf("dhclient exited (%v) without a lease\n%s", err, d.Dump())
			}
			return fmt.Errorf("no lease yet")
		}
		out, _ := testbed.IPIn(d.Netns, "-6", "addr", "show", "dev", "eth0")
		if !strings.Contains(out, lease.Addr.String()+"/") {
			return fmt.Errorf("%s not on eth0 yet", lease.Addr)
		}
		return nil
	})
	t.Logf("the guest's dhclient: %s and %s", lease.Addr, lease.Prefix)
	return lease
}

// waitRenewed waits for the client to report a Renew answered with addr
// and prefix, after every one it had reported when called.
func (d *guestDhclient) waitRenewed(ctx context.Context, addr netip.Addr, prefix netip.Prefix, what string) {
	t := d.t
	t.Helper()
	a0, p0 := d.Renewals(addr, prefix)
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for wctx.Err() == nil {
		if a, p := d.Renewals(addr, prefix); a > a0 && p > p0 {
			return
		}
		select {
		case <-wctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
	t.Fatalf("no Renew of %s and %s answered %s within 30s\n%s", addr, prefix, what, d.Dump())
}
