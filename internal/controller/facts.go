package controller

import (
	"context"
	"errors"
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
// reads (every release is confirmed through one), the controller's caches
// (to find candidates on events) and a sweep's snapshot (the caches in a
// running controller, paged live lists for --once). A nil object means
// NotFound.
type source interface {
	// pod returns the facts of the pod namespace/name and, from live
	// reads only, the pod itself (what a release Event is about).
	pod(ctx context.Context, namespace, name string) (*repair.PodFact, *corev1.Pod, error)
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

// gather reads what Decide needs for r, and nothing more: the pod (with
// its network-status when read live), then siblings and node only when the
// pod's state makes them matter; or the claim, then its siblings while it
// lives.
func gather(ctx context.Context, src source, r *tenurev1alpha1.IPReservation, now time.Time) (gathered, error) {
	g := gathered{facts: repair.Facts{Now: now}}
	o := r.Spec.Owner
	if o.Namespace == "" || o.Name == "" || o.UID == "" {
		return g, nil
	}
	switch o.Kind {
	case tenurev1alpha1.OwnerPod:
		f, p, err := src.pod(ctx, o.Namespace, o.Name)
		if err != nil {
			return g, err
		}
		g.pod = p
		g.facts.Pod = f
		if p != nil {
			g.facts.NetworkStatus = repair.NetworkStatusOf(p.Annotations)
		}
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
		if repair.NeedsClaimSiblings(r, g.facts.Claim) {
			sib, err := src.siblings(ctx, o.UID)
			if err != nil {
				return g, err
			}
			g.facts.Siblings, g.facts.SiblingsKnown = sib, true
		}
	}
	return g, nil
}

// liveSource reads from the API server.
type liveSource struct{ r client.Reader }

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

func (s liveSource) pod(ctx context.Context, ns, name string) (*repair.PodFact, *corev1.Pod, error) {
	p, err := getOrNil(ctx, s.r, types.NamespacedName{Namespace: ns, Name: name}, &corev1.Pod{})
	if err != nil {
		return nil, nil, err
	}
	return repair.PodFactOf(p), p, nil
}

func (s liveSource) node(ctx context.Context, name string) (*corev1.Node, error) {
	return getOrNil(ctx, s.r, types.NamespacedName{Name: name}, &corev1.Node{})
}

func (s liveSource) claim(ctx context.Context, ns, name string) (*ipamclaimsv1alpha1.IPAMClaim, error) {
	return getOrNil(ctx, s.r, types.NamespacedName{Namespace: ns, Name: name}, &ipamclaimsv1alpha1.IPAMClaim{})
}

// siblings selects by the owner label server-side, then by spec, and
// leaves out a reservation whose name, labels or summary disagree with its
// spec (reservation.Check): what its writer said twice and differently is
// no evidence against another reservation.
func (s liveSource) siblings(ctx context.Context, uid string) ([]*tenurev1alpha1.IPReservation, error) {
	list := &tenurev1alpha1.IPReservationList{}
	if err := s.r.List(ctx, list, client.MatchingLabels{reservation.LabelOwnerUID: uid}); err != nil {
		return nil, err
	}
	out := make([]*tenurev1alpha1.IPReservation, 0, len(list.Items))
	for i := range list.Items {
		if list.Items[i].Spec.Owner.UID == uid && reservation.Check(&list.Items[i]) == nil {
			out = append(out, &list.Items[i])
		}
	}
	return out, nil
}

// errOpaque: a cache cannot answer, since an entry it would answer from
// is opaque (see reservation.View); the live reads decide.
var errOpaque = errors.New("the cache does not know what an entry's spec says")

// cachedSource answers from the controller's caches: pods and reservations
// from the entry index, nodes and claims from the informer cache.
type cachedSource struct {
	idx   *index
	cache client.Reader
}

func (s cachedSource) pod(_ context.Context, ns, name string) (*repair.PodFact, *corev1.Pod, error) {
	return s.idx.pod(ns, name), nil, nil
}

func (s cachedSource) node(ctx context.Context, name string) (*corev1.Node, error) {
	return getOrNil(ctx, s.cache, types.NamespacedName{Name: name}, &corev1.Node{})
}

func (s cachedSource) claim(ctx context.Context, ns, name string) (*ipamclaimsv1alpha1.IPAMClaim, error) {
	return getOrNil(ctx, s.cache, types.NamespacedName{Namespace: ns, Name: name}, &ipamclaimsv1alpha1.IPAMClaim{})
}

func (s cachedSource) siblings(_ context.Context, uid string) ([]*tenurev1alpha1.IPReservation, error) {
	es := s.idx.byIndex(indexOwnerUID, uid)
	out := make([]*tenurev1alpha1.IPReservation, len(es))
	for i, e := range es {
		if e.Opaque {
			return nil, errOpaque
		}
		out[i] = e.Reservation()
	}
	return out, nil
}

// snapshot is what a sweep decides on: the entry index, and the nodes and
// claims as listed when it began. It serves one goroutine: the siblings it
// returns are valid until its next call.
type snapshot struct {
	idx    *index
	nodes  map[string]*corev1.Node
	claims map[types.NamespacedName]*ipamclaimsv1alpha1.IPAMClaim
	// owner, when set, is every entry of one owner UID: the siblings of
	// that owner's reservations, which the sweep is judging.
	owner   []*reservation.View
	scratch []tenurev1alpha1.IPReservation
	sibs    []*tenurev1alpha1.IPReservation
}

func (s *snapshot) pod(_ context.Context, ns, name string) (*repair.PodFact, *corev1.Pod, error) {
	return s.idx.pod(ns, name), nil, nil
}

func (s *snapshot) node(_ context.Context, name string) (*corev1.Node, error) {
	return s.nodes[name], nil
}

func (s *snapshot) claim(_ context.Context, ns, name string) (*ipamclaimsv1alpha1.IPAMClaim, error) {
	return s.claims[types.NamespacedName{Namespace: ns, Name: name}], nil
}

// siblings reuses the snapshot's buffers: a sweep asks for the siblings of
// every pod-owned reservation, and fresh objects each time would be as
// much garbage as the index itself.
func (s *snapshot) siblings(_ context.Context, uid string) ([]*tenurev1alpha1.IPReservation, error) {
	es := s.owner
	if len(es) == 0 || es[0].Owner.UID != uid {
		es = s.idx.byIndex(indexOwnerUID, uid)
	}
	if cap(s.scratch) < len(es) {
		s.scratch = make([]tenurev1alpha1.IPReservation, len(es))
	}
	s.scratch = s.scratch[:len(es)]
	s.sibs = s.sibs[:0]
	for i, e := range es {
		if e.Opaque {
			return nil, errOpaque
		}
		s.sibs = append(s.sibs, e.Into(&s.scratch[i]))
	}
	return s.sibs, nil
}
