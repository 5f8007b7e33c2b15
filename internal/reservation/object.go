package reservation

import (
	"net/netip"
	"unique"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
)

// Labels put on every reservation so that the controller, the allocator's
// exhaustion fallback and the agents' caches can select server-side.
const (
	// LabelNetwork is ScopeLabel(spec.network): every reservation of one
	// allocation scope.
	LabelNetwork = "ipam.tenure.dev/network"
	// LabelNode is the node whose agent made the reservation: what an
	// agent's cache of its own reservations selects.
	LabelNode = "ipam.tenure.dev/node"
	// LabelOwnerUID is spec.owner.uid: what a pod or claim holds.
	LabelOwnerUID = "ipam.tenure.dev/owner-uid"
	// AnnotationReason is why an administrator set the address aside, on
	// a reservation of owner kind Administrator.
	AnnotationReason = "ipam.tenure.dev/reason"
)

// NodeLabel is the LabelNode value for node: the name itself when it is a
// valid label value, else a readable prefix and a hash, as ScopeLabel
// makes them. Node names are DNS subdomains of up to 253 bytes; label
// values stop at 63, and a longer one would make every Create fail.
func NodeLabel(node string) string {
	if isLabelValue(node) {
		return node
	}
	return ScopeLabel(node)
}

// Spec is what a reservation is made of; New derives the rest.
type Spec struct {
	// Network is spec.network: the allocation scope (Scope).
	Network string
	Kind    tenurev1alpha1.ReservationKind
	// Item is the address (a full-length prefix) or the delegated prefix.
	Item netip.Prefix
	// Range is the configured range or delegation pool the item came from.
	Range      string
	Pool       string
	CNINetwork string
	Owner      tenurev1alpha1.ReservationOwner
}

// New builds the IPReservation of s: its name derived from (network, item),
// the labels every reader selects by, and the spec. It is the one place
// where the object's shape is decided.
func New(s Spec) *tenurev1alpha1.IPReservation {
	scope := ScopeLabel(s.Network)
	labels := make(map[string]string, 5) // these three, the node's and the spec summary's
	labels[LabelNetwork] = scope
	labels[LabelOwnerUID] = s.Owner.UID
	labels[LabelBlock] = BlockLabel(scope, s.Kind == tenurev1alpha1.KindDelegatedPrefix, s.Item)
	if s.Owner.Node != "" {
		labels[LabelNode] = NodeLabel(s.Owner.Node)
	}
	return withSpecSummary(&tenurev1alpha1.IPReservation{
		TypeMeta:   metav1.TypeMeta{APIVersion: tenurev1alpha1.GroupVersion.String(), Kind: "IPReservation"},
		ObjectMeta: metav1.ObjectMeta{Name: NameInScope(scope, s.Kind, s.Item), Labels: labels},
		Spec: tenurev1alpha1.IPReservationSpec{
			Network:    s.Network,
			Kind:       s.Kind,
			Address:    ItemString(s.Kind, s.Item),
			Range:      s.Range,
			Pool:       s.Pool,
			CNINetwork: s.CNINetwork,
			Owner:      s.Owner,
		},
	})
}

// Name is the object name of item on a network: PrefixName for a delegated
// prefix, AddressName for an address.
func Name(network string, kind tenurev1alpha1.ReservationKind, item netip.Prefix) string {
	return NameInScope(ScopeLabel(network), kind, item)
}

// NameInScope is Name for a network given by its ScopeLabel, for callers
// that hold the label already.
func NameInScope(scopeLabel string, kind tenurev1alpha1.ReservationKind, item netip.Prefix) string {
	if kind == tenurev1alpha1.KindDelegatedPrefix {
		return prefixName(scopeLabel, item)
	}
	return addressName(scopeLabel, item.Addr())
}

// ItemString is spec.address of item: the CIDR of a delegated prefix, the
// bare IP of an address.
func ItemString(kind tenurev1alpha1.ReservationKind, item netip.Prefix) string {
	if kind == tenurev1alpha1.KindDelegatedPrefix {
		return item.Masked().String()
	}
	return item.Addr().String()
}

// ParseItem reads spec.address back into a prefix (an address is a
// full-length prefix).
func ParseItem(s string) (netip.Prefix, error) {
	if p, err := netip.ParsePrefix(s); err == nil {
		return p, nil
	}
	addr, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, err
	}
	return netip.PrefixFrom(addr, addr.BitLen()), nil
}

// Compact is an informer transform for whole reservations: it drops what no
// tenure cache reads (managed fields, annotations but the reason of an
// address set aside, owner references, labels other than the node's) and shares the strings that repeat across
// thousands of objects. Objects of other types pass as they are.
func Compact(obj any) (any, error) {
	r, ok := obj.(*tenurev1alpha1.IPReservation)
	if !ok {
		return obj, nil
	}
	r.ManagedFields = nil
	if reason, ok := r.Annotations[AnnotationReason]; ok && r.Spec.Owner.Kind == tenurev1alpha1.OwnerAdministrator {
		// What `tenurectl get`, `who` and `pools` say of an address set aside.
		r.Annotations = map[string]string{AnnotationReason: reason}
	} else {
		r.Annotations = nil
	}
	r.OwnerReferences = nil
	if node := r.Labels[LabelNode]; node != "" {
		r.Labels = map[string]string{LabelNode: unique.Make(node).Value()}
	} else {
		r.Labels = nil
	}
	sp := &r.Spec
	for _, f := range []*string{&sp.Network, &sp.Range, &sp.Pool, &sp.CNINetwork, &sp.Owner.Namespace, &sp.Owner.Node, &sp.Owner.Interface} {
		*f = unique.Make(*f).Value()
	}
	sp.Kind = tenurev1alpha1.ReservationKind(unique.Make(string(sp.Kind)).Value())
	sp.Owner.Kind = tenurev1alpha1.OwnerKind(unique.Make(string(sp.Owner.Kind)).Value())
	return r, nil
}

// NewMetadataList is an empty list of reservations' metadata: what a
// reader that needs names, labels and annotations asks for, which travels
// as protobuf where the whole custom resources travel as JSON.
func NewMetadataList() *metav1.PartialObjectMetadataList {
	l := &metav1.PartialObjectMetadataList{}
	l.SetGroupVersionKind(tenurev1alpha1.GroupVersion.WithKind("IPReservationList"))
	return l
}

// OwnerIndex names the informer index of reservations by OwnerBucket of
// their owner UID.
const OwnerIndex = "ownerUID"

// OwnerBucket is the owner-UID index key: a bucket of owners rather than
// one owner, because an index keeps a set per key (about 0.3 KiB for a set
// of one), while a bucket of a few dozen names at 100,000 reservations is
// read and filtered in microseconds. UIDs are random hex, so 3 characters
// make 4,096 buckets.
func OwnerBucket(uid string) string { return uid[:min(len(uid), 3)] }
