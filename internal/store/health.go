package store

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/util/watchlist"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tenure-ipam/tenure/internal/kube"
	"github.com/tenure-ipam/tenure/internal/reservation"
)

// health says whether the node cache (this node's reservations, what ADD
// idempotency and DEL read) can be trusted to hold every reservation of
// the node, given the store's assumed writes.
//
// A watch resumed after the API server went away delivers what was missed,
// but only once the reflector gets back to it: after a restart of
// kube-apiserver its backoff leaves the cache up to half a minute behind.
// So the cache is stale from the moment its watch breaks (a failed List or
// Watch, a stream that ends before the timeout the reflector asked for, an
// error event) until a live list of the node's reservations, made after a
// new watch opened, is found wholly in the cache. A watch the API server
// ends at its requested timeout is no break: the reflector resumes it from
// the last resourceVersion and misses nothing.
type health struct {
	mu        sync.Mutex
	stale     bool
	breaks    uint64 // counts breaks: a check passes only if none came since it began
	verifying bool
	// whole is closed when the cache is found whole after a break, and
	// made anew by the next break; nil while fresh.
	whole chan struct{}
	// staleSince is when the cache went stale (the first break since it
	// was last found whole).
	staleSince time.Time
	waiting    atomic.Int64 // calls in AwaitFresh now
	// gone: what the node cache saw deleted since the check's list began
	// (name to UID); nil while no check runs.
	gone map[string]types.UID
}

// Fresh reports whether the node cache is synced and has not broken
// since it was last found whole. While it is false the agent asks the API
// server what an attachment holds rather than the cache.
func (s *Store) Fresh() bool {
	if !s.nodeCache.HasSynced() {
		return false
	}
	s.health.mu.Lock()
	defer s.health.mu.Unlock()
	return !s.health.stale
}

// AwaitFresh reports whether the node cache can be trusted, waiting for
// a stale one to be found whole until max has passed since it went stale:
// a watch the API server closed (it closes a watcher that falls behind
// its buffer, which under a burst of writes is often) reopens within
// milliseconds, and its check passes soon after. Waiting costs the calls
// of that moment some time; a read past the cache instead would cost the
// API server a list per call, in the very burst that made the watch fall
// behind. A cache stale for longer (the API server away, a check that
// cannot catch up) is not waited for: a call reads past it at once, as
// does one on a cache that never synced.
func (s *Store) AwaitFresh(ctx context.Context, max time.Duration) bool {
	if s.Fresh() {
		return true
	}
	s.health.mu.Lock()
	ch, since := s.health.whole, s.health.staleSince
	s.health.mu.Unlock()
	wait, ok := waitFor(since, time.Now(), max)
	if ch == nil || !ok {
		return false
	}
	s.health.waiting.Add(1)
	defer s.health.waiting.Add(-1)
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-ch:
		return s.Fresh()
	case <-t.C:
	case <-ctx.Done():
	}
	return false
}

// waitFor is how long a call at now may wait for a cache stale since
// since, waits being bounded by max from since; false when that is past.
func waitFor(since, now time.Time, max time.Duration) (time.Duration, bool) {
	left := since.Add(max).Sub(now)
	return left, left > 0
}

// Waiting is the number of calls waiting in AwaitFresh now.
func (s *Store) Waiting() int { return int(s.health.waiting.Load()) }

// watchBroke marks the node cache stale.
func (s *Store) watchBroke() {
	s.health.mu.Lock()
	defer s.health.mu.Unlock()
	s.health.stale = true
	s.health.breaks++
	if s.health.whole == nil {
		s.health.whole = make(chan struct{})
		s.health.staleSince = time.Now()
	}
}

// watchOpened starts the check that ends staleness, once per break.
func (s *Store) watchOpened() {
	s.health.mu.Lock()
	defer s.health.mu.Unlock()
	if !s.health.stale || s.health.verifying {
		return
	}
	s.winMu.Lock()
	ctx := s.runCtx
	s.winMu.Unlock()
	if ctx == nil {
		return
	}
	s.health.verifying = true
	go s.verify(ctx)
}

// verify lists this node's reservations live and waits (a little) for the
// node cache to hold every one of them with the same UID; then the cache
// has caught up with the API server as of a moment after the break, and
// the open watch keeps it so.
func (s *Store) verify(ctx context.Context) {
	defer func() {
		s.health.mu.Lock()
		s.health.verifying = false
		s.health.gone = nil
		s.health.mu.Unlock()
	}()
	for ctx.Err() == nil {
		s.health.mu.Lock()
		breaks := s.health.breaks
		s.health.gone = map[string]types.UID{}
		s.health.mu.Unlock()
		list := reservation.NewMetadataList()
		err := s.c.List(ctx, list, client.MatchingLabels{reservation.LabelNode: s.nodeLabel})
		if err == nil {
			deadline := time.Now().Add(3 * time.Second)
			for time.Now().Before(deadline) && ctx.Err() == nil {
				if s.localHoldsAll(list.Items) {
					s.health.mu.Lock()
					done := s.health.breaks == breaks
					if done {
						s.health.stale = false
						close(s.health.whole)
						s.health.whole = nil
					}
					s.health.mu.Unlock()
					if done {
						return
					}
					break // broke again meanwhile: list again
				}
				sleep(ctx, 20*time.Millisecond)
			}
		}
		sleep(ctx, 250*time.Millisecond)
	}
}

// localHoldsAll reports whether the node cache has caught up with a list
// of the node's reservations: it holds each item, or saw it deleted since
// the list began (under a burst of DELs, what was listed is soon gone, and
// a cache that saw the delete is past the list).
func (s *Store) localHoldsAll(items []metav1.PartialObjectMetadata) bool {
	s.health.mu.Lock()
	defer s.health.mu.Unlock()
	for i := range items {
		m := &items[i]
		if _, ok := s.nodeCacheGet(m.Name, m.UID); !ok && s.health.gone[m.Name] != m.UID {
			return false
		}
	}
	return true
}

// sawDeleted is the node cache's delete handler for the check.
func (s *Store) sawDeleted(obj any) {
	name, uid, ok := nameUID(kube.DeletedObject(obj))
	if !ok {
		return
	}
	s.health.mu.Lock()
	defer s.health.mu.Unlock()
	if s.health.gone != nil {
		s.health.gone[name] = uid
	}
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// trackedClient is the node cache's informer's client: it tells the store when
// the informer's List or Watch fails and when a watch ends early.
type trackedClient struct {
	client.WithWatch
	s *Store
}

// IsWatchListSemanticsUnSupported passes on what the wrapped client says
// (kubefake cannot stream a watch's initial events).
func (t *trackedClient) IsWatchListSemanticsUnSupported() bool {
	return watchlist.DoesClientNotSupportWatchListSemantics(t.WithWatch)
}

func (t *trackedClient) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	relist := t.s.nodeCache != nil && t.s.nodeCache.HasSynced()
	err := t.WithWatch.List(ctx, list, opts...)
	if err != nil || relist {
		t.s.watchBroke()
	}
	return err
}

func (t *trackedClient) Watch(ctx context.Context, list client.ObjectList, opts ...client.ListOption) (watch.Interface, error) {
	w, err := t.WithWatch.Watch(ctx, list, opts...)
	if err != nil {
		if ctx.Err() == nil {
			t.s.watchBroke()
		}
		return nil, err
	}
	var timeout time.Duration
	for _, o := range opts {
		if lo, ok := o.(*client.ListOptions); ok && lo.Raw != nil && lo.Raw.TimeoutSeconds != nil {
			timeout = time.Duration(*lo.Raw.TimeoutSeconds) * time.Second
		}
	}
	tw := &trackedWatch{inner: w, out: make(chan watch.Event), stop: make(chan struct{}), s: t.s, started: time.Now(), timeout: timeout}
	go tw.run(ctx)
	t.s.watchOpened()
	return tw, nil
}

type trackedWatch struct {
	inner    watch.Interface
	out      chan watch.Event
	stop     chan struct{}
	stopOnce sync.Once
	s        *Store
	started  time.Time
	timeout  time.Duration
}

func (w *trackedWatch) ResultChan() <-chan watch.Event { return w.out }

func (w *trackedWatch) Stop() {
	w.stopOnce.Do(func() { close(w.stop) })
	w.inner.Stop()
}

func (w *trackedWatch) run(ctx context.Context) {
	defer close(w.out)
	for ev := range w.inner.ResultChan() {
		if ev.Type == watch.Error {
			w.s.watchBroke()
		}
		select {
		case w.out <- ev:
		case <-w.stop:
			return
		}
	}
	select {
	case <-w.stop:
		return // the reflector ended it
	default:
	}
	// The API server ends a watch at the timeout the reflector asked for
	// (a second's slack); anything sooner is a broken stream.
	if ctx.Err() == nil && (w.timeout == 0 || time.Since(w.started) < w.timeout-time.Second) {
		w.s.watchBroke()
	}
}
