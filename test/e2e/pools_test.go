//go:build integration

package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/controller/repair"
	"github.com/tenure-ipam/tenure/internal/ops"
	"github.com/tenure-ipam/tenure/test/controlplane"
	"github.com/tenure-ipam/tenure/test/controlplane/cptest"
	"github.com/tenure-ipam/tenure/test/testbed"
)

// rackLabel is a node label a kubelet cannot set on its own Node.
const rackLabel = "node-restriction.kubernetes.io/rack"

func createPool(t *testing.T, ctx context.Context, c client.Client, name string, spec tenurev1alpha1.IPPoolSpec) {
	t.Helper()
	p := &tenurev1alpha1.IPPool{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: spec}
	if err := c.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Delete(context.Background(), p) })
}

func labelObject(t *testing.T, ctx context.Context, c client.Client, obj client.Object, labels map[string]string) {
	t.Helper()
	if err := c.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(obj.DeepCopyObject().(client.Object))
	l := obj.GetLabels()
	if l == nil {
		l = map[string]string{}
	}
	for k, v := range labels {
		l[k] = v
	}
	obj.SetLabels(l)
	if err := c.Patch(ctx, obj, patch); err != nil {
		t.Fatal(err)
	}
}

func in(cidr string, addrs ...string) bool {
	p := netip.MustParsePrefix(cidr)
	for _, a := range addrs {
		if !p.Contains(netip.MustParseAddr(a)) {
			return false
		}
	}
	return len(addrs) > 0
}

// poolsOf maps each reservation's address to its spec.pool.
func poolsOf(rs []tenurev1alpha1.IPReservation) map[string]string {
	out := map[string]string{}
	for _, r := range rs {
		out[r.Spec.Address] = r.Spec.Pool
	}
	return out
}

// TestAPodGetsItsRacksPool: on a routed fabric with a subnet per rack, one
// NAD lists the racks' pools and a shared one; pods get their rack's IPv4
// subnet by node and the shared IPv6 range, and a VM's claim migrating to
// the other rack keeps the addresses its first ADD got.
func TestAPodGetsItsRacksPool(t *testing.T) {
	ctx := testContext(t, 2*time.Minute)
	c := apiClient(t)
	agents := startAgents(t, ctx, "rack-a-1", "rack-b-1")
	labelObject(t, ctx, c, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "rack-a-1"}}, map[string]string{rackLabel: "a"})
	labelObject(t, ctx, c, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "rack-b-1"}}, map[string]string{rackLabel: "b"})
	rack := func(r string) *metav1.LabelSelector {
		return &metav1.LabelSelector{MatchLabels: map[string]string{rackLabel: r}}
	}
	createPool(t, ctx, c, "e2e-rack-a", tenurev1alpha1.IPPoolSpec{Ranges: []tenurev1alpha1.PoolRange{{Range: "10.81.1.0/24"}}, Gateway: "10.81.1.1", NodeSelector: rack("a")})
	createPool(t, ctx, c, "e2e-rack-b", tenurev1alpha1.IPPoolSpec{Ranges: []tenurev1alpha1.PoolRange{{Range: "10.81.2.0/24"}}, Gateway: "10.81.2.1", NodeSelector: rack("b")})
	createPool(t, ctx, c, "e2e-rack-shared", tenurev1alpha1.IPPoolSpec{Ranges: []tenurev1alpha1.PoolRange{{Range: "10.81.0.0/24"}, {Range: "fd00:81::/64"}}})
	ipam := `{"pools":["e2e-rack-a","e2e-rack-b","e2e-rack-shared"],"network_name":"racks"}`
	conf := func(node string) []byte { return netconf("racks", agents[node].Socket, ipam) }
	const ns = "e2e-racks"

	// Pods of one ReplicaSet, two per rack.
	for _, tc := range []struct{ node, subnet, gw string }{
		{"rack-a-1", "10.81.1.0/24", "10.81.1.1"}, {"rack-b-1", "10.81.2.0/24", "10.81.2.1"},
		{"rack-a-1", "10.81.1.0/24", "10.81.1.1"}, {"rack-b-1", "10.81.2.0/24", "10.81.2.1"},
	} {
		p := newPod(t, ctx, c, ns, tc.node, nil)
		r, err := add(ctx, p, conf(tc.node))
		if err != nil {
			t.Fatalf("ADD on %s: %v", tc.node, err)
		}
		got := addrs(r)
		if len(got) != 2 || !in(tc.subnet, got[0]) || !in("fd00:81::/64", got[1]) {
			t.Fatalf("pod on %s got %v, want one address of %s and one of fd00:81::/64", tc.node, got, tc.subnet)
		}
		if gw := r.IPs[0].Gateway.String(); gw != tc.gw || r.IPs[1].Gateway != nil {
			t.Errorf("pod on %s: gateways %v, %v; want %s and none", tc.node, r.IPs[0].Gateway, r.IPs[1].Gateway, tc.gw)
		}
		pools := poolsOf(ownedBy(t, ctx, p.uid))
		wantPool := "e2e-rack-" + tc.node[len("rack-"):len("rack-a")]
		if pools[got[0]] != wantPool || pools[got[1]] != "e2e-rack-shared" {
			t.Errorf("pod on %s: reservations' spec.pool %v, want %s and e2e-rack-shared", tc.node, pools, wantPool)
		}
	}

	// tenurectl why says which pool a pod's ADD chose and why not the
	// others; tenurectl pools shows each pool's selectors.
	if err := controlplane.InstallCRDs(ctx, cptest.Current().Config, controlplane.MultusCRDs()); err != nil {
		t.Fatal(err)
	}
	cli := apiClient(t) // discovers the NetworkAttachmentDefinition kind
	nadObj := &unstructured.Unstructured{}
	nadObj.SetAPIVersion("k8s.cni.cncf.io/v1")
	nadObj.SetKind("NetworkAttachmentDefinition")
	nadObj.SetNamespace(ns)
	nadObj.SetName("racks")
	if err := unstructured.SetNestedField(nadObj.Object, string(conf("rack-b-1")), "spec", "config"); err != nil {
		t.Fatal(err)
	}
	if err := cli.Create(ctx, nadObj); err != nil {
		t.Fatal(err)
	}
	// tenurectl import reads every NetworkAttachmentDefinition of the
	// cluster; the whereabouts tests import after this one.
	t.Cleanup(func() { _ = cli.Delete(context.Background(), nadObj) })
	onB := newPod(t, ctx, c, ns, "rack-b-1", map[string]string{"k8s.v1.cni.cncf.io/networks": `[{"name":"racks","interface":"net1"}]`})
	if _, err := add(ctx, onB, conf("rack-b-1")); err != nil {
		t.Fatal(err)
	}
	why, err := ops.New(cli).Why(ctx, ns, onB.name, repair.Policy{})
	if err != nil {
		t.Fatal(err)
	}
	verdicts := map[string]string{}
	for _, a := range why.Attachments {
		for _, v := range a.Pools {
			verdicts[v.Family+" "+v.Pool] = fmt.Sprint(v.Chosen, " ", v.Reason)
		}
	}
	for k, want := range map[string][2]string{
		"IPv4 e2e-rack-a":      {"false ", "spec.nodeSelector " + rackLabel + "=a does not select node rack-b-1"},
		"IPv4 e2e-rack-b":      {"true ", "holds 10.81.2."},
		"IPv6 e2e-rack-a":      {"false ", "has no IPv6 range"},
		"IPv6 e2e-rack-shared": {"true ", "holds fd00:81::"},
	} {
		if !strings.HasPrefix(verdicts[k], want[0]) || !strings.Contains(verdicts[k], want[1]) {
			t.Errorf("why %s: %q, want chosen %q and %q", k, verdicts[k], want[0], want[1])
		}
	}
	pools, err := ops.New(cli).Pools(ctx)
	if err != nil {
		t.Fatal(err)
	}
	selects := map[string]string{}
	for _, r := range pools.Rows {
		if r.Pool != "" {
			selects[r.Pool] = r.Selectors.Describe()
		}
	}
	for pool, want := range map[string]string{
		"e2e-rack-a": "any namespace, nodes " + rackLabel + "=a", "e2e-rack-b": "any namespace, nodes " + rackLabel + "=b", "e2e-rack-shared": "any namespace, any node",
	} {
		if selects[pool] != want {
			t.Errorf("pools: %s selects %q, want %q", pool, selects[pool], want)
		}
	}

	// A VM starts on rack a and migrates to rack b: the target gets the
	// claim's rack-a address though no pool of the list selects rack b for it.
	claim := createClaim(t, ctx, c, ns, "vm1.racks", "racks")
	src := newPod(t, ctx, c, ns, "rack-a-1", vmAnnotations("racks", "vm1.racks"))
	rSrc, err := add(ctx, src, conf("rack-a-1"))
	if err != nil {
		t.Fatalf("source ADD: %v", err)
	}
	if got := addrs(rSrc); !in("10.81.1.0/24", got[0]) {
		t.Fatalf("VM on rack a got %v", got)
	}
	before := ownedBy(t, ctx, string(claim.UID))
	dst := newPod(t, ctx, c, ns, "rack-b-1", vmAnnotations("racks", "vm1.racks"))
	rDst, err := add(ctx, dst, conf("rack-b-1"))
	if err != nil {
		t.Fatalf("migration target ADD on rack b: %v", err)
	}
	if !slices.Equal(addrs(rDst), addrs(rSrc)) {
		t.Fatalf("migration target on rack b got %v, the claim holds %v", addrs(rDst), addrs(rSrc))
	}
	after := ownedBy(t, ctx, string(claim.UID))
	if !slices.Equal(reservedItems(after), reservedItems(before)) || !slices.Equal(reservationUIDs(after), reservationUIDs(before)) {
		t.Fatalf("the claim's reservations changed across racks: %v -> %v", reservedItems(before), reservedItems(after))
	}
}

func reservationUIDs(rs []tenurev1alpha1.IPReservation) []string {
	var out []string
	for _, r := range rs {
		out = append(out, string(r.UID))
	}
	slices.Sort(out)
	return out
}

// TestPoolsByNamespace: two namespaces on one NAD get addresses from their
// own pools and a third from the shared one; a namespace no pool of a list
// selects gets code 7 naming its namespace, its node and the pools tried,
// with nothing written; and a pool's selector changed while pods hold its
// addresses moves nothing held.
func TestPoolsByNamespace(t *testing.T) {
	ctx := testContext(t, 2*time.Minute)
	c := apiClient(t)
	agents := startAgents(t, ctx, "byns-1")
	team := func(v string) *metav1.LabelSelector {
		return &metav1.LabelSelector{MatchLabels: map[string]string{"e2e-team": v}}
	}
	createPool(t, ctx, c, "e2e-team-red", tenurev1alpha1.IPPoolSpec{Ranges: []tenurev1alpha1.PoolRange{{Range: "10.82.1.0/24"}}, NamespaceSelector: team("red")})
	createPool(t, ctx, c, "e2e-team-blue", tenurev1alpha1.IPPoolSpec{Ranges: []tenurev1alpha1.PoolRange{{Range: "10.82.2.0/24"}}, NamespaceSelector: team("blue")})
	createPool(t, ctx, c, "e2e-team-shared", tenurev1alpha1.IPPoolSpec{Ranges: []tenurev1alpha1.PoolRange{{Range: "10.82.0.0/24"}}})
	for ns, v := range map[string]string{"e2e-red": "red", "e2e-blue": "blue", "e2e-nobody": "none"} {
		if err := testbed.EnsureNamespace(ctx, c, ns); err != nil {
			t.Fatal(err)
		}
		labelObject(t, ctx, c, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, map[string]string{"e2e-team": v})
	}
	sock := agents["byns-1"].Socket
	shared := netconf("teams", sock, `{"pools":["e2e-team-red","e2e-team-blue","e2e-team-shared"],"network_name":"teams"}`)
	teamsOnly := netconf("teamsonly", sock, `{"pools":["e2e-team-red","e2e-team-blue"],"network_name":"teamsonly"}`)

	got := map[string]pod{}
	for _, tc := range []struct{ ns, subnet, pool string }{
		{"e2e-red", "10.82.1.0/24", "e2e-team-red"}, {"e2e-blue", "10.82.2.0/24", "e2e-team-blue"}, {"e2e-nobody", "10.82.0.0/24", "e2e-team-shared"},
	} {
		p := newPod(t, ctx, c, tc.ns, "byns-1", nil)
		r, err := add(ctx, p, shared)
		if err != nil {
			t.Fatalf("ADD in %s: %v", tc.ns, err)
		}
		if a := addrs(r); !in(tc.subnet, a...) {
			t.Fatalf("pod in %s got %v, want an address of %s", tc.ns, a, tc.subnet)
		}
		if pools := poolsOf(ownedBy(t, ctx, p.uid)); pools[addrs(r)[0]] != tc.pool {
			t.Errorf("pod in %s: spec.pool %v, want %s", tc.ns, pools, tc.pool)
		}
		got[tc.ns] = p
	}

	// No pool of the list selects the namespace: code 7, nothing written.
	lost := newPod(t, ctx, c, "e2e-nobody", "byns-1", nil)
	_, err := add(ctx, lost, teamsOnly)
	if cniCode(err) != 7 {
		t.Fatalf("ADD in a namespace no pool selects: %v, want code 7", err)
	}
	for _, want := range []string{"ipam.pools", "namespace e2e-nobody", "node byns-1", "e2e-team-red (spec.namespaceSelector", "e2e-team-blue (spec.namespaceSelector"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
	if left := ownedBy(t, ctx, lost.uid); len(left) != 0 {
		t.Fatalf("the refused ADD wrote %v", reservedItems(left))
	}

	// The red pool stops selecting e2e-red while its pod holds an address:
	// the reservation stays (same object), the runtime's retried ADD of the
	// attachment gets the same address, and only a new pod of e2e-red gets
	// the shared pool's.
	red := got["e2e-red"]
	held := ownedBy(t, ctx, red.uid)
	pool := &tenurev1alpha1.IPPool{}
	if err := c.Get(ctx, client.ObjectKey{Name: "e2e-team-red"}, pool); err != nil {
		t.Fatal(err)
	}
	pool.Spec.NamespaceSelector = team("green")
	if err := c.Update(ctx, pool); err != nil {
		t.Fatal(err)
	}
	// The agent's pool cache follows the update; a new pod of e2e-red
	// shows when it has.
	var fresh pod
	ctlPoll(t, ctx, "a new pod of e2e-red given the shared pool's address", func() (bool, error) {
		fresh = newPod(t, ctx, c, "e2e-red", "byns-1", nil)
		r, err := add(ctx, fresh, shared)
		if err != nil {
			return false, err
		}
		if in("10.82.0.0/24", addrs(r)...) {
			return true, nil
		}
		return false, del(ctx, fresh, shared)
	})
	r, err := add(ctx, red, shared)
	if err != nil {
		t.Fatalf("retried ADD after the selector change: %v", err)
	}
	if !slices.Equal(addrs(r), reservedItems(held)) {
		t.Fatalf("retried ADD got %v, the attachment holds %v", addrs(r), reservedItems(held))
	}
	if now := ownedBy(t, ctx, red.uid); !slices.Equal(reservationUIDs(now), reservationUIDs(held)) {
		t.Fatalf("the held reservation moved: %v -> %v", reservedItems(held), reservedItems(now))
	}
}
