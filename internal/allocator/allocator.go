// Package allocator hands out addresses and delegated prefixes by creating
// one IPReservation per item. Choosing a candidate reads only the agent's
// informer cache; the single write is the Create whose AlreadyExists tells
// that another node won the race, as in Kubernetes' ClusterIP allocator.
package allocator

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"net/netip"
	"slices"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/addrspace"
	"github.com/tenure-ipam/tenure/internal/reservation"
)

// Template is everything of a reservation but the item.
type Template struct {
	Owner      tenurev1alpha1.ReservationOwner
	CNINetwork string
	Pool       string
}

// Factory builds allocators sharing one store, writer and per-space cursors,
// and releases and settles reservations of any space.
type Factory struct {
	Store Store
	// Writer creates and deletes reservations.
	Writer client.Client
	// Live answers live reads (served from etcd, never from a cache):
	// the live list of a scope the cache says is full, to tell a really
	// full range from a stale cache, and the GETs that settle a Create
	// whose outcome is unknown.
	Live client.Reader
	// Node seeds where the search starts, so nodes rarely race.
	Node string
	// SettleTimeout bounds how long a Create whose outcome is unknown is
	// settled by live reads before the call answers an UnsettledError
	// (DefaultSettleTimeout when 0; the call's own deadline when sooner).
	SettleTimeout time.Duration
	// LiveListInterval is the least time between two live lists of one
	// scope (DefaultLiveListInterval when 0): a full scope retried by
	// many pods costs one list per interval, not one per ADD. What the
	// cache learns in between (a DEL) is used at once all the same.
	LiveListInterval time.Duration

	mu      sync.Mutex
	cursors map[string]uint64

	liveMu     sync.Mutex
	liveLast   map[string]*liveList // by scope
	liveFlight singleflight.Group
}

// DefaultLiveListInterval is Factory.LiveListInterval's default.
const DefaultLiveListInterval = 5 * time.Second

// WholeLiveListInterval is the least time between two live lists of a
// scope the window holds whole (when LiveListInterval is shorter): its
// watch reports every create and delete in the scope as it happens, so
// the cache answers "full", and the list only checks now and then that
// the window has not fallen behind.
const WholeLiveListInterval = 30 * time.Second

// DefaultSettleTimeout is Factory.SettleTimeout's default: well inside a
// runtime's patience for one CNI call (minutes), long enough to ride out
// an API server restart.
const DefaultSettleTimeout = 20 * time.Second

// maxWiden is how many blocks one cache pass may add to the window before
// it asks the live list instead: past a few full blocks in a row, one
// list of the scope says where the free items are for less than a walk
// that watches block after block.
const maxWiden = 4

// errWidened ends a cache pass that added maxWiden blocks to the window
// without finding a free candidate.
var errWidened = errors.New("window widened maxWiden times")

// For returns the allocator of space on scope (a reservation.Scope).
func (f *Factory) For(scope string, space addrspace.Space) Interface {
	return &allocator{f: f, scope: scope, label: reservation.ScopeLabel(scope), space: space}
}

type allocator struct {
	f *Factory
	// vet checks a candidate on the wire (ForVetted); nil checks none.
	vet   Vet
	scope string
	// label is reservation.ScopeLabel(scope), what the store's
	// labels and indexes know the scope by.
	label string
	space addrspace.Space
}

var _ Interface = (*allocator)(nil)

func (a *allocator) object(item netip.Prefix, t Template) *tenurev1alpha1.IPReservation {
	return reservation.New(reservation.Spec{
		Network: a.scope, Kind: a.space.Kind(), Item: item, Range: a.space.String(),
		Pool: t.Pool, CNINetwork: t.CNINetwork, Owner: t.Owner,
	})
}

func (a *allocator) cursorKey() string { return a.scope + "|" + a.space.String() }

func (a *allocator) start() uint64 {
	a.f.mu.Lock()
	defer a.f.mu.Unlock()
	if a.f.cursors == nil {
		a.f.cursors = map[string]uint64{}
	}
	k := a.cursorKey()
	if c, ok := a.f.cursors[k]; ok {
		return c
	}
	h := fnv.New64a()
	h.Write([]byte(a.f.Node + "|" + k))
	c := h.Sum64() % a.space.Size()
	a.f.cursors[k] = c
	return c
}

func (a *allocator) advance(next uint64) {
	a.f.mu.Lock()
	a.f.cursors[a.cursorKey()] = next % a.space.Size()
	a.f.mu.Unlock()
}

func (a *allocator) AllocateNext(ctx context.Context, t Template) (created *tenurev1alpha1.IPReservation, err error) {
	if !a.f.Store.HasSynced() {
		return nil, ErrNotReady
	}
	if a.space.Size() == 0 {
		return nil, &FullError{Range: a.space.String()}
	}
	// taken decides candidates; first from the cache, then, if the cache
	// says full or the pass has widened the window enough, from one live
	// list of the scope.
	a, refused := a.counting()
	defer func() {
		if len(*refused) > 0 && errors.Is(err, ErrFull) {
			err = &AnsweredError{Range: a.space.String(), Items: *refused}
		}
	}()
	taken := func(obj *tenurev1alpha1.IPReservation) bool { return !a.f.Store.TryAssume(obj) }
	created, err = a.firstFree(ctx, t, taken, true)
	widened := errors.Is(err, errWidened)
	if widened {
		err = nil
	}
	if created != nil || err != nil || a.f.Live == nil {
		if created == nil && err == nil {
			err = &FullError{Range: a.space.String(), Capacity: a.space.Capacity()}
		}
		return created, err
	}
	// A live list tells a full range from a stale cache, and says where
	// the free items are past the window; callers on one scope share
	// one list per LiveListInterval.
	q, fresh, lerr := a.f.list(ctx, a.scope, a.f.Store.Watching("", a.label))
	if lerr != nil {
		return nil, lerr
	}
	if q.heldIn(a.space) >= a.space.Capacity() {
		if fresh {
			a.watchWhole(ctx)
		}
		return a.full(ctx, q, t)
	}
	// A list reused from an earlier call says nothing of what was created
	// since, which the cache may hold: only a fresh one may overrule the
	// cache (a stale cache's free address then waits for the next list, or
	// for the cache to catch up, which the first pass sees at once). Past
	// the window, where the cache says nothing, any recent list guides
	// the pass, and the Create decides.
	if fresh || widened {
		taken = func(obj *tenurev1alpha1.IPReservation) bool {
			// A name this node released after the list was made is free
			// as far as the list can tell (the Create decides).
			if _, ok := q.held[obj.Name]; ok && !a.f.Store.ReleasedSince(obj.Name, q.at) {
				return true
			}
			if fresh {
				return !a.f.Store.AssumeOverCache(obj)
			}
			return !a.f.Store.TryAssume(obj)
		}
		if created, err := a.firstFree(ctx, t, taken, false); created != nil || err != nil {
			return created, err
		}
	}
	return a.full(ctx, q, t)
}

// full answers an AllocateNext that found no free candidate: the FullError,
// unless the template's attachment already holds a candidate of the space
// (a reservation of an earlier attempt the caller's cache did not show):
// then that reservation, read live. An attachment is never told a range
// is full while it holds an address of it.
//
// The list's names are looked up by the owner's UID: a waiting pod holds
// none, so "full" costs no read and no walk of the scope's names.
func (a *allocator) full(ctx context.Context, q *liveList, t Template) (*tenurev1alpha1.IPReservation, error) {
	for _, name := range q.byOwner[t.Owner.UID] {
		if !InSpace(a.space, name) {
			continue
		}
		cur := &tenurev1alpha1.IPReservation{}
		if err := a.f.Live.Get(ctx, types.NamespacedName{Name: name}, cur); err != nil {
			if apierrors.IsNotFound(err) {
				continue
			}
			return nil, fmt.Errorf("reading %s, which the range's owner %s holds: %w", name, t.Owner.UID, err)
		}
		if o := cur.Spec.Owner; o.UID == t.Owner.UID && o.ContainerID == t.Owner.ContainerID && o.Interface == t.Owner.Interface {
			a.f.Store.Confirm(cur)
			return cur, nil
		}
	}
	return nil, &FullError{Range: a.space.String(), Capacity: a.space.Capacity()}
}

// watchWhole has the store's window take in the whole scope once a live
// list found its range full: every delete in it is then a waiting pod's
// chance, seen at once rather than at the next list. The watch starts in
// the background (a full scope is a list of all its reservations, which
// this ADD's "full" answer need not wait for), outliving the ADD.
func (a *allocator) watchWhole(ctx context.Context) {
	w, scope := a.f.Store, a.label
	if w.Watching("", scope) || w.TakingInWhole(scope) {
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), wholeScopeSync)
		defer cancel()
		// The answer stands without it: a failed Watch only means a
		// freed address waits for the next live list.
		_ = w.Watch(ctx, scope, "")
	}()
}

// wholeScopeSync bounds the list of a full scope's reservations.
const wholeScopeSync = 5 * time.Minute

// widen makes sure the store's window holds the block of item before the
// cache pass reads the cache about it; errWidened once the pass has added
// maxWiden blocks.
func (a *allocator) widen(ctx context.Context, item netip.Prefix, added *int) error {
	w, scope := a.f.Store, a.label
	block := reservation.BlockLabel(scope, a.space.Kind() == tenurev1alpha1.KindDelegatedPrefix, item)
	if w.Watching(block, scope) {
		return nil
	}
	if w.TakingInWhole(scope) {
		// The window is taking in the whole scope (a live list found
		// its range full): a Watch of a block would wait behind that list
		// of every reservation, seconds on a large scope. The live list
		// answers the pass meanwhile, "full" included.
		return errWidened
	}
	if *added >= maxWiden {
		return errWidened
	}
	*added++
	if w.WatchedBlocks(scope) >= a.wholeAfter() {
		block = "" // the whole scope
	}
	if err := w.Watch(ctx, scope, block); errors.Is(err, ErrTakingInWhole) {
		return errWidened // as above: the live list answers meanwhile
	} else if err != nil {
		return err
	}
	return nil
}

// ErrTakingInWhole is a Store's answer to a Watch of a block whose whole
// scope it is taking in (a list of every reservation of it): the
// allocator asks the live list rather than wait for it.
var ErrTakingInWhole = errors.New("reservation window: taking in the whole scope")

// A window that needed wholeAfter blocks of one scope takes in the whole
// scope instead of a next block: wholeScopeMinBlocks, or a
// wholeScopeShare of the range's blocks if more. Each widening relists
// every block the window holds, so a walk through a nearly full range
// (one free address in every other block) costs the square of its length
// block by block, and one list of the whole scope once; a node that has
// walked a quarter of a range is likely to walk the rest. A range of
// few blocks is never watched whole this way (its nodes' other events
// stay with the nodes that work in their blocks), nor is one too large
// to walk a quarter of.
func (a *allocator) wholeAfter() int {
	blocks := a.space.Capacity()>>reservation.BlockBits + 1
	return int(max(wholeScopeMinBlocks, min(blocks/wholeScopeShare, 1<<30)))
}

const (
	wholeScopeMinBlocks = 8
	wholeScopeShare     = 4
)

// skipHeld is where the first pass resumes when the cache holds the
// candidate at idx: past the whole run of held addresses it starts, by the
// store's index. ok false: not an address space (prefixes are not indexed),
// or the candidate is not held.
func (a *allocator) skipHeld(idx uint64, item netip.Prefix) (next uint64, ok bool) {
	as, isAddr := a.space.(addrspace.AddressSpace)
	if !isAddr {
		return 0, false
	}
	free, found := a.f.Store.NextUnheldAddress(a.label, item.Addr())
	if found && free == item.Addr() {
		return 0, false
	}
	if !found {
		return a.space.Size(), true
	}
	off, in := as.Range.Offset(free)
	if !in {
		return a.space.Size(), true // past the range's end
	}
	return off, true
}

// firstFree creates the reservation of the first candidate from this node's
// cursor on, wrapping around, that taken does not refuse and no other node
// has created; nil when every candidate was seen taken. The walk visits
// candidates only (addrspace.Space.Next jumps over excluded blocks wherever the
// cursor lands), and each candidate it passes is held by a reservation, so
// the walk is as long as the reservations that exist, not the space: it
// needs no bound to end, and reaching the end means full.
//
// With cache (the cache pass), the store's window is made to hold each
// candidate's block before the cache is read about it (errWidened after
// maxWiden new blocks), and runs the cache holds are jumped over by the
// store's NextUnheldAddress, so the walk costs the number of runs, not of
// reservations: a full /16 is one step.
func (a *allocator) firstFree(ctx context.Context, t Template, taken func(*tenurev1alpha1.IPReservation) bool, cache bool) (*tenurev1alpha1.IPReservation, error) {
	start, size := a.start(), a.space.Size()
	widened := 0
	var cooled []cooling
	for _, span := range [...]struct{ from, to uint64 }{{start, size}, {0, start}} {
		for i := span.from; i < span.to; {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			idx, item, ok := a.space.Next(i)
			if !ok || idx >= span.to {
				break
			}
			if cache {
				if err := a.widen(ctx, item, &widened); err != nil {
					return nil, err
				}
				if next, skip := a.skipHeld(idx, item); skip {
					i = next
					continue
				}
			}
			i = idx + 1 // idx < size <= MaxUint64: no overflow
			if cache && a.f.Store.Taken(reservation.NameInScope(a.label, a.space.Kind(), item)) {
				// Assumed by an ADD in flight that read the cursor before
				// this one (both waited on the window): passed by its name,
				// not built whole to be refused.
				continue
			}
			if at, ok := a.f.Store.Cooling(reservation.NameInScope(a.label, a.space.Kind(), item), t.Owner); ok {
				cooled = append(cooled, cooling{idx: idx, item: item, at: at})
				continue
			}
			if created, err := a.try(ctx, idx, item, t, taken); created != nil || err != nil {
				return created, err
			}
		}
	}
	// Nothing else is free: the cooling candidates, released longest ago
	// first.
	slices.SortStableFunc(cooled, func(x, y cooling) int { return x.at.Compare(y.at) })
	for _, c := range cooled {
		if created, err := a.try(ctx, c.idx, c.item, t, taken); created != nil || err != nil {
			return created, err
		}
	}
	return nil, nil
}

// cooling is a candidate firstFree passed over because another owner
// released it within the cooldown: its fallback.
type cooling struct {
	idx  uint64
	item netip.Prefix
	at   time.Time
}

// try creates the reservation of the candidate item at idx unless taken
// refuses it, the vet finds it answering, or another node has created it
// (nil, nil).
func (a *allocator) try(ctx context.Context, idx uint64, item netip.Prefix, t Template, taken func(*tenurev1alpha1.IPReservation) bool) (*tenurev1alpha1.IPReservation, error) {
	obj := a.object(item, t)
	if taken(obj) {
		return nil, nil
	}
	// Past the candidate once it is assumed, not once created: the node's
	// concurrent ADDs start after the items in flight rather than each
	// building and refusing every one of them first.
	a.advance(idx + 1)
	if ok, err := a.vetted(ctx, obj.Name, item); err != nil || !ok {
		return nil, err
	}
	created, err := a.create(ctx, obj)
	if apierrors.IsAlreadyExists(err) {
		a.f.Store.MarkTakenElsewhere(obj.Name)
		return nil, nil
	}
	return created, err
}

// liveList is one live list of a scope: the names held then.
type liveList struct {
	at      time.Time
	held    map[string]string   // name -> owner UID (its label)
	byOwner map[string][]string // owner UID -> the names it holds

	mu     sync.Mutex
	inSpan map[string]uint64 // by addrspace.Space.String(): held names inside it
}

// heldIn counts the listed names that are candidates of space, once per
// space per list.
func (q *liveList) heldIn(space addrspace.Space) uint64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	key := string(space.Kind()) + "|" + space.String()
	if n, ok := q.inSpan[key]; ok {
		return n
	}
	var n uint64
	for name := range q.held {
		if InSpace(space, name) {
			n++
		}
	}
	if q.inSpan == nil {
		q.inSpan = map[string]uint64{}
	}
	q.inSpan[key] = n
	return n
}

// list returns the scope's live list: the last one if younger than
// LiveListInterval (WholeLiveListInterval at least when the window holds
// the scope whole) (fresh false), else a new one shared by every
// concurrent caller (fresh true).
func (f *Factory) list(ctx context.Context, scope string, whole bool) (q *liveList, fresh bool, err error) {
	interval := f.LiveListInterval
	if interval <= 0 {
		interval = DefaultLiveListInterval
	}
	if whole {
		interval = max(interval, WholeLiveListInterval)
	}
	f.liveMu.Lock()
	last := f.liveLast[scope]
	f.liveMu.Unlock()
	if last != nil && time.Since(last.at) < interval {
		return last, false, nil
	}
	type flight struct {
		q      *liveList
		listed bool
	}
	v, err, _ := f.liveFlight.Do(scope, func() (any, error) {
		// A caller that came in just after the previous flight landed
		// takes its answer rather than listing again.
		f.liveMu.Lock()
		last := f.liveLast[scope]
		f.liveMu.Unlock()
		if last != nil && time.Since(last.at) < interval {
			return flight{q: last}, nil
		}
		held, err := f.liveNames(ctx, scope)
		if err != nil {
			return nil, err
		}
		q := &liveList{at: time.Now(), held: held, byOwner: make(map[string][]string)}
		for name, owner := range held {
			q.byOwner[owner] = append(q.byOwner[owner], name)
		}
		f.liveMu.Lock()
		if f.liveLast == nil {
			f.liveLast = map[string]*liveList{}
		}
		f.liveLast[scope] = q
		f.liveMu.Unlock()
		return flight{q: q, listed: true}, nil
	})
	if err != nil {
		return nil, false, err
	}
	fl := v.(flight)
	return fl.q, fl.listed, nil
}

func (f *Factory) liveNames(ctx context.Context, scope string) (map[string]string, error) {
	// Metadata only: the names are the answer, and a full range of a large
	// scope is thousands of objects.
	list := reservation.NewMetadataList()
	if err := f.Live.List(ctx, list, client.MatchingLabels{reservation.LabelNetwork: reservation.ScopeLabel(scope)}); err != nil {
		return nil, fmt.Errorf("listing reservations of scope %s: %w", scope, err)
	}
	held := make(map[string]string, len(list.Items))
	for i := range list.Items {
		held[list.Items[i].Name] = list.Items[i].Labels[reservation.LabelOwnerUID]
	}
	return held, nil
}

// create writes obj, which the caller has assumed in the store. A Create
// the API server may have committed although no reply said so is settled
// by live reads before it returns (settle).
func (a *allocator) create(ctx context.Context, obj *tenurev1alpha1.IPReservation) (*tenurev1alpha1.IPReservation, error) {
	created := obj.DeepCopy()
	err := a.f.Writer.Create(ctx, created)
	if err == nil {
		a.f.Store.Confirm(created)
		return created, nil
	}
	if Definite(err) || a.f.Live == nil {
		a.f.Store.Forget(obj.Name)
		return nil, err
	}
	return a.f.settle(ctx, obj, err, true)
}

// Definite reports whether a write's error says the API server did not
// write: an API status below 500 (AlreadyExists, Conflict, Forbidden,
// Invalid, TooManyRequests, ...). Anything else (a transport error, EOF or
// a reset after the request went out, a timeout, a 5xx) leaves the outcome
// unknown: the object may exist although the reply was lost.
func Definite(err error) bool {
	var st apierrors.APIStatus
	if errors.As(err, &st) {
		code := st.Status().Code
		return code > 0 && code < 500
	}
	return false
}

// Settle finds out what became of a Create of obj whose outcome is unknown
// (see settle); with recreate false a free name is answered (nil, nil)
// and nothing is written.
func (f *Factory) Settle(ctx context.Context, obj *tenurev1alpha1.IPReservation, recreate bool) (*tenurev1alpha1.IPReservation, error) {
	return f.settle(ctx, obj, nil, recreate)
}

// settle reads obj's name live (a live GET, retried with backoff within
// SettleTimeout and ctx):
//   - it exists and belongs to obj's attachment: the Create committed, and
//     that object is the answer;
//   - it belongs to someone else: AlreadyExists, as if the Create had been
//     refused, so the caller moves on;
//   - it does not exist: the Create did not commit, or has not yet. With
//     recreate it is sent again under the same name, so a first Create
//     still in flight at the API server can only meet AlreadyExists, and
//     the attachment never ends up with two items where it asked for one;
//     without, (nil, nil).
//
// Out of time, the name stays marked as possibly obj's (MarkUnsettled) and
// the answer is an UnsettledError.
func (f *Factory) settle(ctx context.Context, obj *tenurev1alpha1.IPReservation, cause error, recreate bool) (*tenurev1alpha1.IPReservation, error) {
	timeout := f.SettleTimeout
	if timeout <= 0 {
		timeout = DefaultSettleTimeout
	}
	sctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	delay := 50 * time.Millisecond
	var last error // what the last read or create met
	for {
		cur := &tenurev1alpha1.IPReservation{}
		err := f.Live.Get(sctx, types.NamespacedName{Name: obj.Name}, cur)
		switch {
		case err == nil && reservation.SameAttachment(cur, obj):
			f.Store.Confirm(cur)
			return cur, nil
		case err == nil:
			f.Store.Forget(obj.Name)
			f.Store.MarkTakenElsewhere(obj.Name)
			return nil, apierrors.NewAlreadyExists(tenurev1alpha1.GroupVersion.WithResource("ipreservations").GroupResource(), obj.Name)
		case apierrors.IsNotFound(err) && !recreate:
			f.Store.Forget(obj.Name)
			return nil, nil
		case apierrors.IsNotFound(err):
			created := obj.DeepCopy()
			cerr := f.Writer.Create(sctx, created)
			switch {
			case cerr == nil:
				f.Store.Confirm(created)
				return created, nil
			case apierrors.IsAlreadyExists(cerr):
				continue // whose: read it
			case Definite(cerr):
				f.Store.Forget(obj.Name)
				return nil, cerr
			}
			last = cerr
		default:
			last = err
		}
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-sctx.Done():
			t.Stop()
		}
		if sctx.Err() != nil {
			if last == nil {
				last = cause
			}
			f.Store.MarkUnsettled(obj)
			return nil, &UnsettledError{Name: obj.Name, Err: last}
		}
		delay = min(2*delay, 2*time.Second)
	}
}

func (a *allocator) Allocate(ctx context.Context, item netip.Prefix, t Template) (*tenurev1alpha1.IPReservation, error) {
	if !a.f.Store.HasSynced() {
		return nil, ErrNotReady
	}
	if !a.space.Contains(item) {
		return nil, &ErrNotInRange{Item: reservation.ItemString(a.space.Kind(), item), ValidRange: a.space.String()}
	}
	obj := a.object(item, t)
	if u, ok := a.f.Store.Unsettled(obj.Name); ok && reservation.SameAttachment(u, obj) && a.f.Live != nil {
		// An earlier call's Create of this very item is unsettled: settle it
		// first; its answer is this one's.
		cur, err := a.f.settle(ctx, u, nil, true)
		if !apierrors.IsAlreadyExists(err) {
			return cur, err
		}
		return a.holder(ctx, obj, t)
	}
	if cur, ok := a.f.Store.Get(obj.Name); ok && cur.Spec.Owner.UID == t.Owner.UID && cur.UID != "" {
		return cur, nil
	}
	// The cache may be stale either way; the API server decides. When
	// this node has an unconfirmed write of the name itself, the API
	// server is asked who holds it without a create, whose failure would
	// make the store forget that write.
	for attempt := 0; ; attempt++ {
		if !a.f.Store.AssumeOverCache(obj) {
			return a.holder(ctx, obj, t)
		}
		created, err := a.create(ctx, obj)
		if err == nil {
			return created, nil
		}
		if !apierrors.IsAlreadyExists(err) || a.f.Live == nil {
			return nil, err
		}
		cur, err := a.holder(ctx, obj, t)
		if apierrors.IsNotFound(err) && attempt < 2 {
			continue // released between the create and the read: ask again
		}
		return cur, err
	}
}

// holder answers Allocate for an item someone holds: the holder's
// reservation when it is the template's owner, else a ConflictError naming
// the holder.
func (a *allocator) holder(ctx context.Context, obj *tenurev1alpha1.IPReservation, t Template) (*tenurev1alpha1.IPReservation, error) {
	cur, ok := a.f.Store.Get(obj.Name)
	if a.f.Live != nil {
		cur = &tenurev1alpha1.IPReservation{}
		if err := a.f.Live.Get(ctx, types.NamespacedName{Name: obj.Name}, cur); err != nil {
			return nil, fmt.Errorf("reading holder of %s: %w", obj.Spec.Address, err)
		}
	} else if !ok {
		return nil, fmt.Errorf("%s: %w", obj.Spec.Address, ErrAllocated)
	}
	if cur.Spec.Owner.UID == t.Owner.UID {
		return cur, nil
	}
	return nil, &ConflictError{Item: obj.Spec.Address, Holder: cur.Spec.Owner}
}

// Release deletes exactly the reservation given: the UID precondition
// makes it a no-op when the name has since been re-created for someone
// else. A reservation without a UID is deleted by name, whoever holds it.
// A Factory without a Store (an operator's tool) only deletes.
func (f *Factory) Release(ctx context.Context, r *tenurev1alpha1.IPReservation) error {
	opts := []client.DeleteOption{}
	if r.UID != "" {
		uid := r.UID
		opts = append(opts, client.Preconditions{UID: &uid})
	}
	err := f.Writer.Delete(ctx, &tenurev1alpha1.IPReservation{ObjectMeta: metav1.ObjectMeta{Name: r.Name}}, opts...)
	if apierrors.IsConflict(err) {
		return nil // the name was re-created for another owner: not ours to free
	}
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	if f.Store != nil {
		f.Store.Released(r.Name, r.UID)
	}
	return nil
}
