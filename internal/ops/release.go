package ops

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipamclaimsv1alpha1 "github.com/tenure-ipam/tenure/api/ipamclaims/v1alpha1"
	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/allocator"
	"github.com/tenure-ipam/tenure/internal/claims"
	"github.com/tenure-ipam/tenure/internal/controller/repair"
	"github.com/tenure-ipam/tenure/internal/reservation"
)

// Component is the Event source of tenurectl.
const Component = "tenurectl"

// EventReasonReleased is the reason of the Event Release records on the
// owner of what it released.
const EventReasonReleased = "ReleasedByOperator"

// ReleaseOptions tune Release.
type ReleaseOptions struct {
	// Network narrows the search to one allocation scope (spec.network),
	// for an address held in several.
	Network string
	// Force releases what an owner that is alive holds.
	Force bool
	// ReleaseUnfenced and NodeGracePeriod are the controller's, for
	// deciding that an owner on a node that is not fenced is gone.
	ReleaseUnfenced bool
	NodeGracePeriod time.Duration
}

// ErrNotHeld is returned when no reservation holds the item.
var ErrNotHeld = errors.New("no reservation holds it")

// OwnerAliveError is Release's refusal: the owner is alive and Force was
// not given.
type OwnerAliveError struct {
	Item, Reservation, Owner, Why string
}

func (e *OwnerAliveError) Error() string {
	return fmt.Sprintf("%s (reservation %s) is held by %s, which is alive: %s; releasing it would let another pod take an address in use (--force to release it anyway)",
		e.Item, e.Reservation, e.Owner, e.Why)
}

// Released is what Release did.
type Released struct {
	Reservation ReservationView `json:"reservation"`
	// OwnerAlive: the owner was alive (the release was forced).
	OwnerAlive bool `json:"ownerAlive"`
	// Decision is the controller's view of the owner, in words.
	Decision string `json:"decision"`
	// ClaimUpdated: the item was also removed from the owning claim's
	// status, so that the claim's next ADD does not take it back.
	ClaimUpdated bool `json:"claimUpdated,omitempty"`
	// Event is the Event recorded on the owner ("namespace/name"), or why
	// none could be.
	Event string `json:"event"`
}

// Release deletes the reservation of an address or a delegated prefix,
// named as ReleaseTargets reads it. It refuses, with an *OwnerAliveError, while the owner is
// alive by the controller's rules unless opts.Force; a claim that is alive
// also loses the item from its status. The delete carries the reservation's
// UID, so a reservation re-made for someone else meanwhile is untouched.
// An Event on the owner records the release.
func (c *Client) Release(ctx context.Context, item string, opts ReleaseOptions) (*Released, error) {
	if opts.NodeGracePeriod == 0 {
		opts.NodeGracePeriod = DefaultNodeGracePeriod
	}
	targets, err := ReleaseTargets(item)
	if err != nil {
		return nil, err
	}
	r, t, err := c.holder(ctx, targets, opts.Network)
	if err != nil {
		return nil, err
	}
	q := t.Item
	if r.Spec.Owner.Kind == tenurev1alpha1.OwnerAdministrator {
		// Set aside: giving it back is what release is for here.
		if err := (&allocator.Factory{Writer: c.c}).Release(ctx, r); err != nil {
			return nil, err
		}
		out := &Released{Decision: "set aside by " + r.Spec.Owner.Name + ": " + r.Annotations[reservation.AnnotationReason] + "; given back",
			Event: "none: an address set aside has no owner object to record it on"}
		if views, err := c.views(ctx, []*tenurev1alpha1.IPReservation{r}); err == nil {
			out.Reservation = views[0]
		}
		return out, nil
	}
	facts, claim, err := c.liveFacts(ctx, r)
	if err != nil {
		return nil, err
	}
	d := repair.Decide(r, facts, repair.Policy{ReleaseUnfenced: opts.ReleaseUnfenced, NodeGracePeriod: opts.NodeGracePeriod})
	out := &Released{OwnerAlive: !d.Release, Decision: d.Message}
	if out.OwnerAlive && !opts.Force {
		return nil, &OwnerAliveError{Item: r.Spec.Address, Reservation: r.Name, Owner: ownerText(r.Spec.Owner), Why: d.Message}
	}
	if claim != nil && out.OwnerAlive {
		// The claim's next ADD would take back what its status records.
		if out.ClaimUpdated, err = c.forget(ctx, claim, q); err != nil {
			return nil, fmt.Errorf("removing %s from IPAMClaim %s: %w", r.Spec.Address, claims.Key(claim), err)
		}
	}
	if err := (&allocator.Factory{Writer: c.c}).Release(ctx, r); err != nil {
		return nil, err
	}
	views, err := c.views(ctx, []*tenurev1alpha1.IPReservation{r})
	if err == nil {
		out.Reservation = views[0]
	}
	out.Event = c.recordRelease(ctx, r, out)
	return out, nil
}

// ReleaseTarget is one thing release's argument may name.
type ReleaseTarget struct {
	Kind tenurev1alpha1.ReservationKind
	// Item is the address as a full-length prefix, or the delegated prefix.
	Item netip.Prefix
}

func (t ReleaseTarget) String() string {
	if t.Kind == tenurev1alpha1.KindDelegatedPrefix {
		return "delegated prefix " + reservation.ItemString(t.Kind, t.Item)
	}
	return "address " + reservation.ItemString(t.Kind, t.Item)
}

// ReleaseTargets reads release's argument into what it names, in the order
// to look for a holder:
//
//   - an IP (10.110.2.169): that address;
//   - a CIDR whose address has host bits set (10.110.2.169/24, an address
//     as a CNI result prints it), or of full length (/32, /128): the
//     address;
//   - any other CIDR, whose address is its network address
//     (2001:db8:100::/56): the delegated prefix of exactly that CIDR, and,
//     when no reservation holds that, the address itself (a /31's
//     10.0.0.0/31 as a CNI result prints it).
func ReleaseTargets(s string) ([]ReleaseTarget, error) {
	p, err := reservation.ParseItem(strings.TrimSpace(s))
	if err != nil || strings.Contains(s, "%") {
		return nil, fmt.Errorf("%q is neither an IP address nor a CIDR prefix", s)
	}
	a := p.Addr().Unmap()
	bits := p.Bits()
	if p.Addr().Is4In6() {
		bits = max(bits-96, 0)
	}
	addr := ReleaseTarget{Kind: tenurev1alpha1.KindAddress, Item: netip.PrefixFrom(a, a.BitLen())}
	if !strings.Contains(s, "/") || bits == a.BitLen() {
		return []ReleaseTarget{addr}, nil
	}
	prefix := netip.PrefixFrom(a, bits)
	if prefix.Masked() != prefix {
		return []ReleaseTarget{addr}, nil
	}
	return []ReleaseTarget{{Kind: tenurev1alpha1.KindDelegatedPrefix, Item: prefix}, addr}, nil
}

// holder finds the reservation of the first target that one holds: by
// name in one scope, or among every reservation's name.
func (c *Client) holder(ctx context.Context, targets []ReleaseTarget, network string) (*tenurev1alpha1.IPReservation, ReleaseTarget, error) {
	var all []string
	if network == "" {
		var err error
		if all, err = c.reservationNames(ctx); err != nil {
			return nil, ReleaseTarget{}, err
		}
	}
	var tried []string
	for _, t := range targets {
		var names []string
		if network != "" {
			names = []string{reservation.Name(network, t.Kind, t.Item)}
		} else {
			for _, n := range all {
				if p, err := reservation.Parse(n); err == nil && p.Prefix == t.Item && p.IsPrefix == (t.Kind == tenurev1alpha1.KindDelegatedPrefix) {
					names = append(names, n)
				}
			}
		}
		var found []*tenurev1alpha1.IPReservation
		for _, n := range names {
			r := &tenurev1alpha1.IPReservation{}
			if err := c.c.Get(ctx, types.NamespacedName{Name: n}, r); err != nil {
				if apierrors.IsNotFound(err) {
					continue
				}
				return nil, t, err
			}
			found = append(found, r)
		}
		switch len(found) {
		case 0:
			tried = append(tried, t.String())
			continue
		case 1:
			return found[0], t, nil
		}
		var nets []string
		for _, r := range found {
			nets = append(nets, r.Spec.Network)
		}
		slices.Sort(nets)
		return nil, t, fmt.Errorf("%s is held in %d networks (%s): name one with --network", reservation.ItemString(t.Kind, t.Item), len(found), strings.Join(nets, ", "))
	}
	where := ""
	if network != "" {
		where = " in network " + network
	}
	return nil, ReleaseTarget{}, fmt.Errorf("%s%s: %w", strings.Join(tried, " or "), where, ErrNotHeld)
}

// liveFacts reads from the API server what repair.Decide needs for r, and
// the owning claim when it exists.
func (c *Client) liveFacts(ctx context.Context, r *tenurev1alpha1.IPReservation) (repair.Facts, *ipamclaimsv1alpha1.IPAMClaim, error) {
	o := r.Spec.Owner
	key := types.NamespacedName{Namespace: o.Namespace, Name: o.Name}
	f := OwnerFacts{Pods: map[string]*repair.PodFact{}, Claims: map[string]*repair.ClaimFact{}, Nodes: map[string]*repair.NodeFact{},
		ByOwner: map[string][]*tenurev1alpha1.IPReservation{}, NetworkStatus: map[string]*repair.NetworkStatus{}}
	var claim *ipamclaimsv1alpha1.IPAMClaim
	var readErr error
	read := func(key types.NamespacedName, obj client.Object) bool {
		found, err := c.getIfExists(ctx, key, obj)
		readErr = cmp.Or(readErr, err)
		return found
	}
	switch o.Kind {
	case tenurev1alpha1.OwnerPod:
		if pod := (&corev1.Pod{}); read(key, pod) {
			f.Pods[key.String()] = repair.PodFactOf(pod)
			f.NetworkStatus[key.String()] = repair.NetworkStatusOf(pod.Annotations)
		}
		if node := (&corev1.Node{}); o.Node != "" && read(types.NamespacedName{Name: o.Node}, node) {
			f.Nodes[o.Node] = repair.NodeFactOf(node)
		}
		sib, err := c.reservations(ctx, metav1.ListOptions{LabelSelector: reservation.LabelOwnerUID + "=" + o.UID})
		readErr = cmp.Or(readErr, err)
		f.ByOwner[o.UID] = sib
		// What other nodes' agents heard of the address, for a NodeNotReady
		// release. Unreadable (no IPProbe CRD, no right to read it), the
		// wire is unknown and the address kept.
		if p := (&tenurev1alpha1.IPProbe{}); o.Node != "" {
			if found, err := c.getIfExists(ctx, types.NamespacedName{Name: r.Name}, p); err == nil && found {
				f.Probes = map[string]*tenurev1alpha1.IPProbe{r.Name: p}
				for _, a := range p.Status.Answers {
					if node := (&corev1.Node{}); f.Nodes[a.Node] == nil && read(types.NamespacedName{Name: a.Node}, node) {
						f.Nodes[a.Node] = repair.NodeFactOf(node)
					}
				}
			}
		}
	case tenurev1alpha1.OwnerIPAMClaim:
		if cl := (&ipamclaimsv1alpha1.IPAMClaim{}); read(key, cl) {
			f.Claims[key.String()] = repair.ClaimFactOf(cl)
			if string(cl.UID) == o.UID {
				claim = cl
			}
		}
		sib, err := c.reservations(ctx, metav1.ListOptions{LabelSelector: reservation.LabelOwnerUID + "=" + o.UID})
		readErr = cmp.Or(readErr, err)
		f.ByOwner[o.UID] = sib
	}
	if readErr != nil {
		return repair.Facts{}, nil, readErr
	}
	return f.Facts(r, c.Now()), claim, nil
}

// getIfExists reads an object; false when there is none.
func (c *Client) getIfExists(ctx context.Context, key types.NamespacedName, obj client.Object) (bool, error) {
	err := c.c.Get(ctx, key, obj)
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	return err == nil, err
}

// forget removes item from the claim's status.ips (an address, whatever
// subnet length it is recorded with) and status.delegatedPrefixes.
func (c *Client) forget(ctx context.Context, claim *ipamclaimsv1alpha1.IPAMClaim, item netip.Prefix) (bool, error) {
	changed := false
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cl := &ipamclaimsv1alpha1.IPAMClaim{}
		if err := c.c.Get(ctx, client.ObjectKeyFromObject(claim), cl); err != nil {
			return err
		}
		if cl.UID != claim.UID {
			return nil // another claim of the same name: not ours
		}
		n := len(cl.Status.IPs) + len(cl.Status.DelegatedPrefixes)
		cl.Status.IPs = slices.DeleteFunc(cl.Status.IPs, func(s string) bool {
			p, err := reservation.ParseItem(s)
			return err == nil && item.Bits() == item.Addr().BitLen() && p.Addr() == item.Addr()
		})
		cl.Status.DelegatedPrefixes = slices.DeleteFunc(cl.Status.DelegatedPrefixes, func(s string) bool {
			p, err := netip.ParsePrefix(s)
			return err == nil && p.Masked() == item
		})
		if changed = len(cl.Status.IPs)+len(cl.Status.DelegatedPrefixes) != n; !changed {
			return nil
		}
		if cl.Status.IPs == nil {
			cl.Status.IPs = []string{} // required by the upstream schema
		}
		return c.c.Status().Update(ctx, cl)
	})
	return changed, err
}

// recordRelease writes an Event on the owner (whether or not it still
// exists: Events may name any object, and one on a gone pod still shows
// in `kubectl get events`). It returns what it recorded, or why not.
func (c *Client) recordRelease(ctx context.Context, r *tenurev1alpha1.IPReservation, rel *Released) string {
	o := r.Spec.Owner
	ref := corev1.ObjectReference{APIVersion: "v1", Kind: "Pod", Namespace: o.Namespace, Name: o.Name, UID: types.UID(o.UID)}
	if o.Kind == tenurev1alpha1.OwnerIPAMClaim {
		ref.APIVersion, ref.Kind = ipamclaimsv1alpha1.GroupVersion.String(), "IPAMClaim"
	}
	typ, how := corev1.EventTypeNormal, "its owner is gone: "+rel.Decision
	if rel.OwnerAlive {
		typ, how = corev1.EventTypeWarning, "with --force while the owner is alive ("+rel.Decision+")"
	}
	if rel.ClaimUpdated {
		how += "; removed from the claim's status"
	}
	host, _ := os.Hostname()
	now := metav1.NewTime(c.Now())
	ev := &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Namespace: o.Namespace, GenerateName: o.Name + ".tenurectl-"},
		InvolvedObject: ref,
		Type:           typ,
		Reason:         EventReasonReleased,
		Message:        fmt.Sprintf("%s (network %s, reservation %s) released by tenurectl release %s", r.Spec.Address, r.Spec.Network, r.Name, how),
		Source:         corev1.EventSource{Component: Component, Host: host},
		FirstTimestamp: now, LastTimestamp: now, Count: 1,
	}
	if err := c.c.Create(ctx, ev); err != nil {
		return fmt.Sprintf("not recorded: %v", err)
	}
	return fmt.Sprintf("%s %s/%s %s %s", ref.Kind, ev.Namespace, o.Name, typ, EventReasonReleased)
}

// WriteTable says what was released.
func (r *Released) WriteTable(w io.Writer, _ bool) error {
	v := r.Reservation
	state := "owner gone"
	if r.OwnerAlive {
		state = "owner alive, forced"
	}
	_, err := fmt.Fprintf(w, "released %s (network %s, reservation %s) of %s: %s (%s)\nevent: %s\n",
		v.Address, v.Network, v.Name, ownerText(v.Owner), state, r.Decision, r.Event)
	if err == nil && r.ClaimUpdated {
		_, err = fmt.Fprintf(w, "removed %s from the status of IPAMClaim %s/%s\n", v.Address, v.Owner.Namespace, v.Owner.Name)
	}
	return err
}
