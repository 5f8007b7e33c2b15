// Package store is the node agent's view of IPReservations: one informer
// whose cache answers "is this name taken?" and "what does this attachment
// hold?" without an API read, plus the agent's own writes that the informer
// has not reported yet.
package store

import (
	"context"
	"fmt"
	"sync"
	"time"
	"unique"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tenurev1 "github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/kube"
)

// Labels put on every reservation so the controller and the exhaustion
// fallback can select server-side.
const (
	LabelNetwork  = "ipam.tenure.dev/network"
	LabelNode     = "ipam.tenure.dev/node"
	LabelOwnerUID = "ipam.tenure.dev/owner-uid"
)

const (
	indexAttachment = "attachment"
	indexOwnerUID   = "ownerUID"
	indexNetwork    = "network"
)

// AttachmentKey identifies one CNI attachment.
func AttachmentKey(containerID, ifName string) string { return containerID + "/" + ifName }

// assumedTTL bounds how long a write of ours stays visible without the
// informer confirming it; a watch delivers within milliseconds normally.
const assumedTTL = 2 * time.Minute

// Store is an informer over IPReservations with the indexes the agent needs.
type Store struct {
	informer cache.SharedIndexInformer

	mu sync.Mutex
	// assumed: created by us, not yet seen by the informer.
	assumed map[string]assumedEntry
	// released: deleted by us, the informer may still hold them.
	released map[string]time.Time
}

type assumedEntry struct {
	obj *tenurev1.IPReservation
	at  time.Time
}

// New builds the store on a watching client. Call Run, then WaitForSync.
func New(c client.WithWatch, selector client.ListOption) *Store {
	newList := func() client.ObjectList { return &tenurev1.IPReservationList{} }
	var opts []client.ListOption
	if selector != nil {
		opts = append(opts, selector)
	}
	inf := kube.NewInformer(c, newList, &tenurev1.IPReservation{}, cache.Indexers{
		indexAttachment: func(obj any) ([]string, error) {
			r := obj.(*tenurev1.IPReservation)
			if r.Spec.Owner.ContainerID == "" {
				return nil, nil
			}
			return []string{AttachmentKey(r.Spec.Owner.ContainerID, r.Spec.Owner.Interface)}, nil
		},
		indexOwnerUID: func(obj any) ([]string, error) {
			return []string{obj.(*tenurev1.IPReservation).Spec.Owner.UID}, nil
		},
		indexNetwork: func(obj any) ([]string, error) {
			return []string{obj.(*tenurev1.IPReservation).Spec.Network}, nil
		},
	}, opts...)
	_ = inf.SetTransform(compact)
	s := &Store{informer: inf, assumed: map[string]assumedEntry{}, released: map[string]time.Time{}}
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { s.observed(obj) },
		UpdateFunc: func(_, obj any) {
			s.observed(obj)
		},
		DeleteFunc: func(obj any) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			if r, ok := obj.(*tenurev1.IPReservation); ok {
				s.mu.Lock()
				delete(s.released, r.Name)
				s.mu.Unlock()
			}
		},
	})
	return s
}

func (s *Store) observed(obj any) {
	r, ok := obj.(*tenurev1.IPReservation)
	if !ok {
		return
	}
	s.mu.Lock()
	if a, ok := s.assumed[r.Name]; ok && a.obj.UID == r.UID {
		delete(s.assumed, r.Name)
	}
	s.mu.Unlock()
}

// Run runs the informer until ctx ends.
func (s *Store) Run(ctx context.Context) { s.informer.RunWithContext(ctx) }

// WaitForSync blocks until the initial list is in, or ctx ends.
func (s *Store) WaitForSync(ctx context.Context) error {
	if !cache.WaitForCacheSync(ctx.Done(), s.informer.HasSynced) {
		return fmt.Errorf("reservation cache did not sync: %w", ctx.Err())
	}
	return nil
}

// HasSynced reports whether the initial list is in.
func (s *Store) HasSynced() bool { return s.informer.HasSynced() }

// Get returns the reservation of that name as this agent knows it. The
// object is shared: callers must not modify it.
func (s *Store) Get(name string) (*tenurev1.IPReservation, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.getLocked(name)
}

func (s *Store) getLocked(name string) (*tenurev1.IPReservation, bool) {
	if _, gone := s.released[name]; gone {
		return nil, false
	}
	if a, ok := s.assumed[name]; ok {
		return a.obj, true
	}
	obj, ok, _ := s.informer.GetIndexer().GetByKey(name)
	if !ok {
		return nil, false
	}
	return obj.(*tenurev1.IPReservation), true
}

// Taken reports whether a name is held, counting our unconfirmed writes.
func (s *Store) Taken(name string) bool {
	_, ok := s.Get(name)
	return ok
}

// TryAssume marks name as ours before the Create is sent, so concurrent
// allocations on this node never pick it too. False: it is already taken.
func (s *Store) TryAssume(r *tenurev1.IPReservation) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.getLocked(r.Name); ok {
		return false
	}
	delete(s.released, r.Name)
	s.assumed[r.Name] = assumedEntry{obj: r, at: time.Now()}
	return true
}

// Confirm replaces the assumed placeholder with the created object.
func (s *Store) Confirm(r *tenurev1.IPReservation) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if obj, informed, _ := s.informer.GetIndexer().GetByKey(r.Name); informed && obj.(*tenurev1.IPReservation).UID == r.UID {
		delete(s.assumed, r.Name)
		return
	}
	s.assumed[r.Name] = assumedEntry{obj: r, at: time.Now()}
}

// Forget drops an assumption whose Create failed.
func (s *Store) Forget(name string) {
	s.mu.Lock()
	delete(s.assumed, name)
	s.mu.Unlock()
}

// MarkTakenElsewhere records that a Create met AlreadyExists, so this agent
// stops offering the name until its informer has the real object.
func (s *Store) MarkTakenElsewhere(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.getLocked(name); ok {
		return
	}
	s.assumed[name] = assumedEntry{obj: &tenurev1.IPReservation{ObjectMeta: metav1.ObjectMeta{Name: name}}, at: time.Now()}
}

// Released records a successful delete of ours.
func (s *Store) Released(name string) {
	s.mu.Lock()
	delete(s.assumed, name)
	s.released[name] = time.Now()
	s.mu.Unlock()
}

// ByAttachment returns what one attachment holds.
func (s *Store) ByAttachment(containerID, ifName string) []*tenurev1.IPReservation {
	return s.byIndex(indexAttachment, AttachmentKey(containerID, ifName), func(r *tenurev1.IPReservation) bool {
		return r.Spec.Owner.ContainerID == containerID && r.Spec.Owner.Interface == ifName
	})
}

// ByOwnerUID returns what one pod or claim holds.
func (s *Store) ByOwnerUID(uid string) []*tenurev1.IPReservation {
	return s.byIndex(indexOwnerUID, uid, func(r *tenurev1.IPReservation) bool { return r.Spec.Owner.UID == uid })
}

// ByNetwork returns every reservation of one network key.
func (s *Store) ByNetwork(network string) []*tenurev1.IPReservation {
	return s.byIndex(indexNetwork, network, func(r *tenurev1.IPReservation) bool { return r.Spec.Network == network })
}

// List returns every reservation known.
func (s *Store) List() []*tenurev1.IPReservation {
	return s.byIndex("", "", func(*tenurev1.IPReservation) bool { return true })
}

func (s *Store) byIndex(index, key string, match func(*tenurev1.IPReservation) bool) []*tenurev1.IPReservation {
	var objs []any
	if index == "" {
		objs = s.informer.GetIndexer().List()
	} else {
		objs, _ = s.informer.GetIndexer().ByIndex(index, key)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.expireLocked()
	out := make([]*tenurev1.IPReservation, 0, len(objs))
	seen := make(map[string]bool, len(objs))
	for _, o := range objs {
		r := o.(*tenurev1.IPReservation)
		if _, gone := s.released[r.Name]; gone {
			continue
		}
		if a, ok := s.assumed[r.Name]; ok && a.obj.Spec.Owner.UID != "" && a.obj.UID != r.UID {
			continue // ours is newer than what the informer holds
		}
		seen[r.Name] = true
		out = append(out, r)
	}
	for name, a := range s.assumed {
		if !seen[name] && a.obj.Spec.Owner.UID != "" && match(a.obj) {
			out = append(out, a.obj)
		}
	}
	return out
}

func (s *Store) expireLocked() {
	now := time.Now()
	for name, a := range s.assumed {
		if now.Sub(a.at) > assumedTTL {
			delete(s.assumed, name)
		}
	}
	for name, at := range s.released {
		if now.Sub(at) > assumedTTL {
			delete(s.released, name)
		}
	}
}

// Len is the number of reservations in the informer cache.
func (s *Store) Len() int { return len(s.informer.GetIndexer().ListKeys()) }

// AssumeOverCache assumes name even though the informer holds it, for when
// a quorum read has shown the informer to be stale. False only when this
// agent itself has an unconfirmed write of that name.
func (s *Store) AssumeOverCache(r *tenurev1.IPReservation) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if a, ok := s.assumed[r.Name]; ok && a.obj.Spec.Owner.UID != "" {
		return false
	}
	delete(s.released, r.Name)
	s.assumed[r.Name] = assumedEntry{obj: r, at: time.Now()}
	return true
}

// compact trims a cached reservation to what the agent reads and shares the
// strings that repeat across thousands of objects (network, range, node...),
// so a 100,000-reservation cluster fits a node agent's memory budget.
func compact(obj any) (any, error) {
	r, ok := obj.(*tenurev1.IPReservation)
	if !ok {
		return obj, nil
	}
	r.ManagedFields = nil
	r.Labels = nil
	r.Annotations = nil
	r.OwnerReferences = nil
	sp := &r.Spec
	for _, f := range []*string{&sp.Network, &sp.Range, &sp.Pool, &sp.CNINetwork, &sp.Owner.Namespace, &sp.Owner.Node, &sp.Owner.Interface} {
		*f = unique.Make(*f).Value()
	}
	sp.Kind = tenurev1.ReservationKind(unique.Make(string(sp.Kind)).Value())
	sp.Owner.Kind = tenurev1.OwnerKind(unique.Make(string(sp.Owner.Kind)).Value())
	return r, nil
}
