package ops

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"strings"

	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"

	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/allocator"
	"github.com/tenure-ipam/tenure/internal/inventory"
	"github.com/tenure-ipam/tenure/internal/reservation"
)

// MaxSetAside bounds the addresses one reserve sets aside: each is an
// object, and a typo of a prefix length should not make a million.
const MaxSetAside = 4096

// maxReason bounds a set-aside's reason, an annotation value.
const maxReason = 1024

// SetAsideOptions are reserve's.
type SetAsideOptions struct {
	// Reason says why the addresses are set aside; required.
	Reason string
	// DryRun builds the objects and checks that nothing holds their
	// addresses, and creates nothing.
	DryRun bool
}

// SetAsideReport is what Reserve set aside (or, with DryRun, would): the
// IPReservations as a List, which `kubectl apply -f` takes as it is.
type SetAsideReport struct {
	APIVersion string                         `json:"apiVersion"`
	Kind       string                         `json:"kind"`
	Items      []tenurev1alpha1.IPReservation `json:"items"`
	DryRun     bool                           `json:"-"`
}

// WriteTable lists the addresses set aside.
func (r *SetAsideReport) WriteTable(w io.Writer, wide bool) error {
	verb := "set aside"
	if r.DryRun {
		verb = "would be set aside (dry run)"
	}
	fmt.Fprintf(w, "%d address(es) %s\n", len(r.Items), verb)
	t := newTable(w, wide, []string{"ADDRESS", "NETWORK", "RANGE", "REASON"}, "POOL", "NAME")
	for _, it := range r.Items {
		t.row([]string{it.Spec.Address, it.Spec.Network, orNone(it.Spec.Range), it.Annotations[reservation.AnnotationReason]}, orNone(it.Spec.Pool), it.Name)
	}
	return t.flush()
}

// HeldError is Reserve's refusal of addresses that something holds: each
// address with its holder.
type HeldError struct{ Held []string }

func (e *HeldError) Error() string {
	return "refusing to set aside addresses that are held, nothing was set aside: " + strings.Join(e.Held, "; ")
}

// ParseAddressRange reads reserve's ADDR|RANGE: an IP, a CIDR (its
// addresses) or FIRST-LAST; the addresses in order, at most max of them.
func ParseAddressRange(s string, max int) ([]netip.Addr, error) {
	bad := func(why string, args ...any) error {
		return fmt.Errorf("ADDR|RANGE %q: %s", s, fmt.Sprintf(why, args...))
	}
	s = strings.TrimSpace(s)
	var first, last netip.Addr
	switch {
	case strings.Contains(s, "-"):
		a, b, _ := strings.Cut(s, "-")
		var err error
		if first, err = netip.ParseAddr(strings.TrimSpace(a)); err != nil {
			return nil, bad("the first address: %v", err)
		}
		if last, err = netip.ParseAddr(strings.TrimSpace(b)); err != nil {
			return nil, bad("the last address: %v", err)
		}
		if first.Is4() != last.Is4() {
			return nil, bad("the first and last address are of different families")
		}
		if last.Less(first) {
			return nil, bad("the last address comes before the first")
		}
	case strings.Contains(s, "/"):
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return nil, bad("not a CIDR: %v", err)
		}
		if p != p.Masked() {
			return nil, bad("has host bits set (did you mean %s?)", p.Masked())
		}
		first = p.Addr()
		last = lastOf(p)
	default:
		a, err := netip.ParseAddr(s)
		if err != nil {
			return nil, bad("neither an IP address, a CIDR nor FIRST-LAST: %v", err)
		}
		first, last = a, a
	}
	if first.Zone() != "" || last.Zone() != "" {
		return nil, bad("an address with a zone is no address of a network")
	}
	first, last = first.Unmap(), last.Unmap()
	var out []netip.Addr
	for a := first; ; a = a.Next() {
		if len(out) == max {
			return nil, bad("holds more than %d addresses; set aside at most %d at once", max, max)
		}
		out = append(out, a)
		if a == last {
			return out, nil
		}
	}
}

// lastOf is p's last address.
func lastOf(p netip.Prefix) netip.Addr {
	b := p.Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}

// Reserve sets the addresses addrs names (ParseAddressRange) aside in the
// network named as get names one: for each, a reservation of owner kind
// Administrator, with the reason in the annotation ipam.tenure.dev/reason
// and one UID for all, in the scope and range of the network that hands
// the address out. Nothing allocates an address a reservation holds, so
// nothing hands them out, and nothing but Release gives them back.
//
// Of a range, the addresses no range of the network hands out (excluded,
// the gateway, a subnet's network and broadcast addresses) are skipped; a
// single address that none hands out, a network no configuration names,
// and an address something holds are refused, and then nothing is set
// aside: the error names each held address with its holder.
func (c *Client) Reserve(ctx context.Context, network, addrs string, opts SetAsideOptions) (*SetAsideReport, error) {
	reason := strings.TrimSpace(opts.Reason)
	switch {
	case reason == "":
		return nil, errors.New(`--reason "": is required: say why the addresses are set aside`)
	case len(reason) > maxReason:
		return nil, fmt.Errorf("--reason: %d bytes, more than the %d a reason may have", len(reason), maxReason)
	}
	list, err := ParseAddressRange(addrs, MaxSetAside)
	if err != nil {
		return nil, err
	}
	inv, err := c.inventory(ctx)
	if err != nil {
		return nil, err
	}
	var spaces []*inventory.Entry
	for _, m := range inv.Resolve(network) {
		for _, s := range inv.Spaces() {
			if s.Scope == m.Scope && s.Space.Kind() == tenurev1alpha1.KindAddress {
				spaces = append(spaces, s)
			}
		}
	}
	if len(spaces) == 0 {
		return nil, fmt.Errorf("NETWORK %q: no IPPool or NetworkAttachmentDefinition configures a range of that network", network)
	}
	by := c.whoAmI(ctx)
	uid := string(uuid.NewUUID())
	rep := &SetAsideReport{APIVersion: "v1", Kind: "List", DryRun: opts.DryRun}
	for _, a := range list {
		item := netip.PrefixFrom(a, a.BitLen())
		i := slices.IndexFunc(spaces, func(s *inventory.Entry) bool { return s.Space.Contains(item) })
		if i < 0 {
			if len(list) == 1 {
				var rs []string
				for _, s := range spaces {
					rs = append(rs, s.Space.String())
				}
				return nil, fmt.Errorf("ADDR|RANGE %q: no range of network %s hands out %s (ranges %s)", addrs, network, a, strings.Join(rs, ", "))
			}
			continue
		}
		s := spaces[i]
		r := reservation.New(reservation.Spec{Network: s.Scope, Kind: tenurev1alpha1.KindAddress, Item: item, Range: s.Space.String(), Pool: s.Pool,
			Owner: tenurev1alpha1.ReservationOwner{Kind: tenurev1alpha1.OwnerAdministrator, Name: by, UID: uid}})
		r.Annotations[reservation.AnnotationReason] = reason
		rep.Items = append(rep.Items, *r)
	}
	if len(rep.Items) == 0 {
		return nil, fmt.Errorf("ADDR|RANGE %q: network %s hands out none of its addresses", addrs, network)
	}
	var held []string
	for _, r := range rep.Items {
		h, err := c.holderOf(ctx, r.Name)
		if err != nil {
			return nil, err
		}
		if h != "" {
			held = append(held, h)
		}
	}
	if len(held) > 0 {
		return nil, &HeldError{Held: held}
	}
	if opts.DryRun {
		return rep, nil
	}
	var created []*tenurev1alpha1.IPReservation
	for i := range rep.Items {
		r := rep.Items[i].DeepCopy()
		err := c.c.Create(ctx, r)
		if err == nil {
			created = append(created, r)
			rep.Items[i] = *r
			continue
		}
		// Taken since the check: give back what was set aside, name the holder.
		c.giveBack(created)
		if apierrors.IsAlreadyExists(err) {
			if h, herr := c.holderOf(ctx, r.Name); herr == nil && h != "" {
				return nil, &HeldError{Held: []string{h}}
			}
		}
		return nil, fmt.Errorf("setting %s aside: %w; nothing was set aside", r.Spec.Address, err)
	}
	return rep, nil
}

// holderOf names what holds the reservation name ("" when nothing does):
// the address, its holder, and where.
func (c *Client) holderOf(ctx context.Context, name string) (string, error) {
	r := &tenurev1alpha1.IPReservation{}
	if err := c.c.Get(ctx, types.NamespacedName{Name: name}, r); err != nil {
		if apierrors.IsNotFound(err) {
			return "", nil
		}
		return "", err
	}
	o := r.Spec.Owner
	switch o.Kind {
	case tenurev1alpha1.OwnerAdministrator:
		return fmt.Sprintf("%s is set aside already by %s: %s", r.Spec.Address, o.Name, r.Annotations[reservation.AnnotationReason]), nil
	case tenurev1alpha1.OwnerIPAMClaim:
		return fmt.Sprintf("%s is held by IPAMClaim %s/%s (uid %s), made on node %s for pod %s", r.Spec.Address, o.Namespace, o.Name, o.UID, orNone(o.Node), orNone(o.PodName)), nil
	}
	return fmt.Sprintf("%s is held by Pod %s/%s (uid %s) on node %s", r.Spec.Address, o.Namespace, o.Name, o.UID, orNone(o.Node)), nil
}

// giveBack deletes reservations this Reserve created, each by its UID.
func (c *Client) giveBack(rs []*tenurev1alpha1.IPReservation) {
	for _, r := range rs {
		_ = (&allocator.Factory{Writer: c.c}).Release(context.Background(), r)
	}
}

// whoAmI is the caller's user name, as the API server authenticates it;
// "administrator" when it does not say.
func (c *Client) whoAmI(ctx context.Context) string {
	r := &authenticationv1.SelfSubjectReview{}
	if err := c.c.Create(ctx, r); err == nil && r.Status.UserInfo.Username != "" {
		return r.Status.UserInfo.Username
	}
	return "administrator"
}

// SetAsideReleased is what ReleaseSetAside gave back.
type SetAsideReleased struct {
	Released []ReservationView `json:"released"`
}

// WriteTable lists the addresses given back.
func (r *SetAsideReleased) WriteTable(w io.Writer, wide bool) error {
	fmt.Fprintf(w, "%d address(es) given back\n", len(r.Released))
	t := newTable(w, wide, []string{"ADDRESS", "NETWORK", "REASON"}, "NAME")
	for _, v := range r.Released {
		t.row([]string{v.Address, v.Network, v.Reason}, v.Name)
	}
	return t.flush()
}

// ReleaseSetAside gives back the addresses of addrs (ParseAddressRange)
// that are set aside in the network named as get names one. An address
// of the range that something else holds, or nothing, is left alone; a
// single address that is not set aside is refused, naming what holds it.
func (c *Client) ReleaseSetAside(ctx context.Context, network, addrs string) (*SetAsideReleased, error) {
	list, err := ParseAddressRange(addrs, 1<<16)
	if err != nil {
		return nil, err
	}
	inv, err := c.inventory(ctx)
	if err != nil {
		return nil, err
	}
	var scopes []string
	for _, m := range inv.Resolve(network) {
		scopes = append(scopes, m.Scope)
	}
	var found []*tenurev1alpha1.IPReservation
	for _, a := range list {
		for _, scope := range scopes {
			r := &tenurev1alpha1.IPReservation{}
			name := reservation.Name(scope, tenurev1alpha1.KindAddress, netip.PrefixFrom(a, a.BitLen()))
			if err := c.c.Get(ctx, types.NamespacedName{Name: name}, r); err != nil {
				if apierrors.IsNotFound(err) {
					continue
				}
				return nil, err
			}
			if r.Spec.Owner.Kind != tenurev1alpha1.OwnerAdministrator {
				if len(list) == 1 {
					h, _ := c.holderOf(ctx, name)
					return nil, fmt.Errorf("ADDR|RANGE %q: not set aside: %s (tenurectl release ADDRESS releases a pod's or claim's)", addrs, h)
				}
				continue
			}
			found = append(found, r)
		}
	}
	if len(found) == 0 {
		return nil, fmt.Errorf("ADDR|RANGE %q: no address of it is set aside in network %s", addrs, network)
	}
	out := &SetAsideReleased{}
	for _, r := range found {
		if err := (&allocator.Factory{Writer: c.c}).Release(ctx, r); err != nil && !apierrors.IsNotFound(err) {
			return out, fmt.Errorf("giving back %s: %w", r.Spec.Address, err)
		}
		out.Released = append(out.Released, ReservationView{Name: r.Name, Network: r.Spec.Network, Kind: r.Spec.Kind, Address: r.Spec.Address,
			Range: r.Spec.Range, Pool: r.Spec.Pool, Owner: r.Spec.Owner, Reason: r.Annotations[reservation.AnnotationReason], Created: r.CreationTimestamp})
	}
	return out, nil
}
