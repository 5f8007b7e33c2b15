package store

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/test/kubefake"
)

// breakable is an in-memory API whose watches a test can break and keep
// from reopening, as a restarting kube-apiserver does.
type breakable struct {
	*kubefake.Client
	refuse  atomic.Bool
	mu      sync.Mutex
	watches []watch.Interface
	held    chan struct{} // closed to let held lists go on
	entered chan struct{}
	// afterList sees each list of reservations' metadata before its caller.
	afterList func(*metav1.PartialObjectMetadataList)
}

func (b *breakable) Watch(ctx context.Context, list client.ObjectList, opts ...client.ListOption) (watch.Interface, error) {
	if b.refuse.Load() {
		return nil, errors.New("the API server is down")
	}
	w, err := b.Client.Watch(ctx, list, opts...)
	if err == nil {
		b.mu.Lock()
		b.watches = append(b.watches, w)
		b.mu.Unlock()
	}
	return w, err
}

// List holds a list of reservations' metadata (what the node cache's
// check makes) while held is set, telling entered first.
func (b *breakable) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	b.mu.Lock()
	held, entered := b.held, b.entered
	b.mu.Unlock()
	if _, meta := list.(*metav1.PartialObjectMetadataList); meta && held != nil {
		select {
		case entered <- struct{}{}:
		default:
		}
		select {
		case <-held:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if err := b.Client.List(ctx, list, opts...); err != nil {
		return err
	}
	b.mu.Lock()
	after := b.afterList
	b.mu.Unlock()
	if l, meta := list.(*metav1.PartialObjectMetadataList); meta && after != nil {
		after(l)
	}
	return nil
}

// holdChecks makes the node cache's checks wait until the returned
// release is called; entered receives once a check is waiting.
func (b *breakable) holdChecks() (entered <-chan struct{}, release func()) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.held, b.entered = make(chan struct{}), make(chan struct{}, 1)
	held := b.held
	return b.entered, func() {
		b.mu.Lock()
		b.held = nil
		b.mu.Unlock()
		close(held)
	}
}

func (b *breakable) breakWatches() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, w := range b.watches {
		w.Stop()
	}
	b.watches = nil
}

// startBreakable runs the node n1's store on a breakable API, synced.
func startBreakable(t *testing.T) (*Store, *breakable, context.Context) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	b := &breakable{Client: kubefake.New()}
	s := New(b, "n1")
	go s.Run(ctx)
	if err := s.WaitForSync(ctx); err != nil {
		t.Fatal(err)
	}
	return s, b, ctx
}

// TestFreshOnlyOnceTheCacheCaughtUp: a broken watch makes the node cache
// stale at once; it is fresh again only once it holds what was created
// while it could not watch.
func TestFreshOnlyOnceTheCacheCaughtUp(t *testing.T) {
	s, b, ctx := startBreakable(t)
	eventually(t, ctx, "fresh after the initial list", s.Fresh)

	b.refuse.Store(true)
	b.breakWatches()
	eventually(t, ctx, "stale once the watch broke", func() bool { return !s.Fresh() })
	missed := resv("10.0.0.9", "u-missed", "n1")
	if err := b.Create(ctx, missed); err != nil {
		t.Fatal(err)
	}
	if s.Fresh() {
		t.Fatal("fresh while the watch cannot reopen")
	}
	b.refuse.Store(false)
	eventually(t, ctx, "fresh once the watch reopened", s.Fresh)
	if got := s.ByAttachment("c-u-missed", "net1"); len(got) != 1 || got[0].Name != missed.Name {
		t.Fatalf("fresh, but the cache holds %v for the attachment created during the break, want %s", got, missed.Name)
	}
}

// TestAwaitFreshWaitsForTheCacheToBeFoundWhole: after a watch the API server
// closed reopens, a call waits for the check of the node cache rather
// than reading past it, and is told the cache is fresh once the check
// finds it whole; a call that comes while no watch can open waits for
// the reopening and the check too, and one whose wait runs out is told
// the cache is stale.
func TestAwaitFreshWaitsForTheCacheToBeFoundWhole(t *testing.T) {
	s, b, ctx := startBreakable(t)
	eventually(t, ctx, "fresh after the initial list", s.Fresh)
	if !s.AwaitFresh(ctx, time.Hour) {
		t.Fatal("AwaitFresh of a fresh cache: false")
	}

	entered, release := b.holdChecks()
	b.breakWatches()
	select {
	case <-entered:
	case <-ctx.Done():
		t.Fatal("no check of the node cache began after its watch reopened")
	}
	if s.Fresh() {
		t.Fatal("fresh while its check is held")
	}
	answers := make(chan bool, 3)
	for range 3 {
		go func() { answers <- s.AwaitFresh(ctx, time.Hour) }()
	}
	eventually(t, ctx, "three calls waiting for the check", func() bool { return s.Waiting() == 3 })
	release()
	for range 3 {
		if fresh := <-answers; !fresh {
			t.Fatal("a call that waited for the check was told the cache is stale")
		}
	}
	if n := s.Waiting(); n != 0 {
		t.Fatalf("%d calls still waiting after the check", n)
	}

	b.refuse.Store(true)
	b.breakWatches()
	eventually(t, ctx, "stale once the watch broke", func() bool { return !s.Fresh() })
	if s.AwaitFresh(ctx, time.Millisecond) {
		t.Fatal("AwaitFresh with no watch open: true")
	}
	waited := make(chan bool, 1)
	go func() { waited <- s.AwaitFresh(ctx, time.Hour) }()
	eventually(t, ctx, "a call waiting while no watch can open", func() bool { return s.Waiting() == 1 })
	b.refuse.Store(false)
	if !<-waited {
		t.Fatal("a call that waited through the watch's reopening was told the cache is stale")
	}
}

// TestCheckPassesWhileWhatItListedIsDeleted: under a burst of DELs, what
// the check listed is deleted before it looks; a node cache that saw the
// delete is past the list, and the check passes with that one list.
func TestCheckPassesWhileWhatItListedIsDeleted(t *testing.T) {
	s, b, ctx := startBreakable(t)
	doomed, kept := resv("10.0.0.7", "u-doomed", "n1"), resv("10.0.0.8", "u-kept", "n1")
	for _, r := range []*tenurev1alpha1.IPReservation{doomed, kept} {
		if err := b.Create(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, ctx, "fresh, holding both", func() bool {
		return s.Fresh() && len(s.ByAttachment("c-u-doomed", "net1")) == 1 && len(s.ByAttachment("c-u-kept", "net1")) == 1
	})

	var lists atomic.Int32
	b.mu.Lock()
	b.afterList = func(l *metav1.PartialObjectMetadataList) {
		if lists.Add(1) != 1 {
			return
		}
		listed := false
		for _, m := range l.Items {
			listed = listed || m.Name == doomed.Name
		}
		if !listed {
			t.Errorf("the check's list lacks %s", doomed.Name)
			return
		}
		// Deleted by another client between the list and the look.
		if err := b.Delete(ctx, doomed); err != nil {
			t.Error(err)
			return
		}
		if err := wait.PollUntilContextTimeout(ctx, 2*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
			return len(s.ByAttachment("c-u-doomed", "net1")) == 0, nil
		}); err != nil {
			t.Errorf("the node cache never saw the delete: %v", err) // not Fatal: this is the check's goroutine
		}
	}
	b.mu.Unlock()
	b.breakWatches()
	eventually(t, ctx, "fresh again after a check", func() bool { return lists.Load() > 0 && s.Fresh() })
	if n := lists.Load(); n != 1 {
		t.Fatalf("the check listed %d times, want 1: the deleted item held it back", n)
	}
}

func TestWaitForCountsFromWhenTheCacheWentStale(t *testing.T) {
	since := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name  string
		now   time.Time
		max   time.Duration
		want  time.Duration
		waits bool
	}{
		{"just gone stale", since, time.Second, time.Second, true},
		{"stale for part of it", since.Add(300 * time.Millisecond), time.Second, 700 * time.Millisecond, true},
		{"stale for all of it", since.Add(time.Second), time.Second, 0, false},
		{"stale for longer", since.Add(time.Minute), time.Second, -59 * time.Second, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, waits := waitFor(since, c.now, c.max)
			if waits != c.waits || (waits && got != c.want) {
				t.Fatalf("waitFor(since, since+%v, %v) = %v, %v; want %v, %v", c.now.Sub(since), c.max, got, waits, c.want, c.waits)
			}
		})
	}
}
