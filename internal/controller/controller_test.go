package controller

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	ipamclaimsv1alpha1 "github.com/tenure-ipam/tenure/api/ipamclaims/v1alpha1"
	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/claims"
	"github.com/tenure-ipam/tenure/internal/controller/repair"
	"github.com/tenure-ipam/tenure/internal/kube"
	"github.com/tenure-ipam/tenure/internal/reservation"
)

type recorded struct {
	obj     runtime.Object
	reason  string
	message string
}

type fakeRecorder struct {
	mu     sync.Mutex
	events []recorded
}

func (f *fakeRecorder) Eventf(obj runtime.Object, _, reason, format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.events = append(f.events, recorded{obj, reason, fmt.Sprintf(format, args...)})
}

func pod(ns, name, uid, node string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(uid)}, Spec: corev1.PodSpec{NodeName: node}}
}

// reservationOf is a reservation whose labels are what its spec implies
// (reservation.Check): the live reads leave out any other as a sibling.
func reservationOf(name, addr string, owner tenurev1alpha1.ReservationOwner) *tenurev1alpha1.IPReservation {
	r := &tenurev1alpha1.IPReservation{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("r-" + name), Labels: map[string]string{reservation.LabelOwnerUID: owner.UID, reservation.LabelNetwork: "n"}},
		Spec:       tenurev1alpha1.IPReservationSpec{Network: "n", Kind: tenurev1alpha1.KindAddress, Address: addr, Owner: owner},
	}
	if owner.Node != "" {
		r.Labels[reservation.LabelNode] = reservation.NodeLabel(owner.Node)
	}
	return r
}

func podOwner(ns, name, uid, container, node string) tenurev1alpha1.ReservationOwner {
	return tenurev1alpha1.ReservationOwner{Kind: tenurev1alpha1.OwnerPod, Namespace: ns, Name: name, UID: uid, PodName: name, PodUID: uid,
		ContainerID: container, Interface: "net1", Node: node}
}

func newFake(objs ...client.Object) client.WithWatch {
	return fake.NewClientBuilder().WithScheme(kube.Scheme).WithObjects(objs...).
		WithStatusSubresource(&tenurev1alpha1.IPPool{}, &ipamclaimsv1alpha1.IPAMClaim{}).Build()
}

func exists(t *testing.T, c client.Client, name string) bool {
	t.Helper()
	err := c.Get(context.Background(), types.NamespacedName{Name: name}, &tenurev1alpha1.IPReservation{})
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	return err == nil
}

func TestSweepDryRunThenRelease(t *testing.T) {
	ctx := context.Background()
	now := metav1.Now()
	terminating := pod("ns", "term", "uid-term", "dead")
	terminating.DeletionTimestamp = &now
	terminating.Finalizers = []string{"hold"} // the fake refuses a deletionTimestamp without one
	deadNode := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "dead"}, Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{
		{Type: corev1.NodeReady, Status: corev1.ConditionUnknown, LastTransitionTime: metav1.NewTime(time.Now().Add(-time.Hour))}}}}
	// The same, fenced: NotReady and tainted out-of-service.
	termFenced := pod("ns", "term-fenced", "uid-term-fenced", "fenced")
	termFenced.DeletionTimestamp = &now
	termFenced.Finalizers = []string{"hold"}
	fencedNode := deadNode.DeepCopy()
	fencedNode.Name = "fenced"
	fencedNode.Spec.Taints = []corev1.Taint{{Key: corev1.TaintNodeOutOfService, Value: "nodeshutdown", Effect: corev1.TaintEffectNoExecute}}
	objs := []client.Object{
		pod("ns", "live", "uid-live", "a"),
		pod("ns", "db-0", "uid-new", "a"), // recreated: uid-old is gone
		terminating, deadNode, termFenced, fencedNode,
		reservationOf("n.1", "10.0.0.1", podOwner("ns", "live", "uid-live", "c1", "a")),
		reservationOf("n.2", "10.0.0.2", podOwner("ns", "gone", "uid-gone", "c2", "a")),
		reservationOf("n.3", "10.0.0.3", podOwner("ns", "db-0", "uid-old", "c3", "a")),
		reservationOf("n.4", "10.0.0.4", podOwner("ns", "db-0", "uid-new", "c4", "a")),
		reservationOf("n.5", "10.0.0.5", podOwner("ns", "term", "uid-term", "c5", "dead")),
		reservationOf("n.6", "10.0.0.6", podOwner("ns", "term-fenced", "uid-term-fenced", "c6", "fenced")),
	}
	c := newFake(objs...)
	rec := &fakeRecorder{}
	rel := &Releaser{Live: c, Writer: c, Events: rec, Policy: repair.Policy{NodeGracePeriod: time.Minute}, DryRun: true}
	sw := NewSweeper(c, c, rel)
	sw.PageSize = 2 // exercise paging

	res, err := sw.Sweep(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// n.5, on a node NotReady for an hour but not fenced, is kept.
	want := map[string]repair.Reason{"n.2": repair.PodGone, "n.3": repair.PodReplaced, "n.6": repair.NodeOutOfService}
	got := map[string]repair.Reason{}
	for _, o := range res.Outcomes {
		if o.Released {
			t.Errorf("dry run released %s", o.Name)
		}
		got[o.Name] = o.Decision.Reason
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("dry run would release %v, want %v", got, want)
	}
	for _, n := range []string{"n.1", "n.2", "n.3", "n.4", "n.5"} {
		if !exists(t, c, n) {
			t.Fatalf("dry run deleted %s", n)
		}
	}
	if len(rec.events) != 0 {
		t.Fatalf("dry run recorded %d events", len(rec.events))
	}

	rel.DryRun = false
	res, err = sw.Sweep(ctx)
	if err != nil {
		t.Fatal(err)
	}
	released := 0
	for _, o := range res.Outcomes {
		if o.Released {
			released++
		}
	}
	if released != 3 {
		t.Fatalf("released %d, want 3: %+v", released, res.Outcomes)
	}
	for n, want := range map[string]bool{"n.1": true, "n.2": false, "n.3": false, "n.4": true, "n.5": true, "n.6": false} {
		if exists(t, c, n) != want {
			t.Errorf("%s exists=%v, want %v", n, !want, want)
		}
	}
	if len(rec.events) != 3 {
		t.Fatalf("%d events, want 3", len(rec.events))
	}
	for _, e := range rec.events {
		if e.reason != EventReason {
			t.Errorf("event reason %q", e.reason)
		}
		if strings.Contains(e.message, "10.0.0.6") {
			// The terminating pod still exists: the event is about it.
			if p, ok := e.obj.(*corev1.Pod); !ok || p.Name != "term-fenced" {
				t.Errorf("event for the terminating pod's release is on %T", e.obj)
			}
		} else if _, ok := e.obj.(*tenurev1alpha1.IPReservation); !ok {
			t.Errorf("event for a gone pod's release is on %T, want the reservation (no pool)", e.obj)
		}
	}
}

// A terminating pod on a node that is NotReady but not fenced keeps its
// addresses; one Warning Event on the pod per reservation says that it
// waits for the node to be fenced and names the taint, however often it is
// decided again; once the node is tainted out-of-service it is released
// and forgotten.
func TestFenceWaitIsToldOnceThenReleased(t *testing.T) {
	ctx := context.Background()
	now := metav1.Now()
	term := pod("ns", "term", "uid-term", "lost")
	term.DeletionTimestamp = &now
	term.Finalizers = []string{"hold"}
	lost := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "lost"}, Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{
		{Type: corev1.NodeReady, Status: corev1.ConditionUnknown, LastTransitionTime: metav1.NewTime(time.Now().Add(-time.Hour))}}}}
	r1 := reservationOf("n.1", "10.0.0.1", podOwner("ns", "term", "uid-term", "c1", "lost"))
	r2 := reservationOf("n.2", "10.0.0.2", podOwner("ns", "term", "uid-term", "c1", "lost"))
	r2.Spec.Network = "m"
	c := newFake(term, lost, r1, r2)
	rec := &fakeRecorder{}
	waits := newFenceWaits(rec, slog.Default())
	rel := &Releaser{Live: c, Writer: c, Events: rec, Observe: waits.observe, Policy: repair.Policy{NodeGracePeriod: time.Minute}}
	sw := NewSweeper(c, c, rel)
	for range 2 {
		res, err := sw.Sweep(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Outcomes) != 0 {
			t.Fatalf("released on an unfenced node: %+v", res.Outcomes)
		}
		// The watch path decides the same and tells nothing new.
		for _, r := range []*tenurev1alpha1.IPReservation{r1, r2} {
			if _, out, err := nominate(ctx, liveSource{c}, rel, r, false, slog.Default()); err != nil || out != nil {
				t.Fatalf("%s nominated on an unfenced node: %+v, %v", r.Name, out, err)
			}
		}
	}
	for _, n := range []string{"n.1", "n.2"} {
		if !exists(t, c, n) {
			t.Fatalf("%s released on an unfenced node", n)
		}
	}
	told := map[string]bool{}
	for _, e := range rec.events {
		p, ok := e.obj.(*corev1.Pod)
		if e.reason != EventReasonFenceWait || !ok || p.Name != "term" || p.UID != "uid-term" {
			t.Errorf("event %q on %T %+v, want %s on pod ns/term", e.reason, e.obj, e.obj, EventReasonFenceWait)
			continue
		}
		for _, w := range []string{"waiting for node lost to be fenced", "kubectl taint node lost node.kubernetes.io/out-of-service=nodeshutdown:NoExecute"} {
			if !strings.Contains(e.message, w) {
				t.Errorf("event message %q lacks %q", e.message, w)
			}
		}
		for _, n := range []string{"n.1", "n.2"} {
			if strings.Contains(e.message, "(IPReservation "+n+")") {
				if told[n] {
					t.Errorf("%s told twice", n)
				}
				told[n] = true
			}
		}
	}
	if !told["n.1"] || !told["n.2"] || len(rec.events) != 2 {
		t.Fatalf("told %v in %d events, want n.1 and n.2 once each", told, len(rec.events))
	}

	// A keep for another reason (a sweep's view of the node from before it
	// was lost) neither forgets the wait nor tells it again.
	waits.observe(r1, repair.Decision{Message: "pod ns/term is terminating on Ready node lost: its kubelet runs the DEL"})
	waits.observe(r1, repair.Decide(r1, repair.Facts{Now: time.Now(), Pod: repair.PodFactOf(term), Node: repair.NodeFactOf(lost)}, rel.Policy))
	if _, ok := waits.told["n.1"]; !ok || len(rec.events) != 2 {
		t.Fatalf("after a keep for another reason: told %v, %d events; want n.1 still told, no new event", waits.told, len(rec.events))
	}

	lost.Spec.Taints = []corev1.Taint{{Key: corev1.TaintNodeOutOfService, Value: "nodeshutdown", Effect: corev1.TaintEffectNoExecute}}
	if err := c.Update(ctx, lost); err != nil {
		t.Fatal(err)
	}
	for _, r := range []*tenurev1alpha1.IPReservation{r1, r2} {
		_, out, err := nominate(ctx, liveSource{c}, rel, r, false, slog.Default())
		if err != nil || out == nil || !out.Released || out.Decision.Reason != repair.NodeOutOfService {
			t.Fatalf("%s on the fenced node: %+v, %v; want released as NodeOutOfService", r.Name, out, err)
		}
	}
	if len(waits.told) != 0 {
		t.Fatalf("released reservations still waiting: %v", waits.told)
	}
}

func TestReleaseRefusesAChangedReservation(t *testing.T) {
	ctx := context.Background()
	r := reservationOf("n.9", "10.0.0.9", podOwner("ns", "gone", "uid-gone", "c", "a"))
	c := newFake(r)
	// A writer that changes the object between the live read and the delete.
	once := sync.Once{}
	w := &interposer{Client: c, before: func() {
		once.Do(func() {
			cur := &tenurev1alpha1.IPReservation{}
			if err := c.Get(ctx, types.NamespacedName{Name: "n.9"}, cur); err != nil {
				t.Fatal(err)
			}
			cur.Labels["touched"] = "yes"
			if err := c.Update(ctx, cur); err != nil {
				t.Fatal(err)
			}
		})
	}}
	rel := &Releaser{Live: c, Writer: w}
	_, err := rel.Release(ctx, "n.9")
	if err == nil || !strings.Contains(err.Error(), ErrChanged.Error()) {
		t.Fatalf("err %v, want ErrChanged", err)
	}
	if !exists(t, c, "n.9") {
		t.Fatal("a reservation that changed after the decision was deleted")
	}
	out, err := rel.Release(ctx, "n.9")
	if err != nil || !out.Released {
		t.Fatalf("second attempt: %+v %v", out, err)
	}
}

type interposer struct {
	client.Client
	before func()
}

func (i *interposer) Delete(ctx context.Context, obj client.Object, opts ...client.DeleteOption) error {
	i.before()
	return i.Client.Delete(ctx, obj, opts...)
}

func TestEventTargetPrefersPodThenClaimThenPool(t *testing.T) {
	ctx := context.Background()
	pool := &tenurev1alpha1.IPPool{ObjectMeta: metav1.ObjectMeta{Name: "p1", UID: "pool-uid"}}
	c := newFake(pool)
	rel := &Releaser{Live: c}
	r := reservationOf("x", "10.0.0.1", podOwner("ns", "p", "u1", "c", "a"))
	r.Spec.Pool = "p1"
	if got := rel.eventTarget(ctx, r, gathered{pod: pod("ns", "p", "u1", "a")}); got.(*corev1.Pod).Name != "p" {
		t.Errorf("live pod: %T", got)
	}
	if got := rel.eventTarget(ctx, r, gathered{pod: pod("ns", "p", "u2", "a")}); got.(*tenurev1alpha1.IPPool).Name != "p1" {
		t.Errorf("replaced pod: %T, want the pool", got)
	}
	cl := &ipamclaimsv1alpha1.IPAMClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "vm", UID: "u1"}}
	if got := rel.eventTarget(ctx, r, gathered{claim: cl}); got.(*ipamclaimsv1alpha1.IPAMClaim).Name != "vm" {
		t.Errorf("claim: %T", got)
	}
	r.Spec.Pool = "missing"
	if got := rel.eventTarget(ctx, r, gathered{}); got.(*tenurev1alpha1.IPReservation).Name != "x" {
		t.Errorf("fallback: %T", got)
	}
}

func TestClaimFinalizer(t *testing.T) {
	ctx := context.Background()
	claim := &ipamclaimsv1alpha1.IPAMClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "vm", UID: "claim-uid"},
		Spec: ipamclaimsv1alpha1.IPAMClaimSpec{Network: "n", Interface: "net1"}}
	owner := tenurev1alpha1.ReservationOwner{Kind: tenurev1alpha1.OwnerIPAMClaim, Namespace: "ns", Name: "vm", UID: "claim-uid"}
	pd := reservationOf("n.pd", "2001:db8::/56", owner)
	pd.Spec.Kind = tenurev1alpha1.KindDelegatedPrefix
	other := reservationOf("n.other", "10.0.0.8", podOwner("ns", "p", "pod-uid", "c", "a"))
	c := newFake(claim, reservationOf("n.a", "10.0.0.7", owner), pd, other, pod("ns", "p", "pod-uid", "a"))
	rel := &Releaser{Live: c, Writer: c}
	cf := &claimFinalizer{live: c, writer: c, rel: rel}

	cur := &ipamclaimsv1alpha1.IPAMClaim{}
	get := func() {
		t.Helper()
		if err := c.Get(ctx, types.NamespacedName{Namespace: "ns", Name: "vm"}, cur); err != nil {
			t.Fatal(err)
		}
	}
	get()
	if wrote, err := cf.ensure(ctx, cur, false); err != nil || wrote {
		t.Fatalf("ensure on a claim that holds nothing: %v %v", wrote, err)
	}
	get()
	if wrote, err := cf.ensure(ctx, cur, true); err != nil || wrote {
		t.Fatalf("ensure before the agent recorded anything: %v %v, want no write (it would race the agent's status write)", wrote, err)
	}
	cur.Status.IPs = []string{"10.0.0.7/24"}
	if err := c.Status().Update(ctx, cur); err != nil {
		t.Fatal(err)
	}
	get()
	if wrote, err := cf.ensure(ctx, cur, true); err != nil || !wrote {
		t.Fatalf("ensure: %v %v", wrote, err)
	}
	get()
	if len(cur.Finalizers) != 1 || cur.Finalizers[0] != ClaimFinalizer {
		t.Fatalf("finalizers %v", cur.Finalizers)
	}
	// The claim is still live: nothing of it may be released.
	if out, err := rel.Release(ctx, "n.a"); err != nil || out.Released {
		t.Fatalf("released a live claim's address: %+v %v", out, err)
	}
	if err := c.Delete(ctx, cur); err != nil {
		t.Fatal(err)
	}
	get() // still there: Terminating with the finalizer
	if cur.DeletionTimestamp == nil {
		t.Fatal("no deletionTimestamp")
	}
	n, done, err := cf.finalize(ctx, cur)
	if err != nil || n != 2 || !done {
		t.Fatalf("finalize: released %d, done %v, %v", n, done, err)
	}
	if exists(t, c, "n.a") || exists(t, c, "n.pd") || !exists(t, c, "n.other") {
		t.Fatal("finalize must release exactly the claim's reservations")
	}
	if err := c.Get(ctx, types.NamespacedName{Namespace: "ns", Name: "vm"}, cur); !apierrors.IsNotFound(err) {
		t.Fatalf("claim after finalize: %v (finalizers %v)", err, cur.Finalizers)
	}
}

// A released claim is logged once: the deletes of its reservations
// nominate it again, from a cache that still holds it Terminating with the
// finalizer, and that second pass finds the claim gone.
func TestClaimReleaseLoggedOnce(t *testing.T) {
	ctx := context.Background()
	claim := &ipamclaimsv1alpha1.IPAMClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "vm", UID: "claim-uid",
		Finalizers: []string{ClaimFinalizer}},
		Spec:   ipamclaimsv1alpha1.IPAMClaimSpec{Network: "n", Interface: "net1"},
		Status: ipamclaimsv1alpha1.IPAMClaimStatus{IPs: []string{"10.0.0.7/24"}}}
	owner := tenurev1alpha1.ReservationOwner{Kind: tenurev1alpha1.OwnerIPAMClaim, Namespace: "ns", Name: "vm", UID: "claim-uid"}
	c := newFake(claim, reservationOf("n.a", "10.0.0.7", owner))
	var logs strings.Builder
	rel := &Releaser{Live: c, Writer: c, Log: slog.New(slog.NewTextHandler(&logs, nil))}
	cf := &claimFinalizer{live: c, writer: c, rel: rel}
	cur := &ipamclaimsv1alpha1.IPAMClaim{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: "ns", Name: "vm"}, cur); err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(ctx, cur); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, types.NamespacedName{Namespace: "ns", Name: "vm"}, cur); err != nil {
		t.Fatal(err)
	}
	cached := cur.DeepCopy()
	if n, done, err := cf.finalize(ctx, cur); err != nil || n != 1 || !done {
		t.Fatalf("finalize: released %d, done %v, %v", n, done, err)
	}
	if _, _, err := cf.finalize(ctx, cached); err != nil {
		t.Fatalf("finalize again from the cache's copy: %v", err)
	}
	if got := strings.Count(logs.String(), "msg=\"released IPAMClaim\""); got != 1 {
		t.Fatalf("released IPAMClaim logged %d times, want once:\n%s", got, logs.String())
	}
}

// TestClaimFinalizerWaitsForOtherFinalizers: a claim deleted while
// KubeVirt's finalizer is on it keeps its reservations, says so in its
// condition, and is released once that finalizer is removed.
func TestClaimFinalizerWaitsForOtherFinalizers(t *testing.T) {
	ctx := context.Background()
	const kubevirt = "kubevirt.io/persistent-ipam"
	claim := &ipamclaimsv1alpha1.IPAMClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "vm", UID: "claim-uid",
		Finalizers: []string{kubevirt, ClaimFinalizer}},
		Spec:   ipamclaimsv1alpha1.IPAMClaimSpec{Network: "n"},
		Status: ipamclaimsv1alpha1.IPAMClaimStatus{IPs: []string{"10.0.0.7/24"}, DelegatedPrefixes: []string{"2001:db8::/56"}}}
	owner := tenurev1alpha1.ReservationOwner{Kind: tenurev1alpha1.OwnerIPAMClaim, Namespace: "ns", Name: "vm", UID: "claim-uid"}
	pd := reservationOf(reservation.PrefixName("n", netip.MustParsePrefix("2001:db8::/56")), "2001:db8::/56", owner)
	pd.Spec.Kind = tenurev1alpha1.KindDelegatedPrefix
	addr := reservationOf(reservation.AddressName("n", netip.MustParseAddr("10.0.0.7")), "10.0.0.7", owner)
	c := newFake(claim, addr, pd)
	rel := &Releaser{Live: c, Writer: c}
	cf := &claimFinalizer{live: c, writer: c, rel: rel}
	cur := &ipamclaimsv1alpha1.IPAMClaim{}
	get := func() {
		t.Helper()
		if err := c.Get(ctx, types.NamespacedName{Namespace: "ns", Name: "vm"}, cur); err != nil {
			t.Fatal(err)
		}
	}
	get()
	if err := c.Delete(ctx, cur); err != nil {
		t.Fatal(err)
	}
	for range 2 { // the second pass finds the condition set and writes nothing
		get()
		n, done, err := cf.finalize(ctx, cur)
		if err != nil || n != 0 || done {
			t.Fatalf("finalize while KubeVirt's finalizer is on the claim: released %d, done %v, %v", n, done, err)
		}
		if !exists(t, c, addr.Name) || !exists(t, c, pd.Name) {
			t.Fatal("a reservation of the claim was released while KubeVirt's finalizer is on it")
		}
	}
	get()
	cond := meta.FindStatusCondition(cur.Status.Conditions, claims.ConditionReleased)
	want := "claim is being deleted; waiting for finalizer kubevirt.io/persistent-ipam before releasing 10.0.0.7, 2001:db8::/56"
	if cond == nil || cond.Status != metav1.ConditionFalse || cond.Reason != claims.ReasonWaitingForFinalizers || cond.Message != want {
		t.Fatalf("condition %+v, want Released=False WaitingForFinalizers %q", cond, want)
	}
	if !slices.Equal(cur.Finalizers, []string{kubevirt, ClaimFinalizer}) {
		t.Fatalf("finalizers %v", cur.Finalizers)
	}

	// KubeVirt's Cleanup: an Update without its finalizer.
	controllerutil.RemoveFinalizer(cur, kubevirt)
	if err := c.Update(ctx, cur); err != nil {
		t.Fatal(err)
	}
	get()
	n, done, err := cf.finalize(ctx, cur)
	if err != nil || n != 2 || !done {
		t.Fatalf("finalize after KubeVirt's finalizer went: released %d, done %v, %v", n, done, err)
	}
	if exists(t, c, addr.Name) || exists(t, c, pd.Name) {
		t.Fatal("the claim's reservations outlived it")
	}
	if err := c.Get(ctx, types.NamespacedName{Namespace: "ns", Name: "vm"}, cur); !apierrors.IsNotFound(err) {
		t.Fatalf("claim after finalize: %v (finalizers %v)", err, cur.Finalizers)
	}
}

func TestPoolCapacity(t *testing.T) {
	for _, tc := range []struct {
		spec tenurev1alpha1.IPPoolSpec
		want int64
		err  string
	}{
		{tenurev1alpha1.IPPoolSpec{Ranges: []tenurev1alpha1.PoolRange{{Range: "10.0.0.0/29"}}}, 6, ""},
		{tenurev1alpha1.IPPoolSpec{Ranges: []tenurev1alpha1.PoolRange{{Range: "10.0.0.0/24", RangeStart: "10.0.0.10", RangeEnd: "10.0.0.19"}}}, 10, ""},
		{tenurev1alpha1.IPPoolSpec{Ranges: []tenurev1alpha1.PoolRange{{Range: "10.0.0.0/29", Exclude: []string{"10.0.0.1/32"}}}, Gateway: "10.0.0.6"}, 4, ""},
		{tenurev1alpha1.IPPoolSpec{Ranges: []tenurev1alpha1.PoolRange{{Range: "10.0.0.0/29"}, {Range: "fd00::/120"}}}, 6 + 255, ""},
		{tenurev1alpha1.IPPoolSpec{Ranges: []tenurev1alpha1.PoolRange{{Range: "fd00::/32"}}}, 1<<63 - 1, ""},
		{tenurev1alpha1.IPPoolSpec{Ranges: []tenurev1alpha1.PoolRange{{Range: "10.0.0.0/33"}}}, 0, "spec.ranges[0].range"},
		{tenurev1alpha1.IPPoolSpec{Ranges: []tenurev1alpha1.PoolRange{{Range: "10.0.0.0/29"}},
			NodeSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "rack", Operator: "Near"}}}}, 0, `IPPool p spec.nodeSelector: {"matchExpressions":[{"key":"rack","operator":"Near"}]}`},
		{tenurev1alpha1.IPPoolSpec{Ranges: []tenurev1alpha1.PoolRange{{Range: "10.0.0.0/29"}},
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "red blue"}}}, 0, `IPPool p spec.namespaceSelector: {"matchLabels":{"team":"red blue"}}`},
		{tenurev1alpha1.IPPoolSpec{Ranges: []tenurev1alpha1.PoolRange{{Range: "10.0.0.0/29"}},
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "red"}}, NodeSelector: &metav1.LabelSelector{}}, 6, ""},
	} {
		got, err := PoolCapacity("p", tc.spec)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%+v: err %v, want one naming %s", tc.spec, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%+v: %d %v, want %d", tc.spec, got, err, tc.want)
		}
	}
}

func TestPoolStatusWritesOnlyChanges(t *testing.T) {
	ctx := context.Background()
	pool := &tenurev1alpha1.IPPool{ObjectMeta: metav1.ObjectMeta{Name: "p1"}, Spec: tenurev1alpha1.IPPoolSpec{Ranges: []tenurev1alpha1.PoolRange{{Range: "10.0.0.0/29"}}}}
	bad := &tenurev1alpha1.IPPool{ObjectMeta: metav1.ObjectMeta{Name: "bad"}, Spec: tenurev1alpha1.IPPoolSpec{Ranges: []tenurev1alpha1.PoolRange{{Range: "10.0.0.0/33"}}}}
	r1 := reservationOf("n.1", "10.0.0.1", podOwner("ns", "a", "u", "c", "n"))
	r1.Spec.Pool = "p1"
	r2 := reservationOf("n.2", "10.0.0.2", podOwner("ns", "a", "u", "c", "n"))
	r2.Spec.Pool = "p1"
	c := newFake(pool, bad, r1, r2)
	ps := &poolStatus{counts: &reservationCounts{}, cache: c, writer: c, interval: time.Second}
	h := ps.counts.Handler()
	h.OnAdd(reservation.ViewOf(r1), true)
	h.OnAdd(reservation.ViewOf(r2), true)
	if err := ps.update(ctx); err != nil {
		t.Fatal(err)
	}
	got := &tenurev1alpha1.IPPool{}
	if err := c.Get(ctx, types.NamespacedName{Name: "p1"}, got); err != nil {
		t.Fatal(err)
	}
	st := got.Status
	if st.Capacity != 6 || st.Allocated != 2 || st.Free != 4 || st.LastUpdated == nil {
		t.Fatalf("status %+v", st)
	}
	rv := got.ResourceVersion
	if err := ps.update(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, types.NamespacedName{Name: "p1"}, got); err != nil {
		t.Fatal(err)
	}
	if got.ResourceVersion != rv {
		t.Fatal("an unchanged pool was written again")
	}
	if err := c.Get(ctx, types.NamespacedName{Name: "bad"}, got); err != nil {
		t.Fatal(err)
	}
	if len(got.Status.Conditions) != 1 || got.Status.Conditions[0].Status != metav1.ConditionFalse ||
		!strings.Contains(got.Status.Conditions[0].Message, "spec.ranges[0].range") {
		t.Fatalf("invalid pool conditions %+v", got.Status.Conditions)
	}
}

// A stale cache (pod not seen yet, node missing) nominates; the live reads
// keep: nothing a cache says alone ever releases.
func TestStaleCacheNominatesLiveReadKeeps(t *testing.T) {
	ctx := context.Background()
	now := metav1.Now()
	live := pod("ns", "new", "uid-new", "fresh-node")
	terminating := pod("ns", "term", "uid-term", "fresh-node")
	terminating.DeletionTimestamp = &now
	terminating.Finalizers = []string{"hold"}
	freshNode := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "fresh-node"}, Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{
		{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastTransitionTime: now}}}}
	rNew := reservationOf("n.1", "10.0.0.1", podOwner("ns", "new", "uid-new", "c1", "fresh-node"))
	rTerm := reservationOf("n.2", "10.0.0.2", podOwner("ns", "term", "uid-term", "c2", "fresh-node"))
	c := newFake(live, terminating, freshNode, rNew, rTerm)
	rel := &Releaser{Live: c, Writer: c, Policy: repair.Policy{NodeGracePeriod: time.Minute}}

	// The cache has neither the new pod nor the node; it has the
	// terminating pod.
	stale := &snapshot{
		idx:    newIndex(),
		nodes:  map[string]*corev1.Node{},
		claims: map[types.NamespacedName]*ipamclaimsv1alpha1.IPAMClaim{},
	}
	if err := stale.idx.pods.Add(podEntryOf(terminating)); err != nil {
		t.Fatal(err)
	}
	for _, r := range []*tenurev1alpha1.IPReservation{rNew, rTerm} {
		_, out, err := nominate(ctx, stale, rel, r, false, slog.Default())
		if err != nil {
			t.Fatal(err)
		}
		if out == nil {
			t.Fatalf("%s: the stale cache did not nominate it; the test proves nothing", r.Name)
		}
		if out.Released || out.Decision.Release {
			t.Fatalf("%s released on a stale cache: %+v", r.Name, out.Decision)
		}
		if !exists(t, c, r.Name) {
			t.Fatalf("%s deleted", r.Name)
		}
	}
}

func TestReservationCountsFollowEvents(t *testing.T) {
	c := &reservationCounts{}
	h := c.Handler()
	a := reservationOf("n.1", "10.0.0.1", podOwner("ns", "a", "u1", "c", "n"))
	a.Spec.Pool = "p1"
	b := reservationOf("n.2", "10.0.0.2", podOwner("ns", "b", "u2", "c", "n"))
	b.Spec.Pool = "p1"
	pd := reservationOf("n.pd.fd00-0000-0000-0100-0000-0000-0000-0000.56", "fd00:0:0:100::/56", podOwner("ns", "b", "u2", "c", "n"))
	pd.Spec.Pool, pd.Spec.Kind = "p1", tenurev1alpha1.KindDelegatedPrefix
	h.OnAdd(reservation.ViewOf(a), true)
	h.OnAdd(reservation.ViewOf(b), false)
	h.OnAdd(reservation.ViewOf(pd), false)
	if got := c.snapshot()["p1"]; got == nil || *got != (usage{addresses: 2, prefixes: 1}) {
		t.Fatalf("after three adds: %+v", got)
	}
	moved := b.DeepCopy()
	moved.Spec.Pool = "p2"
	h.OnUpdate(reservation.ViewOf(b), reservation.ViewOf(moved))
	h.OnDelete(toolscache.DeletedFinalStateUnknown{Key: a.Name, Obj: reservation.ViewOf(a)})
	snap := c.snapshot()
	if got := snap["p1"]; got == nil || *got != (usage{prefixes: 1}) {
		t.Fatalf("p1 after moving b and deleting a: %+v", got)
	}
	if got := snap["p2"]; got == nil || *got != (usage{addresses: 1}) {
		t.Fatalf("p2: %+v", got)
	}
	h.OnDelete(reservation.ViewOf(pd))
	if _, ok := c.snapshot()["p1"]; ok {
		t.Fatal("an empty pool keeps no entry")
	}
}

// A sibling whose metadata disagrees with its spec is no evidence on the
// live reads: a newer sandbox's reservation of the pod's own node, but
// named for another address than its spec holds, does not make the
// pod's earlier one an EarlierSandbox; the same sibling, well formed,
// does.
func TestTheLiveReadsWeighNoMalformedSibling(t *testing.T) {
	ctx := context.Background()
	old := metav1.NewTime(time.Now().Add(-time.Hour).Truncate(time.Second))
	p := pod("ns", "p1", "uid-p1", "node-b")
	earlier := reservationOf("n.10.0.0.1", "10.0.0.1", podOwner("ns", "p1", "uid-p1", "c1", "node-b"))
	earlier.CreationTimestamp = old
	for _, tc := range []struct {
		name string
		lock string // the newer sibling's name
		want repair.Reason
	}{
		{"well formed", "n.10.0.0.2", repair.EarlierSandbox},
		{"named for another address", "n.10.0.0.3", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			newer := reservationOf(tc.lock, "10.0.0.2", podOwner("ns", "p1", "uid-p1", "c2", "node-b"))
			newer.CreationTimestamp = metav1.Now()
			c := newFake(p.DeepCopy(), earlier.DeepCopy(), newer)
			rel := &Releaser{Live: c, Writer: c, DryRun: true}
			out, err := rel.Release(ctx, earlier.Name)
			if err != nil {
				t.Fatal(err)
			}
			if out.Decision.Reason != tc.want || out.Decision.Release != (tc.want != "") {
				t.Fatalf("Release(%s) decided %+v; want reason %q", earlier.Name, out.Decision, tc.want)
			}
		})
	}
}

// A node's watch event hands its reservations to the queue at once when
// it is fenced (the out-of-service taint comes, or goes), when its
// readiness changes and when it is deleted; a change of neither (a
// heartbeat, another taint) hands nothing.
func TestNodeEventsRecheckTheNodesReservations(t *testing.T) {
	c := &Controller{idx: newIndex()}
	for _, r := range []*tenurev1alpha1.IPReservation{
		reservationOf("n.1", "10.0.0.1", podOwner("ns", "a", "uid-a", "c1", "lost")),
		reservationOf("n.2", "10.0.0.2", podOwner("ns", "b", "uid-b", "c2", "lost")),
		reservationOf("n.3", "10.0.0.3", podOwner("ns", "c", "uid-c", "c3", "other")),
	} {
		if err := c.idx.add(reservation.ViewOf(r)); err != nil {
			t.Fatal(err)
		}
	}
	notReady := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "lost", ResourceVersion: "1"}, Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{
		{Type: corev1.NodeReady, Status: corev1.ConditionUnknown}}}}
	with := func(n *corev1.Node, f func(*corev1.Node)) *corev1.Node {
		n = n.DeepCopy()
		f(n)
		return n
	}
	fenced := with(notReady, func(n *corev1.Node) {
		n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: corev1.TaintNodeOutOfService, Value: "nodeshutdown", Effect: corev1.TaintEffectNoExecute})
	})
	unreachable := with(notReady, func(n *corev1.Node) {
		n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: corev1.TaintNodeUnreachable, Effect: corev1.TaintEffectNoExecute})
	})
	ready := with(notReady, func(n *corev1.Node) { n.Status.Conditions[0].Status = corev1.ConditionTrue })
	heartbeat := with(notReady, func(n *corev1.Node) { n.Status.Conditions[0].LastHeartbeatTime = metav1.Now() })
	h := (&reservationReconciler{c}).nodeEvents()
	for _, tc := range []struct {
		name     string
		old, new *corev1.Node
		want     []string
	}{
		{"tainted out-of-service", notReady, fenced, []string{"n.1", "n.2"}},
		{"taint removed", fenced, notReady, []string{"n.1", "n.2"}},
		{"Ready to NotReady", ready, notReady, []string{"n.1", "n.2"}},
		{"tainted unreachable", notReady, unreachable, nil},
		{"a heartbeat", notReady, heartbeat, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
			defer q.ShutDown()
			h.Update(context.Background(), event.UpdateEvent{ObjectOld: tc.old, ObjectNew: tc.new}, q)
			var got []string
			for q.Len() > 0 {
				req, _ := q.Get()
				got = append(got, req.Name)
				q.Done(req)
			}
			slices.Sort(got)
			if !slices.Equal(got, tc.want) {
				t.Errorf("queued %v, want %v", got, tc.want)
			}
		})
	}
}
