package allocator_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/addrspace"
	"github.com/tenure-ipam/tenure/internal/allocator"
	"github.com/tenure-ipam/tenure/internal/reservation"
	"github.com/tenure-ipam/tenure/internal/store"
)

// filled is a /29 every address of which one owner (pod o<i>,
// interface net1) holds, in the order node n1's cursor handed them out:
// first is where n1's cursor starts, last the address before it.
type filled struct {
	t           *testing.T
	network     string
	f           *allocator.Factory
	a           allocator.Interface
	first, last *tenurev1alpha1.IPReservation
}

func space(t *testing.T) addrspace.Space {
	return addrspace.AddressSpace{Range: rangeOf(t, `{"type":"tenure","range":"10.9.0.0/29"}`)}
}

func withIf(tpl allocator.Template, ifc string) allocator.Template {
	tpl.Owner.Interface = ifc
	return tpl
}

func fill(t *testing.T, network string) filled {
	t.Helper()
	ctx := context.Background()
	f, _ := newFactory(t, "n1")
	a := f.For(network, space(t))
	var got []*tenurev1alpha1.IPReservation
	for i := 0; ; i++ {
		r, err := a.AllocateNext(ctx, withIf(owner(fmt.Sprintf("o%d", i)), "net1"))
		var full *allocator.FullError
		if errors.As(err, &full) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, r)
	}
	if len(got) < 3 {
		t.Fatalf("the /29 took %d owners, want at least 3", len(got))
	}
	return filled{t: t, network: network, f: f, a: a, first: got[0], last: got[len(got)-1]}
}

// restart is the pool seen by a new agent of node n1 (a restart: the
// cursor starts at first again, the ledger is empty) with that cooldown.
func (p filled) restart(cooldown time.Duration) filled {
	p.t.Helper()
	f, _ := newFactory(p.t, "n1")
	f.Store.(*store.Store).SetCooldown(cooldown)
	p.f, p.a = f, f.For(p.network, space(p.t))
	return p
}

func (p filled) release(t *testing.T, rs ...*tenurev1alpha1.IPReservation) {
	t.Helper()
	for _, r := range rs {
		if err := p.f.Release(context.Background(), r); err != nil {
			t.Fatal(err)
		}
	}
}

func (p filled) next(t *testing.T, tpl allocator.Template) string {
	t.Helper()
	r, err := p.a.AllocateNext(context.Background(), tpl)
	if err != nil {
		t.Fatalf("AllocateNext for %s: %v", tpl.Owner.UID, err)
	}
	return r.Spec.Address
}

// TestAReleasedAddressCoolsDown: of two free addresses, a new owner gets
// the one not cooling, although the search meets the one just released
// first; with the cooldown off, it gets that one.
func TestAReleasedAddressCoolsDown(t *testing.T) {
	for _, tc := range []struct {
		name     string
		cooldown time.Duration
		wantLast bool
	}{
		{"on", time.Hour, true},
		{"off", 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := fill(t, "cool-"+tc.name)
			// Released before this agent started: free, not cooling.
			p.release(t, p.last)
			p = p.restart(tc.cooldown)
			p.release(t, p.first)
			want := p.first.Spec.Address
			if tc.wantLast {
				want = p.last.Spec.Address
			}
			if got := p.next(t, owner("new")); got != want {
				t.Fatalf("new owner got %s, want %s (just released: %s)", got, want, p.first.Spec.Address)
			}
		})
	}
}

// TestWhenNothingElseIsFreeTheLongestCooledIsUsedFirst: with only cooling
// addresses free, new owners get them in the order they were released,
// whatever the cursor's order; the range is not full while one is.
func TestWhenNothingElseIsFreeTheLongestCooledIsUsedFirst(t *testing.T) {
	p := fill(t, "cool-order").restart(time.Hour)
	p.release(t, p.last, p.first) // the last is released longest ago
	if got := p.next(t, owner("new1")); got != p.last.Spec.Address {
		t.Fatalf("first new owner got %s, want %s, released longest ago", got, p.last.Spec.Address)
	}
	if got := p.next(t, owner("new2")); got != p.first.Spec.Address {
		t.Fatalf("second new owner got %s, want %s", got, p.first.Spec.Address)
	}
	_, err := p.a.AllocateNext(context.Background(), owner("new3"))
	var full *allocator.FullError
	if !errors.As(err, &full) {
		t.Fatalf("third new owner: %v, want full", err)
	}
}

// TestTheSameOwnerTakesItsAddressBackAtOnce: the attachment that released
// an address (a retried ADD) gets it back, cooling and all, where another
// owner would get the address released longest ago; the same pod's other
// interface is another owner.
func TestTheSameOwnerTakesItsAddressBackAtOnce(t *testing.T) {
	for _, tc := range []struct {
		ifc       string
		wantFirst bool
	}{
		{"net1", true},
		{"net2", false},
	} {
		t.Run(tc.ifc, func(t *testing.T) {
			p := fill(t, "cool-same-"+tc.ifc).restart(time.Hour)
			p.release(t, p.last, p.first)
			want := p.last.Spec.Address
			if tc.wantFirst {
				want = p.first.Spec.Address
			}
			o := withIf(allocator.Template{Owner: p.first.Spec.Owner}, tc.ifc)
			if got := p.next(t, o); got != want {
				t.Fatalf("%s/%s got %s, want %s (its own: %s)", o.Owner.UID, tc.ifc, got, want, p.first.Spec.Address)
			}
		})
	}
}

// TestAnotherAgentCoolsWhatItsWindowSawReleased: node n2 allocates from a
// /29 (its window then holds the block), node n1 releases the address
// n2's search meets next: once n2's window has seen the delete, a new
// owner on n2 gets the other free address; with n2's cooldown off, the
// released one.
func TestAnotherAgentCoolsWhatItsWindowSawReleased(t *testing.T) {
	for _, tc := range []struct {
		name     string
		cooldown time.Duration
		wantX    bool
	}{
		{"on", time.Hour, false},
		{"off", 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			network := "cool-window-" + tc.name
			sp := space(t)
			n1, _ := newFactory(t, "n1")
			n1.Store.(*store.Store).SetCooldown(tc.cooldown)
			n2, _ := newFactory(t, "n2")
			st2 := n2.Store.(*store.Store)
			st2.SetCooldown(tc.cooldown)
			a1, a2 := n1.For(network, sp), n2.For(network, sp)

			b0, err := a2.AllocateNext(ctx, owner("b0"))
			if err != nil {
				t.Fatal(err)
			}
			var cands []netip.Prefix
			for i := uint64(0); ; {
				idx, item, ok := sp.Next(i)
				if !ok {
					break
				}
				cands, i = append(cands, item), idx+1
			}
			pos := slices.IndexFunc(cands, func(p netip.Prefix) bool { return p.Addr().String() == b0.Spec.Address })
			x, y := cands[(pos+1)%len(cands)], cands[(pos+2)%len(cands)]
			var xr *tenurev1alpha1.IPReservation
			for i, c := range cands {
				if c == y || i == pos {
					continue
				}
				r, err := a1.Allocate(ctx, c, owner(fmt.Sprintf("h%d", i)))
				if err != nil {
					t.Fatal(err)
				}
				if c == x {
					xr = r
				}
			}
			if err := n1.Release(ctx, xr); err != nil {
				t.Fatal(err)
			}
			name := reservation.NameInScope(reservation.ScopeLabel(network), tenurev1alpha1.KindAddress, x)
			err = wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
				if st2.Taken(name) {
					return false, nil
				}
				_, cooling := st2.Cooling(name, owner("new").Owner)
				return cooling == (tc.cooldown > 0), nil
			})
			if err != nil {
				t.Fatalf("n2's window never saw %s released (cooling as its cooldown %v says): %v", x.Addr(), tc.cooldown, err)
			}
			want := y
			if tc.wantX {
				want = x
			}
			r, err := a2.AllocateNext(ctx, owner("new"))
			if err != nil {
				t.Fatal(err)
			}
			if r.Spec.Address != want.Addr().String() {
				t.Fatalf("new owner on n2 got %s, want %s (released on n1: %s)", r.Spec.Address, want.Addr(), x.Addr())
			}
		})
	}
}
