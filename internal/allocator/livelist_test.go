package allocator_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/addrspace"
	"github.com/tenure-ipam/tenure/internal/allocator"
)

// countingReader counts the live lists an allocator sends.
type countingReader struct {
	client.Reader
	lists atomic.Int64
}

func (c *countingReader) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	c.lists.Add(1)
	return c.Reader.List(ctx, list, opts...)
}

// TestFullNetworkCallersShareOneLiveList: many ADDs on a full network at
// once cost one live list, and later ones within the interval none; a
// release the cache has seen is handed out at once, without a list.
func TestFullNetworkCallersShareOneLiveList(t *testing.T) {
	ctx := context.Background()
	f, _ := newFactory(t, "n1")
	lists := &countingReader{Reader: f.Live}
	f.Live = lists
	// Long enough that no second list is due while the test runs.
	f.LiveListInterval = time.Hour
	a := f.For("alloc-storm", addrspace.AddressSpace{Range: rangeOf(t, `{"type":"tenure","range":"10.6.0.0/29"}`)})
	var held []*tenurev1alpha1.IPReservation
	for {
		r, err := a.AllocateNext(ctx, owner(string(rune('a'+len(held)))))
		if errors.Is(err, allocator.ErrFull) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, r)
	}
	if len(held) != 6 {
		t.Fatalf("filled %d addresses of a /29, want 6", len(held))
	}
	if n := lists.lists.Load(); n != 1 {
		t.Fatalf("filling the range sent %d live lists, want 1 (for the ADD that found it full)", n)
	}

	var wg sync.WaitGroup
	var notFull atomic.Int64
	for i := 0; i < 50; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := a.AllocateNext(ctx, owner("waiting")); !errors.Is(err, allocator.ErrFull) {
				notFull.Add(1)
			}
		}()
	}
	wg.Wait()
	if n := notFull.Load(); n != 0 {
		t.Fatalf("%d ADDs on a full range did not answer full", n)
	}
	if n := lists.lists.Load(); n != 1 {
		t.Fatalf("50 ADDs on a full range sent %d more live lists, want none within the interval", n-1)
	}

	// A release: once the cache has seen it, the next ADD gets the address.
	freed := held[3]
	if err := f.Release(ctx, freed); err != nil {
		t.Fatal(err)
	}
	waitCache(t, f, freed.Name)
	r, err := a.AllocateNext(ctx, owner("waiting"))
	if err != nil {
		t.Fatalf("after a release the cache has seen: %v", err)
	}
	if r.Spec.Address != freed.Spec.Address {
		t.Fatalf("got %s, want the freed %s", r.Spec.Address, freed.Spec.Address)
	}
	if n := lists.lists.Load(); n != 1 {
		t.Fatalf("handing out the freed address sent %d live lists", n-1)
	}
}

// TestConcurrentLiveListsAreShared: with no interval at all, callers
// that find the range full at the same moment still share one list each
// time one is in flight, and every one of them answers full.
func TestConcurrentLiveListsAreShared(t *testing.T) {
	ctx := context.Background()
	f, _ := newFactory(t, "n1")
	gate := make(chan struct{})
	lists := &blockingReader{Reader: f.Live, gate: gate}
	f.Live = lists
	f.LiveListInterval = time.Nanosecond
	a := f.For("alloc-shared", addrspace.AddressSpace{Range: rangeOf(t, `{"type":"tenure","range":"10.7.0.0/31"}`)})
	for i := 0; i < 2; i++ {
		if _, err := a.AllocateNext(ctx, owner(string(rune('a'+i)))); err != nil {
			t.Fatal(err)
		}
	}
	const callers = 20
	errs := make(chan error, callers)
	for i := 0; i < callers; i++ {
		go func() {
			_, err := a.AllocateNext(ctx, owner("w"))
			errs <- err
		}()
	}
	// Let the first list through only once every caller waits on it.
	deadline := time.Now().Add(30 * time.Second)
	for lists.waiting.Load() < 1 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	close(gate)
	for i := 0; i < callers; i++ {
		if err := <-errs; !errors.Is(err, allocator.ErrFull) {
			t.Fatalf("caller %d: %v, want ErrFull", i, err)
		}
	}
	if n := lists.lists.Load(); n >= callers {
		t.Fatalf("%d callers sent %d live lists: none were shared", callers, n)
	}
}

type blockingReader struct {
	client.Reader
	gate    chan struct{}
	waiting atomic.Int64
	lists   atomic.Int64
}

func (b *blockingReader) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	b.lists.Add(1)
	b.waiting.Add(1)
	<-b.gate
	return b.Reader.List(ctx, list, opts...)
}

// waitCache polls until the factory's store no longer holds name.
func waitCache(t *testing.T, f *allocator.Factory, name string) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); f.Store.Taken(name); {
		if time.Now().After(deadline) {
			t.Fatalf("the cache still holds %s", name)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
