package store

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tenure-ipam/tenure/internal/dev/kubefake"
)

// breakable is an in-memory API whose watches a test can break and keep
// from reopening, as a restarting kube-apiserver does.
type breakable struct {
	*kubefake.Client
	refuse  atomic.Bool
	mu      sync.Mutex
	watches []watch.Interface
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

func (b *breakable) breakWatches() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, w := range b.watches {
		w.Stop()
	}
	b.watches = nil
}

// TestFreshOnlyOnceTheCacheCaughtUp: a broken watch makes the node cache
// stale at once; it is fresh again only once it holds what was created
// while it could not watch.
func TestFreshOnlyOnceTheCacheCaughtUp(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	b := &breakable{Client: kubefake.New()}
	s := New(b, "n1")
	go s.Run(ctx)
	if err := s.WaitForSync(ctx); err != nil {
		t.Fatal(err)
	}
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
