package allocator_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/addrspace"
	"github.com/tenure-ipam/tenure/internal/allocator"
	"github.com/tenure-ipam/tenure/internal/config"
	"github.com/tenure-ipam/tenure/internal/reservation"
	"github.com/tenure-ipam/tenure/internal/store"
)

func rangeOf(t *testing.T, ipam string) addrspace.Range {
	t.Helper()
	c, err := config.Parse([]byte(`{"cniVersion":"1.1.0","name":"t","ipam":`+ipam+`}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	return c.Ranges[0]
}

func owner(uid string) allocator.Template {
	return allocator.Template{Owner: tenurev1alpha1.ReservationOwner{Kind: tenurev1alpha1.OwnerPod, Namespace: "ns", Name: "p-" + uid, UID: uid, PodName: "p-" + uid, PodUID: uid, Node: "n1"}}
}

// newFactory starts a store; stop() freezes it, leaving a stale cache.
func newFactory(t *testing.T, node string) (f *allocator.Factory, stop func()) {
	t.Helper()
	c := testClient(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	s := store.New(c, node)
	go s.Run(ctx)
	sctx, scancel := context.WithTimeout(ctx, time.Minute)
	defer scancel()
	if err := s.WaitForSync(sctx); err != nil {
		t.Fatal(err)
	}
	return &allocator.Factory{Store: s, Writer: c, Live: c, Node: node}, cancel
}

func TestAllocateNextFillsThenReportsFull(t *testing.T) {
	ctx := context.Background()
	f, _ := newFactory(t, "n1")
	a := f.For("alloc-full", addrspace.AddressSpace{Range: rangeOf(t, `{"type":"tenure","range":"10.1.0.0/30"}`)})
	got := map[string]bool{}
	for i := 0; i < 2; i++ {
		r, err := a.AllocateNext(ctx, owner(string(rune('a'+i))))
		if err != nil {
			t.Fatal(err)
		}
		got[r.Spec.Address] = true
	}
	if !got["10.1.0.1"] || !got["10.1.0.2"] {
		t.Fatalf("a /30 has .1 and .2, got %v", got)
	}
	_, err := a.AllocateNext(ctx, owner("c"))
	var full *allocator.FullError
	if !errors.As(err, &full) || !errors.Is(err, allocator.ErrFull) || full.Capacity != 2 {
		t.Fatalf("third allocation: %v, want FullError with capacity 2", err)
	}
	for _, ip := range []string{"10.1.0.1", "10.1.0.2"} {
		if !f.Store.Taken(reservation.AddressName("alloc-full", netip.MustParseAddr(ip))) {
			t.Fatalf("the store must report the allocated %s taken", ip)
		}
	}
}

func TestAllocateExplicitConflictAndRange(t *testing.T) {
	ctx := context.Background()
	f, _ := newFactory(t, "n1")
	a := f.For("alloc-explicit", addrspace.AddressSpace{Range: rangeOf(t, `{"type":"tenure","range":"10.2.0.0/24"}`)})
	item := netip.MustParsePrefix("10.2.0.9/32")
	r1, err := a.Allocate(ctx, item, owner("x"))
	if err != nil {
		t.Fatal(err)
	}
	r2, err := a.Allocate(ctx, item, owner("x"))
	if err != nil || r2.UID != r1.UID {
		t.Fatalf("the owner asking again must get its own reservation: %v %v", r2, err)
	}
	_, err = a.Allocate(ctx, item, owner("y"))
	var conflict *allocator.ConflictError
	if !errors.As(err, &conflict) || !errors.Is(err, allocator.ErrAllocated) || conflict.Holder.UID != "x" {
		t.Fatalf("another owner: %v, want ConflictError naming x", err)
	}
	_, err = a.Allocate(ctx, netip.MustParsePrefix("10.3.0.1/32"), owner("x"))
	var nir *allocator.ErrNotInRange
	if !errors.As(err, &nir) {
		t.Fatalf("outside the range: %v, want ErrNotInRange", err)
	}
	if err := f.Release(ctx, r1); err != nil {
		t.Fatal(err)
	}
	if f.Store.Taken(r1.Name) {
		t.Fatal("released item still held")
	}
}

// TestAllocateKeepsAnUnconfirmedWrite: a second owner asking for an item
// this node created a moment ago, before its cache confirmed the write, is
// refused naming the first, and the store still counts the first's write
// (a DEL reads it to free the item).
func TestAllocateKeepsAnUnconfirmedWrite(t *testing.T) {
	ctx := context.Background()
	f, stop := newFactory(t, "n1")
	stop() // the cache never confirms what follows
	a := f.For("alloc-unconfirmed", addrspace.AddressSpace{Range: rangeOf(t, `{"type":"tenure","range":"10.2.0.0/24"}`)})
	item := netip.MustParsePrefix("10.2.0.9/32")
	r1, err := a.Allocate(ctx, item, owner("x"))
	if err != nil {
		t.Fatal(err)
	}
	var conflict *allocator.ConflictError
	if _, err := a.Allocate(ctx, item, owner("y")); !errors.As(err, &conflict) || conflict.Holder.UID != "x" {
		t.Fatalf("another owner: %v, want ConflictError naming x", err)
	}
	if !f.Store.Taken(r1.Name) {
		t.Fatal("the refused request made the store forget x's unconfirmed reservation")
	}
	if r, ok := f.Store.Get(r1.Name); !ok || r.UID != r1.UID {
		t.Fatalf("the store holds %v for %s, want x's reservation", r, r1.Name)
	}
}

// A stale cache must never cause a duplicate (the API server refuses the
// Create) nor a false "full" (one live list settles it: the first list
// after the network's LiveListInterval, which a full network's callers
// share).
func TestStaleCacheNeitherDuplicatesNorReportsFalselyFull(t *testing.T) {
	ctx := context.Background()
	rng := rangeOf(t, `{"type":"tenure","range":"10.4.0.0/30"}`)
	stale, freeze := newFactory(t, "n1")
	fresh, _ := newFactory(t, "n2")
	// The range's one block is in stale's window, then frozen: from here
	// on, stale's cache sees nothing.
	block := reservation.BlockLabel("alloc-stale", false, netip.MustParsePrefix("10.4.0.0/32"))
	if err := stale.Store.(*store.Store).Watch(ctx, "alloc-stale", block); err != nil {
		t.Fatal(err)
	}
	freeze()

	// Taken behind the stale cache's back: both addresses.
	c := fresh.Writer
	taken := []*tenurev1alpha1.IPReservation{}
	for _, ip := range []string{"10.4.0.1", "10.4.0.2"} {
		r := &tenurev1alpha1.IPReservation{ObjectMeta: metav1.ObjectMeta{Name: reservation.AddressName("alloc-stale", netip.MustParseAddr(ip))},
			Spec: tenurev1alpha1.IPReservationSpec{Network: "alloc-stale", Kind: tenurev1alpha1.KindAddress, Address: ip, Owner: owner("other").Owner}}
		if err := c.Create(ctx, r); err != nil {
			t.Fatal(err)
		}
		taken = append(taken, r)
	}
	stale.LiveListInterval = time.Millisecond
	a := stale.For("alloc-stale", addrspace.AddressSpace{Range: rng})
	if _, err := a.AllocateNext(ctx, owner("me")); !errors.Is(err, allocator.ErrFull) {
		t.Fatalf("every address is taken though the cache does not know: %v, want ErrFull", err)
	}
	// Free one behind its back: the stale cache still believes it taken
	// (it recorded the AlreadyExists), the live list finds it.
	if err := c.Delete(ctx, taken[1]); err != nil {
		t.Fatal(err)
	}
	// Within the interval the last list stands; the next one finds it.
	var r *tenurev1alpha1.IPReservation
	var err error
	for deadline := time.Now().Add(30 * time.Second); ; {
		if r, err = a.AllocateNext(ctx, owner("me")); err == nil || !errors.Is(err, allocator.ErrFull) || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		t.Fatalf("after a release elsewhere: %v", err)
	}
	if r.Spec.Address != "10.4.0.2" {
		t.Fatalf("got %s, want the freed 10.4.0.2", r.Spec.Address)
	}
}

func TestPrefixSpace(t *testing.T) {
	ctx := context.Background()
	f, _ := newFactory(t, "n1")
	c, err := config.Parse([]byte(`{"cniVersion":"1.1.0","name":"t","ipam":{"type":"tenure","range":"fd00::/64","prefix_delegation":{"range":"2001:db8:100::/55","prefix_length":56}}}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	a := f.For("alloc-pd", addrspace.PrefixSpace{PD: *c.PrefixDelegation})
	seen := map[string]bool{}
	for i := 0; i < 2; i++ {
		r, err := a.AllocateNext(ctx, owner(string(rune('p'+i))))
		if err != nil {
			t.Fatal(err)
		}
		if r.Spec.Kind != tenurev1alpha1.KindDelegatedPrefix || seen[r.Spec.Address] {
			t.Fatalf("bad prefix reservation %+v", r.Spec)
		}
		seen[r.Spec.Address] = true
	}
	if !seen["2001:db8:100::/56"] || !seen["2001:db8:100:100::/56"] {
		t.Fatalf("a /55 as /56 has two prefixes, got %v", seen)
	}
	if _, err := a.AllocateNext(ctx, owner("z")); !errors.Is(err, allocator.ErrFull) {
		t.Fatalf("third prefix: %v", err)
	}
}

// Wherever a node's search starts, inside an excluded
// block too, a network with free addresses is not full. Each node's cursor
// starts where a hash of its name puts it; among these names some land in
// the excluded blocks, which hold three quarters of the IPv4 range and half
// of the IPv6 one.
func TestAllocateNextFromInsideExcludedBlocks(t *testing.T) {
	ctx := context.Background()
	base, _ := newFactory(t, "n1")
	for _, tc := range []struct{ network, ipam, firstAfterBlocks string }{
		{"alloc-wide-v4", `{"type":"tenure","range":"10.0.0.0/8","exclude":["10.0.0.0/9","10.128.0.0/10"]}`, "10.192.0.0"},
		{"alloc-wide-v6", `{"type":"tenure","range":"2001:db8::/64","exclude":["2001:db8::/65"]}`, "2001:db8::8000:0:0:0"},
	} {
		rng := rangeOf(t, tc.ipam)
		firstAfter, _ := rng.Offset(netip.MustParseAddr(tc.firstAfterBlocks))
		const nodes = 32
		startedInside := 0
		seen := map[string]bool{}
		for n := range nodes {
			node := fmt.Sprintf("node-%d", n)
			f := &allocator.Factory{Store: base.Store, Writer: base.Writer, Live: base.Live, Node: node}
			r, err := f.For(tc.network, addrspace.AddressSpace{Range: rng}).AllocateNext(ctx, owner(tc.network+"-"+node))
			if err != nil {
				t.Fatalf("%s, %s, %d addresses reserved: %v", tc.network, node, len(seen), err)
			}
			a := netip.MustParseAddr(r.Spec.Address)
			if !rng.Contains(a) || seen[r.Spec.Address] {
				t.Fatalf("%s, %s: got %s, excluded or already handed out", tc.network, node, a)
			}
			seen[r.Spec.Address] = true
			// A search that starts inside the blocks takes the first free
			// address after them.
			if off, _ := rng.Offset(a); off-firstAfter < nodes {
				startedInside++
			}
		}
		if startedInside == 0 {
			t.Fatalf("%s: no node's search started inside the excluded blocks; pick other node names", tc.network)
		}
	}
}

// releasedOnRead deletes the reservation it is asked for before reading it:
// its holder released it between another node's create and its read.
type releasedOnRead struct {
	client.WithWatch
	once sync.Once
}

func (r *releasedOnRead) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	r.once.Do(func() {
		_ = r.WithWatch.Delete(ctx, &tenurev1alpha1.IPReservation{ObjectMeta: metav1.ObjectMeta{Name: key.Name}})
	})
	return r.WithWatch.Get(ctx, key, obj, opts...)
}

// TestAllocateAfterTheHolderReleased: an item whose create met
// AlreadyExists but whose holder is gone by the time it is read is asked
// for again, and reserved.
func TestAllocateAfterTheHolderReleased(t *testing.T) {
	ctx := context.Background()
	space := addrspace.AddressSpace{Range: rangeOf(t, `{"type":"tenure","range":"10.2.0.0/24"}`)}
	item := netip.MustParsePrefix("10.2.0.9/32")
	f1, _ := newFactory(t, "n1")
	if _, err := f1.For("alloc-released", space).Allocate(ctx, item, owner("x")); err != nil {
		t.Fatal(err)
	}
	f2, _ := newFactory(t, "n2")
	f2.Live = &releasedOnRead{WithWatch: testClient(t)}
	r, err := f2.For("alloc-released", space).Allocate(ctx, item, owner("y"))
	if err != nil || r.Spec.Owner.UID != "y" {
		t.Fatalf("Allocate after the holder released: %v, %v; want y's reservation", r, err)
	}
}

// heldWriter holds each Create until release is closed, telling entered
// that one arrived: the Creates of concurrent ADDs are all in flight at once.
type heldWriter struct {
	client.Client
	entered chan<- string
	release <-chan struct{}
}

func (w *heldWriter) Create(ctx context.Context, obj client.Object, opts ...client.CreateOption) error {
	w.entered <- obj.GetName()
	<-w.release
	return w.Client.Create(ctx, obj, opts...)
}

// refusalCounter counts the candidates the allocator built and found
// taken.
type refusalCounter struct {
	allocator.Store
	refused atomic.Int32
}

func (s *refusalCounter) TryAssume(r *tenurev1alpha1.IPReservation) bool {
	ok := s.Store.TryAssume(r)
	if !ok {
		s.refused.Add(1)
	}
	return ok
}

// TestConcurrentAllocationsStartPastTheItemsInFlight: ADDs of one node
// that overlap, each starting while the others' Creates are in flight,
// each try one candidate: the cursor moves past an item once it is
// assumed, so no ADD walks over the items the others are creating.
func TestConcurrentAllocationsStartPastTheItemsInFlight(t *testing.T) {
	ctx := context.Background()
	f, _ := newFactory(t, "n1")
	entered, release := make(chan string), make(chan struct{})
	counter := &refusalCounter{Store: f.Store}
	f.Store = counter
	f.Writer = &heldWriter{Client: f.Writer, entered: entered, release: release}
	a := f.For("alloc-inflight", addrspace.AddressSpace{Range: rangeOf(t, `{"type":"tenure","range":"10.9.0.0/24"}`)})
	const n = 8
	var g sync.WaitGroup
	got := make([]string, n)
	errs := make([]error, n)
	var creating []string
	for i := range n {
		g.Add(1)
		go func() {
			defer g.Done()
			r, err := a.AllocateNext(ctx, owner(fmt.Sprintf("inflight-%d", i)))
			errs[i] = err
			if r != nil {
				got[i] = r.Spec.Address
			}
		}()
		creating = append(creating, <-entered) // the next starts with this one in flight
	}
	close(release)
	g.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("ADD %d: %v", i, err)
		}
	}
	if r := counter.refused.Load(); r != 0 {
		t.Fatalf("the ADDs built %d candidates that the ones in flight had assumed, want 0 (creating %v)", r, creating)
	}
	seen := map[string]bool{}
	for _, ip := range got {
		if seen[ip] {
			t.Fatalf("two ADDs got %s: %v", ip, got)
		}
		seen[ip] = true
	}
}

// barrierStore holds every Watch until n callers wait in it, and reports
// no block watched until then: n ADDs that start together all read the
// cursor before any of them assumes an item.
type barrierStore struct {
	*refusalCounter
	n       int32
	arrived atomic.Int32
	open    chan struct{}
}

func (s *barrierStore) Watching(block, network string) bool {
	select {
	case <-s.open:
		return s.refusalCounter.Watching(block, network)
	default:
		return false
	}
}

func (s *barrierStore) Watch(ctx context.Context, network, block string) error {
	if s.arrived.Add(1) == s.n {
		close(s.open)
	}
	<-s.open
	return s.refusalCounter.Watch(ctx, network, block)
}

// TestADDsThatReadTheCursorTogetherBuildOneCandidateEach: ADDs that all
// read the cursor before any assumed an item (each waited on the window's
// first block) pass the items the others assumed by their names: each
// builds and assumes one reservation, the one it creates. On one P, as
// the agent runs, so that only the window's wait interleaves them.
func TestADDsThatReadTheCursorTogetherBuildOneCandidateEach(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	ctx := context.Background()
	f, _ := newFactory(t, "n1")
	const n = 8
	s := &barrierStore{refusalCounter: &refusalCounter{Store: f.Store}, n: n, open: make(chan struct{})}
	f.Store = s
	a := f.For("alloc-together", addrspace.AddressSpace{Range: rangeOf(t, `{"type":"tenure","range":"10.10.0.0/24"}`)})
	var g sync.WaitGroup
	got := make([]string, n)
	for i := range n {
		g.Add(1)
		go func() {
			defer g.Done()
			r, err := a.AllocateNext(ctx, owner(fmt.Sprintf("together-%d", i)))
			if err != nil {
				t.Errorf("ADD %d: %v", i, err)
				return
			}
			got[i] = r.Spec.Address
		}()
	}
	g.Wait()
	if r := s.refused.Load(); r != 0 {
		t.Fatalf("the ADDs built %d candidates that others had assumed, want 0 (got %v)", r, got)
	}
	seen := map[string]bool{}
	for _, ip := range got {
		if ip == "" || seen[ip] {
			t.Fatalf("addresses %v: want %d different ones", got, n)
		}
		seen[ip] = true
	}
}
