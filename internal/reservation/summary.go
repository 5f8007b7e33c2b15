package reservation

import (
	"fmt"
	"net/url"
	"strings"

	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
)

// The spec summary is what a reader that receives only a reservation's
// metadata needs of its spec beyond what the name (scope label, address
// or prefix, kind) and the labels (owner UID) say. Metadata travels as
// protobuf (PartialObjectMetadata) where a whole custom resource travels as
// JSON only: at 100,000 reservations, decoding them whole was most of the
// controller's start-up.
const (
	// AnnotationSpecSummary holds spec.owner's kind, namespace, name,
	// containerID, interface and node, spec.pool and spec.range,
	// URL-query encoded in that order, empty ones left out:
	//
	//	kind=Pod&namespace=ns&name=web-0&containerID=3f2a…&interface=net1&node=n1&pool=p&range=10.0.0.0%2F24
	//
	// New writes it with the spec. It describes the spec as created: a
	// reader trusts it only while metadata.generation is 1, since any
	// later change of the spec raises the generation.
	AnnotationSpecSummary = "ipam.tenure.dev/spec-summary"
	// LabelSpecSummary, value SpecSummaryV1, marks an object that carries
	// AnnotationSpecSummary in the format above, so that a reader selects
	// server-side the objects whose metadata is enough
	// (LabelSpecSummary=v1) and those it must read whole (!=v1: made
	// before the summary existed).
	LabelSpecSummary = "ipam.tenure.dev/spec-summary"
	SpecSummaryV1    = "v1"
)

// withSpecSummary labels and annotates r as New makes it.
func withSpecSummary(r *tenurev1alpha1.IPReservation) *tenurev1alpha1.IPReservation {
	r.Labels[LabelSpecSummary] = SpecSummaryV1
	if r.Annotations == nil {
		r.Annotations = map[string]string{}
	}
	r.Annotations[AnnotationSpecSummary] = EncodeSpecSummary(&r.Spec)
	return r
}

// SpecSummary is what AnnotationSpecSummary says: the pool, the owner
// less its UID (LabelOwnerUID), podName and podUID, and the range (absent
// from summaries written before it was added).
type SpecSummary struct {
	Pool  string
	Owner tenurev1alpha1.ReservationOwner
	Range string
}

// specSummaryFields are the summary's keys, in the order they are written,
// and the fields they stand for.
var specSummaryFields = []struct {
	key   string
	field func(*SpecSummary) *string
}{
	{"kind", func(s *SpecSummary) *string { return (*string)(&s.Owner.Kind) }},
	{"namespace", func(s *SpecSummary) *string { return &s.Owner.Namespace }},
	{"name", func(s *SpecSummary) *string { return &s.Owner.Name }},
	{"containerID", func(s *SpecSummary) *string { return &s.Owner.ContainerID }},
	{"interface", func(s *SpecSummary) *string { return &s.Owner.Interface }},
	{"node", func(s *SpecSummary) *string { return &s.Owner.Node }},
	{"pool", func(s *SpecSummary) *string { return &s.Pool }},
	{"range", func(s *SpecSummary) *string { return &s.Range }},
}

// EncodeSpecSummary is the AnnotationSpecSummary value of spec.
func EncodeSpecSummary(spec *tenurev1alpha1.IPReservationSpec) string {
	s := &SpecSummary{Pool: spec.Pool, Owner: spec.Owner, Range: spec.Range}
	var b strings.Builder
	b.Grow(256)
	for _, f := range specSummaryFields {
		v := *f.field(s)
		if v == "" {
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('&')
		}
		b.WriteString(f.key)
		b.WriteByte('=')
		if needsEscape(v) {
			v = url.QueryEscape(v)
		}
		b.WriteString(v)
	}
	return b.String()
}

// needsEscape says whether url.QueryEscape would change v: names, UIDs
// and container IDs almost never need it, and it allocates either way.
func needsEscape(v string) bool {
	for i := 0; i < len(v); i++ {
		switch c := v[i]; {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '-', c == '_', c == '.', c == '~':
		default:
			return true
		}
	}
	return false
}

// ParseSpecSummary reads an AnnotationSpecSummary value; keys it does not
// know are skipped, so a later writer may add some.
func ParseSpecSummary(v string) (SpecSummary, error) {
	var s SpecSummary
	for v != "" {
		var kv string
		kv, v, _ = strings.Cut(v, "&")
		key, value, ok := strings.Cut(kv, "=")
		if !ok {
			return SpecSummary{}, fmt.Errorf("spec summary: %q is not key=value", kv)
		}
		if strings.ContainsAny(value, "%+") {
			var err error
			if value, err = url.QueryUnescape(value); err != nil {
				return SpecSummary{}, fmt.Errorf("spec summary: %s: %w", key, err)
			}
		}
		for _, f := range specSummaryFields {
			if f.key == key {
				*f.field(&s) = value
				break
			}
		}
	}
	return s, nil
}
