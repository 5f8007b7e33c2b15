package claims

import (
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ipamclaimsv1alpha1 "github.com/tenure-ipam/tenure/api/ipamclaims/v1alpha1"
)

// ReleaseFinalizer is tenure's own finalizer on a claim that records items:
// the claim is not removed before the controller has released them.
const ReleaseFinalizer = "ipam.tenure.dev/release"

// The condition the controller sets on a claim being deleted whose items
// it keeps, because another finalizer still holds the claim.
const (
	ConditionReleased          = "Released"
	ReasonWaitingForFinalizers = "WaitingForFinalizers"
)

// OtherFinalizers are the claim's finalizers other than tenure's own, in the
// order the claim lists them. While one remains on a claim being deleted,
// whoever set it still uses the claim: KubeVirt's ipam-extensions removes
// kubevirt.io/persistent-ipam only once the VM's VMI is gone, and the
// garbage collector's foregroundDeletion and orphan once it has dealt with
// the claim's dependents.
func OtherFinalizers(c *ipamclaimsv1alpha1.IPAMClaim) []string {
	var out []string
	for _, f := range c.Finalizers {
		if f != ReleaseFinalizer {
			out = append(out, f)
		}
	}
	return out
}

// Held reports whether the claim keeps its items: it is not being deleted,
// or it is and a finalizer other than tenure's remains (see
// OtherFinalizers). A held claim keeps serving ADD, so a migration target or
// a restart of the VM still using it gets its addresses and prefix; once
// only tenure's finalizer is left (or the claim is gone), its items are
// released.
func Held(c *ipamclaimsv1alpha1.IPAMClaim) bool {
	return c.DeletionTimestamp == nil || len(OtherFinalizers(c)) > 0
}

// DeletionMessage says, for a claim being deleted, what the release of items
// (addresses and prefixes, as a reservation's spec.address writes them)
// waits for. The condition, the controller's log and `tenurectl why` say it
// in these words.
func DeletionMessage(c *ipamclaimsv1alpha1.IPAMClaim, items []string) string {
	what := "what it holds"
	if len(items) > 0 {
		items = slices.Clone(items)
		slices.Sort(items)
		what = strings.Join(items, ", ")
	}
	others := OtherFinalizers(c)
	switch len(others) {
	case 0:
		return fmt.Sprintf("claim is being deleted; no finalizer but %s is left, so the controller releases %s", ReleaseFinalizer, what)
	case 1:
		return fmt.Sprintf("claim is being deleted; waiting for finalizer %s before releasing %s", others[0], what)
	}
	return fmt.Sprintf("claim is being deleted; waiting for finalizers %s before releasing %s", strings.Join(others, ", "), what)
}

// SetWaitingCondition sets Released=False (WaitingForFinalizers) on a claim
// being deleted that another finalizer holds; it reports whether anything
// changed.
func SetWaitingCondition(c *ipamclaimsv1alpha1.IPAMClaim, items []string) bool {
	return meta.SetStatusCondition(&c.Status.Conditions, metav1.Condition{
		Type: ConditionReleased, Status: metav1.ConditionFalse, Reason: ReasonWaitingForFinalizers,
		Message: DeletionMessage(c, items), ObservedGeneration: c.Generation,
	})
}
