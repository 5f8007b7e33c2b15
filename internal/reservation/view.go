package reservation

import (
	"unique"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
)

// View is what a reader keeps of a reservation it does not write from:
// its identity and what decisions need of its spec. The agent's window and
// the controller hold every reservation of a block or of the cluster, so
// a view's size is their memory: it keeps only this, with the strings that
// repeat across reservations (scope, pool, namespace, node, ...) shared.
//
// Most views are made of metadata alone (ViewOfMeta), which travels as
// protobuf: the name says scope, address and kind, the labels the owner
// UID, the spec summary the rest (AnnotationSpecSummary). Objects made
// before the summary existed are read whole (ViewOf).
type View struct {
	Name, ResourceVersion string
	UID                   types.UID
	// Created is creationTimestamp in Unix seconds, all the precision the
	// API keeps.
	Created int64
	// Scope is the scope's label (ScopeLabel), what every view knows;
	// decisions only compare it.
	Scope   string
	Kind    tenurev1alpha1.ReservationKind
	Address string
	Pool    string
	// Range is spec.range: an attachment holds one item per range.
	Range string
	Owner ViewOwner
	// Opaque: the metadata does not say what decisions read (no spec
	// summary, one that does not parse, a name that does not parse, a
	// spec changed since the summary was written, or metadata that
	// disagrees with itself). No decision is taken on such a view, nor on
	// a sibling of it, without a live read of the whole object.
	Opaque bool
}

// ViewOwner is spec.owner less podName and podUID, which no decision
// reads.
type ViewOwner struct {
	Kind                                               tenurev1alpha1.OwnerKind
	Namespace, Name, UID, ContainerID, Interface, Node string
}

// GetObjectMeta makes a view an object to an informer: its store key is
// the name, and its resourceVersion tells an update from a resync.
func (v *View) GetObjectMeta() metav1.Object {
	return &metav1.ObjectMeta{Name: v.Name, UID: v.UID, ResourceVersion: v.ResourceVersion}
}

func intern[T ~string](s T) T { return T(unique.Make(string(s)).Value()) }

// ViewOf is the view of the whole object r.
func ViewOf(r *tenurev1alpha1.IPReservation) *View {
	o := r.Spec.Owner
	var created int64
	if !r.CreationTimestamp.IsZero() {
		created = r.CreationTimestamp.Unix()
	}
	return &View{
		Name: r.Name, ResourceVersion: r.ResourceVersion, UID: r.UID, Created: created,
		Scope: intern(ScopeLabel(r.Spec.Network)), Address: r.Spec.Address, Kind: intern(r.Spec.Kind), Pool: intern(r.Spec.Pool), Range: intern(r.Spec.Range),
		Owner: ViewOwner{
			Kind: intern(o.Kind), Namespace: intern(o.Namespace), Name: o.Name, UID: o.UID,
			ContainerID: o.ContainerID, Interface: intern(o.Interface), Node: intern(o.Node),
		},
	}
}

// ViewOfMeta is the view of a reservation's metadata: as ViewOf would make
// it of the whole object when the metadata describes the spec, else an
// opaque view of what the metadata says.
func ViewOfMeta(m *metav1.PartialObjectMetadata) *View {
	v := &View{Name: m.Name, ResourceVersion: m.ResourceVersion, UID: m.UID, Scope: intern(ScopeLabelOf(m.Name))}
	if !m.CreationTimestamp.IsZero() {
		v.Created = m.CreationTimestamp.Unix()
	}
	uid, hasUID := m.Labels[LabelOwnerUID]
	summary, hasSummary := m.Annotations[AnnotationSpecSummary]
	sum, serr := ParseSpecSummary(summary)
	parsed, perr := Parse(m.Name)
	// Generation 1 is the spec as created; any change of it raises the
	// generation, and the summary may then be stale.
	v.Opaque = !hasSummary || serr != nil || perr != nil || m.Generation > 1 || !hasUID ||
		!metadataAgrees(m, sum)
	if !hasSummary || serr != nil {
		// Still the node the object was made on, for a node index.
		sum.Owner.Node = m.Labels[LabelNode]
	}
	if perr == nil {
		v.Kind = tenurev1alpha1.KindAddress
		if parsed.IsPrefix {
			v.Kind = tenurev1alpha1.KindDelegatedPrefix
		}
		v.Address = ItemString(v.Kind, parsed.Prefix)
	}
	o := sum.Owner
	v.Pool = intern(sum.Pool)
	v.Range = intern(sum.Range)
	v.Owner = ViewOwner{Kind: intern(o.Kind), Namespace: intern(o.Namespace), Name: o.Name, UID: uid,
		ContainerID: o.ContainerID, Interface: intern(o.Interface), Node: intern(o.Node)}
	return v
}

// metadataAgrees reports whether what a reservation's metadata says twice
// says it alike: the scope label of its name and its network label, the
// node of its summary and its node label. Admission holds every writer's
// metadata to its spec (Check); an object that disagrees with itself was
// written past that, and no reader acts on its word: its view is opaque,
// judged on live reads, which weigh its spec.
func metadataAgrees(m *metav1.PartialObjectMetadata, sum SpecSummary) bool {
	if m.Labels[LabelNetwork] != ScopeLabelOf(m.Name) {
		return false
	}
	node, labelled := m.Labels[LabelNode]
	if sum.Owner.Node == "" {
		return !labelled
	}
	return node == NodeLabel(sum.Owner.Node)
}

// Into fills r (reused by the caller) with what the view knows: enough for
// a decision, never for a write.
func (v *View) Into(r *tenurev1alpha1.IPReservation) *tenurev1alpha1.IPReservation {
	o := v.Owner
	*r = tenurev1alpha1.IPReservation{
		ObjectMeta: metav1.ObjectMeta{Name: v.Name, UID: v.UID, ResourceVersion: v.ResourceVersion},
		Spec: tenurev1alpha1.IPReservationSpec{Network: v.Scope, Kind: v.Kind, Address: v.Address, Pool: v.Pool, Range: v.Range,
			Owner: tenurev1alpha1.ReservationOwner{Kind: o.Kind, Namespace: o.Namespace, Name: o.Name, UID: o.UID,
				ContainerID: o.ContainerID, Interface: o.Interface, Node: o.Node}},
	}
	if v.Created != 0 {
		r.CreationTimestamp = metav1.Unix(v.Created, 0)
	}
	return r
}

// Reservation is a new IPReservation of what the view knows: enough for a
// decision, never for a write.
func (v *View) Reservation() *tenurev1alpha1.IPReservation {
	return v.Into(&tenurev1alpha1.IPReservation{})
}

// ToView is an informer transform: reservations, whole or their metadata,
// become views; anything else passes.
func ToView(obj any) (any, error) {
	switch o := obj.(type) {
	case *metav1.PartialObjectMetadata:
		return ViewOfMeta(o), nil
	case *tenurev1alpha1.IPReservation:
		return ViewOf(o), nil
	}
	return obj, nil
}
