package ops

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	ipamclaimsv1alpha1 "github.com/tenure-ipam/tenure/api/ipamclaims/v1alpha1"
	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/addrspace"
	"github.com/tenure-ipam/tenure/internal/claims"
	"github.com/tenure-ipam/tenure/internal/controller/repair"
	"github.com/tenure-ipam/tenure/internal/inventory"
	"github.com/tenure-ipam/tenure/internal/reservation"
)

// Rule names one kind of problem Check finds.
type Rule string

// The rules, in the order Check reports them.
const (
	// RuleDuplicate: one address or prefix held by more than one
	// reservation in the same allocation scope.
	RuleDuplicate = Rule("Duplicate")
	// RuleOverlap: an address or prefix inside a delegated prefix held by
	// another reservation of the same scope.
	RuleOverlap = Rule("Overlap")
	// RuleOwnerGone: the pod or claim that holds a reservation is gone, by
	// the controller's own rules (repair.Decide).
	RuleOwnerGone = Rule("OwnerGone")
	// RuleDuplicateAttachment: one attachment of a live pod (or one live
	// claim) holds two reservations of one slot: the same network, kind,
	// address family and range (repair's DuplicateAttachment).
	RuleDuplicateAttachment = Rule("DuplicateAttachment")
	// RuleClaimMismatch: an IPAMClaim's status and the reservations it owns
	// disagree.
	RuleClaimMismatch = Rule("ClaimMismatch")
	// RuleOutsideRange: a reservation's item is not assignable in any
	// configured range of its scope.
	RuleOutsideRange = Rule("OutsideRange")
	// RuleMalformed: a reservation whose address does not parse or whose
	// name is not the one derived from its network and address (the name is
	// the lock, so such an object does not lock what it holds).
	RuleMalformed = Rule("Malformed")
)

var ruleOrder = []Rule{RuleIPPoolSchemaStale, RuleDuplicate, RuleOverlap, RuleOwnerGone, RuleDuplicateAttachment, RuleClaimMismatch, RulePrefixNotRecorded, RuleOutsideRange, RuleMalformed, RuleAddressConflict, RuleAddressAnswers}

// Finding is one problem.
type Finding struct {
	Rule Rule `json:"rule"`
	// Object is what the problem is about: "IPReservation NAME" or
	// "IPAMClaim NAMESPACE/NAME".
	Object  string `json:"object"`
	Network string `json:"network,omitempty"`
	Address string `json:"address,omitempty"`
	Message string `json:"message"`
	// Related are the other objects involved, named as Object is.
	Related []string `json:"related,omitempty"`
}

func reservationObject(r *tenurev1alpha1.IPReservation) string { return "IPReservation " + r.Name }

func claimObject(namespace, name string) string { return "IPAMClaim " + namespace + "/" + name }

// ownerText names a reservation's owner for messages: "pod ns/name" or
// "IPAMClaim ns/name".
func ownerText(o tenurev1alpha1.ReservationOwner) string {
	if o.Kind == tenurev1alpha1.OwnerAdministrator {
		return "administrator " + o.Name + " (set aside)"
	}
	kind := "pod"
	if o.Kind == tenurev1alpha1.OwnerIPAMClaim {
		kind = "IPAMClaim"
	}
	return kind + " " + o.Namespace + "/" + o.Name
}

// itemOf parses spec.address; ok is false when it does not parse or does
// not fit spec.kind.
func itemOf(r *tenurev1alpha1.IPReservation) (netip.Prefix, bool) {
	p, err := reservation.ParseItem(r.Spec.Address)
	if err != nil || p.Addr().Zone() != "" {
		return netip.Prefix{}, false
	}
	isCIDR := strings.Contains(r.Spec.Address, "/")
	if (r.Spec.Kind == tenurev1alpha1.KindDelegatedPrefix) != isCIDR {
		return netip.Prefix{}, false
	}
	return p, true
}

// sameScope reports whether two scopes must never hold one address twice:
// the same scope, or one network_name's shared scope and one of its
// per-range scopes (two configurations of one network that disagree on
// enable_overlapping_ranges; the one that keeps it on promises that no
// overlapping range hands out its addresses). Two per-range scopes are
// independent by configuration.
func sameScope(a, b string) bool {
	return a == b || (reservation.NetworkNameOf(a) == reservation.NetworkNameOf(b) && (a == reservation.NetworkNameOf(a) || b == reservation.NetworkNameOf(b)))
}

// FindMalformed reports reservations whose address does not parse, does
// not fit their kind, is a prefix with host bits set, or whose name is not
// reservation.Name of their network and address.
func FindMalformed(rs []*tenurev1alpha1.IPReservation, shapes map[string]error) []Finding {
	var out []Finding
	for _, r := range rs {
		f := Finding{Rule: RuleMalformed, Object: reservationObject(r), Network: r.Spec.Network, Address: r.Spec.Address}
		item, ok := itemOf(r)
		switch {
		case !ok:
			f.Message = fmt.Sprintf("spec.address %q is not a valid %s", r.Spec.Address, kindText(r.Spec.Kind))
		case item != item.Masked():
			f.Message = fmt.Sprintf("delegated prefix %s has host bits set (%s)", r.Spec.Address, item.Masked())
		case r.Name != reservation.Name(r.Spec.Network, r.Spec.Kind, item):
			f.Message = fmt.Sprintf("the name is not %s, the one derived from its network and address: it does not lock %s, so another reservation can hold it",
				reservation.Name(r.Spec.Network, r.Spec.Kind, item), r.Spec.Address)
		case shapes[r.Name] != nil:
			// Labels and summary: what readers act on without the spec.
			f.Message = fmt.Sprintf("%v: readers that select by labels or read the summary (the controller's caches, the agents) are told other than the spec says", shapes[r.Name])
		default:
			continue
		}
		out = append(out, f)
	}
	return out
}

func kindText(k tenurev1alpha1.ReservationKind) string {
	if k == tenurev1alpha1.KindDelegatedPrefix {
		return "CIDR for a DelegatedPrefix reservation"
	}
	return "IP for an Address reservation"
}

// held is a parsed reservation.
type held struct {
	r    *tenurev1alpha1.IPReservation
	item netip.Prefix
}

func parsedItems(rs []*tenurev1alpha1.IPReservation) []held {
	out := make([]held, 0, len(rs))
	for _, r := range rs {
		if item, ok := itemOf(r); ok {
			out = append(out, held{r, item.Masked()})
		}
	}
	return out
}

func holderText(h held) string {
	return fmt.Sprintf("%s (reservation %s, network %s)", ownerText(h.r.Spec.Owner), h.r.Name, h.r.Spec.Network)
}

// FindDuplicates reports every address or prefix held by more than one
// reservation of the same scope (sameScope): one finding per item, on its
// first holder by name, naming the others.
func FindDuplicates(rs []*tenurev1alpha1.IPReservation) []Finding {
	type key struct {
		name string
		item netip.Prefix
	}
	groups := map[key][]held{}
	for _, h := range parsedItems(rs) {
		k := key{reservation.NetworkNameOf(h.r.Spec.Network), h.item}
		groups[k] = append(groups[k], h)
	}
	var out []Finding
	for _, g := range groups {
		if len(g) < 2 {
			continue
		}
		slices.SortFunc(g, func(a, b held) int { return cmp.Compare(a.r.Name, b.r.Name) })
		var dup []held
		for i, a := range g {
			for j, b := range g {
				if i != j && sameScope(a.r.Spec.Network, b.r.Spec.Network) {
					dup = append(dup, a)
					break
				}
			}
		}
		if len(dup) < 2 {
			continue
		}
		f := Finding{Rule: RuleDuplicate, Object: reservationObject(dup[0].r), Network: dup[0].r.Spec.Network, Address: dup[0].r.Spec.Address}
		texts := make([]string, len(dup))
		for i, h := range dup {
			texts[i] = holderText(h)
			if i > 0 {
				f.Related = append(f.Related, reservationObject(h.r))
			}
		}
		f.Message = fmt.Sprintf("%s is held %d times: by %s", dup[0].r.Spec.Address, len(dup), strings.Join(texts, ", by "))
		out = append(out, f)
	}
	return out
}

// FindOverlaps reports every address or prefix that lies inside a
// different delegated prefix held in the same scope (sameScope), naming the
// innermost such prefix. Equal items are duplicates, not overlaps.
func FindOverlaps(rs []*tenurev1alpha1.IPReservation) []Finding {
	type key struct {
		name string
		is4  bool
	}
	groups := map[key][]held{}
	for _, h := range parsedItems(rs) {
		k := key{reservation.NetworkNameOf(h.r.Spec.Network), h.item.Addr().Is4()}
		groups[k] = append(groups[k], h)
	}
	var out []Finding
	for _, g := range groups {
		// By first address, a containing prefix before what it contains:
		// prefixes are nested or disjoint, so a stack of the open ones
		// holds every prefix that contains the current item.
		slices.SortFunc(g, func(a, b held) int {
			if c := a.item.Addr().Compare(b.item.Addr()); c != 0 {
				return c
			}
			return cmp.Compare(a.item.Bits(), b.item.Bits())
		})
		var open []held
		for _, h := range g {
			for len(open) > 0 && !open[len(open)-1].item.Contains(h.item.Addr()) {
				open = open[:len(open)-1]
			}
			for i := len(open) - 1; i >= 0; i-- {
				o := open[i]
				if o.item != h.item && sameScope(o.r.Spec.Network, h.r.Spec.Network) {
					out = append(out, Finding{
						Rule: RuleOverlap, Object: reservationObject(h.r), Network: h.r.Spec.Network, Address: h.r.Spec.Address,
						Message: fmt.Sprintf("%s, held by %s, lies inside delegated prefix %s, held by %s",
							h.r.Spec.Address, holderText(h), o.r.Spec.Address, holderText(o)),
						Related: []string{reservationObject(o.r)},
					})
					break
				}
			}
			if h.item.Bits() < h.item.Addr().BitLen() {
				open = append(open, h)
			}
		}
	}
	return out
}

// OwnerFacts is what is known of every owner, from full lists: a missing
// entry is an object that does not exist.
type OwnerFacts struct {
	Pods   map[string]*repair.PodFact   // by "namespace/name"
	Claims map[string]*repair.ClaimFact // by "namespace/name"
	Nodes  map[string]*repair.NodeFact  // by name
	// ByOwner holds every reservation by spec.owner.uid.
	ByOwner map[string][]*tenurev1alpha1.IPReservation
	// NetworkStatus of pods (by "namespace/name"), for those whose
	// attachments hold two reservations of one slot; a pod missing here
	// has none known.
	NetworkStatus map[string]*repair.NetworkStatus
	// Probes are the IPProbes by name (the name of the reservation each is
	// about): what other nodes' agents heard of an address that
	// NodeNotReady would release. A reservation missing here has none.
	Probes map[string]*tenurev1alpha1.IPProbe
}

// wire is r's Wire fact from its IPProbe: the answering nodes' readiness
// from Nodes.
func (f OwnerFacts) wire(r *tenurev1alpha1.IPReservation) *repair.WireFact {
	return repair.WireFactOf(r, f.Probes[r.Name], func(node string) bool {
		n := f.Nodes[node]
		return n != nil && n.Exists && n.Ready
	})
}

// Facts are the facts repair.Decide needs for r.
func (f OwnerFacts) Facts(r *tenurev1alpha1.IPReservation, now time.Time) repair.Facts {
	o := r.Spec.Owner
	key := o.Namespace + "/" + o.Name
	facts := repair.Facts{Now: now}
	switch o.Kind {
	case tenurev1alpha1.OwnerPod:
		facts.Pod = orAbsent(f.Pods[key])
		facts.NetworkStatus = f.NetworkStatus[key]
		if repair.NeedsSiblings(r, facts.Pod) {
			facts.Siblings, facts.SiblingsKnown = f.ByOwner[o.UID], true
		}
		if repair.NeedsNode(r, facts.Pod) {
			facts.Node = orAbsent(f.Nodes[o.Node])
			facts.Wire = f.wire(r)
		}
	case tenurev1alpha1.OwnerIPAMClaim:
		facts.Claim = orAbsent(f.Claims[key])
		if repair.NeedsClaimSiblings(r, facts.Claim) {
			facts.Siblings, facts.SiblingsKnown = f.ByOwner[o.UID], true
		}
	}
	return facts
}

// HasDuplicates reports whether r's owner holds another reservation in r's slot
// of the same attachment (repair.Duplicates): what DuplicateAttachment is about.
func (f OwnerFacts) HasDuplicates(r *tenurev1alpha1.IPReservation) bool {
	sib := f.ByOwner[r.Spec.Owner.UID]
	return len(sib) > 1 && len(repair.Duplicates(r, sib)) > 1
}

// orAbsent is the fact of an object that was not listed: it does not exist.
func orAbsent[T any](fact *T) *T {
	if fact == nil {
		return new(T)
	}
	return fact
}

// FindOwnersGone reports the reservations the controller would release
// because their owner is gone: repair.Decide over facts, with the
// controller's policy. A surplus reservation of a live owner is
// FindDuplicateAttachments'.
func FindOwnersGone(rs []*tenurev1alpha1.IPReservation, facts OwnerFacts, p repair.Policy, now time.Time) []Finding {
	var out []Finding
	for _, r := range rs {
		d := repair.Decide(r, facts.Facts(r, now), p)
		if !d.Release || d.Reason == repair.DuplicateAttachment {
			continue
		}
		out = append(out, Finding{
			Rule: RuleOwnerGone, Object: reservationObject(r), Network: r.Spec.Network, Address: r.Spec.Address,
			Message: fmt.Sprintf("%s (%s): the controller releases it", d.Message, d.Reason),
		})
	}
	return out
}

// FindDuplicateAttachments reports every slot of a live attachment (pod
// UID, sandbox, interface) or claim that holds more than one reservation of
// one network, kind, family and range: one finding per reservation the
// controller releases as surplus (repair.Decide's DuplicateAttachment),
// naming the holder and the reservations of the slot; one finding on the
// first by name when it releases none of them yet (it waits for the pod's
// network-status, DuplicateGrace, or the claim's status). A holder that
// is gone is FindOwnersGone's.
func FindDuplicateAttachments(rs []*tenurev1alpha1.IPReservation, facts OwnerFacts, p repair.Policy, now time.Time) []Finding {
	var out []Finding
	seen := map[string]bool{}
	for _, r := range rs {
		if seen[r.Name] || !facts.HasDuplicates(r) {
			continue
		}
		group := repair.Duplicates(r, facts.ByOwner[r.Spec.Owner.UID])
		var findings []Finding
		var first repair.Decision
		for i, g := range group {
			seen[g.Name] = true
			d := repair.Decide(g, facts.Facts(g, now), p)
			if i == 0 {
				first = d
			}
			if d.Release && d.Reason != repair.DuplicateAttachment {
				findings = nil // the holder is gone: FindOwnersGone reports it
				break
			}
			if d.Release {
				findings = append(findings, duplicateAttachmentFinding(g, group, d.Message+": the controller releases it"))
			}
		}
		if len(findings) == 0 && !first.Release && !first.AskLive {
			findings = append(findings, duplicateAttachmentFinding(group[0], group, first.Message+"; the controller releases none of them yet"))
		}
		out = append(out, findings...)
	}
	return out
}

func duplicateAttachmentFinding(r *tenurev1alpha1.IPReservation, group []*tenurev1alpha1.IPReservation, msg string) Finding {
	f := Finding{Rule: RuleDuplicateAttachment, Object: reservationObject(r), Network: r.Spec.Network, Address: r.Spec.Address, Message: msg}
	for _, g := range group {
		if g.Name != r.Name {
			f.Related = append(f.Related, reservationObject(g))
		}
	}
	return f
}

// FindClaimMismatches compares each IPAMClaim's status.ips and
// status.delegatedPrefixes with the reservations it owns (owned, by owner
// UID): an item recorded that no reservation of the claim holds, a
// reservation of the claim its status does not record, and entries that do
// not parse. byItem names other holders in messages. Claims being deleted
// that nothing but tenure's finalizer holds are the controller's (their
// reservations are OwnerGone).
func FindClaimMismatches(cs []ipamclaimsv1alpha1.IPAMClaim, owned map[string][]*tenurev1alpha1.IPReservation, byItem map[netip.Prefix][]*tenurev1alpha1.IPReservation) []Finding {
	var out []Finding
	for i := range cs {
		out = append(out, claimMismatches(&cs[i], owned[string(cs[i].UID)], byItem)...)
	}
	return out
}

func claimMismatches(c *ipamclaimsv1alpha1.IPAMClaim, owned []*tenurev1alpha1.IPReservation, byItem map[netip.Prefix][]*tenurev1alpha1.IPReservation) []Finding {
	if !claims.Held(c) {
		return nil
	}
	finding := func(address, format string, args ...any) Finding {
		return Finding{Rule: RuleClaimMismatch, Object: claimObject(c.Namespace, c.Name), Network: c.Spec.Network, Address: address, Message: fmt.Sprintf(format, args...)}
	}
	rec, bad := claims.ParseStatus(c.Status)
	var out []Finding
	for _, b := range bad {
		out = append(out, finding("", "unparsable %s", b))
	}
	mine := map[netip.Prefix]*tenurev1alpha1.IPReservation{}
	for _, r := range owned {
		if item, ok := itemOf(r); ok && r.Spec.Owner.Kind == tenurev1alpha1.OwnerIPAMClaim {
			mine[item.Masked()] = r
		}
	}
	recorded := map[netip.Prefix]bool{}
	check := func(field string, written, item netip.Prefix) {
		recorded[item] = true
		if mine[item] != nil {
			return
		}
		holders := "nobody holds it"
		var related []string
		for _, r := range byItem[item] {
			holders = fmt.Sprintf("it is held by %s (reservation %s)", ownerText(r.Spec.Owner), r.Name)
			related = append(related, reservationObject(r))
		}
		f := finding(written.String(), "%s records %s but no reservation of the claim holds it: %s", field, written, holders)
		f.Related = related
		out = append(out, f)
	}
	for _, p := range rec.Addresses {
		a := p.Addr().Unmap()
		check("status.ips", p, netip.PrefixFrom(a, a.BitLen()))
	}
	for _, p := range rec.Prefixes {
		check("status.delegatedPrefixes", p, p.Masked())
	}
	for item, r := range mine {
		if !recorded[item] && !recordsNoPrefix(rec, r) {
			f := finding(r.Spec.Address, "reservation %s holds %s for the claim but its status does not record it", r.Name, r.Spec.Address)
			f.Related = []string{reservationObject(r)}
			out = append(out, f)
		}
	}
	return out
}

// FindOutsideRanges reports reservations whose item no known space of
// their scope can hand out (out of bounds, excluded, or of another
// prefix length). A scope no configuration describes is judged by the range
// the reservation records (without its excludes, which are not recorded).
// unchecked counts the reservations with neither.
func FindOutsideRanges(rs []*tenurev1alpha1.IPReservation, inv *inventory.Inventory) (out []Finding, unchecked int) {
	recorded := map[string]addrspace.Space{} // inventory.SpaceOfRange by kind and range, parsed once
	for _, h := range parsedItems(rs) {
		r := h.r
		spaces := inv.InScope(r.Spec.Network, r.Spec.Kind)
		if len(spaces) > 0 {
			if slices.ContainsFunc(spaces, func(s *inventory.Entry) bool { return s.Space.Contains(h.item) }) {
				continue
			}
			descs := make([]string, len(spaces))
			for i, s := range spaces {
				descs[i] = fmt.Sprintf("%s (%s)", s.Space.String(), strings.Join(s.Sources, ", "))
			}
			out = append(out, Finding{
				Rule: RuleOutsideRange, Object: reservationObject(r), Network: r.Spec.Network, Address: r.Spec.Address,
				Message: fmt.Sprintf("%s is not assignable in any configured range of network %s (out of bounds or excluded): %s",
					r.Spec.Address, r.Spec.Network, strings.Join(descs, "; ")),
			})
			continue
		}
		k := string(r.Spec.Kind) + " " + r.Spec.Range
		sp, seen := recorded[k]
		if !seen {
			sp = inventory.SpaceOfRange(r.Spec.Kind, r.Spec.Range)
			recorded[k] = sp
		}
		switch {
		case sp == nil:
			unchecked++
		case !sp.Contains(h.item):
			out = append(out, Finding{
				Rule: RuleOutsideRange, Object: reservationObject(r), Network: r.Spec.Network, Address: r.Spec.Address,
				Message: fmt.Sprintf("%s is outside %s, the range it records (no known configuration describes network %s)",
					r.Spec.Address, r.Spec.Range, r.Spec.Network),
			})
		}
	}
	return out, unchecked
}

// sortFindings orders findings by rule (ruleOrder), then object, address
// and message, so that a report is the same for the same cluster.
func sortFindings(fs []Finding) {
	rank := func(r Rule) int { return slices.Index(ruleOrder, r) }
	slices.SortFunc(fs, func(a, b Finding) int {
		return cmp.Or(cmp.Compare(rank(a.Rule), rank(b.Rule)), cmp.Compare(a.Object, b.Object),
			cmp.Compare(a.Address, b.Address), cmp.Compare(a.Message, b.Message))
	})
}
