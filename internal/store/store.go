// Package store is the node agent's view of IPReservations: caches that
// answer "is this name taken?" and "what does this attachment hold?"
// without an API read, plus the agent's own writes that the caches have not
// reported yet.
//
// Two caches feed it, because what an agent must know of the cluster's
// reservations and of its own node's differs by orders of magnitude:
//   - the window: other nodes' reservations of the blocks this agent
//     allocates from (label ipam.tenure.dev/block, 64 addresses each) and
//     of the scopes it found full, as metadata only (name, UID, the
//     owner-UID label); this node's own are the node cache's alone. A
//     name says the scope and the item, so this answers "taken, and by
//     whom" for any address the agent may pick. Watching only its blocks,
//     rather than every reservation, is what keeps an ADD's watch event
//     from going to every node: the API server's cost of an ADD stays flat
//     as nodes are added (docs/performance.md, "fanout"). The allocator
//     widens the window (Watch) before it trusts the cache about a block.
//   - the node cache: this node's reservations (label ipam.tenure.dev/node), whole,
//     which is what ADD idempotency, DEL, CHECK and GC read.
//
// Every reservation a node agent creates carries its own node label, so its
// own writes are confirmed by the node cache's informer.
package store

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/kube"
	"github.com/tenure-ipam/tenure/internal/reservation"
)

const (
	indexAttachment = "attachment"
	indexOwnerUID   = reservation.OwnerIndex
	indexScope      = "scope"
)

// assumedTTL bounds how long a write of ours stays visible without the
// informer confirming it; a watch delivers within milliseconds normally.
const assumedTTL = 2 * time.Minute

// Store answers from the window, the node cache's informer and the agent's
// unconfirmed writes.
type Store struct {
	// nodeLabel is reservation.NodeLabel(node): what this node's
	// reservations carry and the node cache's informer selects.
	nodeLabel string
	c         client.WithWatch
	win       atomic.Pointer[window]    // *reservation.View, from metadata: the watched blocks and scopes
	nodeCache cache.SharedIndexInformer // *tenurev1alpha1.IPReservation, this node's

	// winMu serialises window changes; wanted is when each block ("b:"
	// scope label "|" block label), scope ("n:" label) or scope's
	// unlabelled reservations ("l:" label) was last asked for, and runCtx
	// the context the window's informers run under (set by Run).
	winMu    sync.Mutex
	wanted   map[string]time.Time
	runCtx   context.Context
	rebuilds atomic.Int64
	// takingInWhole counts the Watch calls of a whole scope under way,
	// by scope label (TakingInWhole), and wholeBegun is closed (and
	// made anew) when one begins; wholeMu guards them, apart from the
	// rebuild such a call holds throughout. rebuild (one slot) is held by
	// the Watch that rebuilds the window.
	wholeMu       sync.Mutex
	takingInWhole map[string]int
	wholeBegun    chan struct{}
	rebuild       chan struct{}

	mu sync.Mutex
	// assumed: created by us, not yet seen by the informers.
	assumed map[string]assumedEntry
	// released: deleted by us, an informer may still hold them.
	released map[string]releasedEntry
	// cool: the names released lately, kept from other owners
	// (cooldown.go).
	cool cooldown

	// clusterAdded is told each name the window adds (benchmarks time the
	// fan-out with it); set before Run.
	clusterAdded func(name string)

	health health
}

type assumedEntry struct {
	obj *tenurev1alpha1.IPReservation
	at  time.Time
	// unsettled: a Create of obj whose outcome no reply told (a transport
	// error, a timeout, a 5xx) and no live read has settled yet. The name
	// stays set aside for its owner until one does (Unsettled).
	unsettled bool
}

// unsettledTTL bounds how long an unsettled Create stays set aside. Past
// it, a committed object is long in the node cache (it carries this
// node's label), and a stale cache is read past by the live list the
// agent makes while Fresh is false.
const unsettledTTL = 10 * time.Minute

// New builds the store of node on a watching client. Call Run, then
// WaitForSync.
func New(c client.WithWatch, node string) *Store {
	s := &Store{nodeLabel: reservation.NodeLabel(node), c: c, assumed: map[string]assumedEntry{}, released: map[string]releasedEntry{}, wanted: map[string]time.Time{}, takingInWhole: map[string]int{},
		wholeBegun: make(chan struct{}), rebuild: make(chan struct{}, 1)}
	s.win.Store(&window{held: &heldIndex{}, cancel: func() {}})
	s.nodeCache = kube.NewInformer(&trackedClient{WithWatch: c, s: s}, func() client.ObjectList { return &tenurev1alpha1.IPReservationList{} }, &tenurev1alpha1.IPReservation{}, cache.Indexers{
		indexAttachment: func(obj any) ([]string, error) {
			r := obj.(*tenurev1alpha1.IPReservation)
			if r.Spec.Owner.ContainerID == "" {
				return nil, nil
			}
			return []string{reservation.AttachmentKey(r.Spec.Owner.ContainerID, r.Spec.Owner.Interface)}, nil
		},
		indexOwnerUID: func(obj any) ([]string, error) {
			return []string{obj.(*tenurev1alpha1.IPReservation).Spec.Owner.UID}, nil
		},
		indexScope: func(obj any) ([]string, error) {
			return []string{reservation.ScopeLabelOf(obj.(*tenurev1alpha1.IPReservation).Name)}, nil
		},
	}, client.MatchingLabels{reservation.LabelNode: s.nodeLabel})
	_ = s.nodeCache.SetTransform(reservation.Compact)
	// One handler, not three: the informer wakes a pair of goroutines per
	// handler for every event.
	_, _ = s.nodeCache.AddEventHandler(handlers{s.confirmations(), s.heldInNodeCache(), cache.ResourceEventHandlerFuncs{DeleteFunc: s.sawDeleted}})
	return s
}

// handlers is one informer handler that calls each of its own in turn.
type handlers []cache.ResourceEventHandler

func (hs handlers) OnAdd(obj any, isInInitialList bool) {
	for _, h := range hs {
		h.OnAdd(obj, isInInitialList)
	}
}

func (hs handlers) OnUpdate(oldObj, newObj any) {
	for _, h := range hs {
		h.OnUpdate(oldObj, newObj)
	}
}

func (hs handlers) OnDelete(obj any) {
	for _, h := range hs {
		h.OnDelete(obj)
	}
}

// confirmations is the handler every informer of the store gets: it
// settles the agent's unconfirmed writes and releases, and keeps the
// cooldown's ledger.
func (s *Store) confirmations() cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if name, _, ok := nameUID(obj); ok {
				s.cool.held(name)
			}
			s.observed(obj)
		},
		UpdateFunc: func(_, obj any) { s.observed(obj) },
		DeleteFunc: s.deleted,
	}
}

func newMetadataList() client.ObjectList { return reservation.NewMetadataList() }

// observed drops an assumption once a cache holds the object it stands for:
// the node cache for this node's objects (what ByAttachment reads), the
// window for any other.
func (s *Store) observed(obj any) {
	name, uid, ok := nameUID(obj)
	if !ok {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	a, ok := s.assumed[name]
	if ok && a.unsettled {
		// The Create committed: the node cache now holds the object
		// whole, and says whose it is.
		if r, inNodeCache := s.nodeCacheGet(name, uid); inNodeCache && reservation.SameAttachment(r, a.obj) {
			delete(s.assumed, name)
		}
		return
	}
	if !ok || a.obj.UID != uid {
		return
	}
	if a.obj.Labels[reservation.LabelNode] == s.nodeLabel {
		if _, inNodeCache := s.nodeCacheGet(name, uid); !inNodeCache {
			return
		}
	}
	delete(s.assumed, name)
}

// deleted forgets a release once no cache holds the name any more, and
// starts the name's cooldown.
func (s *Store) deleted(obj any) {
	s.sawFreed(obj)
	name, _, ok := nameUID(kube.DeletedObject(obj))
	if !ok {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	_, inCluster := s.win.Load().get(name)
	_, inNodeCache, _ := s.nodeCache.GetIndexer().GetByKey(name)
	if !inCluster && !inNodeCache {
		delete(s.released, name)
	}
}

func nameUID(obj any) (string, types.UID, bool) {
	m, err := meta.Accessor(obj)
	if err != nil {
		return "", "", false
	}
	return m.GetName(), m.GetUID(), true
}

func (s *Store) nodeCacheGet(name string, uid types.UID) (*tenurev1alpha1.IPReservation, bool) {
	obj, ok, _ := s.nodeCache.GetIndexer().GetByKey(name)
	if !ok {
		return nil, false
	}
	r := obj.(*tenurev1alpha1.IPReservation)
	return r, uid == "" || r.UID == uid
}

// OnClusterAdd has fn told the name of each reservation the window adds,
// from the informer's goroutine (fn must be quick). Call before Run.
func (s *Store) OnClusterAdd(fn func(name string)) { s.clusterAdded = fn }

// Run runs the node cache's informer, and lets the window's run, until ctx ends.
func (s *Store) Run(ctx context.Context) {
	s.winMu.Lock()
	s.runCtx = ctx
	s.winMu.Unlock()
	s.nodeCache.RunWithContext(ctx)
	s.winMu.Lock()
	s.win.Load().cancel()
	s.winMu.Unlock()
}

// WaitForSync blocks until the node cache's initial list is in, or ctx ends.
func (s *Store) WaitForSync(ctx context.Context) error {
	if !cache.WaitForCacheSync(ctx.Done(), s.HasSynced) {
		return fmt.Errorf("reservation cache did not sync: %w", ctx.Err())
	}
	return nil
}

// HasSynced reports whether the node cache's initial list is in (the window is
// synced whenever it is in place: see Watch).
func (s *Store) HasSynced() bool { return s.nodeCache.HasSynced() }

// Get returns the reservation of that name as this agent knows it. For a
// name of another node it is a partial reservation (see partial), for this node's the
// whole object. The object is shared: callers must not modify it.
func (s *Store) Get(name string) (*tenurev1alpha1.IPReservation, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.getLocked(name)
}

func (s *Store) getLocked(name string) (*tenurev1alpha1.IPReservation, bool) {
	if a, ok := s.assumed[name]; ok && !s.hiddenLocked(name, a.obj.UID) {
		return a.obj, true
	}
	if r, ok := s.nodeCacheGet(name, ""); ok && !s.hiddenLocked(name, r.UID) {
		return r, true
	}
	e, ok := s.win.Load().get(name)
	if !ok || s.hiddenLocked(name, e.UID) {
		return nil, false
	}
	return partial(e), true
}

// releasedEntry records one of our deletes: when, and of which object.
type releasedEntry struct {
	at  time.Time
	uid types.UID // empty: deleted by name, whatever held it
}

// hiddenLocked reports whether our release of name hides the object of
// uid: a release hides the object it deleted, never one created under the
// name since (a DEL's reply can arrive after an ADD on this node re-created
// the name the informer had already reported free).
func (s *Store) hiddenLocked(name string, uid types.UID) bool {
	e, ok := s.released[name]
	return ok && (e.uid == "" || uid == "" || e.uid == uid)
}

// partial is what the window's view of a reservation says whatever the
// view's spec summary says: its name, UID, owner UID, and kind and item
// (decoded from the name). Spec fields beyond those are empty: another
// node's summary is no fact the agent acts on.
func partial(v *reservation.View) *tenurev1alpha1.IPReservation {
	r := &tenurev1alpha1.IPReservation{ObjectMeta: metav1.ObjectMeta{Name: v.Name, UID: v.UID, ResourceVersion: v.ResourceVersion}}
	r.Spec.Owner.UID = v.Owner.UID
	if v.Address != "" {
		r.Spec.Kind, r.Spec.Address = v.Kind, v.Address
	}
	return r
}

// Taken reports whether a name is held, counting our unconfirmed writes.
func (s *Store) Taken(name string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.takenLocked(name)
}

// takenLocked is getLocked without building a partial reservation: the allocator asks it
// of every candidate it passes over.
func (s *Store) takenLocked(name string) bool {
	if _, released := s.released[name]; !released {
		if _, ok := s.assumed[name]; ok {
			return true
		}
		if _, ok, _ := s.nodeCache.GetIndexer().GetByKey(name); ok {
			return true
		}
		_, ok := s.win.Load().get(name)
		return ok
	}
	_, ok := s.getLocked(name)
	return ok
}

// TryAssume marks name as ours before the Create is sent, so concurrent
// allocations on this node never pick it too. False: it is already taken.
func (s *Store) TryAssume(r *tenurev1alpha1.IPReservation) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.takenLocked(r.Name) {
		return false
	}
	delete(s.released, r.Name)
	s.assumed[r.Name] = assumedEntry{obj: r, at: time.Now()}
	return true
}

// Confirm replaces the assumed placeholder with the created object.
func (s *Store) Confirm(r *tenurev1alpha1.IPReservation) {
	s.mu.Lock()
	defer s.mu.Unlock()
	confirmed := false
	if r.Labels[reservation.LabelNode] == s.nodeLabel {
		_, confirmed = s.nodeCacheGet(r.Name, r.UID)
	} else if e, ok := s.win.Load().get(r.Name); ok {
		confirmed = e.UID == r.UID
	}
	if confirmed {
		delete(s.assumed, r.Name)
		return
	}
	s.assumed[r.Name] = assumedEntry{obj: r, at: time.Now()}
}

// MarkUnsettled keeps r's name set aside for r's owner after a Create
// whose outcome is unknown, until a live read settles it (Settled) or the
// node cache reports the object.
func (s *Store) MarkUnsettled(r *tenurev1alpha1.IPReservation) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.released, r.Name)
	s.assumed[r.Name] = assumedEntry{obj: r, at: time.Now(), unsettled: true}
}

// Unsettled returns the reservation an unsettled Create of that name was
// to make, if there is one.
func (s *Store) Unsettled(name string) (*tenurev1alpha1.IPReservation, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if a, ok := s.assumed[name]; ok && a.unsettled {
		return a.obj, true
	}
	return nil, false
}

// Forget drops an assumption whose Create failed.
func (s *Store) Forget(name string) {
	s.mu.Lock()
	delete(s.assumed, name)
	s.mu.Unlock()
}

// MarkTakenElsewhere records that a Create met AlreadyExists, so this agent
// stops offering the name until its cache has the real object.
func (s *Store) MarkTakenElsewhere(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.takenLocked(name) {
		return
	}
	s.assumed[name] = assumedEntry{obj: &tenurev1alpha1.IPReservation{ObjectMeta: metav1.ObjectMeta{Name: name}}, at: time.Now()}
}

// Released records a successful delete of ours, of the object of uid
// (empty: whatever held the name). The held index forgets
// the address at once, so the next search on this node finds it before the
// informer reports the delete.
func (s *Store) Released(name string, uid types.UID) {
	s.mu.Lock()
	if a, ok := s.assumed[name]; ok && uid != "" && a.obj.Spec.Owner.UID != "" && a.obj.UID != uid {
		// Our create of the name, sent after the informer reported this
		// delete: the release is of an object gone before it.
		s.mu.Unlock()
		return
	}
	if r, ok := s.getLocked(name); ok {
		s.cool.record(name, r.Spec.Owner.UID, r.Spec.Owner.Interface)
	} else {
		s.cool.record(name, "", "")
	}
	delete(s.assumed, name)
	s.released[name] = releasedEntry{at: time.Now(), uid: uid}
	s.mu.Unlock()
	// After the unlock: a window installed meanwhile applied the assumed writes
	// above under the lock, and this applies to it again, harmlessly.
	s.win.Load().held.apply(name, false)
}

// ReleasedSince reports whether this agent released name at t or later
// (and has not created it since).
func (s *Store) ReleasedSince(name string, t time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.released[name]
	return ok && !e.at.Before(t)
}

// ByAttachment returns what one attachment of this node holds.
func (s *Store) ByAttachment(containerID, ifName string) []*tenurev1alpha1.IPReservation {
	return s.collect(indexAttachment, reservation.AttachmentKey(containerID, ifName), false, func(r *tenurev1alpha1.IPReservation) bool {
		return r.Spec.Owner.ContainerID == containerID && r.Spec.Owner.Interface == ifName
	})
}

// ByOwnerUID returns what one pod or claim holds as this agent knows it:
// this node's whole, and others' in the window as partial reservations. HeldBy asks
// the API server for all of it.
func (s *Store) ByOwnerUID(uid string) []*tenurev1alpha1.IPReservation {
	return s.collect(indexOwnerUID, uid, true, func(r *tenurev1alpha1.IPReservation) bool { return r.Spec.Owner.UID == uid })
}

// HeldBy returns what one pod or claim holds on any node: this node's
// whole from the node cache, every other as a partial reservation from one list of
// the owner's label (served from the API server's watch cache). It is
// what a claim's ADD reads, whose items may lie in blocks no window here
// holds.
func (s *Store) HeldBy(ctx context.Context, uid string) ([]*tenurev1alpha1.IPReservation, error) {
	list := reservation.NewMetadataList()
	if err := s.c.List(ctx, list, client.MatchingLabels{reservation.LabelOwnerUID: uid}); err != nil {
		return nil, fmt.Errorf("listing reservations of owner %s: %w", uid, err)
	}
	out := s.ByOwnerUID(uid)
	known := make(map[string]*tenurev1alpha1.IPReservation, len(out))
	for _, r := range out {
		known[r.Name] = r
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range list.Items {
		m := &list.Items[i]
		if r := known[m.Name]; r != nil {
			if r.Spec.Owner.Kind == "" && r.UID == m.UID {
				r.Spec.Owner.Kind = ownerKindOf(m)
			}
			continue
		}
		if s.hiddenLocked(m.Name, m.UID) {
			continue
		}
		r := partial(reservation.ViewOfMeta(m))
		r.Spec.Owner.Kind = ownerKindOf(m)
		out = append(out, r)
	}
	return out, nil
}

// ClaimHolds is HeldBy of a claim's UID less every reservation that is not
// the claim's: a pod's reservation carrying the claim's UID is no item of
// the claim, and neither is one whose owner kind is unknown (no summary).
func (s *Store) ClaimHolds(ctx context.Context, uid string) ([]*tenurev1alpha1.IPReservation, error) {
	out, err := s.HeldBy(ctx, uid)
	return slices.DeleteFunc(out, func(r *tenurev1alpha1.IPReservation) bool { return r.Spec.Owner.Kind != tenurev1alpha1.OwnerIPAMClaim }), err
}

// ownerKindOf is the owner kind a reservation's spec summary says, ""
// without one. Admission holds every writer's summary to its spec
// (reservation.Check), so it says what the spec does.
func ownerKindOf(m *metav1.PartialObjectMetadata) tenurev1alpha1.OwnerKind {
	if m.Labels[reservation.LabelSpecSummary] != reservation.SpecSummaryV1 {
		return ""
	}
	sum, err := reservation.ParseSpecSummary(m.Annotations[reservation.AnnotationSpecSummary])
	if err != nil {
		return ""
	}
	return sum.Owner.Kind
}

// NodeReservations returns every reservation of the node cache.
func (s *Store) NodeReservations() []*tenurev1alpha1.IPReservation {
	return s.collect("", "", false, func(r *tenurev1alpha1.IPReservation) bool { return r.Labels[reservation.LabelNode] == s.nodeLabel })
}

// collect reads index key from the node cache and, with cluster, the
// window (as partial reservations where the node cache lacks the name), then
// lays our unconfirmed writes and releases over them.
func (s *Store) collect(index, key string, cluster bool, match func(*tenurev1alpha1.IPReservation) bool) []*tenurev1alpha1.IPReservation {
	// The caches are read under mu, which the handlers that settle our
	// writes hold: an informer updates its index before its handler drops
	// our record of the write, so under mu a write is in one or the
	// other. An index read outside mu could predate the update while the
	// record postdates the handler: a reservation missing (a DEL answering
	// success and leaving it) or a deleted one found again.
	s.mu.Lock()
	defer s.mu.Unlock()
	var own, others []any
	if index == "" {
		own = s.nodeCache.GetIndexer().List()
	} else {
		own, _ = s.nodeCache.GetIndexer().ByIndex(index, key)
		if cluster {
			ckey := key
			if index == indexOwnerUID {
				ckey = reservation.OwnerBucket(key)
			}
			others = s.win.Load().byIndex(index, ckey)
		}
	}
	s.expireLocked()
	out := make([]*tenurev1alpha1.IPReservation, 0, len(own)+len(others))
	seen := make(map[string]bool, len(own)+len(others))
	add := func(r *tenurev1alpha1.IPReservation) {
		if s.hiddenLocked(r.Name, r.UID) || seen[r.Name] {
			return
		}
		if a, ok := s.assumed[r.Name]; ok && a.obj.Spec.Owner.UID != "" && a.obj.UID != r.UID {
			return // ours is newer than what the cache holds
		}
		seen[r.Name] = true
		out = append(out, r)
	}
	for _, o := range own {
		add(o.(*tenurev1alpha1.IPReservation))
	}
	for _, o := range others {
		if v := o.(*reservation.View); !seen[v.Name] && (index != indexOwnerUID || v.Owner.UID == key) {
			add(partial(v))
		}
	}
	for name, a := range s.assumed {
		if !seen[name] && a.obj.Spec.Owner.UID != "" && match(a.obj) {
			out = append(out, a.obj)
		}
	}
	return out
}

func (s *Store) expireLocked() {
	now := time.Now()
	for name, a := range s.assumed {
		ttl := assumedTTL
		if a.unsettled {
			ttl = unsettledTTL
		}
		if now.Sub(a.at) > ttl {
			delete(s.assumed, name)
		}
	}
	for name, e := range s.released {
		if now.Sub(e.at) > assumedTTL {
			delete(s.released, name)
		}
	}
}

// WindowLen is the number of reservations in the window: other nodes'
// reservations of the blocks this node allocates from, not what this node
// holds (Local).
func (s *Store) WindowLen() int {
	n := 0
	for _, inf := range s.win.Load().infs {
		n += len(inf.GetIndexer().ListKeys())
	}
	return n
}

// AssumeOverCache assumes name even though a cache holds it, for when a
// live read has shown the cache to be stale. False only when this agent
// itself has an unconfirmed write of that name.
func (s *Store) AssumeOverCache(r *tenurev1alpha1.IPReservation) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if a, ok := s.assumed[r.Name]; ok && a.obj.Spec.Owner.UID != "" {
		return false
	}
	delete(s.released, r.Name)
	s.assumed[r.Name] = assumedEntry{obj: r, at: time.Now()}
	return true
}
