package controller

import (
	"context"
	"fmt"
	"sort"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	ipamclaimsv1alpha1 "github.com/tenure-ipam/tenure/api/ipamclaims/v1alpha1"
	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/claims"
	"github.com/tenure-ipam/tenure/internal/reservation"
)

// ClaimFinalizer keeps an IPAMClaim that holds reservations until the
// controller has released them, so a claim deleted while the controller is
// down stays Terminating until it runs.
const ClaimFinalizer = claims.ReleaseFinalizer

// ClaimWriter writes claims: the finalizer, and the condition of a claim
// being deleted whose items are kept.
type ClaimWriter interface {
	client.Writer
	client.StatusClient
}

// claimFinalizer adds and honours ClaimFinalizer.
type claimFinalizer struct {
	live   client.Reader
	writer ClaimWriter
	rel    *Releaser
	// cached, when set, adds reservation names the controller's informer
	// cache knows for an owner UID to the live label selection (which
	// misses reservations that lack the owner label).
	cached func(ctx context.Context, uid string) []string
}

// recordsItems: the claim's status records addresses or prefixes.
func recordsItems(c *ipamclaimsv1alpha1.IPAMClaim) bool {
	return len(c.Status.IPs) > 0 || len(c.Status.DelegatedPrefixes) > 0
}

// ensure adds the finalizer to a live claim whose status records items. It
// waits for the agent's status write rather than acting on the first
// reservation: adding it earlier races that write (one conflict per new
// claim), and reservations of a claim deleted before recording anything are
// released anyway, by the ClaimGone rule. c must be the caller's copy. It
// reports whether it wrote.
func (cf *claimFinalizer) ensure(ctx context.Context, c *ipamclaimsv1alpha1.IPAMClaim, holds bool) (bool, error) {
	_ = holds // owned reservations alone do not call for the finalizer; see above
	if cf.rel.DryRun || c.DeletionTimestamp != nil || controllerutil.ContainsFinalizer(c, ClaimFinalizer) || !recordsItems(c) {
		return false, nil
	}
	orig := c.DeepCopy()
	controllerutil.AddFinalizer(c, ClaimFinalizer)
	// The optimistic lock makes the list replacement of a merge patch safe
	// against a concurrent writer of other finalizers.
	if err := cf.writer.Patch(ctx, c, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return false, fmt.Errorf("adding finalizer %s to IPAMClaim %s/%s: %w", ClaimFinalizer, c.Namespace, c.Name, err)
	}
	return true, nil
}

// owned lists, live, the reservations owned by the claim's UID.
func (cf *claimFinalizer) owned(ctx context.Context, c *ipamclaimsv1alpha1.IPAMClaim) ([]string, error) {
	uid := string(c.UID)
	list := &tenurev1alpha1.IPReservationList{}
	if err := cf.live.List(ctx, list, client.MatchingLabels{reservation.LabelOwnerUID: uid}); err != nil {
		return nil, fmt.Errorf("listing reservations of IPAMClaim %s/%s: %w", c.Namespace, c.Name, err)
	}
	seen := map[string]bool{}
	for _, r := range list.Items {
		if r.Spec.Owner.Kind == tenurev1alpha1.OwnerIPAMClaim && r.Spec.Owner.UID == uid {
			seen[r.Name] = true
		}
	}
	if cf.cached != nil {
		for _, n := range cf.cached(ctx, uid) {
			seen[n] = true
		}
	}
	names := make([]string, 0, len(seen))
	for n := range seen {
		names = append(names, n)
	}
	sort.Strings(names)
	return names, nil
}

// finalize releases everything a deleting claim owns, then removes the
// finalizer; it returns how many reservations it released, and whether it
// removed the finalizer. While a finalizer other than tenure's is left on
// the claim, whoever set it still uses the claim (KubeVirt's, until the VM's
// VMI is gone): finalize then releases nothing and only says, in the
// claim's condition, what it waits for. The claim's next update (that
// finalizer's removal) brings it back.
func (cf *claimFinalizer) finalize(ctx context.Context, c *ipamclaimsv1alpha1.IPAMClaim) (int, bool, error) {
	if c.DeletionTimestamp == nil || !controllerutil.ContainsFinalizer(c, ClaimFinalizer) {
		return 0, false, nil
	}
	names, err := cf.owned(ctx, c)
	if err != nil {
		return 0, false, err
	}
	if claims.Held(c) {
		return 0, false, cf.waiting(ctx, c, names)
	}
	released, err := cf.release(ctx, c, names)
	return released, err == nil && !cf.rel.DryRun, err
}

// waiting sets the condition that says which finalizers the release of the
// claim's items waits for.
func (cf *claimFinalizer) waiting(ctx context.Context, c *ipamclaimsv1alpha1.IPAMClaim, names []string) error {
	items := make([]string, 0, len(names))
	for _, n := range names {
		if p, err := reservation.Parse(n); err == nil {
			items = append(items, reservation.ItemString(kindOf(p), p.Prefix))
		} else {
			items = append(items, n)
		}
	}
	orig := c.DeepCopy()
	if cf.rel.DryRun || len(names) == 0 || !claims.SetWaitingCondition(c, items) {
		return nil
	}
	if c.Status.IPs == nil {
		c.Status.IPs = []string{} // required by the upstream schema
	}
	err := cf.writer.Status().Patch(ctx, c, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}))
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("IPAMClaim %s/%s: setting condition %s: %w", c.Namespace, c.Name, claims.ConditionReleased, err)
	}
	cf.rel.log().Info("IPAMClaim being deleted keeps its reservations", "claim", c.Namespace+"/"+c.Name, "uid", c.UID,
		"why", claims.DeletionMessage(c, items))
	return nil
}

func kindOf(p reservation.Parsed) tenurev1alpha1.ReservationKind {
	if p.IsPrefix {
		return tenurev1alpha1.KindDelegatedPrefix
	}
	return tenurev1alpha1.KindAddress
}

// release releases names, checks live that the claim owns nothing more,
// then removes the finalizer.
func (cf *claimFinalizer) release(ctx context.Context, c *ipamclaimsv1alpha1.IPAMClaim, names []string) (int, error) {
	released := 0
	for _, name := range names {
		out, err := cf.rel.Release(ctx, name)
		if err != nil {
			return released, err
		}
		if out.Released {
			released++
		}
		if out.Reservation != nil && !out.Decision.Release && out.Reservation.Spec.Owner.UID == string(c.UID) {
			return released, fmt.Errorf("IPAMClaim %s/%s: reservation %s kept: %s", c.Namespace, c.Name, name, out.Decision.Message)
		}
	}
	if cf.rel.DryRun {
		return released, nil
	}
	if left, err := cf.owned(ctx, c); err != nil {
		return released, err
	} else if len(left) > 0 {
		return released, fmt.Errorf("IPAMClaim %s/%s still owns %d reservations (%s); not removing finalizer yet", c.Namespace, c.Name, len(left), left[0])
	}
	orig := c.DeepCopy()
	controllerutil.RemoveFinalizer(c, ClaimFinalizer)
	err := cf.writer.Patch(ctx, c, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}))
	if apierrors.IsConflict(err) {
		// Someone else wrote the claim; done if that was our finalizer's
		// removal (a concurrent sweep or reconcile), else decide again.
		cur := &ipamclaimsv1alpha1.IPAMClaim{}
		if gerr := cf.live.Get(ctx, client.ObjectKeyFromObject(c), cur); apierrors.IsNotFound(gerr) ||
			(gerr == nil && (cur.UID != c.UID || !controllerutil.ContainsFinalizer(cur, ClaimFinalizer))) {
			return released, nil
		}
	}
	if apierrors.IsNotFound(err) {
		// Gone: an earlier pass removed the finalizer and logged the
		// release; this one worked from a copy that still had it.
		return released, nil
	}
	if err != nil {
		return released, fmt.Errorf("removing finalizer %s from IPAMClaim %s/%s: %w", ClaimFinalizer, c.Namespace, c.Name, err)
	}
	cf.rel.log().Info("released IPAMClaim", "claim", c.Namespace+"/"+c.Name, "uid", c.UID, "reservations", released)
	return released, nil
}
