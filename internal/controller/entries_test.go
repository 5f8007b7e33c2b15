package controller

import (
	"context"
	"fmt"
	"net/netip"
	"runtime"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	ipamclaimsv1alpha1 "github.com/tenure-ipam/tenure/api/ipamclaims/v1alpha1"
	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/controller/repair"
	"github.com/tenure-ipam/tenure/internal/reservation"
)

// objectSource answers from whole objects, as the caches did before they
// kept entries.
type objectSource struct {
	pods   map[types.NamespacedName]*corev1.Pod
	nodes  map[string]*corev1.Node
	byUID  map[string][]*tenurev1alpha1.IPReservation
	claims map[types.NamespacedName]*ipamclaimsv1alpha1.IPAMClaim
}

func (s objectSource) pod(_ context.Context, ns, name string) (*repair.PodFact, *corev1.Pod, error) {
	p := s.pods[types.NamespacedName{Namespace: ns, Name: name}]
	return repair.PodFactOf(p), p, nil
}

func (s objectSource) node(_ context.Context, name string) (*corev1.Node, error) {
	return s.nodes[name], nil
}

func (s objectSource) claim(_ context.Context, ns, name string) (*ipamclaimsv1alpha1.IPAMClaim, error) {
	return s.claims[types.NamespacedName{Namespace: ns, Name: name}], nil
}

func (s objectSource) siblings(_ context.Context, uid string) ([]*tenurev1alpha1.IPReservation, error) {
	return s.byUID[uid], nil
}

// Entries keep what the rules read: every reservation of a cluster that
// exercises each rule (and each way to keep) is decided the same from its
// entry and the pod entries as from the whole objects.
func TestEntriesDecideAsTheObjects(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	old := metav1.NewTime(now.Add(-time.Hour))
	live := pod("ns", "live", "uid-live", "a")
	live.Status.Phase = corev1.PodRunning
	term := pod("ns", "term", "uid-term", "dead")
	term.DeletionTimestamp = &old
	done := pod("ns", "done", "uid-done", "gone-node")
	done.Status.Phase = corev1.PodSucceeded
	doneReady := pod("ns", "done-ready", "uid-done-ready", "a")
	doneReady.Status.Phase = corev1.PodFailed
	replaced := pod("ns", "db-0", "uid-new", "a")
	nodeA := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "a"}, Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{
		{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastTransitionTime: old}}}}
	dead := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "dead"}, Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{
		{Type: corev1.NodeReady, Status: corev1.ConditionUnknown, LastTransitionTime: old}}}}
	vm := &ipamclaimsv1alpha1.IPAMClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "vm", UID: "claim-uid"}}
	deleting := &ipamclaimsv1alpha1.IPAMClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "vm2", UID: "claim2-uid", DeletionTimestamp: &old}}

	earlier := reservationOf("n.1", "10.0.0.1", podOwner("ns", "live", "uid-live", "sandbox-1", "a"))
	earlier.CreationTimestamp = old
	later := reservationOf("n.2", "10.0.0.2", podOwner("ns", "live", "uid-live", "sandbox-2", "a"))
	later.CreationTimestamp = metav1.NewTime(now)
	v6 := reservationOf("n.3", "fd00::3", podOwner("ns", "live", "uid-live", "sandbox-1", "a"))
	claimOwned := func(name, addr, claim, uid string) *tenurev1alpha1.IPReservation {
		return reservationOf(name, addr, tenurev1alpha1.ReservationOwner{Kind: tenurev1alpha1.OwnerIPAMClaim, Namespace: "ns", Name: claim, UID: uid})
	}
	all := []*tenurev1alpha1.IPReservation{
		earlier, later, v6,
		reservationOf("n.4", "10.0.0.4", podOwner("ns", "gone", "uid-gone", "s", "a")),
		reservationOf("n.5", "10.0.0.5", podOwner("ns", "db-0", "uid-old", "s", "a")),
		reservationOf("n.6", "10.0.0.6", podOwner("ns", "term", "uid-term", "s", "dead")),
		reservationOf("n.7", "10.0.0.7", podOwner("ns", "done", "uid-done", "s", "gone-node")),
		reservationOf("n.8", "10.0.0.8", podOwner("ns", "done-ready", "uid-done-ready", "s", "a")),
		claimOwned("n.9", "10.0.0.9", "vm", "claim-uid"),
		claimOwned("n.10", "10.0.0.10", "vm", "old-claim-uid"),
		claimOwned("n.11", "10.0.0.11", "vm2", "claim2-uid"),
		reservationOf("n.12", "10.0.0.12", podOwner("", "", "", "s", "a")),
	}
	for i, r := range all {
		r.ResourceVersion = fmt.Sprint(100 + i)
		r.Spec.Pool, r.Spec.Range, r.Spec.CNINetwork = "p", "10.0.0.0/24", "n"
		r.Labels[reservation.LabelNode] = r.Spec.Owner.Node
	}
	objects := objectSource{pods: map[types.NamespacedName]*corev1.Pod{}, nodes: map[string]*corev1.Node{"a": nodeA, "dead": dead},
		byUID:  map[string][]*tenurev1alpha1.IPReservation{},
		claims: map[types.NamespacedName]*ipamclaimsv1alpha1.IPAMClaim{{Namespace: "ns", Name: "vm"}: vm, {Namespace: "ns", Name: "vm2"}: deleting}}
	entries := &snapshot{idx: newIndex(), nodes: objects.nodes, claims: objects.claims}
	for _, p := range []*corev1.Pod{live, term, done, doneReady, replaced} {
		objects.pods[types.NamespacedName{Namespace: p.Namespace, Name: p.Name}] = p
		if err := entries.idx.pods.Add(podEntryOf(p)); err != nil {
			t.Fatal(err)
		}
	}
	for _, r := range all {
		objects.byUID[r.Spec.Owner.UID] = append(objects.byUID[r.Spec.Owner.UID], r)
		if err := entries.idx.reservations.Add(resEntryOf(r)); err != nil {
			t.Fatal(err)
		}
	}
	policy := repair.Policy{NodeGracePeriod: time.Minute}
	released := map[repair.Reason]bool{}
	for _, r := range all {
		g, _ := gather(ctx, objects, r, now)
		want := repair.Decide(r, g.facts, policy)
		e := entries.idx.reservation(r.Name)
		if e == nil {
			t.Fatalf("%s: no entry", r.Name)
		}
		var scratch tenurev1alpha1.IPReservation
		ge, _ := gather(ctx, entries, e.into(&scratch), now)
		got := repair.Decide(&scratch, ge.facts, policy)
		if got != want {
			t.Errorf("%s: from the entries %+v, from the objects %+v", r.Name, got, want)
		}
		released[want.Reason] = released[want.Reason] || want.Release
	}
	for _, reason := range repair.Reasons {
		if !released[reason] {
			t.Errorf("no reservation of the table is released as %s: the table proves less than it says", reason)
		}
	}
}

// BenchmarkEntryMemory reports what the controller's caches hold per
// reservation and per pod, indexes included (the figures of
// docs/performance.md).
func BenchmarkEntryMemory(b *testing.B) {
	const n = 100_000
	for b.Loop() {
		var before, mid, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		x := newIndex()
		for i := range n {
			uid := fmt.Sprintf("%08x-1111-4222-8333-%012d", i*2654435761, i)
			a := netip.AddrFrom4([4]byte{100, byte(i >> 16), byte(i >> 8), byte(i)})
			r := reservation.New(reservation.Spec{Network: "bench-scale", Kind: tenurev1alpha1.KindAddress, Item: netip.PrefixFrom(a, 32),
				Range: "100.0.0.0/14", CNINetwork: "bench-scale", Owner: podOwner("bench", fmt.Sprintf("owner-%d", i), uid,
					fmt.Sprintf("%064x", i*2654435761), fmt.Sprintf("node-%d", i%1000))})
			r.UID, r.ResourceVersion, r.CreationTimestamp = types.UID(fmt.Sprintf("0f3b2c1a-1111-4222-8333-%012d", i)), fmt.Sprint(1_000_000+i), metav1.Now()
			_ = x.reservations.Add(resEntryOf(r))
		}
		runtime.GC()
		runtime.ReadMemStats(&mid)
		for i := range n {
			p := pod("bench", fmt.Sprintf("owner-%d", i), fmt.Sprintf("%08x-1111-4222-8333-%012d", i*2654435761, i), fmt.Sprintf("node-%d", i%1000))
			p.ResourceVersion = fmt.Sprint(2_000_000 + i)
			_ = x.pods.Add(podEntryOf(p))
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(mid.HeapAlloc-before.HeapAlloc)/n, "B/reservation")
		b.ReportMetric(float64(after.HeapAlloc-mid.HeapAlloc)/n, "B/pod")
		runtime.KeepAlive(x)
	}
}
