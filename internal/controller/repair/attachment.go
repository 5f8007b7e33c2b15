package repair

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"

	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/claims"
	"github.com/tenure-ipam/tenure/internal/reservation"
)

// DuplicateGrace is how long after the newest of an attachment's
// duplicate reservations was made the DuplicateAttachment rule waits for
// the pod's network-status to say which one the pod uses, before it falls
// back to keeping the newest. The ADD that made it runs inside the
// runtime's RunPodSandbox, which the kubelet gives up on after its
// runtime-request-timeout (2 minutes by default); Multus writes
// network-status when that ADD returns.
const DuplicateGrace = 2 * time.Minute

// NetworkStatus is what a pod's k8s.v1.cni.cncf.io/network-status
// annotation (written by Multus after each sandbox's ADD) lists: the IPs of
// each interface.
type NetworkStatus struct {
	// Present: the pod has the annotation.
	Present bool
	// Err says why the annotation does not parse; what it lists is then
	// unknown.
	Err error
	// IPs by interface name.
	IPs map[string][]netip.Addr
}

// NetworkStatusOf reads the annotation from a pod's annotations.
func NetworkStatusOf(annotations map[string]string) *NetworkStatus {
	s, ok := annotations[nadv1.NetworkStatusAnnot]
	if !ok {
		return &NetworkStatus{}
	}
	ns := &NetworkStatus{Present: true, IPs: map[string][]netip.Addr{}}
	var entries []nadv1.NetworkStatus
	if err := json.Unmarshal([]byte(s), &entries); err != nil {
		ns.Err = fmt.Errorf("annotation %s: %w", nadv1.NetworkStatusAnnot, err)
		return ns
	}
	for _, e := range entries {
		for _, ip := range e.IPs {
			p, err := reservation.ParseItem(ip)
			if err != nil {
				ns.Err = fmt.Errorf("annotation %s: interface %q: ip %q does not parse", nadv1.NetworkStatusAnnot, e.Interface, ip)
				return ns
			}
			ns.IPs[e.Interface] = append(ns.IPs[e.Interface], p.Addr().Unmap())
		}
	}
	return ns
}

// lists reports whether the pod's network-status lists r's address on r's
// interface. A delegated prefix is never listed.
func (ns *NetworkStatus) lists(r *tenurev1alpha1.IPReservation) bool {
	if r.Spec.Kind != tenurev1alpha1.KindAddress {
		return false
	}
	a, err := netip.ParseAddr(r.Spec.Address)
	return err == nil && slices.Contains(ns.IPs[r.Spec.Owner.Interface], a.Unmap())
}

// recordedBy parses a claim's status into what ClaimFact keeps.
func recordedBy(st claims.Recorded, bad []string) ([]netip.Prefix, string) {
	var items []netip.Prefix
	for _, p := range st.Addresses {
		a := p.Addr().Unmap()
		items = append(items, netip.PrefixFrom(a, a.BitLen()))
	}
	items = append(items, st.Prefixes...)
	return items, strings.Join(bad, ", ")
}

// records reports whether the claim's status records r's item.
func (c *ClaimFact) records(r *tenurev1alpha1.IPReservation) bool {
	p, err := reservation.ParseItem(r.Spec.Address)
	if err != nil {
		return false
	}
	if r.Spec.Kind == tenurev1alpha1.KindAddress {
		a := p.Addr().Unmap()
		p = netip.PrefixFrom(a, a.BitLen())
	}
	return slices.Contains(c.Recorded, p.Masked())
}

// sameAttachmentSlot reports whether b fills the same slot as a for the
// same holder: for a pod, the same pod UID, sandbox (containerID),
// interface, network, kind, family and range; for a claim, the same claim
// UID, network, kind, family and range. The range tells apart the addresses
// of a configuration with two ranges of one family, one from each.
func sameAttachmentSlot(a, b *tenurev1alpha1.IPReservation) bool {
	oa, ob := a.Spec.Owner, b.Spec.Owner
	if oa.Kind != ob.Kind || oa.UID != ob.UID || a.Spec.Network != b.Spec.Network || a.Spec.Kind != b.Spec.Kind ||
		a.Spec.Range != b.Spec.Range || family(a) == 0 || family(a) != family(b) {
		return false
	}
	switch oa.Kind {
	case tenurev1alpha1.OwnerPod:
		return oa.ContainerID != "" && oa.ContainerID == ob.ContainerID && oa.Interface == ob.Interface
	case tenurev1alpha1.OwnerIPAMClaim:
		return true
	}
	return false
}

// Duplicates returns the reservations among siblings that fill r's slot of the
// same attachment (sameAttachmentSlot), r included, sorted by name; r alone
// when it has none.
func Duplicates(r *tenurev1alpha1.IPReservation, siblings []*tenurev1alpha1.IPReservation) []*tenurev1alpha1.IPReservation {
	out := []*tenurev1alpha1.IPReservation{r}
	for _, s := range siblings {
		if s != nil && s.Name != r.Name && sameAttachmentSlot(r, s) && !slices.ContainsFunc(out, func(o *tenurev1alpha1.IPReservation) bool { return o.Name == s.Name }) {
			out = append(out, s)
		}
	}
	slices.SortFunc(out, func(a, b *tenurev1alpha1.IPReservation) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// NeedsClaimSiblings reports whether Decide consults Facts.Siblings for a
// claim-owned r given its claim: only while the claim with the owner's UID
// exists and is not being deleted.
func NeedsClaimSiblings(r *tenurev1alpha1.IPReservation, c *ClaimFact) bool {
	o := r.Spec.Owner
	return o.Kind == tenurev1alpha1.OwnerIPAMClaim && c != nil && c.Exists && c.UID == o.UID && !c.Deleting
}

// duplicatesText lists a group as "ADDRESS (reservation NAME), ...".
func duplicatesText(group []*tenurev1alpha1.IPReservation) string {
	parts := make([]string, len(group))
	for i, g := range group {
		parts[i] = fmt.Sprintf("%s (reservation %s)", g.Spec.Address, g.Name)
	}
	return strings.Join(parts, " and ")
}

// familyText is "IPv4 address" or "IPv6 delegated prefix", plural for
// n > 1.
func familyText(r *tenurev1alpha1.IPReservation, n int) string {
	kind, kinds := "address", "addresses"
	if r.Spec.Kind == tenurev1alpha1.KindDelegatedPrefix {
		kind, kinds = "delegated prefix", "delegated prefixes"
	}
	if n > 1 {
		kind = kinds
	}
	return fmt.Sprintf("IPv%d %s", family(r), kind)
}

// duplicatePod applies DuplicateAttachment to a pod-owned r whose pod
// exists with the owner's UID and whose siblings are known. ok is false
// when r's attachment holds nothing else in r's slot.
//
// Of an attachment's reservations in one slot it keeps those the pod's
// network-status lists for the interface; when it lists none of them, the
// newest (Newer), once DuplicateGrace has passed since it was made.
// Without network-status facts (a cache does not keep them) it keeps r and
// asks for the live read.
func duplicatePod(r *tenurev1alpha1.IPReservation, f Facts, evidence []*tenurev1alpha1.IPReservation) (Decision, bool) {
	group := Duplicates(r, evidence)
	if len(group) < 2 {
		return Decision{}, false
	}
	o := r.Spec.Owner
	what := fmt.Sprintf("pod %s/%s interface %s (sandbox %s) holds %d %s of network %s range %s: %s",
		o.Namespace, o.Name, o.Interface, short(o.ContainerID), len(group), familyText(r, len(group)), r.Spec.Network, r.Spec.Range, duplicatesText(group))
	ns := f.NetworkStatus
	switch {
	case ns == nil:
		d := keep("%s; which one the pod uses is for a live read of its network-status to say", what)
		d.AskLive = true
		return d, true
	case ns.Err != nil:
		return keep("%s; which one the pod uses is unknown: %v", what, ns.Err), true
	}
	var listed []*tenurev1alpha1.IPReservation
	for _, g := range group {
		if ns.lists(g) {
			listed = append(listed, g)
		}
	}
	if slices.Contains(listed, r) {
		return keep("%s; its network-status lists %s, which it uses", what, r.Spec.Address), true
	}
	if len(listed) > 0 {
		return release(DuplicateAttachment, "%s; its network-status lists %s (reservation %s) for %s, so this one is a second %s of one attachment",
			what, listed[0].Spec.Address, listed[0].Name, o.Interface, familyText(r, 1)), true
	}
	newest := r
	for _, g := range group {
		if Newer(g, newest) {
			newest = g
		}
	}
	why := "its network-status lists none of them"
	if !ns.Present {
		why = "it has no network-status"
	}
	if newest == r {
		return keep("%s; %s: this, the newest, is kept", what, why), true
	}
	if age := f.Now.Sub(newest.CreationTimestamp.Time); age < DuplicateGrace {
		d := keep("%s; %s yet: the newest, %s, is kept, and the rest once %s have passed since it was made", what, why, newest.Name, DuplicateGrace)
		d.RecheckAfter = DuplicateGrace - age
		return d, true
	}
	return release(DuplicateAttachment, "%s; %s: the newest, %s (reservation %s), is kept", what, why, newest.Spec.Address, newest.Name), true
}

// duplicateClaim applies DuplicateAttachment to a claim-owned r whose claim
// exists (same UID, not being deleted) and whose siblings are known: of the
// claim's reservations in one slot, it keeps those its status records, and
// all of them while it records none (the ADD that records one, or adopts
// one, decides; the rest are surplus then).
func duplicateClaim(r *tenurev1alpha1.IPReservation, f Facts) (Decision, bool) {
	if !f.SiblingsKnown || !NeedsClaimSiblings(r, f.Claim) {
		return Decision{}, false
	}
	group := Duplicates(r, f.Siblings)
	if len(group) < 2 {
		return Decision{}, false
	}
	o, c := r.Spec.Owner, f.Claim
	what := fmt.Sprintf("IPAMClaim %s/%s holds %d %s of network %s range %s: %s",
		o.Namespace, o.Name, len(group), familyText(r, len(group)), r.Spec.Network, r.Spec.Range, duplicatesText(group))
	if c.Unreadable != "" {
		return keep("%s; which one it records is unknown: its status does not parse (%s)", what, c.Unreadable), true
	}
	var recorded []*tenurev1alpha1.IPReservation
	for _, g := range group {
		if c.records(g) {
			recorded = append(recorded, g)
		}
	}
	switch {
	case slices.Contains(recorded, r):
		return keep("%s; its status records %s", what, r.Spec.Address), true
	case len(recorded) > 0:
		return release(DuplicateAttachment, "%s; its status records %s (reservation %s), so this one is a second %s of the claim",
			what, recorded[0].Spec.Address, recorded[0].Name, familyText(r, 1)), true
	}
	return keep("%s; its status records none of them yet: the ADD that records one decides", what), true
}
