package controller

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipamclaimsv1alpha1 "github.com/tenure-ipam/tenure/api/ipamclaims/v1alpha1"
	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/controller/repair"
	"github.com/tenure-ipam/tenure/internal/reservation"
)

// source answers the questions Decide needs. Three kinds exist: live API
// reads (every release is confirmed through one), the controller's informer
// cache (to find candidates on events) and a sweep's snapshot of full
// lists. nil, nil means NotFound.
type source interface {
	pod(ctx context.Context, namespace, name string) (*corev1.Pod, error)
	node(ctx context.Context, name string) (*corev1.Node, error)
	claim(ctx context.Context, namespace, name string) (*ipamclaimsv1alpha1.IPAMClaim, error)
	// siblings returns reservations whose spec.owner.uid is uid.
	siblings(ctx context.Context, uid string) ([]*tenurev1alpha1.IPReservation, error)
}

// gathered is the facts about one reservation plus the objects read, so
// the Event can name the pod or claim that still exists.
type gathered struct {
	facts repair.Facts
	pod   *corev1.Pod
	claim *ipamclaimsv1alpha1.IPAMClaim
}

// gather reads what Decide needs for r, and nothing more: the pod, then
// siblings and node only when the pod's state makes them matter; or the
// claim.
func gather(ctx context.Context, src source, r *tenurev1alpha1.IPReservation, now time.Time) (gathered, error) {
	g := gathered{facts: repair.Facts{Now: now}}
	o := r.Spec.Owner
	if o.Namespace == "" || o.Name == "" || o.UID == "" {
		return g, nil
	}
	switch o.Kind {
	case tenurev1alpha1.OwnerPod:
		p, err := src.pod(ctx, o.Namespace, o.Name)
		if err != nil {
			return g, err
		}
		g.pod = p
		g.facts.Pod = repair.PodFactOf(p)
		if repair.NeedsSiblings(r, g.facts.Pod) {
			sib, err := src.siblings(ctx, o.UID)
			if err != nil {
				return g, err
			}
			g.facts.Siblings, g.facts.SiblingsKnown = sib, true
		}
		if repair.NeedsNode(r, g.facts.Pod) {
			n, err := src.node(ctx, o.Node)
			if err != nil {
				return g, err
			}
			g.facts.Node = repair.NodeFactOf(n)
		}
	case tenurev1alpha1.OwnerIPAMClaim:
		c, err := src.claim(ctx, o.Namespace, o.Name)
		if err != nil {
			return g, err
		}
		g.claim = c
		g.facts.Claim = repair.ClaimFactOf(c)
	}
	return g, nil
}

// readerSource reads through a client.Reader: the API server (live) or the
// controller's informer cache.
type readerSource struct {
	r client.Reader
	// siblingOpts selects reservations by owner UID: a label selector for
	// the API server, a field index for the cache.
	siblingOpts func(uid string) []client.ListOption
}

func liveSource(r client.Reader) readerSource {
	return readerSource{r: r, siblingOpts: func(uid string) []client.ListOption {
		return []client.ListOption{client.MatchingLabels{reservation.LabelOwnerUID: uid}}
	}}
}

func cacheSource(r client.Reader) readerSource {
	return readerSource{r: r, siblingOpts: func(uid string) []client.ListOption {
		return []client.ListOption{client.MatchingFields{indexOwnerUID: uid}}
	}}
}

func getOrNil[T client.Object](ctx context.Context, r client.Reader, key types.NamespacedName, obj T) (T, error) {
	var zero T
	if err := r.Get(ctx, key, obj); err != nil {
		if apierrors.IsNotFound(err) {
			return zero, nil
		}
		return zero, err
	}
	return obj, nil
}

func (s readerSource) pod(ctx context.Context, ns, name string) (*corev1.Pod, error) {
	return getOrNil(ctx, s.r, types.NamespacedName{Namespace: ns, Name: name}, &corev1.Pod{})
}

func (s readerSource) node(ctx context.Context, name string) (*corev1.Node, error) {
	return getOrNil(ctx, s.r, types.NamespacedName{Name: name}, &corev1.Node{})
}

func (s readerSource) claim(ctx context.Context, ns, name string) (*ipamclaimsv1alpha1.IPAMClaim, error) {
	return getOrNil(ctx, s.r, types.NamespacedName{Namespace: ns, Name: name}, &ipamclaimsv1alpha1.IPAMClaim{})
}

func (s readerSource) siblings(ctx context.Context, uid string) ([]*tenurev1alpha1.IPReservation, error) {
	list := &tenurev1alpha1.IPReservationList{}
	if err := s.r.List(ctx, list, s.siblingOpts(uid)...); err != nil {
		return nil, err
	}
	out := make([]*tenurev1alpha1.IPReservation, 0, len(list.Items))
	for i := range list.Items {
		if list.Items[i].Spec.Owner.UID == uid {
			out = append(out, &list.Items[i])
		}
	}
	return out, nil
}

// snapshot answers from full lists taken by a sweep.
type snapshot struct {
	pods    map[types.NamespacedName]*corev1.Pod
	nodes   map[string]*corev1.Node
	claims  map[types.NamespacedName]*ipamclaimsv1alpha1.IPAMClaim
	byOwner map[string][]*tenurev1alpha1.IPReservation
}

func (s *snapshot) pod(_ context.Context, ns, name string) (*corev1.Pod, error) {
	return s.pods[types.NamespacedName{Namespace: ns, Name: name}], nil
}

func (s *snapshot) node(_ context.Context, name string) (*corev1.Node, error) {
	return s.nodes[name], nil
}

func (s *snapshot) claim(_ context.Context, ns, name string) (*ipamclaimsv1alpha1.IPAMClaim, error) {
	return s.claims[types.NamespacedName{Namespace: ns, Name: name}], nil
}

func (s *snapshot) siblings(_ context.Context, uid string) ([]*tenurev1alpha1.IPReservation, error) {
	return s.byOwner[uid], nil
}
