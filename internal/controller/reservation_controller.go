package controller

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crcontroller "sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	ipamclaimsv1alpha1 "github.com/tenure-ipam/tenure/api/ipamclaims/v1alpha1"
	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/claims"
	"github.com/tenure-ipam/tenure/internal/controller/repair"
	"github.com/tenure-ipam/tenure/internal/reservation"
)

// reservationReconciler is the controller ipreservation_release: one
// reservation by name, fed by the reservation informers, pods, nodes,
// claims and probe requests.
type reservationReconciler struct{ *Controller }

// SetupWithManager builds the controller on the reservation and pod
// sources; it watches probe requests when the API server serves them.
func (c *reservationReconciler) SetupWithManager(mgr manager.Manager, reservations, pods informerSource, askWire bool) error {
	rb := builder.ControllerManagedBy(mgr).Named("ipreservation_release").
		WithOptions(crcontroller.Options{MaxConcurrentReconciles: c.opts.Workers}).
		WatchesRawSource(reservations.with(c.reservationEvents, c.setResQ)).
		WatchesRawSource(pods.with(c.podEvents, nil)).
		Watches(&corev1.Node{}, c.nodeEvents()).
		Watches(&ipamclaimsv1alpha1.IPAMClaim{}, c.claimReservationEvents())
	if askWire {
		// An IPProbe is named as its reservation: an agent's answer
		// decides it again.
		rb = rb.Watches(&tenurev1alpha1.IPProbe{}, &handler.EnqueueRequestForObject{})
	}
	return rb.Complete(c)
}

func (c *Controller) setResQ(q queue) {
	c.resQOnce.Do(func() {
		c.resQ.Store(&q)
		close(c.resQReady)
	})
}

// requeue hands a reservation to the reservation controller: after the
// given time, or at once (0).
func (c *Controller) requeue(name string, after time.Duration) {
	q := c.resQ.Load()
	if q == nil {
		return
	}
	req := reconcile.Request{NamespacedName: types.NamespacedName{Name: name}}
	if after > 0 {
		(*q).AddAfter(req, after)
	} else {
		(*q).Add(req)
	}
}

// reservationEvents: a reservation's changes reconcile it, and its
// creation its siblings (same owner UID): a new sandbox's reservation is
// what makes an earlier sandbox's reservation an orphan.
func (c *reservationReconciler) reservationEvents(q queue) toolscache.ResourceEventHandler {
	return toolscache.ResourceEventHandlerDetailedFuncs{
		AddFunc: func(obj any, isInInitialList bool) {
			// The initial list is the first sweep's (see lead).
			if e, ok := obj.(*reservation.View); ok && !isInInitialList {
				enqueue(q, e.Name)
				if e.Owner.Kind == tenurev1alpha1.OwnerPod {
					enqueue(q, c.byIndex(indexOwnerUID, e.Owner.UID)...)
				}
			}
		},
		UpdateFunc: func(_, obj any) {
			if e, ok := obj.(*reservation.View); ok {
				enqueue(q, e.Name)
			}
		},
	}
}

// podEvents reconcile a pod's reservations when it is deleted, starts
// terminating or reaches a terminal phase.
func (c *reservationReconciler) podEvents(q queue) toolscache.ResourceEventHandler {
	return toolscache.ResourceEventHandlerFuncs{
		UpdateFunc: func(oldObj, obj any) {
			o, ok1 := oldObj.(*podEntry)
			n, ok2 := obj.(*podEntry)
			if ok1 && ok2 && ((!o.fact.Terminating && n.fact.Terminating) || (!o.fact.Terminal && n.fact.Terminal)) {
				enqueue(q, c.byIndex(indexOwnerUID, n.fact.UID)...)
			}
		},
		DeleteFunc: func(obj any) {
			if p, ok := unwrapEntry[*podEntry](obj); ok {
				enqueue(q, c.byIndex(indexOwnerUID, p.fact.UID)...)
			}
		},
	}
}

// nodeEvents reconcile the reservations made on a node when it is deleted,
// its readiness changes or it is fenced (the out-of-service taint comes or
// goes): a fenced node's addresses are released at once, not at the next
// sweep.
func (c *reservationReconciler) nodeEvents() handler.EventHandler {
	state := func(o client.Object) (ready, outOfService bool) {
		n, ok := o.(*corev1.Node)
		if !ok {
			return false, false
		}
		f := repair.NodeFactOf(n)
		return f.Ready, f.OutOfService
	}
	return handler.Funcs{
		UpdateFunc: func(_ context.Context, e event.UpdateEvent, q queue) {
			r0, oos0 := state(e.ObjectOld)
			r1, oos1 := state(e.ObjectNew)
			if r0 != r1 || oos0 != oos1 {
				enqueue(q, c.byIndex(indexNode, e.ObjectNew.GetName())...)
			}
		},
		DeleteFunc: func(_ context.Context, e event.DeleteEvent, q queue) {
			enqueue(q, c.byIndex(indexNode, e.Object.GetName())...)
		},
	}
}

// claimReservationEvents reconcile a claim's reservations when it is
// deleted or starts terminating with nothing else holding it, and when
// its status changes.
func (c *reservationReconciler) claimReservationEvents() handler.EventHandler {
	return handler.Funcs{
		UpdateFunc: func(_ context.Context, e event.UpdateEvent, q queue) {
			o, ok1 := e.ObjectOld.(*ipamclaimsv1alpha1.IPAMClaim)
			n, ok2 := e.ObjectNew.(*ipamclaimsv1alpha1.IPAMClaim)
			if !ok1 || !ok2 {
				return
			}
			// Its reservations are released once nothing but tenure's
			// finalizer holds it (claims.Held).
			if n.DeletionTimestamp != nil && !claims.Held(n) && (o.DeletionTimestamp == nil || claims.Held(o)) {
				enqueue(q, c.byIndex(indexOwnerUID, string(n.UID))...)
			}
			// What the status records decides which of two items of one
			// slot is surplus (DuplicateAttachment).
			if !slices.Equal(o.Status.IPs, n.Status.IPs) || !slices.Equal(o.Status.DelegatedPrefixes, n.Status.DelegatedPrefixes) {
				enqueue(q, c.byIndex(indexOwnerUID, string(n.UID))...)
			}
		},
		DeleteFunc: func(_ context.Context, e event.DeleteEvent, q queue) {
			enqueue(q, c.byIndex(indexOwnerUID, string(e.Object.GetUID()))...)
		},
	}
}

// Reconcile nominates from the cache and releases through the Releaser,
// which decides again on live reads.
func (c *reservationReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	e := c.idx.reservation(req.Name)
	if e == nil {
		c.fence.forget(req.Name)
		c.answers.forget(req.Name)
		// A probe whose reservation is gone: its owner reference lets the
		// garbage collector delete it as well.
		return reconcile.Result{}, c.rel.retireProbe(ctx, req.Name, nil)
	}
	after, _, err := nominate(ctx, cachedSource{idx: c.idx, cache: c.cache}, c.rel, e.Reservation(), e.Opaque, c.log)
	return reconcile.Result{RequeueAfter: after}, err
}

// nominate decides on src (a cache) whether r looks like an orphan, and if
// so hands it to the Releaser, which decides again on live reads; so does
// an opaque entry (see reservation.View), one whose siblings src cannot tell, and
// one whose decision needs what only the live reads give (AskLive).
// It returns when to look again and the Releaser's outcome, if it was
// called.
func nominate(ctx context.Context, src source, rel *Releaser, r *tenurev1alpha1.IPReservation, opaque bool, log *slog.Logger) (time.Duration, *Outcome, error) {
	why := "the cache does not know its spec"
	if !opaque {
		g, err := gather(ctx, src, r, rel.now())
		switch {
		case errors.Is(err, errOpaque):
			why = "the cache does not know a sibling's spec"
		case err != nil:
			return 0, nil, err
		default:
			d := repair.Decide(r, g.facts, rel.Policy)
			if !d.Release && !d.AskLive {
				rel.observe(r, d)
				rel.settleCached(ctx, r, d)
				return d.RecheckAfter, nil, nil
			}
			why = d.Message
		}
	}
	out, err := rel.Release(ctx, r.Name)
	if err != nil {
		return 0, &out, err
	}
	if out.Reservation != nil && !out.Released && !rel.DryRun {
		log.Info("the cache nominated a reservation that the live read keeps", "reservation", r.Name,
			"cache", why, "live", out.Decision.Message)
		return out.Decision.RecheckAfter, &out, nil
	}
	return 0, &out, nil
}
