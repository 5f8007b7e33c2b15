package allocator_test

import (
	"context"
	"errors"
	"net/netip"
	"sync"
	"testing"

	"github.com/tenure-ipam/tenure/internal/addrspace"
	"github.com/tenure-ipam/tenure/internal/allocator"
	"github.com/tenure-ipam/tenure/internal/reservation"
)

// answering is a Vet refusing the addresses in it, recording what it saw.
type answering struct {
	mu   sync.Mutex
	held map[netip.Addr]bool
	seen []netip.Addr
}

func (w *answering) vet(_ context.Context, item netip.Prefix) (bool, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.seen = append(w.seen, item.Addr())
	return !w.held[item.Addr()], nil
}

func TestAnAddressTheVetRefusesIsSkippedAndStaysFree(t *testing.T) {
	ctx := context.Background()
	f, _ := newFactory(t, "n1")
	squatted := netip.MustParseAddr("10.1.0.2")
	w := &answering{held: map[netip.Addr]bool{squatted: true}}
	space := addrspace.AddressSpace{Range: rangeOf(t, `{"type":"tenure","range":"10.1.0.0/29"}`)}
	got := map[string]string{}
	for _, uid := range []string{"a", "b", "c", "d", "e"} {
		r, err := f.ForVetted("vet-skip", space, w.vet).AllocateNext(ctx, owner(uid))
		if err != nil {
			t.Fatalf("allocation %s: %v", uid, err)
		}
		got[r.Spec.Address] = uid
	}
	if uid, ok := got[squatted.String()]; ok {
		t.Fatalf("%s, which answers on the wire, went to %s", squatted, uid)
	}
	for _, ip := range []string{"10.1.0.1", "10.1.0.3", "10.1.0.4", "10.1.0.5", "10.1.0.6"} {
		if _, ok := got[ip]; !ok {
			t.Fatalf("allocations %v, want every address of the /29 but %s", got, squatted)
		}
	}
	if f.Store.Taken(reservation.AddressName("vet-skip", squatted)) {
		t.Fatalf("the refused %s is still set aside in the store", squatted)
	}
	// The range is full but for the squatted address: the answer says so.
	_, err := f.ForVetted("vet-skip", space, w.vet).AllocateNext(ctx, owner("f"))
	var answered *allocator.AnsweredError
	if !errors.As(err, &answered) || !errors.Is(err, allocator.ErrAllocated) || len(answered.Items) != 1 || answered.Items[0].Addr() != squatted {
		t.Fatalf("allocation past the last silent address: %v, want an AnsweredError naming %s", err, squatted)
	}
	// Once it stops answering, it is handed out.
	w.mu.Lock()
	w.held = nil
	w.mu.Unlock()
	r, err := f.ForVetted("vet-skip", space, w.vet).AllocateNext(ctx, owner("f"))
	if err != nil || r.Spec.Address != squatted.String() {
		t.Fatalf("after the squatter left: %v %v, want %s", r, err, squatted)
	}
}

func TestACandidateTheVetCannotCheckFailsTheCallAndStaysFree(t *testing.T) {
	ctx := context.Background()
	f, _ := newFactory(t, "n1")
	space := addrspace.AddressSpace{Range: rangeOf(t, `{"type":"tenure","range":"10.1.0.0/30"}`)}
	broken := errors.New("no such interface")
	var tried netip.Addr
	_, err := f.ForVetted("vet-err", space, func(_ context.Context, item netip.Prefix) (bool, error) {
		tried = item.Addr()
		return false, broken
	}).AllocateNext(ctx, owner("a"))
	if !errors.Is(err, broken) {
		t.Fatalf("err = %v, want the vet's", err)
	}
	if !tried.IsValid() || f.Store.Taken(reservation.AddressName("vet-err", tried)) {
		t.Fatalf("the candidate %v the vet could not check stays set aside", tried)
	}
	r, err := f.For("vet-err", space).Allocate(ctx, netip.PrefixFrom(tried, 32), owner("a"))
	if err != nil || r.Spec.Address != tried.String() {
		t.Fatalf("allocating %s after the failed check: %v %v", tried, r, err)
	}
}

func TestUpcomingIsWhatTheNextAllocationsTake(t *testing.T) {
	ctx := context.Background()
	f, _ := newFactory(t, "n1")
	space := addrspace.AddressSpace{Range: rangeOf(t, `{"type":"tenure","range":"10.1.0.0/28"}`)}
	held := map[netip.Addr]bool{}
	for _, uid := range []string{"a", "b", "c"} {
		r, err := f.For("upcoming", space).AllocateNext(ctx, owner(uid))
		if err != nil {
			t.Fatal(err)
		}
		held[netip.MustParseAddr(r.Spec.Address)] = true
	}
	next := f.Upcoming(ctx, "upcoming", space, 4)
	if len(next) != 4 {
		t.Fatalf("Upcoming = %v, want 4 candidates", next)
	}
	for _, p := range next {
		if held[p.Addr()] {
			t.Fatalf("Upcoming %v holds %s, which is reserved", next, p.Addr())
		}
	}
	for i, uid := range []string{"d", "e", "f", "g"} {
		r, err := f.For("upcoming", space).AllocateNext(ctx, owner(uid))
		if err != nil {
			t.Fatal(err)
		}
		if r.Spec.Address != next[i].Addr().String() {
			t.Fatalf("allocation %d took %s, Upcoming said %v", i, r.Spec.Address, next)
		}
	}
}

func TestUpcomingWidensTheWindowIntoTheNextBlock(t *testing.T) {
	ctx := context.Background()
	f, _ := newFactory(t, "n1")
	// 21 addresses across two blocks (.0-.63 and .64-.127).
	space := addrspace.AddressSpace{Range: rangeOf(t, `{"type":"tenure","range":"10.1.0.0/24","range_start":"10.1.0.60","range_end":"10.1.0.80"}`)}
	r, err := f.For("upcoming-widen", space).AllocateNext(ctx, owner("a"))
	if err != nil {
		t.Fatal(err)
	}
	next := f.Upcoming(ctx, "upcoming-widen", space, 30)
	if len(next) != 20 {
		t.Fatalf("Upcoming = %v (%d), want the 20 addresses of both blocks but %s", next, len(next), r.Spec.Address)
	}
	for _, p := range next {
		if p.Addr().String() == r.Spec.Address {
			t.Fatalf("Upcoming %v holds the reserved %s", next, r.Spec.Address)
		}
	}
}
