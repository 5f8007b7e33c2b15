package controller

import (
	"context"

	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crcontroller "sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	ipamclaimsv1alpha1 "github.com/tenure-ipam/tenure/api/ipamclaims/v1alpha1"
	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/reservation"
)

// claimReconciler is the controller ipamclaim_finalizer: one IPAMClaim,
// fed by its own changes and by those of the reservations it owns.
type claimReconciler struct{ *Controller }

// SetupWithManager builds the controller on the claims and the reservation
// source.
func (c *claimReconciler) SetupWithManager(mgr manager.Manager, reservations informerSource) error {
	return builder.ControllerManagedBy(mgr).Named("ipamclaim_finalizer").
		For(&ipamclaimsv1alpha1.IPAMClaim{}).
		WithOptions(crcontroller.Options{MaxConcurrentReconciles: 2}).
		WatchesRawSource(reservations.with(c.reservationClaimEvents, nil)).
		Complete(c)
}

// reservationClaimEvents: claim-owned reservations nominate their claim
// for the finalizer.
func (c *claimReconciler) reservationClaimEvents(q queue) toolscache.ResourceEventHandler {
	claimOf := func(obj any) {
		if e, ok := unwrapEntry[*reservation.View](obj); ok && e.Owner.Kind == tenurev1alpha1.OwnerIPAMClaim {
			q.Add(reconcile.Request{NamespacedName: types.NamespacedName{Namespace: e.Owner.Namespace, Name: e.Owner.Name}})
		}
	}
	return toolscache.ResourceEventHandlerDetailedFuncs{
		AddFunc: func(obj any, isInInitialList bool) {
			if !isInInitialList { // every claim is reconciled as the controller starts
				claimOf(obj)
			}
		},
		UpdateFunc: func(_, obj any) { claimOf(obj) },
		DeleteFunc: claimOf,
	}
}

// Reconcile adds the finalizer to a claim that holds something and
// honours it on deletion.
func (c *claimReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	cl := &ipamclaimsv1alpha1.IPAMClaim{}
	if err := c.cache.Get(ctx, req.NamespacedName, cl); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	cl = cl.DeepCopy()
	if cl.DeletionTimestamp != nil {
		_, _, err := c.cf.finalize(ctx, cl)
		return reconcile.Result{}, err
	}
	_, err := c.cf.ensure(ctx, cl, c.idx.holds(string(cl.UID)))
	return reconcile.Result{}, err
}
