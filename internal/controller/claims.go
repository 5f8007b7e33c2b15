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
	"github.com/tenure-ipam/tenure/internal/reservation"
)

// ClaimFinalizer keeps an IPAMClaim that holds reservations until the
// controller has released them, so a claim deleted while the controller is
// down stays Terminating until it runs.
const ClaimFinalizer = "ipam.tenure.dev/release"

// claimFinalizer adds and honours ClaimFinalizer.
type claimFinalizer struct {
	live   client.Reader
	writer client.Writer
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
// finalizer; it returns how many reservations it released.
func (cf *claimFinalizer) finalize(ctx context.Context, c *ipamclaimsv1alpha1.IPAMClaim) (int, error) {
	if c.DeletionTimestamp == nil || !controllerutil.ContainsFinalizer(c, ClaimFinalizer) {
		return 0, nil
	}
	names, err := cf.owned(ctx, c)
	if err != nil {
		return 0, err
	}
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
	err = cf.writer.Patch(ctx, c, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}))
	if apierrors.IsConflict(err) {
		// Someone else wrote the claim; done if that was our finalizer's
		// removal (a concurrent sweep or reconcile), else decide again.
		cur := &ipamclaimsv1alpha1.IPAMClaim{}
		if gerr := cf.live.Get(ctx, client.ObjectKeyFromObject(c), cur); apierrors.IsNotFound(gerr) ||
			(gerr == nil && (cur.UID != c.UID || !controllerutil.ContainsFinalizer(cur, ClaimFinalizer))) {
			return released, nil
		}
	}
	if err != nil && !apierrors.IsNotFound(err) {
		return released, fmt.Errorf("removing finalizer %s from IPAMClaim %s/%s: %w", ClaimFinalizer, c.Namespace, c.Name, err)
	}
	cf.rel.log().Info("released IPAMClaim", "claim", c.Namespace+"/"+c.Name, "uid", c.UID, "reservations", released)
	return released, nil
}
