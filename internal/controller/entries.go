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
// "The controller at 100,000 reservations and pods"). These entries keep
// only what the rules read; a release is decided again on live reads of
// the whole objects anyway.
// They are stored by the informers themselves (the cache's transform
// makes them), so controller-runtime's typed Get and List do not apply to
// these two types: the controller reads them through the informers'
// indexers (see index).

// resEntry is one IPReservation: its identity and the spec fields the
// repair rules and the pool counts read. Strings that repeat across
// reservations (network, pool, namespace, node, ...) are shared.
//
// Most entries are made from metadata alone (resEntryOfMeta): the name
// says network, address and kind, the labels the owner UID, and the spec
// summary annotation the rest (reservation.AnnotationSpecSummary). Objects
// made before that annotation existed are read whole (resEntryOf).
type resEntry struct {
	name, resourceVersion string
	// created is creationTimestamp in Unix seconds, all the precision the
	// API keeps.
	created int64
	// network is the network's label (reservation.NetworkLabel), what
	// both kinds of entries know; the rules only compare it.
	network, address string
	kind             tenurev1alpha1.ReservationKind
	pool             string
	// rng is spec.range: an attachment holds one item per range
	// (repair's DuplicateAttachment).
	rng   string
	owner entryOwner
	// opaque: the metadata does not say what the rules read (no spec
	// summary, one that does not parse, a name that does not parse, or a
	// spec changed since the summary was written). The cache cannot judge
	// such an entry, nor a sibling of it: each is handed to the Releaser,
	// which decides on live reads of the whole objects.
	opaque bool
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
		network: intern(reservation.ScopeLabel(r.Spec.Network)), address: r.Spec.Address, kind: intern(r.Spec.Kind), pool: intern(r.Spec.Pool), rng: intern(r.Spec.Range),
		owner: entryOwner{
			kind: intern(o.Kind), namespace: intern(o.Namespace), name: o.Name, uid: o.UID,
			containerID: o.ContainerID, iface: intern(o.Interface), node: intern(o.Node),
		},
	}
}

// resEntryOfMeta is the entry of a reservation's metadata: as resEntryOf
// would make it of the whole object when the metadata describes the spec,
// else an opaque entry of what the metadata says.
func resEntryOfMeta(m *metav1.PartialObjectMetadata) *resEntry {
	e := &resEntry{name: m.Name, resourceVersion: m.ResourceVersion, network: intern(reservation.ScopeLabelOf(m.Name))}
	if !m.CreationTimestamp.IsZero() {
		e.created = m.CreationTimestamp.Unix()
	}
	uid, hasUID := m.Labels[reservation.LabelOwnerUID]
	summary, hasSummary := m.Annotations[reservation.AnnotationSpecSummary]
	sum, serr := reservation.ParseSpecSummary(summary)
	parsed, perr := reservation.Parse(m.Name)
	// Generation 1 is the spec as created; any change of it raises the
	// generation, and the summary may then be stale.
	e.opaque = !hasSummary || serr != nil || perr != nil || m.Generation > 1 || !hasUID ||
		!metadataAgrees(m, sum)
	if !hasSummary || serr != nil {
		// Still the node the object was made on, for the node index.
		sum.Owner.Node = m.Labels[reservation.LabelNode]
	}
	if perr == nil {
		e.kind = tenurev1alpha1.KindAddress
		if parsed.IsPrefix {
			e.kind = tenurev1alpha1.KindDelegatedPrefix
		}
		e.address = reservation.ItemString(e.kind, parsed.Prefix)
	}
	o := sum.Owner
	e.pool = intern(sum.Pool)
	e.rng = intern(sum.Range)
	e.owner = entryOwner{kind: intern(o.Kind), namespace: intern(o.Namespace), name: o.Name, uid: uid,
		containerID: o.ContainerID, iface: intern(o.Interface), node: intern(o.Node)}
	return e
}

// metadataAgrees reports whether what a reservation's metadata says twice
// says it alike: the scope label of its name and its network label, the
// node of its summary and its node label. Admission holds every writer's
// metadata to its spec (reservation.Check); an object that disagrees with
// itself was written past that, and the cache does not act on its word:
// its entry is opaque, judged on live reads, which weigh its spec.
func metadataAgrees(m *metav1.PartialObjectMetadata, sum reservation.SpecSummary) bool {
	if m.Labels[reservation.LabelNetwork] != reservation.ScopeLabelOf(m.Name) {
		return false
	}
	node, labelled := m.Labels[reservation.LabelNode]
	if sum.Owner.Node == "" {
		return !labelled
	}
	return node == reservation.NodeLabel(sum.Owner.Node)
}

// into fills r (reused by the caller) with what the entry knows: enough for
// repair.Decide, never for a write.
func (e *resEntry) into(r *tenurev1alpha1.IPReservation) *tenurev1alpha1.IPReservation {
	o := e.owner
	*r = tenurev1alpha1.IPReservation{
		ObjectMeta: metav1.ObjectMeta{Name: e.name, ResourceVersion: e.resourceVersion},
		Spec: tenurev1alpha1.IPReservationSpec{Network: e.network, Kind: e.kind, Address: e.address, Pool: e.pool, Range: e.rng,
			Owner: tenurev1alpha1.ReservationOwner{Kind: o.kind, Namespace: o.namespace, Name: o.name, UID: o.uid,
				ContainerID: o.containerID, Interface: o.iface, Node: o.node}},
	}
	if e.created != 0 {
		r.CreationTimestamp = metav1.Unix(e.created, 0)
	}
	return r
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

// transformEntries is the cache transform of reservations (whole or their
// metadata) and pods.
func transformEntries(obj any) (any, error) {
	switch o := obj.(type) {
	case *metav1.PartialObjectMetadata:
		return resEntryOfMeta(o), nil
	case *tenurev1alpha1.IPReservation:
		return resEntryOf(o), nil
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
		if e, ok := obj.(*resEntry); ok && e.owner.uid != "" {
			return []string{reservation.OwnerBucket(e.owner.uid)}, nil
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
func (x *index) add(e *resEntry) error { return x.reservations[0].Add(e) }

// reservation returns the entry called name, nil when there is none.
func (x *index) reservation(name string) *resEntry {
	for _, s := range x.reservations {
		if obj, ok, err := s.GetByKey(name); err == nil && ok {
			if e, ok := obj.(*resEntry); ok {
				return e
			}
		}
	}
	return nil
}

// list returns every reservation entry.
func (x *index) list() []*resEntry {
	var out []*resEntry
	for _, s := range x.reservations {
		objs := s.List()
		out = slices.Grow(out, len(objs))
		for _, obj := range objs {
			if e, ok := obj.(*resEntry); ok {
				out = append(out, e)
			}
		}
	}
	return out
}

// byIndex returns the reservation entries of one index value: of one
// owner UID for indexOwnerUID, of one node for indexNode.
func (x *index) byIndex(name, value string) []*resEntry {
	key := value
	if name == indexOwnerUID {
		key = reservation.OwnerBucket(value)
	}
	var out []*resEntry
	for _, s := range x.reservations {
		objs, err := s.ByIndex(name, key)
		if err != nil {
			continue
		}
		for _, o := range objs {
			if e, ok := o.(*resEntry); ok && (name != indexOwnerUID || e.owner.uid == value) {
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
