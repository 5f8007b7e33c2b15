package agent

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ipamclaimsv1alpha1 "github.com/tenure-ipam/tenure/api/ipamclaims/v1alpha1"
	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
)

func holdingRes(name string, kind tenurev1alpha1.ReservationKind) *tenurev1alpha1.IPReservation {
	r := &tenurev1alpha1.IPReservation{ObjectMeta: metav1.ObjectMeta{Name: name}}
	r.Spec.Kind, r.Spec.Owner.UID = kind, "c1"
	return r
}

// fakeLister answers the owner-UID list with what it holds, or err.
type fakeLister struct {
	mu    sync.Mutex
	rs    []*tenurev1alpha1.IPReservation
	err   error
	calls int
	// hang makes a list wait for its context, as one to an unreachable
	// API server does.
	hang bool
}

func (f *fakeLister) list(ctx context.Context, uid string) ([]*tenurev1alpha1.IPReservation, error) {
	f.mu.Lock()
	f.calls++
	hang := f.hang
	rs, err := append([]*tenurev1alpha1.IPReservation(nil), f.rs...), f.err
	f.mu.Unlock()
	if hang {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	if !strings.HasPrefix(uid, "c1") {
		return nil, errors.New("unexpected owner " + uid)
	}
	return rs, err
}

func names(rs []*tenurev1alpha1.IPReservation) []string {
	out := []string{}
	for _, r := range rs {
		out = append(out, r.Name)
	}
	return out
}

func TestClaimHoldingsListFirstThenFollowTheClaim(t *testing.T) {
	pd := holdingRes("net.pd.a.56", tenurev1alpha1.KindDelegatedPrefix)
	pd2 := holdingRes("net.pd.b.56", tenurev1alpha1.KindDelegatedPrefix)
	f := &fakeLister{rs: []*tenurev1alpha1.IPReservation{pd}}
	changed := make(chan struct{}, 4)
	h := newClaimHoldings(f.list, func(string) []*tenurev1alpha1.IPReservation { return nil }, func() { changed <- struct{}{} })
	claim := &ipamclaimsv1alpha1.IPAMClaim{ObjectMeta: metav1.ObjectMeta{UID: "c1", ResourceVersion: "1"}}

	// First sight: the list is waited for.
	rs, known := h.get(claim)
	if !known || len(rs) != 1 || rs[0].Name != pd.Name {
		t.Fatalf("first get: %v known %v, want %s known", names(rs), known, pd.Name)
	}
	// Unchanged claim within the TTL: no list.
	h.get(claim)
	if f.calls != 1 {
		t.Fatalf("%d lists for an unchanged claim, want 1", f.calls)
	}
	// The claim changed: listed again in the background, the old answer
	// stands meanwhile, and a different answer triggers a reconcile.
	f.mu.Lock()
	f.rs = []*tenurev1alpha1.IPReservation{pd2}
	f.mu.Unlock()
	claim.ResourceVersion = "2"
	if rs, known := h.get(claim); !known || len(rs) != 1 || rs[0].Name != pd.Name {
		t.Fatalf("get of a changed claim: %v known %v, want the previous answer", names(rs), known)
	}
	select {
	case <-changed:
	case <-time.After(5 * time.Second):
		t.Fatal("no reconcile asked for after the holdings changed")
	}
	if rs, _ := h.get(claim); len(rs) != 1 || rs[0].Name != pd2.Name {
		t.Fatalf("after the refresh: %v, want %s", names(rs), pd2.Name)
	}
}

func TestClaimHoldingsUnknownWhileTheListFails(t *testing.T) {
	f := &fakeLister{err: errors.New("connection refused")}
	local := []*tenurev1alpha1.IPReservation{}
	h := newClaimHoldings(f.list, func(string) []*tenurev1alpha1.IPReservation { return local }, nil)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel) // ends the background list left hanging below
	h.run(ctx)
	claim := &ipamclaimsv1alpha1.IPAMClaim{ObjectMeta: metav1.ObjectMeta{UID: "c1", ResourceVersion: "1"}}
	if _, known := h.get(claim); known {
		t.Fatal("a failed first list: want unknown, so the status record decides")
	}
	// While lists fail, another claim's first list is not waited for.
	f.mu.Lock()
	f.hang = true
	f.mu.Unlock()
	other := &ipamclaimsv1alpha1.IPAMClaim{ObjectMeta: metav1.ObjectMeta{UID: "c1-other", ResourceVersion: "1"}}
	start := time.Now()
	if _, known := h.get(other); known {
		t.Fatal("a claim first seen while lists fail: want unknown")
	}
	if d := time.Since(start); d >= holdingsFirstList {
		t.Fatalf("get took %v: a first list was waited for right after one failed", d)
	}
	f.mu.Lock()
	f.hang = false
	f.mu.Unlock()
	// What an ADD of this node learnt is known whatever the list does.
	pd := holdingRes("net.pd.a.56", tenurev1alpha1.KindDelegatedPrefix)
	h.learn(claim, []*tenurev1alpha1.IPReservation{pd})
	if rs, known := h.get(claim); !known || len(rs) != 1 || rs[0].Name != pd.Name {
		t.Fatalf("after learn: %v known %v", names(rs), known)
	}
}
