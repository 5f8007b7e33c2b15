package claims

import (
	"net/netip"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ipamclaimsv1alpha1 "github.com/tenure-ipam/tenure/api/ipamclaims/v1alpha1"
)

// Recorded is what a claim's status says it holds.
type Recorded struct {
	Addresses []netip.Prefix // address with its subnet length, as status.ips writes it
	Prefixes  []netip.Prefix
}

// Empty reports whether the claim holds nothing yet.
func (r Recorded) Empty() bool { return len(r.Addresses) == 0 && len(r.Prefixes) == 0 }

// ParseStatus reads status.ips (CIDR, or a bare IP as some writers use) and
// status.delegatedPrefixes. Entries that do not parse are returned as bad.
func ParseStatus(st ipamclaimsv1alpha1.IPAMClaimStatus) (rec Recorded, bad []string) {
	for _, s := range st.IPs {
		if p, err := netip.ParsePrefix(s); err == nil {
			rec.Addresses = append(rec.Addresses, p)
		} else if a, err := netip.ParseAddr(s); err == nil {
			rec.Addresses = append(rec.Addresses, netip.PrefixFrom(a, a.BitLen()))
		} else {
			bad = append(bad, "status.ips: "+s)
		}
	}
	for _, s := range st.DelegatedPrefixes {
		if p, err := netip.ParsePrefix(s); err == nil && p == p.Masked() {
			rec.Prefixes = append(rec.Prefixes, p)
		} else {
			bad = append(bad, "status.delegatedPrefixes: "+s)
		}
	}
	return rec, bad
}

// SetCondition sets IPsAllocated; it reports whether anything changed.
func SetCondition(c *ipamclaimsv1alpha1.IPAMClaim, ok bool, reason, message string) bool {
	status := metav1.ConditionTrue
	if !ok {
		status = metav1.ConditionFalse
	}
	return meta.SetStatusCondition(&c.Status.Conditions, metav1.Condition{
		Type: ipamclaimsv1alpha1.ConditionIPsAllocated, Status: status, Reason: reason,
		Message: message, ObservedGeneration: c.Generation,
	})
}

// Key is namespace/name of a claim.
func Key(c *ipamclaimsv1alpha1.IPAMClaim) string { return c.Namespace + "/" + c.Name }
