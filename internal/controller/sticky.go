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
	"k8s.io/apimachinery/pkg/types"
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
	// cachedPod, when set, says whether the pod cache holds
	// namespace/name: the controller's keeps entries, not pods (see
	// entries.go). Unset, pods are read from cache like the rest.
	cachedPod func(namespace, name string) bool
}

// stickyLook is one decision about a sticky claim and what it rests on.
type stickyLook struct {
	claim    *ipamclaimsv1alpha1.IPAMClaim
	sticky   claims.Sticky
	sts      *appsv1.StatefulSet // nil when there is none
	decision sticky.Decision
}

// look reads the sticky claim of key, its StatefulSet and its pod from r
// (the cache, with the pod cache, or the API server) and decides; nil when
// the claim is gone or not a sticky claim the controller can act on.
func (sr *stickyReleaser) look(ctx context.Context, r client.Reader, cached bool, key types.NamespacedName) (*stickyLook, error) {
	l := &stickyLook{claim: &ipamclaimsv1alpha1.IPAMClaim{}}
	if err := r.Get(ctx, key, l.claim); err != nil {
		return nil, client.IgnoreNotFound(err)
	}
	s, ok, err := claims.StickyOf(l.claim)
	if err != nil {
		sr.log.Info("not a sticky claim the controller can act on", "claim", key, "err", err)
	}
	if !ok || err != nil {
		return nil, nil
	}
	l.sticky = s
	if l.sts, err = getOrNil(ctx, r, types.NamespacedName{Namespace: key.Namespace, Name: s.StatefulSet}, &appsv1.StatefulSet{}); err != nil {
		return nil, err
	}
	var pod *sticky.PodFact
	if cached && sr.cachedPod != nil {
		pod = &sticky.PodFact{Exists: sr.cachedPod(key.Namespace, s.Pod)}
	} else {
		p, err := getOrNil(ctx, r, types.NamespacedName{Namespace: key.Namespace, Name: s.Pod}, &corev1.Pod{})
		if err != nil {
			return nil, err
		}
		pod = sticky.PodFactOf(p)
	}
	f := sticky.Facts{Now: sr.now(), StatefulSet: sticky.StatefulSetFactOf(l.sts), Pod: pod}
	l.decision = sticky.Decide(l.claim, s, f, sr.policy)
	return l, nil
}

// reconcile nominates from the cache and returns when to look again.
func (sr *stickyReleaser) reconcile(ctx context.Context, key types.NamespacedName) (time.Duration, error) {
	l, err := sr.look(ctx, sr.cache, true, key)
	if l == nil || err != nil {
		return 0, err
	}
	switch d := l.decision; {
	case d.Hold:
		return 0, nil
	case d.Release:
		return sr.release(ctx, key)
	default:
		return d.RecheckAfter, sr.apply(ctx, l.claim.DeepCopy(), l.sticky, d)
	}
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
	l, err := sr.look(ctx, sr.live, false, key)
	if l == nil || err != nil {
		return 0, err
	}
	cl, s, d := l.claim, l.sticky, l.decision
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
	// The Event is about the StatefulSet while it exists: that is where
	// its owner looks.
	msg := fmt.Sprintf("deleted IPAMClaim %s, which kept the addresses of pod %s: %s: %s", cl.Name, s.Pod, d.Reason, d.Message)
	switch {
	case sr.events == nil:
	case l.sts != nil:
		sr.events.Eventf(l.sts, corev1.EventTypeNormal, EventStickyReleased, "%s", msg)
	default:
		sr.events.Eventf(cl, corev1.EventTypeNormal, EventStickyReleased, "%s", msg)
	}
	return 0, nil
}
