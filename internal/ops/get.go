package ops

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/duration"

	ipamclaimsv1alpha1 "github.com/tenure-ipam/tenure/api/ipamclaims/v1alpha1"
	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
	stickyclaims "github.com/tenure-ipam/tenure/internal/claims"
	"github.com/tenure-ipam/tenure/internal/inventory"
	"github.com/tenure-ipam/tenure/internal/reservation"
)

// ReservationView is a reservation as get and who show it.
type ReservationView struct {
	Name    string                         `json:"name"`
	Network string                         `json:"network"`
	Kind    tenurev1alpha1.ReservationKind `json:"kind"`
	Address string                         `json:"address"`
	Range   string                         `json:"range,omitempty"`
	Pool    string                         `json:"pool,omitempty"`
	// CNINetwork is the CNI network name that made it (spec.cniNetwork).
	CNINetwork string `json:"cniNetwork,omitempty"`
	// Owner is spec.owner: owner.node is the node the reservation was made
	// on, owner.podName the pod that made it.
	Owner tenurev1alpha1.ReservationOwner `json:"owner"`
	// Pod is the pod that uses the reservation now: the owner itself, or
	// the claim's status.ownerPod; "" when none exists.
	Pod string `json:"pod,omitempty"`
	// Node is where that pod runs now; "" when no pod holds it.
	Node string `json:"node,omitempty"`
	// StatefulSet is, for a sticky claim's reservation, the StatefulSet
	// whose pod the claim keeps addresses for.
	StatefulSet string `json:"statefulSet,omitempty"`
	// Reason is why an administrator set the address aside (owner kind
	// Administrator).
	Reason  string      `json:"reason,omitempty"`
	Created metav1.Time `json:"created"`
}

// Placement is where a reservation's owner runs now.
type Placement struct{ Pod, Node string }

// PodPlacement is what CurrentPlacement needs of a pod.
type PodPlacement struct{ NodeName string }

// CurrentPlacement answers where the owner of r runs now. A pod owner runs
// where it was made: a pod never moves, and its UID pins the reservation to
// it (whether it still exists is Check's question, RuleOwnerGone). A
// claim-bound reservation follows the claim: the pod in its
// status.ownerPod (the last pod an ADD served, the migration target once it
// started) and that pod's node, which is not spec.owner.node after a
// migration. pods is keyed by "namespace/name"; claim is nil when the claim
// is gone.
func CurrentPlacement(r *tenurev1alpha1.IPReservation, claim *ipamclaimsv1alpha1.IPAMClaim, pods map[string]PodPlacement) Placement {
	o := r.Spec.Owner
	switch o.Kind {
	case tenurev1alpha1.OwnerPod:
		return Placement{Pod: o.Name, Node: o.Node}
	case tenurev1alpha1.OwnerIPAMClaim:
		if claim == nil || string(claim.UID) != o.UID {
			return Placement{}
		}
		name := o.PodName
		if claim.Status.OwnerPod != nil && claim.Status.OwnerPod.Name != "" {
			name = claim.Status.OwnerPod.Name
		}
		if p, ok := pods[o.Namespace+"/"+name]; ok && name != "" {
			return Placement{Pod: name, Node: p.NodeName}
		}
	}
	return Placement{}
}

// views reads the claims that own reservations of rs and the pods using
// them (one read each; pod owners need none) and returns the reservations
// with where their owners run now, sorted by network and address.
func (c *Client) views(ctx context.Context, rs []*tenurev1alpha1.IPReservation) ([]ReservationView, error) {
	pods := map[string]PodPlacement{}
	claims := map[string]*ipamclaimsv1alpha1.IPAMClaim{}
	read := map[string]bool{}
	readPod := func(ns, name string) error {
		key := ns + "/" + name
		if read[key] || name == "" {
			return nil
		}
		read[key] = true
		p := &corev1.Pod{}
		if err := c.c.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, p); err != nil {
			if apierrors.IsNotFound(err) {
				return nil
			}
			return err
		}
		pods[key] = PodPlacement{NodeName: p.Spec.NodeName}
		return nil
	}
	for _, r := range rs {
		o := r.Spec.Owner
		if o.Kind != tenurev1alpha1.OwnerIPAMClaim {
			continue
		}
		key := o.Namespace + "/" + o.Name
		if _, done := claims[key]; done {
			continue
		}
		cl := &ipamclaimsv1alpha1.IPAMClaim{}
		switch err := c.c.Get(ctx, types.NamespacedName{Namespace: o.Namespace, Name: o.Name}, cl); {
		case apierrors.IsNotFound(err):
			claims[key] = nil
			continue
		case err != nil:
			return nil, err
		}
		claims[key] = cl
		name := o.PodName
		if cl.Status.OwnerPod != nil {
			name = cl.Status.OwnerPod.Name
		}
		if err := readPod(o.Namespace, name); err != nil {
			return nil, err
		}
	}
	out := make([]ReservationView, len(rs))
	for i, r := range rs {
		cl := claims[r.Spec.Owner.Namespace+"/"+r.Spec.Owner.Name]
		pl := CurrentPlacement(r, cl, pods)
		out[i] = ReservationView{
			Name: r.Name, Network: r.Spec.Network, CNINetwork: r.Spec.CNINetwork, Kind: r.Spec.Kind, Address: r.Spec.Address, Range: r.Spec.Range, Pool: r.Spec.Pool,
			Owner: r.Spec.Owner, Pod: pl.Pod, Node: pl.Node, Created: r.CreationTimestamp,
		}
		if r.Spec.Owner.Kind == tenurev1alpha1.OwnerAdministrator {
			out[i].Reason = r.Annotations[reservation.AnnotationReason]
		}
		if cl != nil && cl.Labels[stickyclaims.LabelSticky] == "true" {
			out[i].StatefulSet = cl.Labels[stickyclaims.LabelStatefulSet]
		}
	}
	sortViews(out)
	return out, nil
}

func sortViews(vs []ReservationView) {
	slices.SortFunc(vs, func(a, b ReservationView) int {
		return cmp.Or(cmp.Compare(a.Network, b.Network), compareItems(a.Address, b.Address), cmp.Compare(a.Name, b.Name))
	})
}

// compareItems orders addresses and prefixes numerically, unparsable ones
// last by text.
func compareItems(a, b string) int {
	pa, ea := reservation.ParseItem(a)
	pb, eb := reservation.ParseItem(b)
	switch {
	case ea == nil && eb == nil:
		return cmp.Or(pa.Addr().Compare(pb.Addr()), cmp.Compare(pa.Bits(), pb.Bits()))
	case ea == nil:
		return -1
	case eb == nil:
		return 1
	}
	return cmp.Compare(a, b)
}

// ownerCell names a reservation's owner as kubectl would, and for a sticky
// claim the StatefulSet it belongs to.
func ownerCell(v ReservationView) string {
	switch {
	case v.Owner.Kind == tenurev1alpha1.OwnerAdministrator:
		return "set aside by " + v.Owner.Name + ": " + v.Reason
	case v.Owner.Kind != tenurev1alpha1.OwnerIPAMClaim:
		return "pod/" + v.Owner.Name
	case v.StatefulSet != "":
		return "ipamclaim/" + v.Owner.Name + " (sticky, statefulset/" + v.StatefulSet + ")"
	}
	return "ipamclaim/" + v.Owner.Name
}

// ReservationsReport is Get's and Who's answer.
type ReservationsReport struct {
	// Query is what was asked: the network, or the address or prefix.
	Query string `json:"query"`
	// Scopes are, for get, the allocation scopes shown and how the query
	// named each.
	Scopes []inventory.ScopeMatch `json:"scopes,omitempty"`
	// Pools are, for get, the IPPools the shown scopes' ranges come from,
	// with their selectors.
	Pools        []PoolView        `json:"pools,omitempty"`
	Reservations []ReservationView `json:"reservations"`

	now time.Time
	who bool
}

// Get returns the reservations of a network, named by any of its names
// (inventory.Inventory.Resolve): an allocation scope, which for a network_name also
// lists its per-range scopes (enable_overlapping_ranges false makes one
// scope per range, named "NAME/RANGE"; a per-range scope no configuration
// names any more is listed when named exactly); a CNI network name (the
// configuration's "name", an IPAMClaim's spec.network), whose reservations
// lie in the scope its network_name, or else the default, says; or a
// NetworkAttachmentDefinition NS/NAME. The report says which scopes it
// shows.
func (c *Client) Get(ctx context.Context, network string) (*ReservationsReport, error) {
	inv, err := c.inventory(ctx)
	if err != nil {
		return nil, err
	}
	matches := inv.Resolve(network)
	scopes := make([]string, len(matches))
	for i, m := range matches {
		scopes[i] = m.Scope
	}
	labels := make([]string, len(scopes))
	for i, s := range scopes {
		labels[i] = reservation.ScopeLabel(s)
	}
	selector := fmt.Sprintf("%s in (%s)", reservation.LabelNetwork, strings.Join(labels, ","))
	rs, err := c.reservations(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return nil, err
	}
	// A hashed label could in principle be shared: keep exact scopes only.
	rs = slices.DeleteFunc(rs, func(r *tenurev1alpha1.IPReservation) bool { return !slices.Contains(scopes, r.Spec.Network) })
	views, err := c.views(ctx, rs)
	if err != nil {
		return nil, err
	}
	return &ReservationsReport{Query: network, Scopes: matches, Pools: PoolsOf(inv, scopes), Reservations: views, now: c.Now()}, nil
}

// PoolView is an IPPool as get shows it: its name and selectors.
type PoolView struct {
	Name      string                  `json:"name"`
	Selectors inventory.PoolSelectors `json:"selectors"`
}

// PoolsOf lists, sorted by name, the declared IPPools that ranges of the
// scopes come from.
func PoolsOf(inv *inventory.Inventory, scopes []string) []PoolView {
	var out []PoolView
	for _, s := range inv.Spaces() {
		if s.Pool == "" || !slices.Contains(scopes, s.Scope) || slices.ContainsFunc(out, func(p PoolView) bool { return p.Name == s.Pool }) {
			continue
		}
		out = append(out, PoolView{Name: s.Pool, Selectors: inv.Selectors[s.Pool]})
	}
	slices.SortFunc(out, func(a, b PoolView) int { return cmp.Compare(a.Name, b.Name) })
	return out
}

// Who returns the reservations that hold an address (the address itself,
// or a delegated prefix containing it) or that overlap a prefix, in every
// network, with since when. It reads the reservations' names only (a name
// says its item), then the matching objects.
func (c *Client) Who(ctx context.Context, query string) (*ReservationsReport, error) {
	q, err := ParseQuery(query)
	if err != nil {
		return nil, err
	}
	names, err := c.reservationNames(ctx)
	if err != nil {
		return nil, err
	}
	var rs []*tenurev1alpha1.IPReservation
	for _, n := range names {
		p, err := reservation.Parse(n)
		if err != nil || !p.Prefix.Overlaps(q) {
			continue
		}
		r := &tenurev1alpha1.IPReservation{}
		if err := c.c.Get(ctx, types.NamespacedName{Name: n}, r); err != nil {
			if apierrors.IsNotFound(err) {
				continue // released since the list
			}
			return nil, err
		}
		rs = append(rs, r)
	}
	views, err := c.views(ctx, rs)
	if err != nil {
		return nil, err
	}
	return &ReservationsReport{Query: q.String(), Reservations: views, now: c.Now(), who: true}, nil
}

// ParseQuery reads an IP (as a full-length prefix) or a CIDR.
func ParseQuery(s string) (netip.Prefix, error) {
	p, err := reservation.ParseItem(strings.TrimSpace(s))
	if err != nil || strings.Contains(s, "%") {
		return netip.Prefix{}, fmt.Errorf("%q is neither an IP address nor a CIDR prefix", s)
	}
	if p.Addr().Is4In6() && p.Bits() >= 96 {
		p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
	}
	return p.Masked(), nil
}

// WriteTable writes one line per reservation, as kubectl get does: for
// get ADDRESS, OWNER, NODE (where the owner runs now) and AGE; who adds
// NETWORK and SINCE. wide adds the pod using a claim's addresses, the node
// the reservation was made on, the interface and the object's name.
func (r *ReservationsReport) WriteTable(w io.Writer, wide bool) error {
	if !r.who {
		if _, err := fmt.Fprintf(w, "Network %s: %s\n", r.Query, describeScopes(r.Scopes)); err != nil {
			return err
		}
		for _, p := range r.Pools {
			if _, err := fmt.Fprintf(w, "IPPool %s selects %s\n", p.Name, p.Selectors.Describe()); err != nil {
				return err
			}
		}
	}
	if len(r.Reservations) == 0 {
		what := "in network " + r.Query
		if r.who {
			what = "holds " + r.Query
		}
		_, err := fmt.Fprintf(w, "No reservation %s.\n", what)
		return err
	}
	cols := []string{"ADDRESS", "NAMESPACE", "OWNER", "NODE", "AGE"}
	wideCols := []string{"POD", "MADE ON", "INTERFACE", "NAME", "NETWORK"}
	if r.who {
		cols, wideCols = []string{"ADDRESS", "NETWORK", "NAMESPACE", "OWNER", "NODE", "SINCE"}, wideCols[:4]
	}
	t := newTable(w, wide, cols, wideCols...)
	for _, v := range r.Reservations {
		owner := ownerCell(v)
		age := duration.HumanDuration(r.now.Sub(v.Created.Time))
		cells := []string{v.Address, orNone(v.Owner.Namespace), owner, orNone(v.Node), age}
		if r.who {
			cells = []string{v.Address, networkCell(v.Network, v.CNINetwork), orNone(v.Owner.Namespace), owner, orNone(v.Node), v.Created.UTC().Format(time.RFC3339) + " (" + age + ")"}
		}
		t.row(cells, []string{orNone(v.Pod), orNone(v.Owner.Node), orNone(v.Owner.Interface), v.Name, networkCell(v.Network, v.CNINetwork)}[:len(wideCols)]...)
	}
	return t.flush()
}

// networkCell is an allocation scope with the CNI network name beside it
// when they differ: "default (CNI vm-net)".
func networkCell(scope, cniNetwork string) string {
	if cniNetwork == "" || cniNetwork == scope {
		return scope
	}
	return scope + " (CNI " + cniNetwork + ")"
}

// describeScopes says which allocation scopes get shows and why.
func describeScopes(ms []inventory.ScopeMatch) string {
	parts := make([]string, len(ms))
	for i, m := range ms {
		parts[i] = m.Scope + " (" + strings.Join(m.Via, ", ") + ")"
	}
	noun := "allocation scope "
	if len(ms) != 1 {
		noun = "allocation scopes "
	}
	return noun + strings.Join(parts, ", ")
}
