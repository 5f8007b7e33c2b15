package reservation

import (
	"net/netip"
	"strings"
	"testing"

	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
)

func checked() *tenurev1alpha1.IPReservation {
	return New(Spec{Network: "san", Kind: tenurev1alpha1.KindAddress, Item: netip.MustParsePrefix("10.0.0.11/32"), Range: "10.0.0.0/24",
		Owner: tenurev1alpha1.ReservationOwner{Kind: tenurev1alpha1.OwnerPod, Namespace: "ns", Name: "p1", UID: "uid-p1", PodName: "p1", PodUID: "uid-p1",
			ContainerID: "c1", Interface: "net1", Node: "node-b"}})
}

func TestCheckRefusesMetadataThatDisagreesWithTheSpec(t *testing.T) {
	prefix := New(Spec{Network: "vm net/x", Kind: tenurev1alpha1.KindDelegatedPrefix, Item: netip.MustParsePrefix("2001:db8:0:100::/56"),
		Owner: tenurev1alpha1.ReservationOwner{Kind: tenurev1alpha1.OwnerIPAMClaim, Namespace: "ns", Name: "vm1", UID: "uid-vm1", Node: "node-b"}})
	for _, tc := range []struct {
		name  string
		r     *tenurev1alpha1.IPReservation
		shape func(*tenurev1alpha1.IPReservation)
		want  string // "" = accepted
	}{
		{"as New makes it", checked(), func(*tenurev1alpha1.IPReservation) {}, ""},
		{"a prefix of a hashed scope, as New makes it", prefix, func(*tenurev1alpha1.IPReservation) {}, ""},
		{"without summary and block label (an older writer)", checked(), func(r *tenurev1alpha1.IPReservation) {
			delete(r.Labels, LabelBlock)
			delete(r.Labels, LabelSpecSummary)
			delete(r.Annotations, AnnotationSpecSummary)
		}, ""},
		{"the lock of one address, spec.address another", checked(), func(r *tenurev1alpha1.IPReservation) { r.Name = "san.10.0.0.12" }, `metadata.name "san.10.0.0.12" is not "san.10.0.0.11"`},
		{"an address not in canonical form", checked(), func(r *tenurev1alpha1.IPReservation) { r.Spec.Address = "::ffff:10.0.0.11" }, "canonical form"},
		{"a prefix with host bits", prefix, func(r *tenurev1alpha1.IPReservation) { r.Spec.Address = "2001:db8:0:101::/56" }, "canonical form"},
		{"another scope's label", checked(), func(r *tenurev1alpha1.IPReservation) { r.Labels[LabelNetwork] = "other" }, `label ipam.tenure.dev/network="other"`},
		{"a claim's UID as owner label", checked(), func(r *tenurev1alpha1.IPReservation) { r.Labels[LabelOwnerUID] = "uid-vm1" }, `label ipam.tenure.dev/owner-uid="uid-vm1" is not "uid-p1"`},
		{"no owner label", checked(), func(r *tenurev1alpha1.IPReservation) { delete(r.Labels, LabelOwnerUID) }, "label ipam.tenure.dev/owner-uid is missing"},
		{"another node's label", checked(), func(r *tenurev1alpha1.IPReservation) { r.Labels[LabelNode] = "node-a" }, `label ipam.tenure.dev/node="node-a" is not "node-b"`},
		{"a node label without owner node", checked(), func(r *tenurev1alpha1.IPReservation) { r.Spec.Owner.Node = "" }, "spec.owner.node is empty"},
		{"another block's label", checked(), func(r *tenurev1alpha1.IPReservation) {
			r.Labels[LabelBlock] = BlockLabel("san", false, netip.MustParsePrefix("10.0.1.0/32"))
		}, "label ipam.tenure.dev/block"},
		{"a summary that says IPAMClaim of a Pod-kind spec", checked(), func(r *tenurev1alpha1.IPReservation) {
			r.Annotations[AnnotationSpecSummary] = strings.Replace(r.Annotations[AnnotationSpecSummary], "kind=Pod", "kind=IPAMClaim", 1)
		}, "annotation ipam.tenure.dev/spec-summary"},
		{"a summary naming a live pod", checked(), func(r *tenurev1alpha1.IPReservation) {
			r.Annotations[AnnotationSpecSummary] = strings.Replace(r.Annotations[AnnotationSpecSummary], "name=p1", "name=live", 1)
		}, "annotation ipam.tenure.dev/spec-summary"},
		{"a summary without its range", checked(), func(r *tenurev1alpha1.IPReservation) {
			r.Annotations[AnnotationSpecSummary], _, _ = strings.Cut(r.Annotations[AnnotationSpecSummary], "&range=")
		}, "annotation ipam.tenure.dev/spec-summary"},
		{"the summary label without the annotation (opaque to the caches)", checked(), func(r *tenurev1alpha1.IPReservation) { delete(r.Annotations, AnnotationSpecSummary) }, ""},
		{"the summary label of another version", checked(), func(r *tenurev1alpha1.IPReservation) { r.Labels[LabelSpecSummary] = "v2" }, `="v2" is not "v1"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := tc.r.DeepCopy()
			tc.shape(r)
			err := Check(r)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("Check = %v; want nil", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("Check = %v; want an error with %q", err, tc.want)
			}
		})
	}
}

func TestCheckUpdateKeepsAStaleSummaryOnlyWithTheSpecChanged(t *testing.T) {
	old := checked()
	specChanged := old.DeepCopy()
	specChanged.Spec.Pool = "another-pool" // the summary left as it was: generation 2
	if err := CheckUpdate(old, specChanged); err != nil {
		t.Fatalf("a spec change leaving the summary: %v; want nil (the generation says it is stale)", err)
	}
	relabelled := old.DeepCopy()
	relabelled.Annotations[AnnotationSpecSummary] = strings.Replace(old.Annotations[AnnotationSpecSummary], "name=p1", "name=live", 1)
	if err := CheckUpdate(old, relabelled); err == nil || !strings.Contains(err.Error(), AnnotationSpecSummary) {
		t.Fatalf("a summary rewritten with the spec as it was: %v; want refused", err)
	}
	reowned := old.DeepCopy()
	reowned.Spec.Owner.UID = "uid-other"
	if err := CheckUpdate(old, reowned); err == nil || !strings.Contains(err.Error(), LabelOwnerUID) {
		t.Fatalf("an owner change leaving the owner label: %v; want refused", err)
	}
}
