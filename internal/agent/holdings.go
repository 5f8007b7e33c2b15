package agent

import (
	"context"
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	ipamclaimsv1alpha1 "github.com/tenure-ipam/tenure/api/ipamclaims/v1alpha1"
	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
)

// claimHoldings is what the dataplane reads a claim's reservations from:
// the reservations, not status.delegatedPrefixes, say which prefix a claim
// holds (an IPAMClaim CRD without that field drops the record, never the
// reservation). A claim's items may lie in blocks no window of this node
// holds and may have been made by another node (the VM came from there),
// so the store's caches are completed by one list of the owner-UID label
// per claim: at the claim's ADD here, when the claim is first bound, again
// whenever the claim changes, and at the latest every holdingsTTL.
type claimHoldings struct {
	list    func(ctx context.Context, uid string) ([]*tenurev1alpha1.IPReservation, error)
	cached  func(uid string) []*tenurev1alpha1.IPReservation
	changed func()

	mu sync.Mutex
	m  map[types.UID]*holding
	// lastFailure is when a list last failed: until holdingsRetry has
	// passed, first lists run in the background too, so an unreachable
	// API server does not hold up the reconcile once per claim.
	lastFailure time.Time
	// ctx bounds the background lists; set by run.
	ctx context.Context
}

type holding struct {
	rs []*tenurev1alpha1.IPReservation
	// rv is the claim's resourceVersion when rs was read; at when.
	rv string
	at time.Time
	// failedAt is when the last list failed; used when the dataplane last
	// asked.
	failedAt, used time.Time
	listing        bool
}

const (
	// holdingsTTL bounds how stale a claim's holdings get without a change
	// of the claim (a reservation released by hand).
	holdingsTTL = 30 * time.Second
	// holdingsRetry spaces the lists of a claim whose list failed.
	holdingsRetry = 5 * time.Second
	// holdingsFirstList bounds the synchronous first list of a claim.
	holdingsFirstList = 2 * time.Second
	// holdingsIdle drops a claim the dataplane stopped asking about.
	holdingsIdle = 10 * time.Minute
)

func newClaimHoldings(list func(context.Context, string) ([]*tenurev1alpha1.IPReservation, error),
	cached func(string) []*tenurev1alpha1.IPReservation, changed func()) *claimHoldings {
	return &claimHoldings{list: list, cached: cached, changed: changed, m: map[types.UID]*holding{}, ctx: context.Background()}
}

// run sets the context of the background lists.
func (h *claimHoldings) run(ctx context.Context) {
	h.mu.Lock()
	h.ctx = ctx
	h.mu.Unlock()
}

// learn records what a claim's ADD on this node reserved or found: the
// claim as the ADD left it, and its reservations.
func (h *claimHoldings) learn(claim *ipamclaimsv1alpha1.IPAMClaim, rs []*tenurev1alpha1.IPReservation) {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := time.Now()
	e := h.m[claim.UID]
	if e == nil {
		e = &holding{}
		h.m[claim.UID] = e
	}
	e.rs, e.rv, e.at, e.used, e.failedAt = slices.Clone(rs), claim.ResourceVersion, now, now, time.Time{}
}

// learnHeld is learn of what a claim's ADD on this node holds.
func (h *claimHoldings) learnHeld(claim *ipamclaimsv1alpha1.IPAMClaim, held []heldSlot) {
	rs := make([]*tenurev1alpha1.IPReservation, 0, len(held))
	for _, s := range held {
		rs = append(rs, s.res)
	}
	h.learn(claim, rs)
}

// get returns the claim's reservations and whether they are known. The
// first time a claim is asked for, its list is waited for (bounded, and
// not while lists fail), so a restarted agent's first reconcile does not
// drop a route whose prefix the status no longer records; later lists run
// in the background and the previous answer stands meanwhile.
func (h *claimHoldings) get(claim *ipamclaimsv1alpha1.IPAMClaim) ([]*tenurev1alpha1.IPReservation, bool) {
	uid := string(claim.UID)
	local := h.cached(uid)
	now := time.Now()
	h.mu.Lock()
	h.sweepLocked(now)
	e := h.m[claim.UID]
	if e == nil && now.Sub(h.lastFailure) > holdingsRetry {
		e = &holding{used: now}
		h.m[claim.UID] = e
		ctx := h.ctx
		h.mu.Unlock()
		lctx, cancel := context.WithTimeout(ctx, holdingsFirstList)
		rs, err := h.list(lctx, uid)
		cancel()
		h.mu.Lock()
		if err != nil {
			e.failedAt = time.Now()
			h.lastFailure = e.failedAt
		} else if e.at.IsZero() { // an ADD's learn may have come first
			e.rs, e.rv, e.at = rs, claim.ResourceVersion, time.Now()
		}
	}
	if e == nil {
		e = &holding{used: now}
		h.m[claim.UID] = e
	}
	e.used = now
	known := !e.at.IsZero()
	stale := e.rv != claim.ResourceVersion || now.Sub(e.at) > holdingsTTL
	if stale && !e.listing && now.Sub(e.failedAt) > holdingsRetry {
		e.listing = true
		go h.refresh(claim.UID, uid, claim.ResourceVersion)
	}
	rs := merge(local, e.rs)
	h.mu.Unlock()
	if !known && len(local) > 0 {
		// This node's own reservations of the claim are known whole.
		return local, slices.ContainsFunc(local, isPrefix)
	}
	return rs, known
}

func (h *claimHoldings) refresh(key types.UID, uid, rv string) {
	h.mu.Lock()
	ctx := h.ctx
	h.mu.Unlock()
	lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	rs, err := h.list(lctx, uid)
	cancel()
	h.mu.Lock()
	e := h.m[key]
	if e == nil {
		h.mu.Unlock()
		return
	}
	e.listing = false
	if err != nil {
		e.failedAt = time.Now()
		h.lastFailure = e.failedAt
		h.mu.Unlock()
		return
	}
	differs := !sameNames(e.rs, rs)
	e.rs, e.rv, e.at, e.failedAt = rs, rv, time.Now(), time.Time{}
	h.mu.Unlock()
	if differs && h.changed != nil {
		h.changed()
	}
}

func (h *claimHoldings) sweepLocked(now time.Time) {
	for k, e := range h.m {
		if now.Sub(e.used) > holdingsIdle && !e.listing {
			delete(h.m, k)
		}
	}
}

func isPrefix(r *tenurev1alpha1.IPReservation) bool {
	return r.Spec.Kind == tenurev1alpha1.KindDelegatedPrefix
}

// merge is a and the reservations of b a does not name.
func merge(a, b []*tenurev1alpha1.IPReservation) []*tenurev1alpha1.IPReservation {
	out := slices.Clone(a)
	for _, r := range b {
		if !slices.ContainsFunc(a, func(x *tenurev1alpha1.IPReservation) bool { return x.Name == r.Name }) {
			out = append(out, r)
		}
	}
	return out
}

func sameNames(a, b []*tenurev1alpha1.IPReservation) bool {
	names := func(rs []*tenurev1alpha1.IPReservation) []string {
		out := make([]string, len(rs))
		for i, r := range rs {
			out[i] = r.Name
		}
		slices.Sort(out)
		return out
	}
	return slices.Equal(names(a), names(b))
}

// claimOwnedCached is, of the reservations byOwnerUID returns (the
// store's), what the caches hold of claim uid's items: its claim-owned
// reservations, whole (the node cache's) or as partial reservations whose
// owner kind is known. A pod's reservation carrying the claim's UID is none
// of them (a decoy another node wrote, which the data path would otherwise
// serve where the status records no prefix); a window entry, whose kind is
// unknown, is left to the live list (ClaimHolds).
func claimOwnedCached(byOwnerUID func(uid string) []*tenurev1alpha1.IPReservation) func(uid string) []*tenurev1alpha1.IPReservation {
	return func(uid string) []*tenurev1alpha1.IPReservation {
		return slices.DeleteFunc(byOwnerUID(uid), func(r *tenurev1alpha1.IPReservation) bool {
			return r.Spec.Owner.Kind != tenurev1alpha1.OwnerIPAMClaim
		})
	}
}
