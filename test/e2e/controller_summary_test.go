//go:build integration

package e2e

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/reservation"
)

// The controller's cache reads most reservations as metadata alone, whose
// spec summary says what the rules read of the spec. Reservations made
// before the summary existed (as an older agent made them: neither label
// nor annotation), ones that lost the annotation, and ones whose spec
// changed after the summary was written are still judged by what their
// spec says: released when their owner is gone, never while it lives.
func TestControllerJudgesReservationsWithoutATrustworthySpecSummary(t *testing.T) {
	ctx := testContext(t, 2*time.Minute)
	c := apiClient(t)
	const network, ns = "summary", "e2e-summary"
	live := newPod(t, ctx, c, ns, "sum-a", nil)
	liveOwner := func(sandbox string) tenurev1alpha1.ReservationOwner {
		return tenurev1alpha1.ReservationOwner{Kind: tenurev1alpha1.OwnerPod, Namespace: ns, Name: live.name, UID: live.uid,
			PodName: live.name, PodUID: live.uid, ContainerID: sandbox, Interface: "net1", Node: "sum-a"}
	}
	older := func(r *tenurev1alpha1.IPReservation) {
		delete(r.Labels, reservation.LabelSpecSummary)
		delete(r.Annotations, reservation.AnnotationSpecSummary)
	}
	lostAnnotation := func(r *tenurev1alpha1.IPReservation) { delete(r.Annotations, reservation.AnnotationSpecSummary) }
	asNew := func(*tenurev1alpha1.IPReservation) {}
	n := 0
	create := func(owner tenurev1alpha1.ReservationOwner, shape func(*tenurev1alpha1.IPReservation)) *tenurev1alpha1.IPReservation {
		t.Helper()
		n++
		a := netip.MustParseAddr(fmt.Sprintf("10.66.0.%d", n))
		r := reservation.New(reservation.Spec{Network: network, Kind: tenurev1alpha1.KindAddress, Item: netip.PrefixFrom(a, 32), Owner: owner})
		shape(r)
		if err := c.Create(ctx, r); err != nil {
			t.Fatal(err)
		}
		return r
	}
	// changeOwner changes the spec after the summary was written: the
	// generation goes to 2 and the annotation says the first owner.
	changeOwner := func(r *tenurev1alpha1.IPReservation, owner tenurev1alpha1.ReservationOwner) {
		t.Helper()
		r.Spec.Owner = owner
		if err := c.Update(ctx, r); err != nil {
			t.Fatal(err)
		}
		if r.Generation != 2 || r.Annotations[reservation.AnnotationSpecSummary] == reservation.EncodeSpecSummary(&r.Spec) {
			t.Fatalf("after the spec change: generation %d, summary %q", r.Generation, r.Annotations[reservation.AnnotationSpecSummary])
		}
	}

	kept, released := map[string]string{}, map[string]string{}
	note := func(m map[string]string, why string, r *tenurev1alpha1.IPReservation) { m[r.Name] = why }
	note(released, "older, pod gone", create(ghostOwner(ns, 1), older))
	note(kept, "older, pod live", create(liveOwner("current"), older))
	// One pod's earlier sandbox made by an older agent, its later one
	// with the summary: siblings of both kinds.
	note(released, "older, earlier sandbox", create(tenurev1alpha1.ReservationOwner{Kind: tenurev1alpha1.OwnerPod, Namespace: ns, Name: live.name,
		UID: live.uid, PodName: live.name, PodUID: live.uid, ContainerID: "crashed", Interface: "net2", Node: "sum-a"}, older))
	note(kept, "summary, later sandbox", create(tenurev1alpha1.ReservationOwner{Kind: tenurev1alpha1.OwnerPod, Namespace: ns, Name: live.name,
		UID: live.uid, PodName: live.name, PodUID: live.uid, ContainerID: "retried", Interface: "net2", Node: "sum-a"}, asNew))
	note(released, "no annotation, pod gone", create(ghostOwner(ns, 2), lostAnnotation))
	note(kept, "no annotation, pod live", create(liveOwner("current"), lostAnnotation))
	r := create(liveOwner("current"), asNew)
	changeOwner(r, ghostOwner(ns, 3))
	note(released, "summary says a live pod, spec a gone one", r)
	r = create(ghostOwner(ns, 4), asNew)
	changeOwner(r, liveOwner("current"))
	note(kept, "summary says a gone pod, spec a live one", r)
	note(kept, "summary, pod live", create(liveOwner("current"), asNew))
	note(released, "summary, pod gone", create(ghostOwner(ns, 5), asNew))

	ctrl := ctlStart(t, ctx, "e2e-summary", "--sweep-interval", "1s")
	ctrl.waitLeading(t, ctx)
	wantLeft := func() bool {
		got := present(t, ctx, network)
		return slices.Equal(slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(kept)))
	}
	ctlPoll(t, ctx, "exactly the reservations of live owners left", func() (bool, error) { return wantLeft(), nil })
	ctrl.waitSweepAfter(t, ctx, time.Now())
	if got := present(t, ctx, network); !wantLeft() {
		t.Fatalf("after a full sweep: %v left, want %v (released: %v)", slices.Sorted(maps.Keys(got)), kept, released)
	}

	// While it runs: an older agent's reservation of a gone pod is
	// released, one of the live pod stays.
	gone := create(ghostOwner(ns, 6), older)
	note(kept, "older, made while running, pod live", create(liveOwner("current"), older))
	ctlPoll(t, ctx, "the older reservation of a gone pod made while running released", func() (bool, error) {
		err := c.Get(ctx, client.ObjectKeyFromObject(gone), &tenurev1alpha1.IPReservation{})
		return client.IgnoreNotFound(err) == nil && err != nil, client.IgnoreNotFound(err)
	})
	ctrl.waitSweepAfter(t, ctx, time.Now())
	if got := present(t, ctx, network); !wantLeft() {
		t.Fatalf("after a full sweep: %v left, want %v", slices.Sorted(maps.Keys(got)), kept)
	}
}
