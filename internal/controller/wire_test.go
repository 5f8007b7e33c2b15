package controller

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/controller/repair"
	"github.com/tenure-ipam/tenure/internal/kube"
)

// TestTheReleaserKeepsOneProbeRequestPerDueAddress: on live reads, a due
// NodeNotReady release creates the reservation's IPProbe (owned by it,
// naming the address and the owner node) and keeps the address; an
// answer that it answers keeps it, and the request is asked again once it
// stood the probe interval; a silent answer of a Ready node releases it
// and deletes the IPProbe; and an IPProbe of a reservation no longer due
// is deleted.
func TestTheReleaserKeepsOneProbeRequestPerDueAddress(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 12, 5, 1, 0, 0, 0, time.UTC)
	old := metav1.NewTime(now.Add(-time.Hour))
	term := pod("ns", "db-0", "uid-db", "lost")
	term.DeletionTimestamp, term.Finalizers = &old, []string{"hold"}
	lost := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "lost"}, Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{
		{Type: corev1.NodeReady, Status: corev1.ConditionUnknown, LastTransitionTime: old}}}}
	prober := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "prober"}, Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{
		{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastTransitionTime: old}}}}
	r := reservationOf("n.10.0.0.1", "10.0.0.1", podOwner("ns", "db-0", "uid-db", "c1", "lost"))
	api := fake.NewClientBuilder().WithScheme(kube.Scheme).WithObjects(term, lost, prober, r).
		WithStatusSubresource(&tenurev1alpha1.IPProbe{}).Build()
	clock := now
	probed := map[string]types.UID{}
	rl := &Releaser{Live: api, Writer: api, AskWire: true, Now: func() time.Time { return clock },
		Probed: func(name string) (types.UID, bool) { uid, ok := probed[name]; return uid, ok },
		Policy: repair.Policy{ReleaseUnfenced: true, NodeGracePeriod: time.Minute, ProbeInterval: 30 * time.Second}}
	getProbe := func() *tenurev1alpha1.IPProbe {
		t.Helper()
		p := &tenurev1alpha1.IPProbe{}
		if err := api.Get(ctx, client.ObjectKey{Name: r.Name}, p); err != nil {
			if apierrors.IsNotFound(err) {
				return nil
			}
			t.Fatal(err)
		}
		return p
	}
	answer := func(result tenurev1alpha1.ProbeResult, mac string) {
		t.Helper()
		p := getProbe()
		p.Status.Answers = []tenurev1alpha1.IPProbeAnswer{{Node: "prober", ObservedGeneration: p.Generation, Result: result, MAC: mac, Interface: "san0"}}
		if err := api.Status().Update(ctx, p); err != nil {
			t.Fatal(err)
		}
	}

	out, err := rl.Release(ctx, r.Name)
	if err != nil || out.Released || !out.Decision.Probe {
		t.Fatalf("first decision: %+v, %v; want a keep that asks the wire", out.Decision, err)
	}
	p := getProbe()
	if p == nil || p.Spec.Address != "10.0.0.1" || p.Spec.Node != "lost" || p.Spec.Network != "n" || !p.Spec.AskedAt.Time.Equal(now) ||
		len(p.OwnerReferences) != 1 || p.OwnerReferences[0].UID != r.UID {
		t.Fatalf("IPProbe %+v, want one asking about 10.0.0.1 of node lost, owned by reservation %s", p, r.UID)
	}
	gen := p.Generation

	answer(tenurev1alpha1.ProbeAnswered, "02:00:00:00:00:0b")
	clock = now.Add(10 * time.Second)
	if out, err = rl.Release(ctx, r.Name); err != nil || out.Released || out.Decision.Answering == nil || out.Decision.Answering.MAC != "02:00:00:00:00:0b" {
		t.Fatalf("while it answers: %+v, %v; want kept, naming the MAC", out.Decision, err)
	}
	if p = getProbe(); p.Generation != gen {
		t.Fatalf("asked again after 10s: generation %d, want %d", p.Generation, gen)
	}
	clock = now.Add(31 * time.Second)
	if out, err = rl.Release(ctx, r.Name); err != nil || out.Released {
		t.Fatalf("after the interval: %+v, %v; want kept", out.Decision, err)
	}
	if p = getProbe(); !p.Spec.AskedAt.Time.Equal(clock) {
		t.Fatalf("after the interval: asked at %v, want asked again at %v", p.Spec.AskedAt, clock)
	}

	answer(tenurev1alpha1.ProbeSilent, "")
	probed[r.Name] = p.UID
	if out, err = rl.Release(ctx, r.Name); err != nil || !out.Released || out.Decision.Reason != repair.NodeNotReady {
		t.Fatalf("on silence: %+v, %v; want released as NodeNotReady", out.Decision, err)
	}
	if exists(t, api, r.Name) || getProbe() != nil {
		t.Fatalf("after the release: reservation there %v, IPProbe %+v; want neither", exists(t, api, r.Name), getProbe())
	}

	// A request left over for a reservation no longer due (its node is
	// Ready again): deleted.
	r2 := reservationOf("n.10.0.0.2", "10.0.0.2", podOwner("ns", "db-1", "uid-db1", "c1", "prober"))
	term2 := pod("ns", "db-1", "uid-db1", "prober")
	term2.DeletionTimestamp, term2.Finalizers = &old, []string{"hold"}
	left := &tenurev1alpha1.IPProbe{ObjectMeta: metav1.ObjectMeta{Name: r2.Name},
		Spec: tenurev1alpha1.IPProbeSpec{Network: "n", Address: "10.0.0.2", Node: "prober", AskedAt: metav1.NewTime(now)}}
	for _, o := range []client.Object{r2, term2, left} {
		if err := api.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	probed[r2.Name] = left.UID
	if out, err = rl.Release(ctx, r2.Name); err != nil || out.Released || out.Decision.Probe {
		t.Fatalf("on a Ready node: %+v, %v; want kept, no wire", out.Decision, err)
	}
	if err := api.Get(ctx, client.ObjectKey{Name: r2.Name}, &tenurev1alpha1.IPProbe{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the IPProbe of a reservation no longer due: %v, want it deleted", err)
	}
}
