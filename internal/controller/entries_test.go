package controller

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"runtime"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

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

// sweepOf sweeps snap as a running controller sweeps its caches, through
// rel; it returns the result and the reasons of what it released (or,
// with DryRun, would release).
func sweepOf(t testing.TB, snap *snapshot, rel *Releaser) (SweepResult, map[string]repair.Reason) {
	t.Helper()
	sw := &Sweeper{Live: rel.Live, Releaser: rel, claims: &claimFinalizer{live: rel.Live, writer: rel.Writer.(ClaimWriter), rel: rel},
		view: func(context.Context) (*snapshot, error) { return snap, nil }}
	out, err := sw.Sweep(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]repair.Reason{}
	for _, o := range out.Outcomes {
		if o.Released || rel.DryRun {
			got[o.Name] = o.Decision.Reason
		}
	}
	return out, got
}

// metadataOf is what a metadata watch of r gives, r made by
// reservation.New and never changed since: the generation is 1.
func metadataOf(r *tenurev1alpha1.IPReservation) *metav1.PartialObjectMetadata {
	m := &metav1.PartialObjectMetadata{ObjectMeta: *r.ObjectMeta.DeepCopy()}
	m.Generation = 1
	if m.Labels == nil {
		m.Labels = map[string]string{}
	}
	m.Labels[reservation.LabelSpecSummary] = reservation.SpecSummaryV1
	m.Annotations = map[string]string{reservation.AnnotationSpecSummary: reservation.EncodeSpecSummary(&r.Spec)}
	return m
}

// Entries keep what the rules read: every reservation of a cluster that
// exercises each rule (and each way to keep) is decided the same from its
// entry and the pod entries as from the whole objects, whether the entries
// were made of the whole objects (made before the spec summary), of their
// metadata, or some of each (siblings of both kinds).
func TestEntriesDecideAsTheObjects(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	old := metav1.NewTime(now.Add(-time.Hour))
	live := pod("ns", "live", "uid-live", "a")
	live.Status.Phase = corev1.PodRunning
	term := pod("ns", "term", "uid-term", "dead")
	term.DeletionTimestamp = &old
	termFenced := pod("ns", "term-fenced", "uid-term-fenced", "fenced")
	termFenced.DeletionTimestamp = &old
	done := pod("ns", "done", "uid-done", "gone-node")
	done.Status.Phase = corev1.PodSucceeded
	doneReady := pod("ns", "done-ready", "uid-done-ready", "a")
	doneReady.Status.Phase = corev1.PodFailed
	replaced := pod("ns", "db-0", "uid-new", "a")
	nodeA := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "a"}, Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{
		{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastTransitionTime: old}}}}
	dead := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "dead"}, Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{
		{Type: corev1.NodeReady, Status: corev1.ConditionUnknown, LastTransitionTime: old}}}}
	fenced := dead.DeepCopy()
	fenced.Name = "fenced"
	fenced.Spec.Taints = []corev1.Taint{{Key: corev1.TaintNodeUnreachable, Effect: corev1.TaintEffectNoExecute},
		{Key: corev1.TaintNodeOutOfService, Value: "nodeshutdown", Effect: corev1.TaintEffectNoExecute}}
	// live uses 10.0.0.2 on net1, not 10.0.0.14 (DuplicateAttachment).
	live.Annotations = map[string]string{"k8s.v1.cni.cncf.io/network-status": `[{"name":"ns/n","interface":"net1","ips":["10.0.0.2"]}]`}
	// vm records 10.0.0.9, not 10.0.0.13 (DuplicateAttachment).
	vm := &ipamclaimsv1alpha1.IPAMClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "vm", UID: "claim-uid"},
		Status: ipamclaimsv1alpha1.IPAMClaimStatus{IPs: []string{"10.0.0.9/24"}}}
	deleting := &ipamclaimsv1alpha1.IPAMClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "vm2", UID: "claim2-uid", DeletionTimestamp: &old}}

	// Named as reservation.New names them: a metadata entry reads the
	// address and kind from the name.
	res := func(item string, owner tenurev1alpha1.ReservationOwner) *tenurev1alpha1.IPReservation {
		p, err := reservation.ParseItem(item)
		if err != nil {
			t.Fatal(err)
		}
		kind := tenurev1alpha1.KindAddress
		if p.Bits() != p.Addr().BitLen() {
			kind = tenurev1alpha1.KindDelegatedPrefix
		}
		r := reservationOf(reservation.Name("n", kind, p), item, owner)
		r.Spec.Kind = kind
		return r
	}
	earlier := res("10.0.0.1", podOwner("ns", "live", "uid-live", "sandbox-1", "a"))
	earlier.CreationTimestamp = old
	later := res("10.0.0.2", podOwner("ns", "live", "uid-live", "sandbox-2", "a"))
	later.CreationTimestamp = metav1.NewTime(now)
	laterTwin := res("10.0.0.14", podOwner("ns", "live", "uid-live", "sandbox-2", "a"))
	laterTwin.CreationTimestamp = old
	v6 := res("fd00::3", podOwner("ns", "live", "uid-live", "sandbox-1", "a"))
	pd := res("fd00:1::/64", podOwner("ns", "live", "uid-live", "sandbox-1", "a"))
	claimOwned := func(addr, claim, uid string) *tenurev1alpha1.IPReservation {
		return res(addr, tenurev1alpha1.ReservationOwner{Kind: tenurev1alpha1.OwnerIPAMClaim, Namespace: "ns", Name: claim, UID: uid})
	}
	all := []*tenurev1alpha1.IPReservation{
		earlier, later, v6, pd,
		res("10.0.0.4", podOwner("ns", "gone", "uid-gone", "s", "a")),
		res("10.0.0.5", podOwner("ns", "db-0", "uid-old", "s", "a")),
		res("10.0.0.6", podOwner("ns", "term", "uid-term", "s", "dead")),
		res("10.0.0.7", podOwner("ns", "done", "uid-done", "s", "gone-node")),
		res("10.0.0.8", podOwner("ns", "done-ready", "uid-done-ready", "s", "a")),
		claimOwned("10.0.0.9", "vm", "claim-uid"),
		claimOwned("10.0.0.10", "vm", "old-claim-uid"),
		claimOwned("10.0.0.11", "vm2", "claim2-uid"),
		res("10.0.0.12", podOwner("", "", "", "s", "a")),
		claimOwned("10.0.0.13", "vm", "claim-uid"),
		laterTwin,
		res("10.0.0.15", podOwner("ns", "term-fenced", "uid-term-fenced", "s", "fenced")),
	}
	for i, r := range all {
		r.ResourceVersion = fmt.Sprint(100 + i)
		r.Spec.Pool, r.Spec.Range, r.Spec.CNINetwork = "p", "10.0.0.0/24", "n"
		if r.Spec.Owner.Node != "" {
			r.Labels[reservation.LabelNode] = r.Spec.Owner.Node
		}
	}
	objects := objectSource{pods: map[types.NamespacedName]*corev1.Pod{}, nodes: map[string]*corev1.Node{"a": nodeA, "dead": dead, "fenced": fenced},
		byUID:  map[string][]*tenurev1alpha1.IPReservation{},
		claims: map[types.NamespacedName]*ipamclaimsv1alpha1.IPAMClaim{{Namespace: "ns", Name: "vm"}: vm, {Namespace: "ns", Name: "vm2"}: deleting}}
	for _, r := range all {
		objects.byUID[r.Spec.Owner.UID] = append(objects.byUID[r.Spec.Owner.UID], r)
	}
	for _, p := range []*corev1.Pod{live, term, termFenced, done, doneReady, replaced} {
		objects.pods[types.NamespacedName{Namespace: p.Namespace, Name: p.Name}] = p
	}
	// With ReleaseUnfenced, so that every reason is released; the address
	// on the NotReady node is released as NodeNotReady on node a's silent
	// answer to its IPProbe, which only the live reads see.
	policy := repair.Policy{NodeGracePeriod: time.Minute, ReleaseUnfenced: true}
	notReady := all[6]
	probe := &tenurev1alpha1.IPProbe{ObjectMeta: metav1.ObjectMeta{Name: notReady.Name, Generation: 1},
		Spec: tenurev1alpha1.IPProbeSpec{Network: "n", Address: notReady.Spec.Address, Node: "dead", AskedAt: metav1.NewTime(now)},
		Status: tenurev1alpha1.IPProbeStatus{Answers: []tenurev1alpha1.IPProbeAnswer{
			{Node: "a", ObservedGeneration: 1, Result: tenurev1alpha1.ProbeSilent, Interface: "san0"}}}}
	decideLive := func(r *tenurev1alpha1.IPReservation, g gathered) repair.Decision {
		d := repair.Decide(r, g.facts, policy)
		if d.Probe && r.Name == probe.Name {
			g.facts.Wire = repair.WireFactOf(r, probe, func(n string) bool { return repair.NodeFactOf(objects.nodes[n]).Ready })
			d = repair.Decide(r, g.facts, policy)
		}
		return d
	}
	wantReleased := map[string]repair.Reason{}
	liveObjects := []client.Object{nodeA, dead, fenced, vm, deleting, probe}
	for _, r := range all {
		g, _ := gather(ctx, objects, r, now)
		if d := decideLive(r, g); d.Release {
			wantReleased[r.Name] = d.Reason
		}
		liveObjects = append(liveObjects, r.DeepCopy())
	}
	for _, p := range objects.pods {
		p = p.DeepCopy()
		p.Finalizers = []string{"hold"} // the fake refuses a deletionTimestamp without one
		liveObjects = append(liveObjects, p)
	}
	deleting.Finalizers = []string{ClaimFinalizer} // tenure's own: nothing else holds the claim
	api := newFake(liveObjects...)
	for _, shape := range []struct {
		name     string
		metadata func(i int) bool
	}{
		{"whole objects", func(int) bool { return false }},
		{"metadata", func(int) bool { return true }},
		{"some of each", func(i int) bool { return i%2 == 1 }},
	} {
		t.Run(shape.name, func(t *testing.T) {
			// The nodes as the running controller caches them.
			entries := &snapshot{idx: newIndex(), nodes: map[string]*corev1.Node{}, claims: objects.claims}
			for name, n := range objects.nodes {
				entries.nodes[name] = trimNode(n)
			}
			for _, p := range objects.pods {
				if err := entries.idx.pods.Add(podEntryOf(p)); err != nil {
					t.Fatal(err)
				}
			}
			for i, r := range all {
				obj := any(r)
				if shape.metadata(i) {
					obj = metadataOf(r)
				}
				e, err := transformEntries(obj)
				if err != nil {
					t.Fatal(err)
				}
				if e.(*reservation.View).Opaque {
					t.Fatalf("%s: the entry of %T is opaque", r.Name, obj)
				}
				if err := entries.idx.add(e.(*reservation.View)); err != nil {
					t.Fatal(err)
				}
			}
			released := map[repair.Reason]bool{}
			askedLive := 0
			for _, r := range all {
				g, _ := gather(ctx, objects, r, now)
				want := decideLive(r, g)
				e := entries.idx.reservation(r.Name)
				if e == nil {
					t.Fatalf("%s: no entry", r.Name)
				}
				var scratch tenurev1alpha1.IPReservation
				ge, err := gather(ctx, entries, e.Into(&scratch), now)
				if err != nil {
					t.Fatalf("%s: %v", r.Name, err)
				}
				got := repair.Decide(&scratch, ge.facts, policy)
				if sibs := objects.byUID[r.Spec.Owner.UID]; got.AskLive && (len(repair.Duplicates(r, sibs)) > 1 || repair.NewerSandbox(r, sibs) != nil) {
					// Which of a pod's reservations it uses is in its
					// network-status, which only a live read gives.
					if !want.Release {
						askedLive++
					}
				} else if got.AskLive && got.Probe {
					// What the wire says only a live read of the IPProbe
					// gives: the sweep nominates it to the live reads.
					if !want.Release || want.Reason != repair.NodeNotReady {
						t.Errorf("%s: the entries ask the wire, the objects decide %+v", r.Name, want)
					}
				} else if got != want {
					t.Errorf("%s: from the entries %+v, from the objects %+v", r.Name, got, want)
				}
				released[want.Reason] = released[want.Reason] || want.Release
			}
			for _, reason := range repair.Reasons {
				if !released[reason] {
					t.Errorf("no reservation of the table is released as %s: the table proves less than it says", reason)
				}
			}
			// A sweep over the entries nominates each of those (and the
			// live reads, of the same objects, confirm them).
			out, swept := sweepOf(t, entries, &Releaser{Live: api, Writer: api, DryRun: true, Policy: policy, Now: func() time.Time { return now }})
			if fmt.Sprint(swept) != fmt.Sprint(wantReleased) || out.Kept != askedLive || askedLive != 1 {
				t.Errorf("the sweep would release %v and kept %d on live reads, want %v and %d (1)", swept, out.Kept, wantReleased, askedLive)
			}
		})
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
			v, _ := transformEntries(r)
			_ = x.add(v.(*reservation.View))
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

// An opaque entry, and an entry with an opaque sibling, are judged on live
// reads alone: the sweep releases what the whole objects say is an orphan
// (here an earlier sandbox whose later sibling the cache cannot read) and
// keeps what they say is live; so does the watch path.
func TestOpaqueEntriesAreJudgedLive(t *testing.T) {
	ctx := context.Background()
	now := time.Now()
	res := func(addr string, owner tenurev1alpha1.ReservationOwner, created time.Time) *tenurev1alpha1.IPReservation {
		r := reservationOf(reservation.AddressName("n", netip.MustParseAddr(addr)), addr, owner)
		r.CreationTimestamp = metav1.NewTime(created.Truncate(time.Second))
		return r
	}
	earlier := res("10.0.0.1", podOwner("ns", "live", "uid-live", "s1", "a"), now.Add(-time.Hour))
	laterOpaque := res("10.0.0.2", podOwner("ns", "live", "uid-live", "s2", "a"), now)
	goneOpaque := res("10.0.0.3", podOwner("ns", "gone", "uid-gone", "s", "a"), now)
	liveOpaque := res("10.0.0.4", podOwner("ns", "other", "uid-other", "s", "a"), now)
	c := newFake(pod("ns", "live", "uid-live", "a"), pod("ns", "other", "uid-other", "a"), earlier, laterOpaque, goneOpaque, liveOpaque)
	snap := &snapshot{idx: newIndex(), nodes: map[string]*corev1.Node{}, claims: map[types.NamespacedName]*ipamclaimsv1alpha1.IPAMClaim{}}
	for _, p := range []*corev1.Pod{pod("ns", "live", "uid-live", "a"), pod("ns", "other", "uid-other", "a")} {
		if err := snap.idx.pods.Add(podEntryOf(p)); err != nil {
			t.Fatal(err)
		}
	}
	for _, r := range []*tenurev1alpha1.IPReservation{earlier, laterOpaque, goneOpaque, liveOpaque} {
		m := metadataOf(r)
		if r != earlier {
			delete(m.Annotations, reservation.AnnotationSpecSummary)
		}
		if err := snap.idx.add(reservation.ViewOfMeta(m)); err != nil {
			t.Fatal(err)
		}
	}

	// The watch path, dry: each is handed to the live reads, which say
	// what the whole objects say.
	dry := &Releaser{Live: c, Writer: c, DryRun: true}
	for name, want := range map[string]repair.Reason{earlier.Name: repair.EarlierSandbox, goneOpaque.Name: repair.PodGone, laterOpaque.Name: "", liveOpaque.Name: ""} {
		e := snap.idx.reservation(name)
		_, out, err := nominate(ctx, cachedSource{idx: snap.idx, cache: c}, dry, e.Reservation(), e.Opaque, slog.Default())
		if err != nil || out == nil || out.Decision.Reason != want || out.Decision.Release != (want != "") {
			t.Errorf("%s: nominated %+v, %v; want a live decision %q", name, out, err, want)
		}
	}

	out, got := sweepOf(t, snap, &Releaser{Live: c, Writer: c, Policy: repair.Policy{NodeGracePeriod: time.Minute}})
	want := map[string]repair.Reason{earlier.Name: repair.EarlierSandbox, goneOpaque.Name: repair.PodGone}
	if fmt.Sprint(got) != fmt.Sprint(want) || out.Kept != 2 {
		t.Fatalf("released %v and kept %d on live reads, want %v and 2", got, out.Kept, want)
	}
	for r, want := range map[*tenurev1alpha1.IPReservation]bool{earlier: false, goneOpaque: false, laterOpaque: true, liveOpaque: true} {
		if exists(t, c, r.Name) != want {
			t.Errorf("%s exists: %v, want %v", r.Name, !want, want)
		}
	}
}

// --once lists the reservations as the running controller watches them:
// as metadata those that carry the spec summary, whole the others, and
// judges both.
func TestOnceSweepListsSummarizedAsMetadata(t *testing.T) {
	ctx := context.Background()
	made := func(addr string, owner tenurev1alpha1.ReservationOwner, summary bool) *tenurev1alpha1.IPReservation {
		a := netip.MustParseAddr(addr)
		r := reservation.New(reservation.Spec{Network: "n", Kind: tenurev1alpha1.KindAddress, Item: netip.PrefixFrom(a, 32), Owner: owner})
		if !summary {
			delete(r.Labels, reservation.LabelSpecSummary)
			r.Annotations = nil
		}
		return r
	}
	objs := []client.Object{pod("ns", "live", "uid-live", "a")}
	want := map[string]repair.Reason{}
	for i, summary := range []bool{true, false} {
		gone := made(fmt.Sprintf("10.0.0.%d", 10+i), podOwner("ns", fmt.Sprint("gone-", i), fmt.Sprint("uid-gone-", i), "s", "a"), summary)
		owner := podOwner("ns", "live", "uid-live", "s", "a")
		owner.Interface = fmt.Sprint("net", i+1)
		live := made(fmt.Sprintf("10.0.0.%d", 20+i), owner, summary)
		objs = append(objs, gone, live)
		want[gone.Name] = repair.PodGone
	}
	c := newFake(objs...)
	sw := NewSweeper(c, c, &Releaser{Live: c, Writer: c, DryRun: true})
	sw.PageSize = 1
	res, err := sw.Sweep(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]repair.Reason{}
	for _, o := range res.Outcomes {
		got[o.Name] = o.Decision.Reason
	}
	// Kept 0: the cache judged every one itself, none was opaque.
	if res.Reservations != 4 || fmt.Sprint(got) != fmt.Sprint(want) || res.Kept != 0 {
		t.Fatalf("swept %d, would release %v, kept %d on live reads; want 4, %v, 0", res.Reservations, got, res.Kept, want)
	}
}
