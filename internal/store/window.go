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

	"github.com/tenure-ipam/tenure/internal/kube"
	"github.com/tenure-ipam/tenure/internal/reservation"
)

// windowKeep is how long a block or network stays in the window after it
// was last asked for. The window is rebuilt only when something new is
// asked for, so a block in use is not dropped under an allocation; one
// that was is listed again the next time (a few dozen objects).
const windowKeep = 10 * time.Minute

// window is one generation of what the agent watches of other nodes'
// reservations: the blocks it allocates from and the networks it found
// full (a full network's every delete is a waiting pod's chance). Each
// generation has its informers and its index; Watch replaces the whole
// generation, so lookups never see half of one.
type window struct {
	blocks, networks map[string]bool
	infs             []cache.SharedIndexInformer // *entry
	held             *heldIndex
	cancel           context.CancelFunc
}

func (w *window) get(name string) (*entry, bool) {
	for _, inf := range w.infs {
		if obj, ok, _ := inf.GetIndexer().GetByKey(name); ok {
			return obj.(*entry), true
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

// windowIndexers index a window's entries as the local cache indexes its
// objects, so collect reads both alike.
func windowIndexers() cache.Indexers {
	return cache.Indexers{
		indexOwnerUID: func(obj any) ([]string, error) { return []string{ownerBucket(obj.(*entry).owner)}, nil },
		indexNetwork:  func(obj any) ([]string, error) { return []string{reservation.NetworkLabelOf(obj.(*entry).name)}, nil },
	}
}

// Watching reports whether the window holds every reservation of that
// block or of that whole network (label values: reservation.LabelBlock,
// reservation.LabelNetwork).
func (s *Store) Watching(block, networkLabel string) bool {
	w := s.win.Load()
	return w.blocks[block] || w.networks[networkLabel]
}

// Watch makes the window hold the reservations of these blocks and whole
// networks, and returns once it does (a list of just those, then a watch):
// until then the cache says nothing about them. The new window keeps what
// was asked for in the last windowKeep and drops the rest.
func (s *Store) Watch(ctx context.Context, blocks, networks []string) error {
	s.winMu.Lock()
	defer s.winMu.Unlock()
	if s.runCtx == nil {
		return fmt.Errorf("reservation window: the store is not running")
	}
	now, cur, missing := time.Now(), s.win.Load(), false
	for _, b := range blocks {
		s.wanted["b:"+b], missing = now, missing || !cur.blocks[b]
	}
	for _, n := range networks {
		s.wanted["n:"+n], missing = now, missing || !cur.networks[n]
	}
	if !missing {
		return nil
	}
	next := &window{blocks: map[string]bool{}, networks: map[string]bool{}, held: &heldIndex{}}
	for k, at := range s.wanted {
		switch kind, v, _ := strings.Cut(k, ":"); {
		case now.Sub(at) > windowKeep:
			delete(s.wanted, k)
		case kind == "b":
			next.blocks[v] = true
		default:
			next.networks[v] = true
		}
	}
	if err := s.start(ctx, next); err != nil {
		return err
	}
	s.win.Swap(next).cancel()
	s.rebuilds.Add(1)
	return nil
}

// Rebuilds is how many times Watch has replaced the window.
func (s *Store) Rebuilds() int64 { return s.rebuilds.Load() }

// start runs next's informers under the store's context and waits, under
// ctx, until their initial lists are in next's index.
func (s *Store) start(ctx context.Context, next *window) error {
	wctx, cancel := context.WithCancel(s.runCtx)
	next.cancel = cancel
	var synced []cache.DoneChecker
	for _, sel := range []struct {
		label  string
		values map[string]bool
	}{{reservation.LabelBlock, next.blocks}, {reservation.LabelNetwork, next.networks}} {
		if len(sel.values) == 0 {
			continue
		}
		req, err := labels.NewRequirement(sel.label, selection.In, slices.Sorted(maps.Keys(sel.values)))
		if err != nil {
			cancel()
			return fmt.Errorf("reservation window: %w", err)
		}
		inf := kube.NewInformer(s.c, newMetadataList, &metav1.PartialObjectMetadata{}, windowIndexers(),
			client.MatchingLabelsSelector{Selector: labels.NewSelector().Add(*req)})
		_ = inf.SetTransform(toEntry)
		reg, _ := inf.AddEventHandler(s.indexing(next.held))
		_, _ = inf.AddEventHandler(s.confirmations())
		next.infs = append(next.infs, inf)
		synced = append(synced, reg.HasSyncedChecker())
		go inf.RunWithContext(wctx)
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
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			if name, _, ok := nameUID(obj); ok {
				held.apply(name, false)
			}
		},
	}
}
