package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipamclaimsv1alpha1 "github.com/tenure-ipam/tenure/api/ipamclaims/v1alpha1"
	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/allocator"
	"github.com/tenure-ipam/tenure/internal/claims"
	"github.com/tenure-ipam/tenure/internal/kubevirt"
	"github.com/tenure-ipam/tenure/internal/reservation"
	"github.com/tenure-ipam/tenure/internal/store"
)

// claimPath serves the attachments bound to a claim: the claim's items for
// its ADDs, its sticky claim, and the claim as CHECK reads it.
type claimPath struct {
	node     string
	log      *slog.Logger
	client   client.Client
	claims   cache.SharedIndexInformer
	store    *store.Store
	alloc    *allocator.Factory
	recorder record.EventRecorder

	// What it needs of the other parts: the pools list's choice
	// (poolChooser, called directly as by addVerb), a slot's allocator
	// (allocators), the holdings the dataplane reads (claimHoldings), the
	// claim's status (statusRecorder) and the VMI cache (ownerFollower).
	pools         *poolChooser
	nextAllocator func(at *attachment, s slot) (allocator.Interface, error)
	learn         func(claim *ipamclaimsv1alpha1.IPAMClaim, held []heldSlot)
	status        claimStatusWriter
	vmiLookup     func() kubevirt.Lookup
}

// claimStatusWriter writes what an ADD did to the claim's status.
type claimStatusWriter interface {
	recordClaim(ctx context.Context, claim *ipamclaimsv1alpha1.IPAMClaim, pod *corev1.Pod, held []heldSlot, fresh bool) error
	reportClaimFailure(ctx context.Context, claim *ipamclaimsv1alpha1.IPAMClaim, cause error)
}

func (cp *claimPath) getClaim(ctx context.Context, namespace, name string, fresh bool) (*ipamclaimsv1alpha1.IPAMClaim, error) {
	if !fresh {
		if obj, ok, _ := cp.claims.GetIndexer().GetByKey(namespace + "/" + name); ok {
			return obj.(*ipamclaimsv1alpha1.IPAMClaim).DeepCopy(), nil
		}
	}
	c := &ipamclaimsv1alpha1.IPAMClaim{}
	if err := cp.client.Get(ctx, k8stypes.NamespacedName{Namespace: namespace, Name: name}, c); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, codedf(CodeTryAgainLater, nil, "IPAMClaim %s/%s referenced by the pod's network-selection element does not exist", namespace, name)
		}
		return nil, err
	}
	return c, nil
}

// addForClaim hands out the claim's addresses and prefix. What the claim's
// status records is reproduced exactly (the migration target gets what the
// source holds); only slots with nothing recorded get new items, and those
// become the claim's only once the status update that records them wins.
func (cp *claimPath) addForClaim(ctx context.Context, at *attachment) ([]heldSlot, error) {
	ns := at.pod.Namespace
	var mine []*tenurev1alpha1.IPReservation // created by this call, not yet recorded
	defer func() { rollback(cp.alloc, cp.log, mine) }()

	var held []heldSlot
	first := true
	err := retry.RetryOnConflict(claimUpdateBackoff, func() error {
		// After a conflict the cache is behind the writer who won: read the
		// claim from the API server.
		claim, err := cp.getClaim(ctx, ns, at.sel.Claim, !first)
		first = false
		if err != nil {
			return err
		}
		// A claim being deleted that another finalizer still holds (KubeVirt's,
		// while the VM runs) keeps serving: the migration target and a
		// restart of the VM get its items.
		if !claims.Held(claim) {
			return codedf(CodeTryAgainLater, nil, "IPAMClaim %s is being deleted, and no finalizer but %s holds it", claims.Key(claim), claims.ReleaseFinalizer)
		}
		if claim.Spec.Network != at.cfg.Name {
			return codedf(CodeInvalidNetworkConfig, nil, "IPAMClaim %s has spec.network %q but the CNI network is %q", claims.Key(claim), claim.Spec.Network, at.cfg.Name)
		}
		if err := cp.mayPresent(ctx, at.pod, claim); err != nil {
			return err
		}
		rec, bad := claims.ParseStatus(claim.Status)
		if len(bad) > 0 {
			return codedf(CodeClaimMismatch, nil, "IPAMClaim %s: unparsable %s", claims.Key(claim), strings.Join(bad, ", "))
		}
		// Items this call created that the claim did not end up recording
		// (a concurrent ADD of the same claim recorded others) are freed.
		mine = cp.keepRecorded(mine, rec)
		req, err := claims.RequestedOf(claim)
		if err != nil {
			return codedf(CodeInvalidNetworkConfig, nil, "%v", err)
		}
		if !rec.Empty() {
			req = claims.Requested{} // served as recorded from the first ADD on
		}
		// The claim's recorded (or, before its first ADD, requested)
		// addresses keep the pools they are in.
		var keep []netip.Addr
		for _, p := range rec.Addresses {
			keep = append(keep, p.Addr())
		}
		for _, q := range req.Addresses {
			keep = append(keep, q.Addr)
		}
		if err := cp.pools.choosePools(ctx, at, keep); err != nil {
			return err
		}

		tmpl := allocator.Template{Owner: cp.claimOwner(at, claim), CNINetwork: at.cfg.Name}
		h, fresh, err := cp.reserveForClaim(ctx, at, claim, rec, req, tmpl, &mine)
		if err != nil {
			cp.status.reportClaimFailure(ctx, claim, err)
			return err
		}
		if err := cp.status.recordClaim(ctx, claim, at.pod, h, fresh); err != nil {
			return err // a conflict: someone else wrote the claim, read it again
		}
		mine = nil // recorded: the claim owns them now
		held = h
		cp.learn(claim, h)
		return nil
	})
	if apierrors.IsConflict(err) {
		return nil, codedf(CodeTryAgainLater, err, "IPAMClaim %s/%s: too many concurrent updates", ns, at.sel.Claim)
	}
	return held, err
}

// mayPresent refuses the ADD of a pod that names claim but may not present
// it (claims.MayPresent), with an error naming the pod, the claim and why:
// what a node can write itself (a mirror pod, a pod of its own it keeps
// after deletion) is no evidence that a workload uses a claim, and for a
// KubeVirt VM's claim only the pods its VMI names are. The VMI cache may
// be behind virt-controller's write of status.activePods: before refusing
// on the VMI, the API server's VMI decides.
func (cp *claimPath) mayPresent(ctx context.Context, pod *corev1.Pod, claim *ipamclaimsv1alpha1.IPAMClaim) error {
	lookup := cp.vmiLookup()
	err := claims.MayPresent(pod, claim, lookup)
	var pe *claims.PresentError
	if err == nil || !errors.As(err, &pe) {
		return err
	}
	byVMI := func() bool { return pe.Reason == claims.RefusedNoVMI || pe.Reason == claims.RefusedNotVMIsPod }
	if byVMI() && lookup != nil {
		var readErr error
		err = claims.MayPresent(pod, claim, kubevirt.LiveLookup(ctx, cp.client, &readErr))
		if readErr != nil {
			return readErr
		}
		if err == nil || !errors.As(err, &pe) {
			return err
		}
	}
	if byVMI() {
		return codedf(CodeTryAgainLater, nil, "%v", err)
	}
	return codedf(CodeNotPresented, nil, "%v", err)
}

// claimUpdateBackoff spaces the re-reads of a claim whose status update
// met a conflict: the writers are the pods presenting one claim (a
// migration's source and target), rarely more than two.
var claimUpdateBackoff = wait.Backoff{Steps: 8, Duration: 5 * time.Millisecond, Factor: 2, Jitter: 0.5, Cap: time.Second}

func (cp *claimPath) claimOwner(at *attachment, claim *ipamclaimsv1alpha1.IPAMClaim) tenurev1alpha1.ReservationOwner {
	return tenurev1alpha1.ReservationOwner{
		Kind: tenurev1alpha1.OwnerIPAMClaim, Namespace: claim.Namespace, Name: claim.Name, UID: string(claim.UID),
		PodName: at.pod.Name, PodUID: string(at.pod.UID),
		ContainerID: at.req.ContainerID, Interface: at.req.IfName, Node: cp.node,
	}
}

func (cp *claimPath) keepRecorded(mine []*tenurev1alpha1.IPReservation, rec claims.Recorded) []*tenurev1alpha1.IPReservation {
	if rec.Empty() {
		return mine
	}
	recorded := map[netip.Addr]bool{}
	for _, p := range rec.Addresses {
		recorded[p.Addr()] = true
	}
	for _, p := range rec.Prefixes {
		recorded[p.Addr()] = true
	}
	var release []*tenurev1alpha1.IPReservation
	for _, r := range mine {
		if p, err := reservation.ParseItem(r.Spec.Address); err != nil || !recorded[p.Addr()] {
			release = append(release, r)
		}
	}
	rollback(cp.alloc, cp.log, release)
	return nil
}

// reserveForClaim makes sure every slot has an item owned by the claim.
// fresh reports whether any slot got an item the status does not record.
func (cp *claimPath) reserveForClaim(ctx context.Context, at *attachment, claim *ipamclaimsv1alpha1.IPAMClaim, rec claims.Recorded, req claims.Requested,
	tmpl allocator.Template, mine *[]*tenurev1alpha1.IPReservation) (held []heldSlot, fresh bool, err error) {
	ss := slots(at.cfg, true)
	wants := make([][]netip.Prefix, len(ss))
	for i, s := range ss {
		wants[i] = recordedIn(s, rec)
		// The claim is the truth: a request it contradicts is refused
		// before anything is written.
		if s.requested.IsValid() && len(wants[i]) > 0 && wants[i][0].Addr() != s.requested {
			return nil, false, codedf(CodeClaimMismatch, nil, "IPAMClaim %s records %s, but runtimeConfig.ips asks for %s", claims.Key(claim), wants[i][0].Addr(), s.requested)
		}
	}
	asked, err := claimRequestSlots(claims.Key(claim), ss, req)
	if err != nil {
		return nil, false, err
	}
	for i, s := range ss {
		if asked[i].IsValid() && s.requested.IsValid() && asked[i].Addr() != s.requested {
			return nil, false, codedf(CodeClaimMismatch, nil, "IPAMClaim %s asks for %s (annotation %s), but runtimeConfig.ips asks for %s", claims.Key(claim), asked[i].Addr(), claims.RequestedIPsAnnotation, s.requested)
		}
	}
	used := map[netip.Prefix]bool{}
	// An item the status does not record (an ADD died before recording,
	// or a CRD without status.delegatedPrefixes dropped the record) is
	// adopted, never allocated again. It may lie in blocks no window of
	// this node holds (the VM came from another node): ask the API
	// server, and only for a slot the status leaves empty, since that
	// LIST waits for the API server's watch cache to catch up with etcd
	// (tens of ms while anything else is written), and the ADDs of a
	// migration target or a restarted VM find every slot recorded. In
	// name order, which for prefixes of one length is address order,
	// every node adopts the one the dataplane serves.
	var owned []*tenurev1alpha1.IPReservation
	read := false
	heldBy := func() error {
		if read {
			return nil
		}
		var err error
		if owned, err = cp.store.ClaimHolds(ctx, string(claim.UID)); err != nil {
			return err
		}
		read = true
		slices.SortFunc(owned, func(x, y *tenurev1alpha1.IPReservation) int { return strings.Compare(x.Name, y.Name) })
		return nil
	}
	for i, s := range ss {
		tmpl := tmpl
		tmpl.Pool = s.Pool
		if want := wants[i]; len(want) > 0 {
			item := want[0]
			used[item] = true
			r, err := cp.alloc.For(s.Scope, s.Space).Allocate(ctx, item, tmpl)
			if err != nil {
				return nil, false, err
			}
			held = append(held, heldSlot{s, r})
			continue
		}
		fresh = true
		if err := heldBy(); err != nil {
			return nil, false, err
		}
		if asked[i].IsValid() || s.requested.IsValid() {
			item := asked[i]
			if !item.IsValid() {
				item = s.requestedItem()
			}
			r, err := cp.alloc.For(s.Scope, s.Space).Allocate(ctx, item, tmpl)
			if err != nil {
				return nil, false, err
			}
			if !slices.ContainsFunc(owned, func(o *tenurev1alpha1.IPReservation) bool { return o.Name == r.Name }) {
				*mine = append(*mine, r)
			}
			held = append(held, heldSlot{s, r})
			continue
		}
		if r := firstHeld(owned, s); r != nil { // left by an ADD that died before recording
			held = append(held, heldSlot{s, r})
			continue
		}
		al, err := cp.nextAllocator(at, s)
		if err != nil {
			return nil, false, err
		}
		r, err := al.AllocateNext(ctx, tmpl)
		if err != nil {
			return nil, false, err
		}
		*mine = append(*mine, r)
		held = append(held, heldSlot{s, r})
	}
	var unserved []claimItem
	for _, p := range rec.Addresses {
		if item := netip.PrefixFrom(p.Addr(), p.Addr().BitLen()); !used[item] {
			unserved = append(unserved, describeItem(p.String(), item, ss, wants))
		}
	}
	for _, p := range rec.Prefixes {
		if !used[p] {
			unserved = append(unserved, describeItem(p.String(), p, ss, wants))
		}
	}
	if len(unserved) > 0 {
		cp.whoMade(ctx, claim, unserved)
		return nil, false, &outsideRangeError{claim: claims.Key(claim), items: unserved}
	}
	return held, fresh, nil
}

// claimRequestError is a claim's request (claims.RequestedOf) the
// network cannot serve, with the condition reason OVN-Kubernetes gives it.
type claimRequestError struct {
	reason, msg string
}

func (e *claimRequestError) Error() string { return e.msg }

// claimRequestSlots places a claim's requested addresses and prefix in
// the slots ss: asked[i] is the item slot i must get, zero for none. A
// request no slot can serve is a *claimRequestError: outside every subnet
// (RequestedIPOutsideSubnet), or in one but never handed out, as the
// gateway or an excluded address (ReservedIPRequested).
func claimRequestSlots(claim string, ss []slot, req claims.Requested) ([]netip.Prefix, error) {
	asked := make([]netip.Prefix, len(ss))
	var ranges []string
	for _, s := range ss {
		ranges = append(ranges, s.Space.String())
	}
	for _, q := range req.Addresses {
		item := netip.PrefixFrom(q.Addr, q.Addr.BitLen())
		i := slices.IndexFunc(ss, func(s slot) bool { return s.Range != nil && s.Space.Contains(item) })
		if i < 0 {
			if j := slices.IndexFunc(ss, func(s slot) bool { return s.Range != nil && s.Range.Prefix.Contains(q.Addr) }); j >= 0 {
				return nil, &claimRequestError{ipamclaimsv1alpha1.ReasonReservedIPRequested, fmt.Sprintf(
					"IPAMClaim %s asks for %s (annotation %s), which range %s never hands out (its gateway, an excluded address, or outside its first and last address)",
					claim, q.Addr, claims.RequestedIPsAnnotation, ss[j].Space)}
			}
			return nil, &claimRequestError{ipamclaimsv1alpha1.ReasonRequestedIPOutsideSubnet, fmt.Sprintf(
				"IPAMClaim %s asks for %s (annotation %s), which is in no subnet of the network (%s)", claim, q.Addr, claims.RequestedIPsAnnotation, strings.Join(ranges, ", "))}
		}
		if q.Bits >= 0 && q.Bits != ss[i].Range.Prefix.Bits() {
			return nil, &claimRequestError{ipamclaimsv1alpha1.ReasonRequestedIPOutsideSubnet, fmt.Sprintf(
				"IPAMClaim %s asks for %s/%d (annotation %s), but its range %s is a /%d", claim, q.Addr, q.Bits, claims.RequestedIPsAnnotation, ss[i].Space, ss[i].Range.Prefix.Bits())}
		}
		asked[i] = item
	}
	if p := req.Prefix; p.IsValid() {
		i := slices.IndexFunc(ss, func(s slot) bool { return s.Range == nil && s.Space.Contains(p) })
		if i < 0 {
			return nil, &claimRequestError{ipamclaimsv1alpha1.ReasonRequestedIPOutsideSubnet, fmt.Sprintf(
				"IPAMClaim %s asks for the delegated prefix %s (annotation %s), which is no prefix of the network's delegation pool (%s)", claim, p, claims.RequestedPrefixAnnotation, strings.Join(ranges, ", "))}
		}
		asked[i] = p
	}
	return asked, nil
}

// claimItem is an item a claim's status records that its ADD cannot
// serve, and who made it.
type claimItem struct {
	// item is as the status records it; addr the item as a reservation
	// holds it (an address as a single-address prefix).
	item string
	addr netip.Prefix
	// slot is the configuration's range (or delegation pool) it lies in
	// and first that slot's item the ADD serves, for a second item of a
	// slot; both "" for an item outside every range.
	slot, first string
	// reservation is the reservation of the claim that holds it, with its
	// spec.owner's node and pod; "" when none does.
	reservation, node, pod string
}

// describeItem places item (recorded as recorded) among the slots ss,
// whose recorded items are wants.
func describeItem(recorded string, item netip.Prefix, ss []slot, wants [][]netip.Prefix) claimItem {
	c := claimItem{item: recorded, addr: item}
	for i, s := range ss {
		if len(wants[i]) > 0 && s.Space.Contains(item) {
			c.slot, c.first = s.Space.String(), wants[i][0].String()
		}
	}
	return c
}

// whoMade fills in, for each item, the claim's reservation that holds it
// and the node and pod its spec.owner names: the node whose agent wrote
// the item into the claim. The agent's cache holds other nodes'
// reservations as names only; those are read in full. Best effort: the
// ADD fails either way, and an item no reservation holds says so.
func (cp *claimPath) whoMade(ctx context.Context, claim *ipamclaimsv1alpha1.IPAMClaim, items []claimItem) {
	owned, err := cp.store.HeldBy(ctx, string(claim.UID))
	if err != nil {
		cp.log.Info("cannot list the claim's reservations to name who made its items", "claim", claims.Key(claim), "err", err)
		return
	}
	for i := range items {
		for _, r := range owned {
			p, err := reservation.ParseItem(r.Spec.Address)
			if err != nil || p != items[i].addr {
				continue
			}
			if r.Spec.Owner.Node == "" {
				full := &tenurev1alpha1.IPReservation{}
				if err := cp.client.Get(ctx, k8stypes.NamespacedName{Name: r.Name}, full); err == nil {
					r = full
				}
			}
			items[i].reservation, items[i].node, items[i].pod = r.Name, r.Spec.Owner.Node, r.Spec.Owner.PodName
			break
		}
	}
}

// recordedIn is what the claim's status records in slot s.
func recordedIn(s slot, rec claims.Recorded) []netip.Prefix {
	var want []netip.Prefix
	if s.Range != nil {
		for _, p := range rec.Addresses {
			if item := netip.PrefixFrom(p.Addr(), p.Addr().BitLen()); s.Space.Contains(item) {
				want = append(want, item)
			}
		}
		return want
	}
	for _, p := range rec.Prefixes {
		if s.Space.Contains(p) {
			want = append(want, p)
		}
	}
	return want
}

// outsideRangeError is an ADD of a claim whose status records items the
// ADD cannot serve: outside every range of the configuration, or a second
// item of one slot. It names each, the reservation that holds it and the
// node that made it, since that node's agent wrote it into the claim.
type outsideRangeError struct {
	claim string
	items []claimItem
}

func (e *outsideRangeError) Error() string {
	var parts []string
	for _, c := range e.items {
		what := c.item + " outside every range of the current configuration"
		if c.slot != "" {
			what = fmt.Sprintf("%s, a second item of the slot %s after %s", c.item, c.slot, c.first)
		}
		if c.reservation == "" {
			what += " (no reservation of the claim holds it)"
		} else {
			what += fmt.Sprintf(" (reservation %s, made on node %s for pod %s)", c.reservation, orUnknown(c.node), orUnknown(c.pod))
		}
		parts = append(parts, what)
	}
	return fmt.Sprintf("IPAMClaim %s records %s; nothing is re-allocated", e.claim, strings.Join(parts, "; "))
}

func orUnknown(s string) string {
	if s == "" {
		return "(unknown)"
	}
	return s
}
