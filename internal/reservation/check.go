package reservation

import (
	"fmt"
	"net/netip"

	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
)

// Check reports the first of r's name, labels and spec summary that is
// not what New makes of r's spec, naming the field, its value and the one
// the spec implies; nil when every one is. Readers act on these (the name
// is the lock, the labels select, the summary stands for the spec in a
// metadata-only cache), so one that disagrees with the spec would let its
// writer say one thing to the lock and another to the readers.
//
// The block label and the spec summary may be absent (a writer of a
// version that did not set them; readers then read the object whole, judge
// it on live reads alone, or watch its scope); present, they must be
// exact.
func Check(r *tenurev1alpha1.IPReservation) error {
	if err := checkNameOf(r); err != nil {
		return err
	}
	if err := checkLabelsOf(r); err != nil {
		return err
	}
	return checkSummaryOf(r)
}

// CheckUpdate is Check for an update of old to r, where a summary left
// as it was is no lie when the spec changed: the generation then rises
// above 1, and no reader trusts the summary of such an object.
func CheckUpdate(old, r *tenurev1alpha1.IPReservation) error {
	if err := checkNameOf(r); err != nil {
		return err
	}
	if err := checkLabelsOf(r); err != nil {
		return err
	}
	if old != nil && r.Annotations[AnnotationSpecSummary] == old.Annotations[AnnotationSpecSummary] &&
		r.Labels[LabelSpecSummary] == old.Labels[LabelSpecSummary] && EncodeSpecSummary(&old.Spec) != EncodeSpecSummary(&r.Spec) {
		return nil
	}
	return checkSummaryOf(r)
}

// itemOf is the item spec.address holds, in its canonical form for its
// kind.
func itemOf(spec *tenurev1alpha1.IPReservationSpec) (netip.Prefix, error) {
	item, err := ParseItem(spec.Address)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("spec.address %q: %v", spec.Address, err)
	}
	// Names unmap IPv4-mapped items: so does the canonical form, or the
	// name and spec.address would name one address two ways.
	canon := item
	if a := item.Addr(); a.Is4In6() && item.Bits() >= 96 {
		canon = netip.PrefixFrom(a.Unmap(), item.Bits()-96)
	}
	if want := ItemString(spec.Kind, canon); spec.Address != want {
		return netip.Prefix{}, fmt.Errorf("spec.address %q is not the canonical form %q of a %s reservation", spec.Address, want, spec.Kind)
	}
	return item, nil
}

func checkNameOf(r *tenurev1alpha1.IPReservation) error {
	item, err := itemOf(&r.Spec)
	if err != nil {
		return err
	}
	if want := Name(r.Spec.Network, r.Spec.Kind, item); r.Name != want {
		return fmt.Errorf("metadata.name %q is not %q, the name spec.network %q and spec.address %q imply", r.Name, want, r.Spec.Network, r.Spec.Address)
	}
	return nil
}

func checkLabelsOf(r *tenurev1alpha1.IPReservation) error {
	item, err := itemOf(&r.Spec)
	if err != nil {
		return err
	}
	scope := ScopeLabel(r.Spec.Network)
	want := map[string]string{LabelNetwork: scope, LabelOwnerUID: r.Spec.Owner.UID}
	if r.Spec.Owner.Node != "" {
		want[LabelNode] = NodeLabel(r.Spec.Owner.Node)
	}
	for _, k := range []string{LabelNetwork, LabelOwnerUID, LabelNode} {
		got, has := r.Labels[k]
		w, wanted := want[k]
		switch {
		case wanted && !has:
			return fmt.Errorf("label %s is missing; the spec implies %q", k, w)
		case !wanted && has:
			return fmt.Errorf("label %s=%q, but spec.owner.node is empty", k, got)
		case wanted && got != w:
			return fmt.Errorf("label %s=%q is not %q, what the spec implies", k, got, w)
		}
	}
	if got, has := r.Labels[LabelBlock]; has {
		if w := BlockLabel(scope, r.Spec.Kind == tenurev1alpha1.KindDelegatedPrefix, item); got != w {
			return fmt.Errorf("label %s=%q is not %q, the block of %s", LabelBlock, got, w, r.Spec.Address)
		}
	}
	return nil
}

func checkSummaryOf(r *tenurev1alpha1.IPReservation) error {
	label, labelled := r.Labels[LabelSpecSummary]
	summary, annotated := r.Annotations[AnnotationSpecSummary]
	switch {
	case labelled && label != SpecSummaryV1:
		return fmt.Errorf("label %s=%q is not %q", LabelSpecSummary, label, SpecSummaryV1)
	case annotated:
		if want := EncodeSpecSummary(&r.Spec); summary != want {
			return fmt.Errorf("annotation %s=%q is not %q, what the spec says", AnnotationSpecSummary, summary, want)
		}
	}
	return nil
}
