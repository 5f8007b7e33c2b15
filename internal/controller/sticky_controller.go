package controller

import (
	"context"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	ipamclaimsv1alpha1 "github.com/tenure-ipam/tenure/api/ipamclaims/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/claims"
	"github.com/tenure-ipam/tenure/internal/kube"
)

// What nominates sticky claims for the reconciler of sticky.go: events on
// the claims, on the StatefulSets and pods of their names (found through
// two indexes on the claim cache), and a tick every sweep interval; and
// the StatefulSet cache's transform.

// Field indexes on the claim cache: the StatefulSet and the pod a sticky
// claim is for, as namespace/name.
const (
	indexStickyStatefulSet = "sticky.statefulset"
	indexStickyPod         = "sticky.pod"
)

// indexSticky registers the claim cache's indexes by StatefulSet and pod.
func (c *Controller) indexSticky(ctx context.Context) error {
	for index, part := range map[string]func(claims.Sticky) string{
		indexStickyStatefulSet: func(s claims.Sticky) string { return s.StatefulSet },
		indexStickyPod:         func(s claims.Sticky) string { return s.Pod },
	} {
		err := c.cache.IndexField(ctx, &ipamclaimsv1alpha1.IPAMClaim{}, index, func(obj client.Object) []string {
			cl := obj.(*ipamclaimsv1alpha1.IPAMClaim)
			if s, ok, err := claims.StickyOf(cl); ok && err == nil {
				return []string{cl.Namespace + "/" + part(s)}
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// stickyClaimsOf maps an object to the sticky claims of its
// namespace/name by index.
func (c *Controller) stickyClaimsOf(index string) handler.MapFunc {
	return func(ctx context.Context, o client.Object) []reconcile.Request {
		list := &ipamclaimsv1alpha1.IPAMClaimList{}
		if err := c.cache.List(ctx, list, client.MatchingFields{index: o.GetNamespace() + "/" + o.GetName()}); err != nil {
			return nil
		}
		out := make([]reconcile.Request, len(list.Items))
		for i, cl := range list.Items {
			out[i] = reconcile.Request{NamespacedName: types.NamespacedName{Namespace: cl.Namespace, Name: cl.Name}}
		}
		return out
	}
}

// stickyPodEvents: a pod's coming and going reconciles the sticky claims
// of its name. Pods are cached as entries, which give their metadata
// only through meta.Accessor.
func (c *Controller) stickyPodEvents(q queue) toolscache.ResourceEventHandler {
	claimsOf := c.stickyClaimsOf(indexStickyPod)
	f := func(obj any) {
		m, err := meta.Accessor(kube.DeletedObject(obj))
		if err != nil {
			return
		}
		for _, r := range claimsOf(context.Background(), &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: m.GetNamespace(), Name: m.GetName()}}) {
			q.Add(r)
		}
	}
	return toolscache.ResourceEventHandlerDetailedFuncs{
		AddFunc: func(obj any, isInInitialList bool) {
			if !isInInitialList { // every sticky claim is reconciled as the controller starts
				f(obj)
			}
		},
		DeleteFunc: f,
	}
}

// enqueueAllSticky adds every sticky claim the cache holds.
func (c *Controller) enqueueAllSticky(ctx context.Context, q queue) {
	list := &ipamclaimsv1alpha1.IPAMClaimList{}
	if err := c.cache.List(ctx, list, client.MatchingLabels{claims.LabelSticky: "true"}); err != nil {
		return
	}
	for _, cl := range list.Items {
		q.Add(reconcile.Request{NamespacedName: types.NamespacedName{Namespace: cl.Namespace, Name: cl.Name}})
	}
}

// trimStatefulSet keeps what the sticky rules read of a StatefulSet.
func trimStatefulSet(obj any) (any, error) {
	s, ok := obj.(*appsv1.StatefulSet)
	if !ok {
		return transformTrim(obj)
	}
	return &appsv1.StatefulSet{
		TypeMeta: s.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{
			Name: s.Name, Namespace: s.Namespace, UID: s.UID, ResourceVersion: s.ResourceVersion, Generation: s.Generation,
			CreationTimestamp: s.CreationTimestamp, DeletionTimestamp: s.DeletionTimestamp,
		},
		Spec: appsv1.StatefulSetSpec{Replicas: s.Spec.Replicas, Ordinals: s.Spec.Ordinals},
	}, nil
}

// stickyReconciler is the controller sticky_claim_release: one sticky
// claim, fed by the sticky claims, their StatefulSets and pods, and every
// sweep interval.
type stickyReconciler struct{ *Controller }

// SetupWithManager builds the controller on the sticky claims, their
// StatefulSets and the pod source.
func (c *stickyReconciler) SetupWithManager(mgr manager.Manager, pods informerSource) error {
	return builder.ControllerManagedBy(mgr).Named("sticky_claim_release").
		For(&ipamclaimsv1alpha1.IPAMClaim{}, builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool {
			return o.GetLabels()[claims.LabelSticky] == "true"
		}))).
		Watches(&appsv1.StatefulSet{}, handler.EnqueueRequestsFromMapFunc(c.stickyClaimsOf(indexStickyStatefulSet))).
		WatchesRawSource(pods.with(c.stickyPodEvents, nil)).
		WatchesRawSource(every(c.opts.SweepInterval, c.enqueueAllSticky)).
		Complete(c)
}

// Reconcile decides and acts on one sticky claim.
func (c *stickyReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	after, err := c.sticky.reconcile(ctx, req.NamespacedName)
	return reconcile.Result{RequeueAfter: after}, err
}
