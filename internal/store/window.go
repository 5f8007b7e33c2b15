package store

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tenure-ipam/tenure/internal/allocator"
	"github.com/tenure-ipam/tenure/internal/kube"
	"github.com/tenure-ipam/tenure/internal/reservation"
)

// windowKeep is how long a block or scope stays in the window after it
// was last asked for. The window is rebuilt only when something new is
// asked for, so a block in use is not dropped under an allocation; one
// that was is listed again the next time (a few dozen objects).
const windowKeep = 10 * time.Minute

// window is one generation of what the agent watches of other nodes'
// reservations: the blocks it allocates from, the scopes it found full
// (a full scope's every delete is a waiting pod's chance) and, in the
// scopes of those blocks, the reservations that have no block label
// (legacy: written before the label existed, or by an older agent during
// an upgrade; new ones always have it, so this set only shrinks). Each
// generation has its informers and its index; Watch replaces the whole
// generation, so lookups never see half of one.
type window struct {
	blocks, scopes, legacy map[string]bool
	// blocksOf counts blocks by the label of their scope.
	blocksOf map[string]int
	infs     []cache.SharedIndexInformer // *reservation.View
	held     *heldIndex
	cancel   context.CancelFunc
}

func (w *window) get(name string) (*reservation.View, bool) {
	for _, inf := range w.infs {
		if obj, ok, _ := inf.GetIndexer().GetByKey(name); ok {
			return obj.(*reservation.View), true
		}
	}
	return nil, false
}

func (w *window) byIndex(index, key string) []any {
	var out []any
	for _, inf := range w.infs {
		objs, _ := inf.GetIndexer().ByIndex(index, key)
		out = append(out, objs...)
	}
	return out
}

// windowIndexers index a window's entries as the node cache indexes its
// objects, so collect reads both alike.
func windowIndexers() cache.Indexers {
	return cache.Indexers{
		indexOwnerUID: func(obj any) ([]string, error) {
			return []string{reservation.OwnerBucket(obj.(*reservation.View).Owner.UID)}, nil
		},
		indexScope: func(obj any) ([]string, error) { return []string{obj.(*reservation.View).Scope}, nil },
	}
}

// Watching reports whether the window holds every reservation of that
// block or of that whole scope (label values: reservation.LabelBlock,
// reservation.LabelNetwork).
func (s *Store) Watching(block, scopeLabel string) bool {
	w := s.win.Load()
	return w.blocks[block] || w.scopes[scopeLabel]
}

// WatchedBlocks is how many blocks of the scope of that label the window
// holds one by one; none once it holds the scope whole.
func (s *Store) WatchedBlocks(scopeLabel string) int {
	return s.win.Load().blocksOf[scopeLabel]
}

// lockRebuild takes the right to rebuild the window, which one Watch
// holds at a time; a Watch of a block of scopeLabel gives up once a
// Watch of that whole scope is under way.
func (s *Store) lockRebuild(ctx context.Context, scopeLabel, block string) error {
	for {
		s.wholeMu.Lock()
		begun, taking := s.wholeBegun, s.takingInWhole[scopeLabel] > 0
		s.wholeMu.Unlock()
		if block != "" && taking {
			return allocator.ErrTakingInWhole
		}
		select {
		case s.rebuild <- struct{}{}:
			return nil
		case <-begun: // a take-in of a whole scope began: look again
		case <-ctx.Done():
			return fmt.Errorf("reservation window: %w", ctx.Err())
		}
	}
}

// TakingInWhole reports whether a Watch of the whole scope of that label
// is under way. It lists every reservation of the scope and holds the
// window's lock until its informer has them all: a large scope's takes
// seconds, and a Watch of a block meanwhile waits for it.
func (s *Store) TakingInWhole(scopeLabel string) bool {
	s.wholeMu.Lock()
	defer s.wholeMu.Unlock()
	return s.takingInWhole[scopeLabel] > 0
}

// Watch makes the window hold the reservations of one block of the scope
// of that label, or of the whole scope when block is "", and returns
// once it does (a list of just those, then a watch): until then the cache
// says nothing about them. The new window keeps what was asked for in the
// last windowKeep and drops the rest.
//
// A Watch of a block gives up with allocator.ErrTakingInWhole once a Watch
// of its whole scope is under way, rather than wait for that list of
// every reservation.
func (s *Store) Watch(ctx context.Context, scopeLabel, block string) error {
	if block == "" {
		s.wholeMu.Lock()
		s.takingInWhole[scopeLabel]++
		close(s.wholeBegun)
		s.wholeBegun = make(chan struct{})
		s.wholeMu.Unlock()
		defer func() {
			s.wholeMu.Lock()
			if s.takingInWhole[scopeLabel]--; s.takingInWhole[scopeLabel] == 0 {
				delete(s.takingInWhole, scopeLabel)
			}
			s.wholeMu.Unlock()
		}()
	}
	if err := s.lockRebuild(ctx, scopeLabel, block); err != nil {
		return err
	}
	defer func() { <-s.rebuild }()
	s.winMu.Lock()
	defer s.winMu.Unlock()
	if s.runCtx == nil {
		return fmt.Errorf("reservation window: the store is not running")
	}
	now, cur := time.Now(), s.win.Load()
	s.wanted["l:"+scopeLabel] = now
	missing := !cur.legacy[scopeLabel] && !cur.scopes[scopeLabel]
	if block == "" {
		s.wanted["n:"+scopeLabel] = now
		missing = missing || !cur.scopes[scopeLabel]
	} else {
		s.wanted["b:"+scopeLabel+"|"+block] = now
		missing = missing || !cur.blocks[block] && !cur.scopes[scopeLabel]
	}
	if !missing {
		return nil
	}
	next := &window{blocks: map[string]bool{}, scopes: map[string]bool{}, legacy: map[string]bool{}, blocksOf: map[string]int{}, held: &heldIndex{}}
	var blocks []string
	for k, at := range s.wanted {
		if now.Sub(at) > windowKeep {
			delete(s.wanted, k)
			continue
		}
		switch kind, v, _ := strings.Cut(k, ":"); kind {
		case "b":
			blocks = append(blocks, v)
		case "n":
			next.scopes[v] = true
		default:
			next.legacy[v] = true
		}
	}
	for n := range next.scopes {
		delete(next.legacy, n) // watched whole, labelled or not
	}
	for _, v := range blocks {
		// Label values hold no "|" (alphanumerics, '-', '_', '.').
		if n, b, _ := strings.Cut(v, "|"); !next.scopes[n] {
			next.blocks[b] = true
			next.blocksOf[n]++
		}
	}
	if err := s.start(ctx, next); err != nil {
		return err
	}
	// The window leaves this node's reservations to the node cache; the
	// index holds them too (heldInNodeCache keeps it so from here on). Then:
	// the new window's list may predate a release of ours that the old
	// index already forgot; until its watch reports the delete, its index
	// would hide the address from the search.
	s.mu.Lock()
	for _, name := range s.nodeCache.GetIndexer().ListKeys() {
		next.held.apply(name, true)
	}
	for name := range s.released {
		next.held.apply(name, false)
	}
	old := s.win.Swap(next)
	s.mu.Unlock()
	old.cancel()
	s.rebuilds.Add(1)
	return nil
}

// Rebuilds is how many times Watch has replaced the window.
func (s *Store) Rebuilds() int64 { return s.rebuilds.Load() }

// windowSelector is one informer's label selector; legacy: the one of
// reservations without a block label.
type windowSelector struct {
	labels.Selector
	legacy bool
}

// windowSelectors are the label selectors of w's informers: one per
// non-empty set, each leaving out the reservations of this node (label
// nodeLabel), which the node cache holds whole: the API server sends each
// of the agent's own creates and deletes once, not twice.
func windowSelectors(w *window, nodeLabel string) ([]windowSelector, error) {
	notOurs, err := labels.NewRequirement(reservation.LabelNode, selection.NotEquals, []string{nodeLabel})
	if err != nil {
		return nil, fmt.Errorf("reservation window: %w", err)
	}
	var out []windowSelector
	for _, sel := range []struct {
		label   string
		values  map[string]bool
		unknown bool // also: without a block label
	}{{reservation.LabelBlock, w.blocks, false}, {reservation.LabelNetwork, w.scopes, false}, {reservation.LabelNetwork, w.legacy, true}} {
		if len(sel.values) == 0 {
			continue
		}
		in, err := labels.NewRequirement(sel.label, selection.In, slices.Sorted(maps.Keys(sel.values)))
		if err != nil {
			return nil, fmt.Errorf("reservation window: %w", err)
		}
		selector := labels.NewSelector().Add(*in, *notOurs)
		if sel.unknown {
			none, err := labels.NewRequirement(reservation.LabelBlock, selection.DoesNotExist, nil)
			if err != nil {
				return nil, err
			}
			selector = selector.Add(*none)
		}
		out = append(out, windowSelector{selector, sel.unknown})
	}
	return out, nil
}

// start runs next's informers under the store's context and waits, under
// ctx, until their initial lists are in next's index.
func (s *Store) start(ctx context.Context, next *window) error {
	wctx, cancel := context.WithCancel(s.runCtx)
	next.cancel = cancel
	selectors, err := windowSelectors(next, s.nodeLabel)
	if err != nil {
		cancel()
		return err
	}
	var synced []cache.DoneChecker
	var legacy cache.SharedIndexInformer
	legacyCtx, stopLegacy := context.WithCancel(wctx)
	next.cancel = func() { stopLegacy(); cancel() }
	for _, sel := range selectors {
		inf := kube.NewInformer(s.c, newMetadataList, &metav1.PartialObjectMetadata{}, windowIndexers(),
			client.MatchingLabelsSelector{Selector: sel.Selector})
		_ = inf.SetTransform(reservation.ToView)
		reg, _ := inf.AddEventHandler(s.indexing(next.held))
		_, _ = inf.AddEventHandler(s.confirmations())
		next.infs = append(next.infs, inf)
		synced = append(synced, reg.HasSyncedChecker())
		if sel.legacy {
			legacy = inf
			go inf.RunWithContext(legacyCtx)
		} else {
			go inf.RunWithContext(wctx)
		}
	}
	for _, done := range synced {
		select {
		case <-done.Done():
		case <-ctx.Done():
			cancel()
			return fmt.Errorf("reservation window did not sync: %w", ctx.Err())
		case <-wctx.Done():
			return fmt.Errorf("reservation window did not sync: %w", wctx.Err())
		}
	}
	// Once no reservation without a block label is left (an upgraded
	// cluster), its watch would only be one more watcher for the API
	// server to test every event against: stop it. Only an agent older
	// than the label writes such a reservation, during a rolling upgrade;
	// one missed costs a refused Create, and the next window looks again.
	if legacy != nil && len(legacy.GetIndexer().ListKeys()) == 0 {
		stopLegacy()
		next.infs = slices.DeleteFunc(next.infs, func(inf cache.SharedIndexInformer) bool { return inf == legacy })
	}
	return nil
}

// indexing keeps held, one window's index of addresses, as its informers
// report, and tells clusterAdded.
func (s *Store) indexing(held *heldIndex) cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			name, _, ok := nameUID(obj)
			if !ok {
				return
			}
			held.apply(name, true)
			if s.clusterAdded != nil {
				s.clusterAdded(name)
			}
		},
		DeleteFunc: func(obj any) {
			if name, _, ok := nameUID(kube.DeletedObject(obj)); ok {
				held.apply(name, false)
			}
		},
	}
}

// heldInNodeCache keeps the current window's index of held addresses as the
// node cache reports this node's reservations, which the window's own
// informers leave out (windowSelectors). Under s.mu, so that Watch's swap
// to a new window, seeded from the node cache, misses no event.
func (s *Store) heldInNodeCache() cache.ResourceEventHandler {
	apply := func(obj any, held bool) {
		name, _, ok := nameUID(kube.DeletedObject(obj))
		if !ok {
			return
		}
		s.mu.Lock()
		s.win.Load().held.apply(name, held)
		s.mu.Unlock()
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { apply(obj, true) },
		DeleteFunc: func(obj any) { apply(obj, false) },
	}
}
