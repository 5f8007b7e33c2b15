//go:build integration

package nodes_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/dev/devnode"
	"github.com/tenure-ipam/tenure/dev/localnode"
	"github.com/tenure-ipam/tenure/dev/nodetest"
	"github.com/tenure-ipam/tenure/test/testbed"
)

const (
	// rackLabel is the nodes' rack: under node-restriction.kubernetes.io/,
	// which a kubelet cannot set on its own Node (docs/design.md, "Pools
	// lists").
	rackLabel = "node-restriction.kubernetes.io/rack"
	// rackNAD is the NAD whose tenure config lists both racks' pools.
	rackNAD = "rack-san"
	// rackVMMAC is the rack part's guest MAC.
	rackVMMAC = "02:00:00:00:97:02"
	// rackRouteDst is the config's one route, without a gateway: each
	// result gives it the gateway of the pool its address came from.
	rackRouteDst = "10.211.0.0/16"
)

// rackPool is one rack's IPPool: its subnet and gateway.
type rackPool struct{ rack, pool, subnet, gateway string }

var (
	rackPoolA = rackPool{rack: "a", pool: "rack3-a", subnet: "10.111.1.0/24", gateway: "10.111.1.1"}
	rackPoolB = rackPool{rack: "b", pool: "rack3-b", subnet: "10.111.2.0/24", gateway: "10.111.2.1"}
)

// Node 1 is rack a, nodes 2 and 3 rack b (the node label rackLabel); each
// rack has an IPPool selecting its nodes, and one NAD (macvlan over the
// SAN) lists both pools.
//   - A ReplicaSet's six pods, two a node: each pod's net1 address lies in
//     its node's rack subnet, is held by a reservation of that pod (owner
//     name and UID, spec.pool its rack's pool), and its route to
//     rackRouteDst goes through its rack's gateway. A pod on node 1
//     deleted: its replacement gets a rack a address too, and the deleted
//     pod's reservation is gone by name.
//   - A VM started on node 1 gets a rack a address on its claim. Migrated
//     to node 2 (rack b, which rack a's pool does not select): the target
//     launcher holds the claim's rack a address, its route goes through
//     rack a's gateway (the result carries the claim's pool's gateway),
//     and the claim's status.ips and its reservations (name and UID) are
//     unchanged.
//   - Everything the part made is deleted, and every reservation it saw is
//     gone by name; the nodes lose the rack label.
func rackPoolsGiveEachNodeItsRacksSubnet(t *testing.T) {
	ctx := nodetest.Context(t, 8*time.Minute)
	n1, n2, n3 := cluster.Nodes[0], cluster.Nodes[1], cluster.Nodes[2]
	rackOf := map[string]rackPool{n1.Name: rackPoolA, n2.Name: rackPoolB, n3.Name: rackPoolB}
	t.Cleanup(func() {
		for node := range rackOf {
			if err := setNodeRack(context.Background(), node, ""); err != nil {
				t.Errorf("removing %s from node %s: %v", rackLabel, node, err)
			}
		}
	})
	for node, r := range rackOf {
		if err := setNodeRack(ctx, node, r.rack); err != nil {
			t.Fatal(err)
		}
	}
	var pools []*tenurev1alpha1.IPPool
	for _, r := range []rackPool{rackPoolA, rackPoolB} {
		p := &tenurev1alpha1.IPPool{
			ObjectMeta: metav1.ObjectMeta{Name: r.pool},
			Spec: tenurev1alpha1.IPPoolSpec{
				Ranges: []tenurev1alpha1.PoolRange{{Range: r.subnet}}, Gateway: r.gateway,
				NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{rackLabel: r.rack}},
			},
		}
		// Strict: an IPPool CRD without the selectors (one a release
		// before installed) refuses the pool instead of dropping them.
		if err := cl.Create(ctx, p, client.FieldValidation(metav1.FieldValidationStrict)); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cl.Delete(context.Background(), p) })
		pools = append(pools, p)
	}
	installKubeVirtCRDs(ctx, t)
	for _, n := range []*devnode.Node{n1, n2} {
		waitAgentLog(ctx, t, n.Name, "KubeVirt VirtualMachineInstances are served")
	}
	ns := kc.Namespace(ctx, t, "racks3")
	kc.NAD(ctx, t, ns, rackNAD, `{
		"cniVersion": "1.0.0", "name": "`+rackNAD+`", "type": "macvlan", "master": "`+devnode.SANLink+`", "mode": "bridge",
		"ipam": {"type": "tenure", "pools": ["`+rackPoolA.pool+`", "`+rackPoolB.pool+`"], "network_name": "racks3",
			"routes": [{"dst": "`+rackRouteDst+`"}]}}`)
	// Every reservation the part saw, name: UID; all must be gone at the end.
	seen := map[string]string{}

	// The ReplicaSet: two pods a node (topology spread, DoNotSchedule).
	labels := map[string]string{"app": "racks3"}
	tmpl := localnode.Pod(ns, "", rackNAD)
	tmpl.Labels = labels
	tmpl.Spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{
		MaxSkew: 1, TopologyKey: corev1.LabelHostname, WhenUnsatisfiable: corev1.DoNotSchedule,
		LabelSelector: &metav1.LabelSelector{MatchLabels: labels},
	}}
	rs := &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "racks3"},
		Spec: appsv1.ReplicaSetSpec{
			Replicas: ptr.To(int32(6)),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: tmpl.ObjectMeta, Spec: tmpl.Spec},
		},
	}
	if err := cl.Create(ctx, rs); err != nil {
		t.Fatal(err)
	}
	replicas := func(what string, except types.UID) []corev1.Pod {
		t.Helper()
		var running []corev1.Pod
		kc.Poll(ctx, t, what, func() error {
			var pods corev1.PodList
			if err := cl.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels(labels)); err != nil {
				return err
			}
			running = nil
			for _, p := range pods.Items {
				if p.UID == except {
					return fmt.Errorf("%s not gone yet", p.Name)
				}
				if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
					running = append(running, p)
				}
			}
			if len(running) != 6 || len(pods.Items) != 6 {
				return fmt.Errorf("%d running of %d", len(running), len(pods.Items))
			}
			return nil
		})
		return running
	}
	perNode := map[string][]string{}
	for _, p := range replicas("six replicas running", "") {
		r := rackOf[p.Spec.NodeName]
		name, uid := rackPodAddr(ctx, t, &p, r)
		seen[name] = uid
		perNode[p.Spec.NodeName] = append(perNode[p.Spec.NodeName], p.Name)
	}
	for _, n := range cluster.Nodes {
		if len(perNode[n.Name]) != 2 {
			t.Errorf("node %s runs replicas %v, want two", n.Name, perNode[n.Name])
		}
	}
	t.Logf("replicas by node: %v", perNode)

	// A replica on node 1 deleted: the spread puts its replacement back on
	// node 1, which gets a rack a address.
	gone, err := kc.Pod(ctx, ns, perNode[n1.Name][0])
	if err != nil {
		t.Fatal(err)
	}
	var goneRes []string
	for _, r := range kc.Reservations(ctx, t, ns) {
		if r.Spec.Owner.UID == string(gone.UID) {
			goneRes = append(goneRes, r.Name)
		}
	}
	if len(goneRes) != 1 {
		t.Fatalf("pod %s holds reservations %v, want one", gone.Name, goneRes)
	}
	if err := cl.Delete(ctx, gone); err != nil {
		t.Fatal(err)
	}
	replaced := false
	for _, p := range replicas("the replacement of "+gone.Name+" running", gone.UID) {
		if slices.Contains(perNode[p.Spec.NodeName], p.Name) {
			continue
		}
		replaced = true
		name, uid := rackPodAddr(ctx, t, &p, rackOf[p.Spec.NodeName])
		seen[name] = uid
		t.Logf("replacement %s of %s on %s", p.Name, gone.Name, p.Spec.NodeName)
	}
	if !replaced {
		t.Errorf("no replacement of %s among the running replicas", gone.Name)
	}
	reservationsGone(ctx, t, goneRes)

	// A VM on rack a migrates to rack b.
	vm := testbed.CreateVM(ctx, t, cl, testbed.VM{Namespace: ns, Name: "vm1", Network: migNetwork, NAD: rackNAD, MAC: rackVMMAC}, rackNAD)
	t.Cleanup(func() { _ = releaseClaim(context.Background(), ns, vm.Claim) })
	vm.Start(ctx, t, cl)
	src := launcher(ctx, t, vm, n1.Name, "")
	vm.Running(ctx, t, cl, testbed.LauncherOf(src))
	waitClaimOwner(ctx, t, ns, vm.Claim, src.Name)
	claim := claimOf(ctx, t, ns, vm.Claim)
	wantIPs := ipsOnly(claim.Status.IPs)
	if len(wantIPs) != 1 || !netip.MustParsePrefix(rackPoolA.subnet).Contains(netip.MustParseAddr(wantIPs[0])) {
		t.Fatalf("the VM's claim on node %s (rack a) holds %v, want one address of %s", n1.Name, claim.Status.IPs, rackPoolA.subnet)
	}
	claimRes := claimReservations(ctx, t, ns, string(claim.UID), rackPoolA)
	if got := slices.Sorted(maps.Values(claimRes)); !slices.Equal(got, wantIPs) {
		t.Fatalf("the claim's reservations hold %v, its status.ips %v", got, wantIPs)
	}
	claimUIDs := claimReservationUIDs(ctx, t, ns, string(claim.UID))
	maps.Copy(seen, claimUIDs)
	launcherHolds(t, src, wantIPs, rackPoolA.gateway)

	dst := launcher(ctx, t, vm, n2.Name, "rack-migration")
	launcherHolds(t, dst, wantIPs, rackPoolA.gateway)
	m := migration("rack-migration", src, dst)
	vm.MigrationStart(ctx, t, cl, m)
	vm.DomainReady(ctx, t, cl)
	waitClaimOwner(ctx, t, ns, vm.Claim, dst.Name)
	vm.MigrationEnd(ctx, t, cl, m, false)
	deletePod(ctx, t, src)
	if got := ipsOnly(claimOf(ctx, t, ns, vm.Claim).Status.IPs); !slices.Equal(got, wantIPs) {
		t.Errorf("after the migration to rack b the claim's status.ips are %v, before it %v", got, wantIPs)
	}
	if got := claimReservationUIDs(ctx, t, ns, string(claim.UID)); !maps.Equal(got, claimUIDs) {
		t.Errorf("the claim's reservations (name: UID) changed across racks: %v -> %v", claimUIDs, got)
	}
	claimReservations(ctx, t, ns, string(claim.UID), rackPoolA)
	launcherHolds(t, dst, wantIPs, rackPoolA.gateway)
	t.Logf("the VM's claim holds %v on rack a; its launcher %s on %s (rack b) holds it after the migration, routing through %s", wantIPs, dst.Name, dst.Spec.NodeName, rackPoolA.gateway)

	// Everything goes: the VM (its VMI and launcher with it), the claim,
	// the ReplicaSet and its pods, the NAD, the pools, the labels.
	if err := cl.Delete(ctx, vm.Object(), client.PropagationPolicy(metav1.DeletePropagationForeground)); err != nil {
		t.Fatal(err)
	}
	if err := releaseClaim(ctx, ns, vm.Claim); err != nil {
		t.Fatal(err)
	}
	if err := cl.Delete(ctx, rs, client.PropagationPolicy(metav1.DeletePropagationForeground)); err != nil {
		t.Fatal(err)
	}
	kc.Poll(ctx, t, "the part's pods gone", func() error {
		var pods corev1.PodList
		if err := cl.List(ctx, &pods, client.InNamespace(ns)); err != nil || len(pods.Items) > 0 {
			return fmt.Errorf("%d pods left (%v)", len(pods.Items), err)
		}
		return nil
	})
	reservationsGone(ctx, t, slices.Sorted(maps.Keys(seen)))
	if left := kc.Reservations(ctx, t, ns); len(left) > 0 {
		t.Errorf("reservations of %s left: %s of %s", ns, left[0].Spec.Address, left[0].Spec.Owner.Name)
	}
	nad, err := localnode.NAD(ns, rackNAD, "{}")
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.Delete(ctx, nad); err != nil {
		t.Fatal(err)
	}
	for _, p := range pools {
		if err := cl.Delete(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	kc.Poll(ctx, t, "the NAD and the rack pools gone", func() error {
		if err := cl.Get(ctx, client.ObjectKeyFromObject(nad), nad); !apierrors.IsNotFound(err) {
			return fmt.Errorf("NAD %s/%s: %v", ns, rackNAD, err)
		}
		for _, p := range pools {
			if err := cl.Get(ctx, client.ObjectKeyFromObject(p), &tenurev1alpha1.IPPool{}); !apierrors.IsNotFound(err) {
				return fmt.Errorf("IPPool %s: %v", p.Name, err)
			}
		}
		return nil
	})
	for node := range rackOf {
		if err := setNodeRack(ctx, node, ""); err != nil {
			t.Fatal(err)
		}
		var n corev1.Node
		if err := cl.Get(ctx, client.ObjectKey{Name: node}, &n); err != nil {
			t.Fatal(err)
		}
		if v, ok := n.Labels[rackLabel]; ok {
			t.Errorf("node %s keeps %s=%s", node, rackLabel, v)
		}
	}
}

// setNodeRack sets the node's rackLabel to rack, or removes it if rack is
// empty.
func setNodeRack(ctx context.Context, node, rack string) error {
	var v any
	if rack != "" {
		v = rack
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]any{rackLabel: v}}})
	if err != nil {
		return err
	}
	return cl.Patch(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, client.RawPatch(types.MergePatchType, patch))
}

// rackPodAddr checks the pod's net1 against its node's rack r: its one
// address (inside the pod, in Multus' status) lies in r's subnet, its
// reservation is the pod's by owner name and UID with spec.pool r's pool,
// and its route to rackRouteDst goes through r's gateway. It returns the
// reservation's name and UID.
func rackPodAddr(ctx context.Context, t *testing.T, p *corev1.Pod, r rackPool) (string, string) {
	t.Helper()
	addr := net1Of(ctx, t, p)
	if !netip.MustParsePrefix(r.subnet).Contains(netip.MustParseAddr(addr)) {
		t.Errorf("pod %s on %s (rack %s): net1 holds %s, not an address of %s", p.Name, p.Spec.NodeName, r.rack, addr, r.subnet)
	}
	var name, uid string
	for _, res := range kc.Reservations(ctx, t, p.Namespace) {
		if res.Spec.Address != addr {
			continue
		}
		name, uid = res.Name, string(res.UID)
		if o := res.Spec.Owner; o.Kind != tenurev1alpha1.OwnerPod || o.Name != p.Name || o.UID != string(p.UID) {
			t.Errorf("pod %s (%s): reservation %s of %s is owned by %s %s (%s)", p.Name, p.UID, res.Name, addr, o.Kind, o.Name, o.UID)
		}
		if res.Spec.Pool != r.pool {
			t.Errorf("pod %s on %s (rack %s): reservation %s has spec.pool %q, want %s", p.Name, p.Spec.NodeName, r.rack, res.Name, res.Spec.Pool, r.pool)
		}
	}
	if name == "" {
		t.Errorf("pod %s: no reservation holds %s", p.Name, addr)
	}
	if gws := routeGateways(t, podNetns(t, p), "net1", rackRouteDst); !slices.Equal(gws, []string{r.gateway}) {
		t.Errorf("pod %s on %s (rack %s): routes to %s through %v, want through %s", p.Name, p.Spec.NodeName, r.rack, rackRouteDst, gws, r.gateway)
	}
	return name, uid
}

// claimReservations returns the addresses of the claim's reservations by
// name, each checked to be of pool r.
func claimReservations(ctx context.Context, t *testing.T, ns, claimUID string, r rackPool) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, res := range kc.Reservations(ctx, t, ns) {
		if res.Spec.Owner.UID != claimUID {
			continue
		}
		out[res.Name] = res.Spec.Address
		if res.Spec.Owner.Kind != tenurev1alpha1.OwnerIPAMClaim || res.Spec.Pool != r.pool {
			t.Errorf("the claim's reservation %s of %s: owner kind %s, spec.pool %q; want IPAMClaim and %s", res.Name, res.Spec.Address, res.Spec.Owner.Kind, res.Spec.Pool, r.pool)
		}
	}
	return out
}

// claimReservationUIDs returns the claim's reservations, name: UID.
func claimReservationUIDs(ctx context.Context, t *testing.T, ns, claimUID string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, res := range kc.Reservations(ctx, t, ns) {
		if res.Spec.Owner.UID == claimUID {
			out[res.Name] = string(res.UID)
		}
	}
	return out
}

// launcherHolds checks that the launcher p holds exactly ips on the VM's
// interface (inside the pod and in Multus' status) and routes
// rackRouteDst through gateway.
func launcherHolds(t *testing.T, p *corev1.Pod, ips []string, gateway string) {
	t.Helper()
	if rec := attachmentIPs(t, p); !slices.Equal(rec, ips) {
		t.Errorf("launcher %s on %s: Multus recorded %v, the claim holds %v", p.Name, p.Spec.NodeName, rec, ips)
	}
	path := podNetns(t, p)
	ifname := testbed.LauncherInterface(migNetwork)
	inside, _ := nodetest.AddrsIn(t, path, ifname)
	if got := ipsOnly(inside); !slices.Equal(got, ips) {
		t.Errorf("launcher %s on %s: %s holds %v, the claim %v", p.Name, p.Spec.NodeName, ifname, got, ips)
	}
	if gws := routeGateways(t, path, ifname, rackRouteDst); !slices.Equal(gws, []string{gateway}) {
		t.Errorf("launcher %s on %s: routes to %s through %v, want through %s", p.Name, p.Spec.NodeName, rackRouteDst, gws, gateway)
	}
}

// routeGateways lists the gateways of the routes to dst over ifname in
// the network namespace at path.
func routeGateways(t *testing.T, path, ifname, dst string) []string {
	t.Helper()
	ns, err := netns.GetFromPath(path)
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	link, err := h.LinkByName(ifname)
	if err != nil {
		t.Fatalf("%s in %s: %v", ifname, path, err)
	}
	_, d, err := net.ParseCIDR(dst)
	if err != nil {
		t.Fatal(err)
	}
	routes, err := h.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{LinkIndex: link.Attrs().Index, Dst: d}, netlink.RT_FILTER_OIF|netlink.RT_FILTER_DST)
	if err != nil {
		t.Fatal(err)
	}
	var gws []string
	for _, r := range routes {
		gws = append(gws, r.Gw.String())
	}
	return gws
}

// reservationsGone waits until no reservation of those names exists.
func reservationsGone(ctx context.Context, t *testing.T, names []string) {
	t.Helper()
	kc.Poll(ctx, t, fmt.Sprintf("reservations %v gone", names), func() error {
		for _, name := range names {
			err := cl.Get(ctx, client.ObjectKey{Name: name}, &tenurev1alpha1.IPReservation{})
			if !apierrors.IsNotFound(err) {
				return fmt.Errorf("%s still there (%v)", name, err)
			}
		}
		return nil
	})
}
