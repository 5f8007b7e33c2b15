//go:build integration

package nodes_test

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/dev/devnode"
	"github.com/tenure-ipam/tenure/dev/localnode"
	"github.com/tenure-ipam/tenure/dev/nodetest"
	"github.com/tenure-ipam/tenure/test/guest"
)

// The agent DaemonSet runs one Ready pod on each of the three nodes, on
// that node's host network (its address), and the controller holds its
// Lease under its pod's name.
func daemonSetReadyOnEveryNode(t *testing.T) {
	ctx := nodetest.Context(t, 2*time.Minute)
	var ds appsv1.DaemonSet
	if err := cl.Get(ctx, client.ObjectKey{Namespace: localnode.Namespace, Name: localnode.AgentDaemonSet}, &ds); err != nil {
		t.Fatal(err)
	}
	if s := ds.Status; s.DesiredNumberScheduled != 3 || s.NumberReady != 3 {
		t.Errorf("daemonset: desired %d, ready %d; want 3 and 3", s.DesiredNumberScheduled, s.NumberReady)
	}
	var pods corev1.PodList
	if err := cl.List(ctx, &pods, client.InNamespace(localnode.Namespace), client.MatchingLabels{"app.kubernetes.io/name": "tenure-agent"}); err != nil {
		t.Fatal(err)
	}
	ready := map[string]string{}
	for _, p := range pods.Items {
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				ready[p.Spec.NodeName] = p.Status.PodIP
			}
		}
	}
	for i, n := range cluster.Nodes {
		if ip := ready[n.Name]; ip != devnode.NodeIP(i+1) {
			t.Errorf("node %s: Ready agent with IP %q, want one with the node's %s", n.Name, ip, devnode.NodeIP(i+1))
		}
	}
	ctrl := controllerPod(ctx, t)
	var lease coordinationv1.Lease
	if err := cl.Get(ctx, client.ObjectKey{Namespace: localnode.Namespace, Name: "tenure-controller"}, &lease); err != nil {
		t.Fatal(err)
	}
	if h := ptr.Deref(lease.Spec.HolderIdentity, ""); !strings.HasPrefix(h, ctrl.Name) {
		t.Errorf("lease holder %q, want the controller pod %s", h, ctrl.Name)
	}
}

// A /29 SAN (macvlan over each node's leg of the SAN bridge, six
// assignable addresses) and seven pods spread over the three nodes: six
// run, each holding its own address on net1, and every one pings every
// other on another node over those addresses; the seventh waits with
// tenure's exhaustion event. A pod on another node than the waiting one
// is deleted, and the waiting pod starts on the kubelet's retry with the
// freed address.
func slash29SANAcrossNodes(t *testing.T) {
	ctx := nodetest.Context(t, 6*time.Minute)
	ns := kc.Namespace(ctx, t, "san3")
	kc.NAD(ctx, t, ns, "storage-san", `{
		"cniVersion": "1.0.0", "name": "storage-san", "type": "macvlan", "master": "`+devnode.SANLink+`", "mode": "bridge",
		"ipam": {"type": "tenure", "range": "10.100.0.0/29"}}`)
	var names []string
	for i := range 7 {
		name := fmt.Sprintf("san-%d", i)
		names = append(names, name)
		p := localnode.Pod(ns, name, "storage-san")
		p.Spec.NodeName = cluster.Nodes[i%3].Name
		if err := cl.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	running, waiting := kc.FullRange(ctx, t, ns, names)
	addr := map[string]string{} // pod -> net1 address
	holder := map[string]string{}
	for _, p := range running {
		a := net1Of(ctx, t, p)
		if other, dup := holder[a]; dup {
			t.Errorf("%s and %s both hold %s", p.Name, other, a)
		}
		holder[a], addr[p.Name] = p.Name, a
	}
	crossed := 0
	for _, from := range running {
		path := podNetns(t, from)
		for _, to := range running {
			if to.Spec.NodeName == from.Spec.NodeName {
				continue
			}
			crossed++
			if err := guest.Ping(path, netip.MustParseAddr(addr[to.Name]), 3*time.Second); err != nil {
				t.Errorf("%s (%s) -> %s (%s, %s): %v", from.Name, from.Spec.NodeName, to.Name, to.Spec.NodeName, addr[to.Name], err)
			}
		}
	}
	t.Logf("%d pings across nodes over the SAN", crossed)

	w, err := kc.Pod(ctx, ns, waiting)
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(running, func(p *corev1.Pod) bool { return p.Spec.NodeName != w.Spec.NodeName })
	gone := running[i]
	if err := cl.Delete(ctx, gone); err != nil {
		t.Fatal(err)
	}
	kc.WaitGone(ctx, t, ns, gone.Name)
	started := kc.WaitRunning(ctx, t, ns, waiting)
	if a := net1Of(ctx, t, started); a != addr[gone.Name] {
		t.Errorf("%s on %s got %s, want %s, which %s on %s gave back", waiting, started.Spec.NodeName, a, addr[gone.Name], gone.Name, gone.Spec.NodeName)
	}
	for _, n := range names {
		if n != gone.Name {
			if p, err := kc.Pod(ctx, ns, n); err == nil {
				_ = cl.Delete(ctx, p)
			}
		}
	}
	kc.WaitReleased(ctx, t, ns)
}

// holders watches the reservations of a namespace and records any
// address held by two owners at once: an address's reservation must be
// deleted before another owner's is created.
type holders struct {
	mu         sync.Mutex
	held       map[string]string // address -> owner UID
	violations []string
}

func watchHolders(ctx context.Context, t *testing.T, ns string) *holders {
	t.Helper()
	h := &holders{held: map[string]string{}}
	var list tenurev1alpha1.IPReservationList
	w, err := cl.Watch(ctx, &list)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		defer w.Stop()
		for ev := range w.ResultChan() {
			r, ok := ev.Object.(*tenurev1alpha1.IPReservation)
			if !ok || r.Spec.Owner.Namespace != ns {
				continue
			}
			h.mu.Lock()
			switch ev.Type {
			case watch.Added, watch.Modified:
				if prev, ok := h.held[r.Spec.Address]; ok && prev != r.Spec.Owner.UID {
					h.violations = append(h.violations, fmt.Sprintf("%s held by %s and %s (%s)", r.Spec.Address, prev, r.Spec.Owner.UID, r.Spec.Owner.Name))
				}
				h.held[r.Spec.Address] = r.Spec.Owner.UID
			case watch.Deleted:
				if h.held[r.Spec.Address] == r.Spec.Owner.UID {
					delete(h.held, r.Spec.Address)
				}
			}
			h.mu.Unlock()
		}
	}()
	return h
}

func (h *holders) check(t *testing.T) {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, v := range h.violations {
		t.Errorf("address held twice: %s", v)
	}
}

// One node of three is lost hard: its kubelet and containerd are killed
// and its links cut. The controller-manager marks it NotReady and evicts
// its pods (one-second tolerations); the tenure controller keeps their
// reservations, by name, while the node is not fenced, and releases them
// once it is tainted out-of-service; the ReplicaSet's replacements run on
// the two other nodes with addresses, and no address is held by two owners
// at any point. The node then returns and the taint is removed.
func lostNodeOfThree(t *testing.T) {
	ctx := nodetest.Context(t, 8*time.Minute)
	rs := startSANReplicaSet(ctx, t, sanReplicaSetSpec{name: "lost3", network: "lost-san", ipam: `"range": "10.101.0.0/28"`})
	ns := rs.ns
	var before []corev1.Pod
	kc.Poll(ctx, t, "six replicas running", func() error {
		if before = rs.running(ctx, t); len(before) != 6 {
			return fmt.Errorf("%d running", len(before))
		}
		return nil
	})
	// The node to lose: one with replicas, not the tenure controller's.
	var ctrl corev1.PodList
	if err := cl.List(ctx, &ctrl, client.InNamespace(localnode.Namespace), client.MatchingLabels{"app.kubernetes.io/name": "tenure-controller"}); err != nil {
		t.Fatal(err)
	}
	var lostNode *devnode.Node
	for _, n := range cluster.Nodes {
		if len(ctrl.Items) == 1 && ctrl.Items[0].Spec.NodeName == n.Name {
			continue
		}
		if slices.ContainsFunc(before, func(p corev1.Pod) bool { return p.Spec.NodeName == n.Name }) {
			lostNode = n
			break
		}
	}
	if lostNode == nil {
		t.Fatal("no node other than the controller's runs a replica")
	}
	var lostPods []corev1.Pod
	for _, p := range before {
		net1Of(ctx, t, &p)
		if p.Spec.NodeName == lostNode.Name {
			lostPods = append(lostPods, p)
		}
	}

	lost := time.Now()
	if err := lostNode.Lose(); err != nil {
		t.Fatal(err)
	}
	if err := lostNode.CutLinks(); err != nil {
		t.Fatal(err)
	}
	returned := false
	defer func() {
		if !returned {
			_ = lostNode.RestoreLinks()
			_ = lostNode.Return(context.Background())
		}
	}()
	kc.WaitNotReady(ctx, t, lostNode.Name)
	notReady := time.Since(lost)
	kc.Poll(ctx, t, "the controller-manager to evict the lost node's pods", func() error {
		for _, lp := range lostPods {
			p, err := kc.Pod(ctx, ns, lp.Name)
			if err == nil && p.DeletionTimestamp == nil {
				return fmt.Errorf("%s not evicted", p.Name)
			}
		}
		return nil
	})
	evicted := time.Since(lost)
	kept := map[string]string{} // the lost pods' reservations, name: uid
	for _, r := range kc.Reservations(ctx, t, ns) {
		for _, lp := range lostPods {
			if r.Spec.Owner.UID == string(lp.UID) {
				kept[r.Name] = string(r.UID)
			}
		}
	}
	if len(kept) != len(lostPods) {
		t.Fatalf("the %d lost pods hold %v", len(lostPods), kept)
	}
	for _, lp := range lostPods {
		kc.WaitFenceWait(ctx, t, ns, lp.Name)
	}
	for _, r := range kc.Reservations(ctx, t, ns) {
		if kept[r.Name] == string(r.UID) {
			delete(kept, r.Name)
		}
	}
	if len(kept) > 0 {
		t.Fatalf("released while the node was not fenced: %v", kept)
	}
	kc.Fence(ctx, t, lostNode.Name, corev1.TaintEffectNoExecute)
	fenced := time.Since(lost)
	defer func() {
		if !returned {
			kc.Unfence(context.Background(), t, lostNode.Name)
		}
	}()
	kc.Poll(ctx, t, "the tenure controller to release the lost pods' reservations", func() error {
		for _, r := range kc.Reservations(ctx, t, ns) {
			for _, lp := range lostPods {
				if r.Spec.Owner.UID == string(lp.UID) {
					return fmt.Errorf("%s still held by %s", r.Spec.Address, lp.Name)
				}
			}
		}
		return nil
	})
	released := time.Since(lost)
	var after []corev1.Pod
	kc.Poll(ctx, t, "six replicas running on the two other nodes", func() error {
		after = rs.running(ctx, t)
		n := 0
		for _, p := range after {
			if p.Spec.NodeName != lostNode.Name {
				n++
			}
		}
		if n != 6 {
			return fmt.Errorf("%d running off the lost node", n)
		}
		return nil
	})
	seen := map[string]string{}
	for _, p := range after {
		if p.Spec.NodeName == lostNode.Name {
			continue
		}
		a := net1Of(ctx, t, &p)
		if other, dup := seen[a]; dup {
			t.Errorf("%s and %s both hold %s", p.Name, other, a)
		}
		seen[a] = p.Name
	}
	t.Logf("after the node was lost: NotReady at %v, pods evicted at %v, fenced at %v, reservations released at %v, replacements running at %v",
		notReady.Round(time.Second), evicted.Round(time.Second), fenced.Round(time.Second), released.Round(time.Second), time.Since(lost).Round(time.Second))

	returned = true
	if err := lostNode.RestoreLinks(); err != nil {
		t.Fatal(err)
	}
	if err := lostNode.Return(ctx); err != nil {
		t.Fatal(err)
	}
	kc.Unfence(ctx, t, lostNode.Name)
	for _, lp := range lostPods {
		kc.WaitGone(ctx, t, ns, lp.Name)
	}
	rs.deleteAndCheck(ctx, t)
}
