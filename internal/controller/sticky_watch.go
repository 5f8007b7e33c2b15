package controller

import (
	"context"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipamclaimsv1alpha1 "github.com/tenure-ipam/tenure/api/ipamclaims/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/claims"
	"github.com/tenure-ipam/tenure/internal/kube"
)

// What nominates sticky claims for the reconciler of sticky.go: events on
// the claims, on the StatefulSets and pods of their names (found through
// two indexes on the claim cache), and the StatefulSet cache's transform.

// Field indexes on the claim cache: the StatefulSet and the pod a sticky
// claim is for, as namespace/name.
const (
	indexStickyStatefulSet = "sticky.statefulset"
	indexStickyPod         = "sticky.pod"
)

// stickyKey returns the claim's key when it is labelled sticky.
func stickyKey(obj any) (types.NamespacedName, bool) {
	cl, ok := kube.DeletedObject(obj).(*ipamclaimsv1alpha1.IPAMClaim)
	if !ok || cl.Labels[claims.LabelSticky] != "true" {
		return types.NamespacedName{}, false
	}
	return types.NamespacedName{Namespace: cl.Namespace, Name: cl.Name}, true
}

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

// enqueueSticky adds the sticky claims of one index key, only while
// leading (Lead starts from every sticky claim anyway).
func (c *Controller) enqueueSticky(index, key string) {
	if !c.leading.Load() {
		return
	}
	list := &ipamclaimsv1alpha1.IPAMClaimList{}
	if err := c.cache.List(context.Background(), list, client.MatchingFields{index: key}); err != nil {
		return
	}
	for _, cl := range list.Items {
		c.stickyQ.Add(types.NamespacedName{Namespace: cl.Namespace, Name: cl.Name})
	}
}

// enqueueAllSticky adds every sticky claim the cache holds.
func (c *Controller) enqueueAllSticky(ctx context.Context) {
	list := &ipamclaimsv1alpha1.IPAMClaimList{}
	if err := c.cache.List(ctx, list, client.MatchingLabels{claims.LabelSticky: "true"}); err != nil {
		return
	}
	for _, cl := range list.Items {
		c.stickyQ.Add(types.NamespacedName{Namespace: cl.Namespace, Name: cl.Name})
	}
}

// stickyHandlers are the event handlers that nominate sticky claims: the
// claim itself, the StatefulSet of its name, the pod of its name.
func (c *Controller) stickyHandlers() []objectHandler {
	claim := func(obj any) {
		if key, ok := stickyKey(obj); ok && c.leading.Load() {
			c.stickyQ.Add(key)
		}
	}
	by := func(index string) func(obj any) {
		return func(obj any) {
			// meta.Accessor: pods are cached as entries, which only give
			// their metadata on request.
			if m, err := meta.Accessor(kube.DeletedObject(obj)); err == nil {
				c.enqueueSticky(index, m.GetNamespace()+"/"+m.GetName())
			}
		}
	}
	handler := func(f func(any)) toolscache.ResourceEventHandler {
		return toolscache.ResourceEventHandlerFuncs{AddFunc: f, UpdateFunc: func(_, obj any) { f(obj) }, DeleteFunc: f}
	}
	return []objectHandler{
		{&ipamclaimsv1alpha1.IPAMClaim{}, handler(claim)},
		{&appsv1.StatefulSet{}, handler(by(indexStickyStatefulSet))},
		{&corev1.Pod{}, toolscache.ResourceEventHandlerFuncs{ // a pod's existence is what matters
			AddFunc: by(indexStickyPod), DeleteFunc: by(indexStickyPod),
		}},
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
