package ops

import (
	"context"
	"fmt"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	ipamclaimsv1alpha1 "github.com/tenure-ipam/tenure/api/ipamclaims/v1alpha1"
	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/claims"
	"github.com/tenure-ipam/tenure/internal/reservation"
)

// RulePrefixNotRecorded: an IPAMClaim holds a delegated prefix (its
// reservation) that its status.delegatedPrefixes does not record, while
// recording none; or the installed IPAMClaim CRD has no
// status.delegatedPrefixes, so the API server drops every record. The
// prefix is still served and routed from its reservation.
const RulePrefixNotRecorded = Rule("PrefixNotRecorded")

// ClaimCRDName is the IPAMClaim CustomResourceDefinition, which tenure
// ships with status.delegatedPrefixes and other components ship without.
const ClaimCRDName = "ipamclaims.k8s.cni.cncf.io"

// ClaimCRDFix is what to do when the installed IPAMClaim CRD lacks the
// field.
const ClaimCRDFix = "install tenure's IPAMClaim CRD over it: kubectl apply -f deploy/crds/k8s.cni.cncf.io_ipamclaims.yaml"

var crdGVK = schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"}

// CRDKeepsDelegatedPrefixes reports whether a CustomResourceDefinition (as
// unstructured) stores an IPAMClaim's status.delegatedPrefixes: every
// version it serves declares the field, or keeps unknown fields of status.
func CRDKeepsDelegatedPrefixes(crd *unstructured.Unstructured) bool {
	versions, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
	served := 0
	for _, v := range versions {
		vm, ok := v.(map[string]any)
		if !ok {
			continue
		}
		if s, _, _ := unstructured.NestedBool(vm, "served"); !s {
			continue
		}
		served++
		status, _, _ := unstructured.NestedMap(vm, "schema", "openAPIV3Schema", "properties", "status")
		if keep, _, _ := unstructured.NestedBool(status, "x-kubernetes-preserve-unknown-fields"); keep {
			continue
		}
		if _, ok, _ := unstructured.NestedMap(status, "properties", "delegatedPrefixes"); !ok {
			return false
		}
	}
	return served > 0
}

// claimCRD reads the IPAMClaim CRD: keeps is CRDKeepsDelegatedPrefixes,
// known false when it could not be read (note says why, "" when it does
// not exist).
func (c *Client) claimCRD(ctx context.Context) (keeps, known bool, note string) {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(crdGVK)
	if err := c.c.Get(ctx, types.NamespacedName{Name: ClaimCRDName}, u); err != nil {
		if apierrors.IsNotFound(err) {
			return false, false, ""
		}
		return false, false, fmt.Sprintf("CustomResourceDefinition %s: %v (whether it stores status.delegatedPrefixes was not checked)", ClaimCRDName, err)
	}
	return CRDKeepsDelegatedPrefixes(u), true, ""
}

// FindCRDDropsPrefixes is the finding on an installed IPAMClaim CRD that
// has no status.delegatedPrefixes.
func FindCRDDropsPrefixes(keeps, known bool) []Finding {
	if !known || keeps {
		return nil
	}
	return []Finding{{Rule: RulePrefixNotRecorded, Object: "CustomResourceDefinition " + ClaimCRDName,
		Message: "has no status.delegatedPrefixes (the upstream k8snetworkplumbingwg/ipamclaims schema): the API server drops the " +
			"delegated prefix of every IPAMClaim; the prefixes stay reserved and served from their IPReservations, unrecorded. Fix: " + ClaimCRDFix}}
}

// FindPrefixesNotRecorded reports each IPAMClaim (not being deleted) whose
// status.delegatedPrefixes is empty while a reservation of the claim holds
// a delegated prefix. crdDrops says the installed CRD has no such field,
// which is then named as the cause. A status that records other prefixes
// is RuleClaimMismatch's.
func FindPrefixesNotRecorded(cs []ipamclaimsv1alpha1.IPAMClaim, owned map[string][]*tenurev1alpha1.IPReservation, crdDrops bool) []Finding {
	var out []Finding
	for i := range cs {
		out = append(out, prefixesNotRecorded(&cs[i], owned[string(cs[i].UID)], crdDrops)...)
	}
	return out
}

func prefixesNotRecorded(c *ipamclaimsv1alpha1.IPAMClaim, owned []*tenurev1alpha1.IPReservation, crdDrops bool) []Finding {
	if c.DeletionTimestamp != nil || len(c.Status.DelegatedPrefixes) > 0 {
		return nil
	}
	cause := "the claim's next ADD records it"
	if crdDrops {
		cause = fmt.Sprintf("the installed CustomResourceDefinition %s has no status.delegatedPrefixes, so the API server drops it. Fix: %s", ClaimCRDName, ClaimCRDFix)
	}
	var out []Finding
	for _, r := range unrecordedPrefixes(owned) {
		out = append(out, Finding{Rule: RulePrefixNotRecorded, Object: claimObject(c.Namespace, c.Name), Network: c.Spec.Network, Address: r.Spec.Address,
			Message: fmt.Sprintf("reservation %s holds the delegated prefix %s for the claim, which status.delegatedPrefixes does not record "+
				"(it is served and routed from the reservation): %s", r.Name, r.Spec.Address, cause),
			Related: []string{reservationObject(r)}})
	}
	return out
}

// unrecordedPrefixes are the claim-owned delegated prefixes of owned, in
// name order.
func unrecordedPrefixes(owned []*tenurev1alpha1.IPReservation) []*tenurev1alpha1.IPReservation {
	var out []*tenurev1alpha1.IPReservation
	for _, r := range owned {
		if _, ok := itemOf(r); ok && r.Spec.Kind == tenurev1alpha1.KindDelegatedPrefix && r.Spec.Owner.Kind == tenurev1alpha1.OwnerIPAMClaim {
			out = append(out, r)
		}
	}
	slices.SortFunc(out, func(a, b *tenurev1alpha1.IPReservation) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// prefixFindings runs the PrefixNotRecorded rule: the CRD's schema, and
// each listed claim's record, confirmed by reading the claim and its
// reservations again (a claim's status is written after its reservations,
// so a claim listed mid-ADD is not reported).
func (c *Client) prefixFindings(ctx context.Context, cs []ipamclaimsv1alpha1.IPAMClaim, owned map[string][]*tenurev1alpha1.IPReservation) ([]Finding, []string, error) {
	keeps, known, note := c.claimCRD(ctx)
	var notes []string
	if note != "" {
		notes = append(notes, note)
	}
	crdDrops := known && !keeps
	out := FindCRDDropsPrefixes(keeps, known)
	for _, f := range FindPrefixesNotRecorded(cs, owned, crdDrops) {
		confirmed, err := c.confirmPrefixNotRecorded(ctx, f, crdDrops)
		if err != nil {
			return nil, nil, err
		}
		out = append(out, confirmed...)
	}
	return out, notes, nil
}

func (c *Client) confirmPrefixNotRecorded(ctx context.Context, f Finding, crdDrops bool) ([]Finding, error) {
	ns, name, _ := strings.Cut(strings.TrimPrefix(f.Object, "IPAMClaim "), "/")
	cl := &ipamclaimsv1alpha1.IPAMClaim{}
	if err := c.c.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, cl); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, err
	}
	rs, err := c.reservations(ctx, metav1.ListOptions{LabelSelector: reservation.LabelOwnerUID + "=" + string(cl.UID)})
	if err != nil {
		return nil, err
	}
	var again []Finding
	for _, g := range prefixesNotRecorded(cl, rs, crdDrops) {
		if g.Address == f.Address {
			again = append(again, g)
		}
	}
	return again, nil
}

// recordsNoPrefix reports whether a claim's status records no delegated
// prefix while r, one of its reservations, holds one: RulePrefixNotRecorded
// reports that, not RuleClaimMismatch.
func recordsNoPrefix(rec claims.Recorded, r *tenurev1alpha1.IPReservation) bool {
	return len(rec.Prefixes) == 0 && r.Spec.Kind == tenurev1alpha1.KindDelegatedPrefix
}
