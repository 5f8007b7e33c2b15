package controller

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	ipamclaimsv1alpha1 "github.com/tenure-ipam/tenure/api/ipamclaims/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/claims"
	"github.com/tenure-ipam/tenure/internal/controller/sticky"
)

func statefulSet(name, uid string, replicas int32, generation int64) *appsv1.StatefulSet {
	return &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID(uid), Generation: generation},
		Spec: appsv1.StatefulSetSpec{Replicas: &replicas}}
}

func stickyClaim(sts, stsUID string, ordinal int) *ipamclaimsv1alpha1.IPAMClaim {
	p := pod("ns", sts+"-"+string(rune('0'+ordinal)), "pod-uid", "a")
	c := claims.NewStickyClaim(p, "net1", "san", metav1.OwnerReference{APIVersion: "apps/v1", Kind: "StatefulSet", Name: sts, UID: types.UID(stsUID)})
	c.UID = types.UID("claim-" + c.Name)
	return c
}

// TestStickyReleaser runs the reconciler on one API (cache and live reads
// agree): it marks a claim whose ordinal the StatefulSet scaled below,
// releases it after the grace period, never while a pod of its name
// exists, adopts a claim for the StatefulSet of its name, and releases
// every claim of a deleted StatefulSet.
func TestStickyReleaser(t *testing.T) {
	ctx := context.Background()
	web := statefulSet("web", "web-uid", 3, 1)
	c := newFake(web, stickyClaim("web", "web-uid", 0), stickyClaim("web", "web-uid", 1), stickyClaim("web", "web-uid", 2),
		pod("ns", "web-1", "pod-web-1", "a"), stickyClaim("old", "old-uid", 0))
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	rec := &fakeRecorder{}
	sr := &stickyReleaser{cache: c, live: c, writer: c, policy: sticky.Policy{ReleaseAfter: 10 * time.Minute}, events: rec,
		log: slog.New(slog.DiscardHandler), now: func() time.Time { return now }}
	getClaimOrNil := func(name string) *ipamclaimsv1alpha1.IPAMClaim {
		t.Helper()
		cl, err := getOrNil(ctx, c, types.NamespacedName{Namespace: "ns", Name: name}, &ipamclaimsv1alpha1.IPAMClaim{})
		if err != nil {
			t.Fatal(err)
		}
		return cl
	}
	reconcile := func(name string) time.Duration {
		t.Helper()
		after, err := sr.reconcile(ctx, types.NamespacedName{Namespace: "ns", Name: name})
		if err != nil {
			t.Fatalf("reconcile %s: %v", name, err)
		}
		return after
	}

	// All three in range: nothing written.
	for _, n := range []string{"web-0.net1", "web-1.net1", "web-2.net1"} {
		if after := reconcile(n); after != 0 || sticky.MarkOf(getClaimOrNil(n)) != nil {
			t.Fatalf("%s in range: recheck %v, mark %v", n, after, sticky.MarkOf(getClaimOrNil(n)))
		}
	}

	// Scaled to 1: ordinals 1 and 2 are marked (1's pod still runs: not it).
	web.Spec.Replicas = ptrTo(int32(1))
	web.Generation = 2
	if err := c.Update(ctx, web); err != nil {
		t.Fatal(err)
	}
	if after := reconcile("web-2.net1"); after != 10*time.Minute {
		t.Fatalf("web-2 first seen scaled down: recheck after %v", after)
	}
	if m := sticky.MarkOf(getClaimOrNil("web-2.net1")); m == nil || !m.Since.Equal(now) || m.Generation != 2 {
		t.Fatalf("web-2 mark %+v", m)
	}
	reconcile("web-1.net1")
	if m := sticky.MarkOf(getClaimOrNil("web-1.net1")); m != nil {
		t.Fatalf("web-1, whose pod exists, is marked %+v", m)
	}

	// The grace period passes: web-2's claim goes, web-1's stays.
	now = now.Add(10 * time.Minute)
	reconcile("web-2.net1")
	reconcile("web-1.net1")
	if getClaimOrNil("web-2.net1") != nil {
		t.Fatal("web-2's claim survived the grace period")
	}
	if getClaimOrNil("web-1.net1") == nil || getClaimOrNil("web-0.net1") == nil {
		t.Fatal("a claim whose pod exists, or in range, was released")
	}
	if len(rec.events) != 1 || rec.events[0].reason != EventStickyReleased || !strings.Contains(rec.events[0].message, "ScaledDown") {
		t.Fatalf("events %+v", rec.events)
	}
	if sts, ok := rec.events[0].obj.(*appsv1.StatefulSet); !ok || sts.Name != "web" {
		t.Errorf("the release Event is about %T, want the StatefulSet", rec.events[0].obj)
	}

	// A claim of StatefulSet old, whose StatefulSet of that name is
	// re-created (the first was deleted with the orphan policy): adopted.
	if err := c.Create(ctx, statefulSet("old", "old-uid-2", 1, 1)); err != nil {
		t.Fatal(err)
	}
	reconcile("old-0.net1")
	if refs := getClaimOrNil("old-0.net1").OwnerReferences; len(refs) != 1 || refs[0].UID != "old-uid-2" || *refs[0].BlockOwnerDeletion {
		t.Fatalf("after adoption: ownerReferences %+v", refs)
	}

	// StatefulSet web deleted: web-0 goes at once; web-1 once its pod is gone.
	if err := c.Delete(ctx, web); err != nil {
		t.Fatal(err)
	}
	reconcile("web-0.net1")
	reconcile("web-1.net1")
	if getClaimOrNil("web-0.net1") != nil || getClaimOrNil("web-1.net1") == nil {
		t.Fatal("after the StatefulSet's deletion: want web-0's claim gone, web-1's kept while its pod exists")
	}
	if err := c.Delete(ctx, pod("ns", "web-1", "pod-web-1", "a")); err != nil {
		t.Fatal(err)
	}
	reconcile("web-1.net1")
	if getClaimOrNil("web-1.net1") != nil {
		t.Fatal("web-1's claim survived its StatefulSet and pod")
	}
}

// TestStickyReleaserConfirmsLive: a cache that says scaled down past the
// grace period nominates; the live read (scaled up again) keeps the claim
// and drops its mark.
func TestStickyReleaserConfirmsLive(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	cl := stickyClaim("web", "web-uid", 2)
	for k, v := range (&sticky.Mark{Since: now.Add(-time.Hour), Generation: 2}).Annotations() {
		cl.Annotations[k] = v
	}
	stale := newFake(statefulSet("web", "web-uid", 1, 2), cl.DeepCopy())
	live := newFake(statefulSet("web", "web-uid", 3, 3), cl.DeepCopy())
	sr := &stickyReleaser{cache: stale, live: live, writer: live, policy: sticky.Policy{ReleaseAfter: time.Minute},
		log: slog.New(slog.DiscardHandler), now: func() time.Time { return now }}
	if _, err := sr.reconcile(ctx, types.NamespacedName{Namespace: "ns", Name: cl.Name}); err != nil {
		t.Fatal(err)
	}
	got, err := getOrNil(ctx, live, types.NamespacedName{Namespace: "ns", Name: cl.Name}, &ipamclaimsv1alpha1.IPAMClaim{})
	if got == nil || err != nil {
		t.Fatalf("the live read did not keep the claim: %v", err)
	}
	if m := sticky.MarkOf(got); m != nil {
		t.Fatalf("mark %+v kept on a claim back in range", m)
	}
}

func ptrTo[T any](v T) *T { return &v }
