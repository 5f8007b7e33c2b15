package reservation

import (
	"net/netip"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
)

// metadataOf is what a metadata watch of r gives, r made by New and never
// changed since: the generation is 1.
func metadataOf(r *tenurev1alpha1.IPReservation) *metav1.PartialObjectMetadata {
	m := &metav1.PartialObjectMetadata{ObjectMeta: *r.ObjectMeta.DeepCopy()}
	m.Generation = 1
	return m
}

func testOwner(ns, name, uid, container, node string) tenurev1alpha1.ReservationOwner {
	return tenurev1alpha1.ReservationOwner{Kind: tenurev1alpha1.OwnerPod, Namespace: ns, Name: name, UID: uid, PodName: name, PodUID: uid,
		ContainerID: container, Interface: "net1", Node: node}
}

// A view of metadata is opaque, so that only live reads judge it, whenever
// the metadata does not say what the spec says.
func TestAViewOfMetadataIsOpaqueUnlessItDescribesTheSpec(t *testing.T) {
	r := New(Spec{Network: "n", Kind: tenurev1alpha1.KindAddress, Item: netip.MustParsePrefix("10.0.0.1/32"), Pool: "p",
		Owner: testOwner("ns", "p", "uid-p", "s", "node-1")})
	r.ResourceVersion, r.CreationTimestamp = "7", metav1.Unix(1700000000, 0)
	good := metadataOf(r)
	e := ViewOfMeta(good)
	want := ViewOf(r)
	if *e != *want {
		t.Fatalf("view of the metadata %+v, of the whole object %+v", *e, *want)
	}
	for _, tc := range []struct {
		name   string
		change func(m *metav1.PartialObjectMetadata)
	}{
		{"no summary", func(m *metav1.PartialObjectMetadata) { delete(m.Annotations, AnnotationSpecSummary) }},
		{"summary does not parse", func(m *metav1.PartialObjectMetadata) { m.Annotations[AnnotationSpecSummary] = "kind" }},
		{"spec changed since", func(m *metav1.PartialObjectMetadata) { m.Generation = 2 }},
		{"name does not parse", func(m *metav1.PartialObjectMetadata) { m.Name = "n.not-an-address" }},
		{"no owner UID label", func(m *metav1.PartialObjectMetadata) { delete(m.Labels, LabelOwnerUID) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := good.DeepCopy()
			tc.change(m)
			e := ViewOfMeta(m)
			if !e.Opaque {
				t.Fatalf("view %+v is not opaque", *e)
			}
			if e.Name != m.Name || e.Owner.Node != "node-1" && tc.name != "summary does not parse" {
				t.Fatalf("view %+v: lost what the metadata says", *e)
			}
		})
	}
}

// Metadata that says one thing twice and differently makes an opaque
// view: no reader acts on its word, the live reads judge it.
func TestAViewOfMetadataThatDisagreesWithItselfIsOpaque(t *testing.T) {
	r := New(Spec{Network: "n", Kind: tenurev1alpha1.KindAddress, Item: netip.MustParsePrefix("10.0.0.1/32"), Owner: testOwner("ns", "p1", "uid-p1", "c1", "node-b")})
	for _, tc := range []struct {
		name   string
		shape  func(*metav1.PartialObjectMetadata)
		opaque bool
	}{
		{"as New makes it", func(*metav1.PartialObjectMetadata) {}, false},
		{"another scope's network label", func(m *metav1.PartialObjectMetadata) { m.Labels[LabelNetwork] = "other" }, true},
		{"a node label other than the summary's node", func(m *metav1.PartialObjectMetadata) { m.Labels[LabelNode] = "node-a" }, true},
		{"no node label, the summary naming a node", func(m *metav1.PartialObjectMetadata) { delete(m.Labels, LabelNode) }, true},
	} {
		m := metadataOf(r)
		tc.shape(m)
		if got := ViewOfMeta(m).Opaque; got != tc.opaque {
			t.Errorf("%s: opaque %v, want %v", tc.name, got, tc.opaque)
		}
	}
}
