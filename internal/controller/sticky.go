package controller

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipamclaimsv1alpha1 "github.com/tenure-ipam/tenure/api/ipamclaims/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/claims"
	"github.com/tenure-ipam/tenure/internal/controller/sticky"
)

// Sticky claims (internal/claims, rules in package sticky): a level-triggered
// reconciler keyed by claim, fed by the claims, StatefulSets and pods the
// cache holds. The cache nominates; a release is decided again on live
// reads and deletes the claim with its UID and resourceVersion as
// preconditions; the claim's finalizer then releases its reservations
// through the Releaser, as for any deleted claim. Marks and adoptions are
// written from the cache's view with optimistic locking.

// EventStickyReleased is the reason of the Event recorded for every sticky
// claim the controller deletes; the rule is in its message.
const EventStickyReleased = "ReleasedStickyClaim"

// Field indexes on the claim cache: the StatefulSet and the pod a sticky
// claim is for, as namespace/name.
const (
	indexStickyStatefulSet = "sticky.statefulset"
	indexStickyPod         = "sticky.pod"
)

// DefaultStickyReleaseAfter is the grace period of --sticky-release-after.
const DefaultStickyReleaseAfter = 10 * time.Minute

// stickyReleaser decides and acts on one sticky claim.
type stickyReleaser struct {
	cache  client.Reader
	live   client.Reader
	writer client.Writer
	policy sticky.Policy
	events EventRecorder
	log    *slog.Logger
	now    func() time.Time
}

// stickyFacts reads what Decide needs from r (the cache or the API server).
func stickyFacts(ctx context.Context, r client.Reader, ns string, s claims.Sticky, now time.Time) (sticky.Facts, *appsv1.StatefulSet, error) {
	f := sticky.Facts{Now: now}
	sts, err := getOrNil(ctx, r, types.NamespacedName{Namespace: ns, Name: s.StatefulSet}, &appsv1.StatefulSet{})
	if err != nil {
		return f, nil, err
	}
	pod, err := getOrNil(ctx, r, types.NamespacedName{Namespace: ns, Name: s.Pod}, &corev1.Pod{})
	if err != nil {
		return f, nil, err
	}
	f.StatefulSet, f.Pod = sticky.StatefulSetFactOf(sts), sticky.PodFactOf(pod)
	return f, sts, nil
}

// reconcile nominates from the cache and returns when to look again.
func (sr *stickyReleaser) reconcile(ctx context.Context, key types.NamespacedName) (time.Duration, error) {
	cl := &ipamclaimsv1alpha1.IPAMClaim{}
	if err := sr.cache.Get(ctx, key, cl); err != nil {
		return 0, client.IgnoreNotFound(err)
	}
	s, ok, err := claims.StickyOf(cl)
	if !ok || err != nil {
		if err != nil {
			sr.log.Info("not a sticky claim the controller can act on", "claim", key, "err", err)
		}
		return 0, nil
	}
	f, _, err := stickyFacts(ctx, sr.cache, cl.Namespace, s, sr.now())
	if err != nil {
		return 0, err
	}
	d := sticky.Decide(cl, s, f, sr.policy)
	switch {
	case d.Hold:
		return 0, nil
	case d.Release:
		return sr.release(ctx, key)
	}
	return d.RecheckAfter, sr.apply(ctx, cl.DeepCopy(), s, d)
}

// apply writes the mark and the adoption d asks for, if they differ from
// what the claim carries.
func (sr *stickyReleaser) apply(ctx context.Context, cl *ipamclaimsv1alpha1.IPAMClaim, s claims.Sticky, d sticky.Decision) error {
	orig := cl.DeepCopy()
	ann := maps.Clone(cl.Annotations)
	if ann == nil {
		ann = map[string]string{}
	}
	delete(ann, sticky.AnnotationScaledDownSince)
	delete(ann, sticky.AnnotationScaledDownGeneration)
	if d.Mark != nil {
		maps.Copy(ann, d.Mark.Annotations())
	}
	changed := len(ann) != len(cl.Annotations) || !maps.Equal(ann, cl.Annotations)
	cl.Annotations = ann
	if d.Adopt != "" {
		refs := []metav1.OwnerReference{}
		for _, r := range cl.OwnerReferences {
			if r.Kind != "StatefulSet" || r.Name != s.StatefulSet {
				refs = append(refs, r)
			}
		}
		no := false
		cl.OwnerReferences = append(refs, metav1.OwnerReference{APIVersion: "apps/v1", Kind: "StatefulSet", Name: s.StatefulSet, UID: types.UID(d.Adopt),
			Controller: &no, BlockOwnerDeletion: &no})
		changed = true
	}
	if !changed {
		return nil
	}
	err := sr.writer.Patch(ctx, cl, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}))
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("IPAMClaim %s: %w", claims.Key(cl), err)
	}
	if d.Adopt != "" {
		sr.log.Info("sticky claim adopted by the StatefulSet of its name", "claim", claims.Key(cl), "statefulSet", s.StatefulSet, "uid", d.Adopt)
	}
	return nil
}

// release decides again on live reads and deletes the claim when the
// answer is still to release.
func (sr *stickyReleaser) release(ctx context.Context, key types.NamespacedName) (time.Duration, error) {
	cl := &ipamclaimsv1alpha1.IPAMClaim{}
	if err := sr.live.Get(ctx, key, cl); err != nil {
		return 0, client.IgnoreNotFound(err)
	}
	s, ok, err := claims.StickyOf(cl)
	if !ok || err != nil {
		return 0, nil
	}
	f, sts, err := stickyFacts(ctx, sr.live, cl.Namespace, s, sr.now())
	if err != nil {
		return 0, err
	}
	d := sticky.Decide(cl, s, f, sr.policy)
	if d.Hold {
		return 0, nil
	}
	if !d.Release {
		sr.log.Info("the cache nominated a sticky claim that the live read keeps", "claim", key, "live", d.Message)
		return d.RecheckAfter, sr.apply(ctx, cl, s, d)
	}
	uid, rv := cl.UID, cl.ResourceVersion
	err = sr.writer.Delete(ctx, &ipamclaimsv1alpha1.IPAMClaim{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}},
		client.Preconditions{UID: &uid, ResourceVersion: &rv})
	switch {
	case apierrors.IsNotFound(err):
		return 0, nil
	case apierrors.IsConflict(err):
		return 0, fmt.Errorf("IPAMClaim %s changed since it was read; deciding again", key)
	case err != nil:
		return 0, fmt.Errorf("deleting IPAMClaim %s: %w", key, err)
	}
	stickyReleasesTotal.WithLabelValues(string(d.Reason)).Inc()
	sr.log.Info("released sticky claim", "claim", key, "statefulSet", s.StatefulSet, "pod", s.Pod, "reason", d.Reason, "why", d.Message)
	if sr.events != nil {
		var target runtime.Object = cl
		if sts != nil {
			target = sts
		}
		sr.events.Eventf(target, corev1.EventTypeNormal, EventStickyReleased, "deleted IPAMClaim %s, which kept the addresses of pod %s: %s: %s",
			cl.Name, s.Pod, d.Reason, d.Message)
	}
	return 0, nil
}

// stickyKey returns the claim's key when it is labelled sticky.
func stickyKey(obj any) (types.NamespacedName, bool) {
	cl, ok := unwrap(obj).(*ipamclaimsv1alpha1.IPAMClaim)
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
			if m, ok := unwrap(obj).(metav1.Object); ok {
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
