package controller

import (
	"unique"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"

	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/controller/repair"
)

// What the controller keeps of reservations and pods. It holds every one
// of the cluster's, so their size is its memory: at 100,000 of each, the
// trimmed typed objects it kept before took 1.2 KiB (a reservation: the
// ObjectMeta and spec structs alone are 0.5 KiB, most fields empty) and
// 1.4 KiB (a pod: PodSpec and PodStatus are large even when empty) each,
// plus their indexes. These entries keep only what the rules read; a
// release is decided again on live reads of the whole objects anyway.
// They are stored by the informers themselves (the cache's transform
// makes them), so controller-runtime's typed Get and List do not apply to
// these two types: the controller reads them through the informers'
// indexers (see index).

// resEntry is one IPReservation: its identity and the spec fields the
// repair rules and the pool counts read. Strings that repeat across
// reservations (network, pool, namespace, node, ...) are shared.
type resEntry struct {
	name, resourceVersion string
	// created is creationTimestamp in Unix seconds, all the precision the
	// API keeps.
	created          int64
	network, address string
	kind             tenurev1alpha1.ReservationKind
	pool             string
	owner            entryOwner
}

// entryOwner is spec.owner less podName and podUID, which no rule reads.
type entryOwner struct {
	kind                                           tenurev1alpha1.OwnerKind
	namespace, name, uid, containerID, iface, node string
}

// GetObjectMeta makes an entry an object to the informer: its store key is
// the name, and its resourceVersion tells an update from a resync.
func (e *resEntry) GetObjectMeta() metav1.Object {
	return &metav1.ObjectMeta{Name: e.name, ResourceVersion: e.resourceVersion}
}

func intern[T ~string](s T) T { return T(unique.Make(string(s)).Value()) }

// resEntryOf is the entry of r.
func resEntryOf(r *tenurev1alpha1.IPReservation) *resEntry {
	o := r.Spec.Owner
	var created int64
	if !r.CreationTimestamp.IsZero() {
		created = r.CreationTimestamp.Unix()
	}
	return &resEntry{
		name: r.Name, resourceVersion: r.ResourceVersion, created: created,
		network: intern(r.Spec.Network), address: r.Spec.Address, kind: intern(r.Spec.Kind), pool: intern(r.Spec.Pool),
		owner: entryOwner{
			kind: intern(o.Kind), namespace: intern(o.Namespace), name: o.Name, uid: o.UID,
			containerID: o.ContainerID, iface: intern(o.Interface), node: intern(o.Node),
		},
	}
}

// into fills r (reused by the caller) with what the entry knows: enough for
// repair.Decide, never for a write.
func (e *resEntry) into(r *tenurev1alpha1.IPReservation) *tenurev1alpha1.IPReservation {
	o := e.owner
	*r = tenurev1alpha1.IPReservation{
		ObjectMeta: metav1.ObjectMeta{Name: e.name, ResourceVersion: e.resourceVersion},
		Spec: tenurev1alpha1.IPReservationSpec{Network: e.network, Kind: e.kind, Address: e.address, Pool: e.pool,
			Owner: tenurev1alpha1.ReservationOwner{Kind: o.kind, Namespace: o.namespace, Name: o.name, UID: o.uid,
				ContainerID: o.containerID, Interface: o.iface, Node: o.node}},
	}
	if e.created != 0 {
		r.CreationTimestamp = metav1.Unix(e.created, 0)
	}
	return r
}

// entryName is the name of a reservation entry, "" for anything else.
func entryName(obj any) string {
	if e, ok := obj.(*resEntry); ok {
		return e.name
	}
	return ""
}

// reservation is a new IPReservation of what the entry knows.
func (e *resEntry) reservation() *tenurev1alpha1.IPReservation {
	return e.into(&tenurev1alpha1.IPReservation{})
}

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

func podEntryOf(p *corev1.Pod) *podEntry {
	f := repair.PodFactOf(p)
	f.NodeName = intern(f.NodeName)
	return &podEntry{namespace: intern(p.Namespace), name: p.Name, resourceVersion: p.ResourceVersion, fact: *f}
}

// transformEntries is the cache transform of reservations and pods.
func transformEntries(obj any) (any, error) {
	switch o := obj.(type) {
	case *tenurev1alpha1.IPReservation:
		return resEntryOf(o), nil
	case *corev1.Pod:
		return podEntryOf(o), nil
	}
	return obj, nil
}

func unwrapEntry[T any](obj any) (T, bool) {
	e, ok := unwrap(obj).(T)
	return e, ok
}

// ownerBucketLen is how much of an owner UID the owner index keys on. An
// index keeps a set per key, 0.25 KiB for a set of one: keyed on whole
// UIDs it was a third of what a reservation costs the controller. UIDs
// are random hex, so 3 characters make 4,096 buckets, a few dozen names
// each at 100,000 reservations, which a lookup filters in microseconds
// (as the agent's cache does).
const ownerBucketLen = 3

func ownerBucket(uid string) string { return uid[:min(len(uid), ownerBucketLen)] }

// Indexes on the reservation entries: indexOwnerUID by owner bucket (see
// byIndex), indexNode by owner node.
var resIndexers = toolscache.Indexers{
	indexOwnerUID: func(obj any) ([]string, error) {
		if e, ok := obj.(*resEntry); ok && e.owner.uid != "" {
			return []string{ownerBucket(e.owner.uid)}, nil
		}
		return nil, nil
	},
	indexNode: func(obj any) ([]string, error) {
		if e, ok := obj.(*resEntry); ok && e.owner.node != "" {
			return []string{e.owner.node}, nil
		}
		return nil, nil
	},
}

// index is the reservation and pod entries: the informers' stores in a
// running controller, or stores filled from paged live lists for --once.
type index struct {
	reservations toolscache.Indexer
	pods         toolscache.Store
}

func newIndex() *index {
	return &index{
		reservations: toolscache.NewIndexer(toolscache.MetaNamespaceKeyFunc, resIndexers),
		pods:         toolscache.NewStore(toolscache.MetaNamespaceKeyFunc),
	}
}

// reservation returns the entry called name, nil when there is none.
func (x *index) reservation(name string) *resEntry {
	obj, ok, err := x.reservations.GetByKey(name)
	if err != nil || !ok {
		return nil
	}
	e, _ := obj.(*resEntry)
	return e
}

// byIndex returns the reservation entries of one index value: of one
// owner UID for indexOwnerUID, of one node for indexNode.
func (x *index) byIndex(name, value string) []*resEntry {
	key := value
	if name == indexOwnerUID {
		key = ownerBucket(value)
	}
	objs, err := x.reservations.ByIndex(name, key)
	if err != nil {
		return nil
	}
	out := make([]*resEntry, 0, len(objs))
	for _, o := range objs {
		if e, ok := o.(*resEntry); ok && (name != indexOwnerUID || e.owner.uid == value) {
			out = append(out, e)
		}
	}
	return out
}

// names of the reservation entries of one index value; every name when
// name is "".
func (x *index) names(name, value string) []string {
	if name == "" {
		return x.reservations.ListKeys()
	}
	es := x.byIndex(name, value)
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.name
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
		if e.owner.kind == tenurev1alpha1.OwnerIPAMClaim {
			return true
		}
	}
	return false
}
