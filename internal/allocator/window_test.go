package allocator_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/util/watchlist"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"

	"github.com/tenure-ipam/tenure/internal/addrspace"
	"github.com/tenure-ipam/tenure/internal/allocator"
	"github.com/tenure-ipam/tenure/internal/reservation"
	"github.com/tenure-ipam/tenure/internal/store"
)

// The agent's store watches only the blocks its allocations need
// (internal/store's window): these tests show the allocator widening it,
// falling back to the live list past a few full blocks, and watching a
// network whole once it is full, so that a release still reaches a
// waiting pod at once.

// blocksOf lists the /26 block labels of a /23's eight blocks on network.
func blocksOf(network, base string) []string {
	b := netip.MustParseAddr(base).As4()
	var out []string
	for i := 0; i < 8; i++ {
		a := netip.AddrFrom4([4]byte{b[0], b[1], b[2] + byte(i/4), byte(64 * (i % 4))})
		out = append(out, reservation.BlockLabel(reservation.ScopeLabel(network), false, netip.PrefixFrom(a, 32)))
	}
	return out
}

func watched(s *store.Store, network string, blocks []string) (n int) {
	for _, b := range blocks {
		if s.Watching(b, "not-"+network) {
			n++
		}
	}
	return n
}

func TestWindowWidensBlockByBlockThenAsksTheLiveList(t *testing.T) {
	ctx := context.Background()
	const network = "alloc-window"
	rng := rangeOf(t, `{"type":"tenure","range":"10.7.0.0/23"}`)
	mine, _ := newFactory(t, "n1")
	other, _ := newFactory(t, "n2")
	win := mine.Store.(*store.Store)
	blocks := blocksOf(network, "10.7.0.0")

	// One allocation watches one block: the block it took from.
	a := mine.For(network, addrspace.AddressSpace{Range: rng})
	first, err := a.AllocateNext(ctx, owner("first"))
	if err != nil {
		t.Fatal(err)
	}
	if n := watched(win, network, blocks); n != 1 || !win.Watching(first.Labels[reservation.LabelBlock], "") {
		t.Fatalf("after one allocation %d blocks are watched, want 1: the block of %s", n, first.Spec.Address)
	}

	// Another node takes every address but one, .250 of the last block,
	// behind mine's window.
	b := other.For(network, addrspace.AddressSpace{Range: rng})
	for i := 1; i <= 510; i++ { // 10.7.0.1 to 10.7.1.254
		a := netip.AddrFrom4([4]byte{10, 7, byte(i / 256), byte(i % 256)})
		if a.String() == first.Spec.Address || a.String() == "10.7.1.250" {
			continue
		}
		if _, err := b.Allocate(ctx, netip.PrefixFrom(a, 32), ownerOn(fmt.Sprint("o", i), "n2")); err != nil {
			t.Fatal(err)
		}
	}
	// Mine widens at most maxWiden (4) blocks, each full, then one live
	// list says where the free address is.
	lists := &countingReader{Reader: mine.Live}
	mine.Live = lists
	got, err := a.AllocateNext(ctx, owner("last"))
	if err != nil {
		t.Fatal(err)
	}
	if got.Spec.Address != "10.7.1.250" {
		t.Fatalf("got %s, want the one free address 10.7.1.250", got.Spec.Address)
	}
	if n := watched(win, network, blocks); n > 1+4 {
		t.Fatalf("%d blocks watched, want at most 5 (the first, and 4 widened)", n)
	}
	if n := lists.lists.Load(); n != 1 {
		t.Fatalf("%d live lists, want 1", n)
	}

	// Full now: a fresh live list says so, and mine watches the network
	// whole from then on.
	mine.LiveListInterval = time.Nanosecond // the last list is too old
	if _, err := a.AllocateNext(ctx, owner("waiting")); !errors.Is(err, allocator.ErrFull) {
		t.Fatalf("a full range: %v, want ErrFull", err)
	}
	// The whole network's watch starts in the background.
	if err := wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return win.Watching("no-such-block", reservation.ScopeLabel(network)), nil
	}); err != nil {
		t.Fatalf("a range found full must have its network watched whole: %v", err)
	}
	// A release on another node reaches the waiting pod's next ADD
	// without another live list.
	mine.LiveListInterval = time.Hour
	before := lists.lists.Load()
	freed := reservation.AddressName(network, netip.MustParseAddr("10.7.0.77"))
	if err := other.Release(ctx, &tenurev1alpha1.IPReservation{ObjectMeta: metav1.ObjectMeta{Name: freed}}); err != nil {
		t.Fatal(err)
	}
	// Reached: the window's cache lets the name go, and its index of held
	// addresses (kept by a handler of the same informer, so a moment
	// later) no longer skips the address.
	freedAddr := netip.MustParseAddr("10.7.0.77")
	if err := wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		next, _ := win.NextUnheldAddress(reservation.ScopeLabel(network), freedAddr)
		return !win.Taken(freed) && next == freedAddr, nil
	}); err != nil {
		t.Fatalf("the release never reached the window: %v", err)
	}
	r, err := a.AllocateNext(ctx, owner("waiting"))
	if err != nil || r.Spec.Address != "10.7.0.77" {
		t.Fatalf("after the release: %v %v, want 10.7.0.77", r, err)
	}
	if n := lists.lists.Load() - before; n != 0 {
		t.Fatalf("%d live lists after the release, want 0", n)
	}
}

// ownerOn is owner's template for a pod of node.
func ownerOn(uid, node string) allocator.Template {
	t := owner(uid)
	t.Owner.Node = node
	return t
}

// A node walking a nearly full range, one free address in each block,
// would widen its window block after block, each widening relisting every
// block it holds: past a quarter of the range's blocks (and at least 8),
// it takes in the network whole, once, and the rest of the walk reads it.
func TestWindowTakesInTheWholeNetworkOnceItHasWalkedAQuarterOfTheRange(t *testing.T) {
	ctx := context.Background()
	const network = "alloc-walk"
	rng := rangeOf(t, `{"type":"tenure","range":"10.8.0.0/22"}`) // 16 blocks: whole after 8
	mine, _ := newFactory(t, "n1")
	other, _ := newFactory(t, "n2")
	win := mine.Store.(*store.Store)
	label := reservation.ScopeLabel(network)

	// Another node holds every address but .33 of each block.
	free := map[string]bool{}
	b := other.For(network, addrspace.AddressSpace{Range: rng})
	for i := 1; i <= 1022; i++ {
		a := netip.AddrFrom4([4]byte{10, 8, byte(i / 256), byte(i % 256)})
		if i%64 == 33 {
			free[a.String()] = true
			continue
		}
		if _, err := b.Allocate(ctx, netip.PrefixFrom(a, 32), ownerOn(fmt.Sprint("o", i), "n2")); err != nil {
			t.Fatal(err)
		}
	}

	a := mine.For(network, addrspace.AddressSpace{Range: rng})
	lists := &countingReader{Reader: mine.Live}
	mine.Live = lists
	got := map[string]bool{}
	wholeAt, rebuildsAtWhole := -1, int64(0)
	for i := 0; i < len(free); i++ {
		r, err := a.AllocateNext(ctx, owner(fmt.Sprint("walk", i)))
		if err != nil {
			t.Fatalf("ADD %d: %v", i, err)
		}
		if !free[r.Spec.Address] || got[r.Spec.Address] {
			t.Fatalf("ADD %d got %s: not one of the free addresses, or given twice", i, r.Spec.Address)
		}
		got[r.Spec.Address] = true
		if n := win.WatchedBlocks(label); n > 8 {
			t.Fatalf("after ADD %d the window holds %d blocks one by one, want at most 8 before it takes in the network", i, n)
		}
		if wholeAt < 0 && win.Watching("no-such-block", label) {
			wholeAt, rebuildsAtWhole = i, win.Rebuilds()
			if n := win.WatchedBlocks(label); n != 0 {
				t.Fatalf("watched whole, the window still holds %d of its blocks one by one", n)
			}
		}
	}
	if wholeAt < 0 || wholeAt >= len(free)-1 {
		t.Fatalf("the network was taken in whole at ADD %d of %d, want before the walk's end", wholeAt, len(free))
	}
	if n := win.Rebuilds() - rebuildsAtWhole; n != 0 {
		t.Fatalf("the window was rebuilt %d times after it held the network whole, want 0", n)
	}
	if n := lists.lists.Load(); n != 0 {
		t.Fatalf("%d live lists, want none: the walk found each free address in the window", n)
	}
}

// wholeGate holds back the store's lists and watches of a whole network
// (its window's informer of the network label, not the one of the
// network's unlabelled reservations) until open is closed.
type wholeGate struct {
	client.WithWatch
	open chan struct{}
}

// IsWatchListSemanticsUnSupported passes on what the wrapped client says
// (the in-memory API cannot stream a watch's initial events).
func (g *wholeGate) IsWatchListSemanticsUnSupported() bool {
	return watchlist.DoesClientNotSupportWatchListSemantics(g.WithWatch)
}

func (g *wholeGate) hold(ctx context.Context, opts []client.ListOption) error {
	var o client.ListOptions
	o.ApplyOptions(opts)
	if o.LabelSelector == nil {
		return nil
	}
	sel := o.LabelSelector.String()
	if !strings.Contains(sel, reservation.LabelNetwork+" in (") || strings.Contains(sel, "!"+reservation.LabelBlock) {
		return nil
	}
	select {
	case <-g.open:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (g *wholeGate) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	if err := g.hold(ctx, opts); err != nil {
		return err
	}
	return g.WithWatch.List(ctx, list, opts...)
}

func (g *wholeGate) Watch(ctx context.Context, list client.ObjectList, opts ...client.ListOption) (watch.Interface, error) {
	if err := g.hold(ctx, opts); err != nil {
		return nil, err
	}
	return g.WithWatch.Watch(ctx, list, opts...)
}

// TestAFullNetworkAnswersWhileTheWindowTakesItInWhole: once a live list
// has found a range full, the window takes in the whole network, a list
// of every reservation in it (seconds on a large network). An ADD that
// comes meanwhile and reaches a block the window does not hold is
// answered "full" from the live list; it does not wait for the window.
func TestAFullNetworkAnswersWhileTheWindowTakesItInWhole(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const network = "alloc-taking-in"
	label := reservation.ScopeLabel(network)
	rng := rangeOf(t, `{"type":"tenure","range":"10.8.0.0/23"}`)
	other, _ := newFactory(t, "n2")
	b := other.For(network, addrspace.AddressSpace{Range: rng})
	for i := 1; i <= 510; i++ { // 10.8.0.1 to 10.8.1.254: the range, full
		a := netip.AddrFrom4([4]byte{10, 8, byte(i / 256), byte(i % 256)})
		if _, err := b.Allocate(ctx, netip.PrefixFrom(a, 32), ownerOn(fmt.Sprint("o", i), "n2")); err != nil {
			t.Fatal(err)
		}
	}

	gate := &wholeGate{WithWatch: testClient(t), open: make(chan struct{})}
	opened := false
	defer func() {
		if !opened {
			close(gate.open)
		}
	}()
	win := store.New(gate, "n1")
	go win.Run(ctx)
	if err := win.WaitForSync(ctx); err != nil {
		t.Fatal(err)
	}
	mine := &allocator.Factory{Store: win, Writer: gate.WithWatch, Live: gate.WithWatch, Node: "n1"}
	a := mine.For(network, addrspace.AddressSpace{Range: rng})

	// The first ADD widens the window by 4 blocks of the 8, then a live
	// list finds the range full: the answer, and the window starts taking
	// in the whole network, held back here.
	if _, err := a.AllocateNext(ctx, owner("w1")); !errors.Is(err, allocator.ErrFull) {
		t.Fatalf("the first ADD on a full range: %v, want ErrFull", err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return win.TakingInWhole(label), nil
	}); err != nil {
		t.Fatalf("a range found full must have its network taken in whole: %v", err)
	}
	// The next ADD walks past the window's blocks to one it does not
	// hold, while the whole network's list is held back.
	if _, err := a.AllocateNext(ctx, owner("w2")); !errors.Is(err, allocator.ErrFull) {
		t.Fatalf("an ADD while the network is taken in whole: %v, want ErrFull", err)
	}
	if win.Watching("no-such-block", label) {
		t.Fatal("the network was watched whole before its list was let through")
	}
	opened = true
	close(gate.open)
	if err := wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return win.Watching("no-such-block", label), nil
	}); err != nil {
		t.Fatalf("the network is not watched whole once its list went through: %v", err)
	}

	// Watched whole, the window answers "full": a live list at most once
	// per WholeLiveListInterval, however short LiveListInterval is.
	lists := &countingReader{Reader: mine.Live}
	mine.Live, mine.LiveListInterval = lists, time.Nanosecond
	for i := 0; i < 3; i++ {
		if _, err := a.AllocateNext(ctx, owner("w3")); !errors.Is(err, allocator.ErrFull) {
			t.Fatalf("an ADD on the network watched whole: %v, want ErrFull", err)
		}
	}
	if n := lists.lists.Load(); n != 0 {
		t.Fatalf("3 ADDs on a full network watched whole sent %d live lists, want 0 within %v of the last", n, allocator.WholeLiveListInterval)
	}
}
