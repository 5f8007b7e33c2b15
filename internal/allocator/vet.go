package allocator

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/tenure-ipam/tenure/internal/addrspace"
	"github.com/tenure-ipam/tenure/internal/reservation"
)

// Vet checks a free candidate before it is reserved: false when it must
// not be handed out now (something on the wire answers for it), an error
// when it cannot be known. AllocateNext calls it with the candidate's
// name set aside for the call (Store.TryAssume), so the node's
// concurrent calls pass over it meanwhile; a refused candidate is
// skipped and stays free, to be tried again by a later call.
type Vet func(ctx context.Context, item netip.Prefix) (ok bool, err error)

// ForVetted is For with every candidate AllocateNext picks checked by vet
// before it is reserved. Allocate (an item asked for by name, or one the
// owner holds) does not vet.
func (f *Factory) ForVetted(scope string, space addrspace.Space, vet Vet) Interface {
	a := f.For(scope, space).(*allocator)
	a.vet = vet
	return a
}

// AnsweredError answers an AllocateNext that found free candidates, but
// every one of them refused by its Vet: the range is not full, its free
// addresses are in use on the wire by something that holds no
// reservation.
type AnsweredError struct {
	Range string
	Items []netip.Prefix
}

func (e *AnsweredError) Error() string {
	items := make([]string, len(e.Items))
	for i, p := range e.Items {
		items[i] = p.Addr().String()
	}
	return fmt.Sprintf("range %s has no address to hand out: its free addresses %s answer on the wire, held by hosts tenure did not give them to", e.Range, strings.Join(items, ", "))
}

// Is makes an AnsweredError an ErrAllocated: the addresses are taken,
// though not by a reservation.
func (e *AnsweredError) Is(target error) bool { return target == ErrAllocated }

// counting returns a copy of a whose vet records what it refused in
// *refused, for AllocateNext's answer.
func (a *allocator) counting() (*allocator, *[]netip.Prefix) {
	refused := new([]netip.Prefix)
	if a.vet == nil {
		return a, refused
	}
	c := *a
	vet := a.vet
	c.vet = func(ctx context.Context, item netip.Prefix) (bool, error) {
		ok, err := vet(ctx, item)
		if err == nil && !ok && !slices.Contains(*refused, item) {
			*refused = append(*refused, item)
		}
		return ok, err
	}
	return &c, refused
}

// vetted runs the vet on an assumed candidate of that name; a candidate it
// refuses, or could not check, is handed back to the store.
func (a *allocator) vetted(ctx context.Context, name string, item netip.Prefix) (bool, error) {
	if a.vet == nil {
		return true, nil
	}
	ok, err := a.vet(ctx, item)
	if err != nil || !ok {
		a.f.Store.Forget(name)
	}
	if err != nil {
		return false, fmt.Errorf("checking %s on the wire: %w", reservation.ItemString(a.space.Kind(), item), err)
	}
	return ok, nil
}

// Upcoming is up to n candidates of space that AllocateNext on this node
// would try next, as the store knows them now: from the node's cursor on,
// wrapping, past what the store holds or has set aside. Where the walk
// reaches a block the window does not hold, it widens the window by that
// block, as the next AllocateNext would (once per call; it stops at a
// second, or when the widening fails). What it returns may be taken by
// the time a call comes, which the call finds out as always. The agent
// probes these ahead of time (ForVetted).
func (f *Factory) Upcoming(ctx context.Context, scope string, space addrspace.Space, n int) []netip.Prefix {
	if n <= 0 || space.Size() == 0 || !f.Store.HasSynced() {
		return nil
	}
	a := f.For(scope, space).(*allocator)
	start, size := a.start(), space.Size()
	var out []netip.Prefix
	// Each step passes a run the store holds or one candidate; the bound
	// only guards against a window of many runs of one address each.
	steps := 0
	widened := maxWiden - 1 // one widening
	for _, span := range [...]struct{ from, to uint64 }{{start, size}, {0, start}} {
		for i := span.from; i < span.to && len(out) < n && steps < upcomingSteps; steps++ {
			idx, item, ok := space.Next(i)
			if !ok || idx >= span.to {
				break
			}
			if err := a.widen(ctx, item, &widened); err != nil {
				return out
			}
			if next, skip := a.skipHeld(idx, item); skip {
				i = next
				continue
			}
			i = idx + 1
			if f.Store.Taken(reservation.NameInScope(a.label, space.Kind(), item)) {
				continue
			}
			out = append(out, item)
		}
	}
	return out
}

// upcomingSteps bounds Upcoming's walk.
const upcomingSteps = 4096
