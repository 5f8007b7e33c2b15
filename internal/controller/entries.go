package controller

import (
	"slices"
	"unique"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"

	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/controller/repair"
	"github.com/tenure-ipam/tenure/internal/kube"
	"github.com/tenure-ipam/tenure/internal/reservation"
)

// What the controller keeps of reservations and pods. It holds every one
// of the cluster's, so their size is its memory, and typed objects are
// large even trimmed (ObjectMeta, a reservation's spec, PodSpec and
// PodStatus are large structs with most fields empty; docs/performance.md,
// "The controller at 100,000 reservations and pods"). A reservation is
// kept as its reservation.View, a pod as a podEntry: only what the rules
// read; a release is decided again on live reads of the whole objects
// anyway.
// They are stored by the informers themselves (the cache's transform
// makes them), so controller-runtime's typed Get and List do not apply to
// these two types: the controller reads them through the informers'
// indexers (see index).

// podEntry is one pod: its identity and its facts for the rules.
type podEntry struct {
	namespace, name, resourceVersion string
	fact                             repair.PodFact
}

// GetObjectMeta makes an entry an object to the informer (key
// namespace/name).
func (e *podEntry) GetObjectMeta() metav1.Object {
	return &metav1.ObjectMeta{Namespace: e.namespace, Name: e.name, UID: types.UID(e.fact.UID), ResourceVersion: e.resourceVersion}
}

// intern shares a string that repeats across pods (namespace, node).
func intern(s string) string { return unique.Make(s).Value() }

func podEntryOf(p *corev1.Pod) *podEntry {
	f := repair.PodFactOf(p)
	f.NodeName = intern(f.NodeName)
	return &podEntry{namespace: intern(p.Namespace), name: p.Name, resourceVersion: p.ResourceVersion, fact: *f}
}

// transformEntries is the cache transform of reservations (whole or their
// metadata) and pods.
func transformEntries(obj any) (any, error) {
	switch o := obj.(type) {
	case *metav1.PartialObjectMetadata, *tenurev1alpha1.IPReservation:
		v, err := reservation.ToView(o)
		// No rule reads a reservation's own UID (a release's precondition
		// comes from its live read), and the controller keeps a view of
		// every reservation of the cluster.
		v.(*reservation.View).UID = ""
		return v, err
	case *corev1.Pod:
		return podEntryOf(o), nil
	}
	return obj, nil
}

func unwrapEntry[T any](obj any) (T, bool) {
	e, ok := kube.DeletedObject(obj).(T)
	return e, ok
}

// Indexes on the reservation entries: indexOwnerUID by owner bucket
// (reservation.OwnerBucket), indexNode by owner node.
var resIndexers = toolscache.Indexers{
	indexOwnerUID: func(obj any) ([]string, error) {
		if e, ok := obj.(*reservation.View); ok && e.Owner.UID != "" {
			return []string{reservation.OwnerBucket(e.Owner.UID)}, nil
		}
		return nil, nil
	},
	indexNode: func(obj any) ([]string, error) {
		if e, ok := obj.(*reservation.View); ok && e.Owner.Node != "" {
			return []string{e.Owner.Node}, nil
		}
		return nil, nil
	},
}

// index is the reservation and pod entries: the informers' stores in a
// running controller, or stores filled from paged live lists for --once.
// A running controller has two reservation stores, of the objects its
// metadata informer describes and of the older ones it reads whole; a
// name is in one of them (in both for a moment when its label changes).
type index struct {
	reservations []toolscache.Indexer
	pods         toolscache.Store
}

func newIndex() *index {
	return &index{
		reservations: []toolscache.Indexer{toolscache.NewIndexer(toolscache.MetaNamespaceKeyFunc, resIndexers)},
		pods:         toolscache.NewStore(toolscache.MetaNamespaceKeyFunc),
	}
}

// add puts e in the first reservation store (for --once and tests).
func (x *index) add(e *reservation.View) error { return x.reservations[0].Add(e) }

// reservation returns the entry called name, nil when there is none.
func (x *index) reservation(name string) *reservation.View {
	for _, s := range x.reservations {
		if obj, ok, err := s.GetByKey(name); err == nil && ok {
			if e, ok := obj.(*reservation.View); ok {
				return e
			}
		}
	}
	return nil
}

// list returns every reservation entry.
func (x *index) list() []*reservation.View {
	var out []*reservation.View
	for _, s := range x.reservations {
		objs := s.List()
		out = slices.Grow(out, len(objs))
		for _, obj := range objs {
			if e, ok := obj.(*reservation.View); ok {
				out = append(out, e)
			}
		}
	}
	return out
}

// byIndex returns the reservation entries of one index value: of one
// owner UID for indexOwnerUID, of one node for indexNode.
func (x *index) byIndex(name, value string) []*reservation.View {
	key := value
	if name == indexOwnerUID {
		key = reservation.OwnerBucket(value)
	}
	var out []*reservation.View
	for _, s := range x.reservations {
		objs, err := s.ByIndex(name, key)
		if err != nil {
			continue
		}
		for _, o := range objs {
			if e, ok := o.(*reservation.View); ok && (name != indexOwnerUID || e.Owner.UID == value) {
				out = append(out, e)
			}
		}
	}
	return out
}

// names of the reservation entries of one index value; every name when
// name is "".
func (x *index) names(name, value string) []string {
	if name == "" {
		var out []string
		for _, s := range x.reservations {
			out = append(out, s.ListKeys()...)
		}
		return out
	}
	es := x.byIndex(name, value)
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.Name
	}
	return out
}

// pod returns the facts of the pod namespace/name: Exists false when the
// index has no such pod.
func (x *index) pod(namespace, name string) *repair.PodFact {
	obj, ok, err := x.pods.GetByKey(namespace + "/" + name)
	if err != nil || !ok {
		return &repair.PodFact{}
	}
	e, ok := obj.(*podEntry)
	if !ok {
		return &repair.PodFact{}
	}
	return &e.fact
}

// holds reports whether owner uid holds a claim-owned reservation.
func (x *index) holds(uid string) bool {
	for _, e := range x.byIndex(indexOwnerUID, uid) {
		if e.Owner.Kind == tenurev1alpha1.OwnerIPAMClaim {
			return true
		}
	}
	return false
}
