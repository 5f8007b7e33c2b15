package store

import (
	"context"
	"fmt"
	"net/netip"
	"runtime"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/reservation"
	"github.com/tenure-ipam/tenure/test/kubefake"
)

// The store's assumed writes, on an in-memory API whose watch
// events a test can hold back: what an allocation sees between its Create
// and the informer's report of it.

func startStore(t *testing.T, objs ...client.Object) (*Store, *kubefake.Client, context.Context) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	fc := kubefake.New(objs...)
	s := New(fc, "n1")
	go s.Run(ctx)
	sctx, stop := context.WithTimeout(ctx, 30*time.Second)
	defer stop()
	if err := s.WaitForSync(sctx); err != nil {
		t.Fatal(err)
	}
	return s, fc, ctx
}

func resv(addr, ownerUID, node string) *tenurev1alpha1.IPReservation {
	a := netip.MustParseAddr(addr)
	return reservation.New(reservation.Spec{Network: "san", Kind: tenurev1alpha1.KindAddress, Item: netip.PrefixFrom(a, a.BitLen()),
		Owner: tenurev1alpha1.ReservationOwner{Kind: tenurev1alpha1.OwnerPod, Namespace: "ns", Name: "p", UID: ownerUID, ContainerID: "c-" + ownerUID, Interface: "net1", Node: node}})
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t *testing.T, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(ctx, 2*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) { return cond(), nil }); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func TestAssumedWriteIsTakenUntilTheCacheHasIt(t *testing.T) {
	s, fc, ctx := startStore(t)
	r := resv("10.0.0.1", "o1", "n1")
	if !s.TryAssume(r) {
		t.Fatal("TryAssume of a free name: false")
	}
	if s.TryAssume(resv("10.0.0.1", "o2", "n1")) {
		t.Fatal("a second TryAssume of an assumed name must fail: two allocations on one node would share it")
	}
	fc.Pause()
	if err := fc.Create(ctx, r); err != nil {
		t.Fatal(err)
	}
	s.Confirm(r)
	if got := s.ByAttachment("c-o1", "net1"); len(got) != 1 || got[0].UID != r.UID {
		t.Fatalf("ByAttachment before the informer reported the create: %v", got)
	}
	fc.Resume()
	eventually(t, ctx, "the informer reports the create and the assumption is dropped", func() bool { return !assumedHolds(s, s.assumed, r.Name) })
	if !s.Taken(r.Name) || len(s.ByAttachment("c-o1", "net1")) != 1 {
		t.Fatal("after the informer took over, the reservation must still be taken and found")
	}
}

func TestForgetFreesAFailedCreate(t *testing.T) {
	s, _, _ := startStore(t)
	r := resv("10.0.0.2", "o1", "n1")
	if !s.TryAssume(r) {
		t.Fatal("TryAssume: false")
	}
	s.Forget(r.Name)
	if s.Taken(r.Name) {
		t.Fatal("a forgotten assumption still counts as taken")
	}
	if !s.TryAssume(r) {
		t.Fatal("TryAssume after Forget: false")
	}
}

func TestReleasedIsFreeBeforeTheInformerSaysSo(t *testing.T) {
	existing := resv("10.0.0.3", "o1", "n1")
	s, fc, ctx := startStore(t, existing)
	if !s.Taken(existing.Name) {
		t.Fatal("a listed reservation is not taken")
	}
	fc.Pause()
	if err := fc.Delete(ctx, existing); err != nil {
		t.Fatal(err)
	}
	s.Released(existing.Name, existing.UID)
	if s.Taken(existing.Name) || len(s.ByAttachment("c-o1", "net1")) != 0 || len(s.NodeReservations()) != 0 {
		t.Fatal("a released name must be free at once, whatever the informer still holds")
	}
	if _, ok := s.Get(existing.Name); ok {
		t.Fatal("Get finds a released name")
	}
	fc.Resume()
	eventually(t, ctx, "the informer reports the delete and the release record goes", func() bool { return !assumedHolds(s, s.released, existing.Name) })
}

func TestTakenElsewhereAndAssumeOverCache(t *testing.T) {
	s, _, _ := startStore(t)
	name := resv("10.0.0.4", "o1", "n1").Name
	s.MarkTakenElsewhere(name)
	if !s.Taken(name) {
		t.Fatal("a name whose Create met AlreadyExists must be taken")
	}
	if s.TryAssume(resv("10.0.0.4", "o2", "n1")) {
		t.Fatal("TryAssume of a name taken elsewhere: true")
	}
	// A live read said the name is free after all (its holder released
	// it): assuming over the placeholder is allowed ...
	mine := resv("10.0.0.4", "o2", "n1")
	if !s.AssumeOverCache(mine) {
		t.Fatal("AssumeOverCache over a placeholder: false")
	}
	// ... but never over this node's own unconfirmed write.
	if s.AssumeOverCache(resv("10.0.0.4", "o3", "n1")) {
		t.Fatal("AssumeOverCache over our own unconfirmed write: true")
	}
}

func TestHeldBySeesOtherNodesAsPartialReservations(t *testing.T) {
	other := resv("10.0.0.5", "claim-1", "n2")
	mine := resv("10.0.0.6", "claim-1", "n1")
	s, _, ctx := startStore(t, other, mine)
	addrs := func(rs []*tenurev1alpha1.IPReservation) map[string]*tenurev1alpha1.IPReservation {
		got := map[string]*tenurev1alpha1.IPReservation{}
		for _, r := range rs {
			got[r.Spec.Address] = r
		}
		return got
	}
	// Outside the window, another node's reservation is known only to a
	// live read.
	if got := addrs(s.ByOwnerUID("claim-1")); len(got) != 1 || got["10.0.0.6"] == nil {
		t.Fatalf("ByOwnerUID before any Watch = %v, want this node's only", got)
	}
	held, err := s.HeldBy(ctx, "claim-1")
	if err != nil {
		t.Fatal(err)
	}
	got := addrs(held)
	if len(got) != 2 {
		t.Fatalf("HeldBy = %v, want both nodes' reservations", got)
	}
	if got["10.0.0.5"].Spec.Owner.Node != "" || got["10.0.0.6"].Spec.Owner.Node != "n1" {
		t.Fatal("another node's reservation is a partial reservation (metadata only), this node's is whole")
	}
	if err := s.Watch(ctx, "san", other.Labels[reservation.LabelBlock]); err != nil {
		t.Fatal(err)
	}
	if got := addrs(s.ByOwnerUID("claim-1")); len(got) != 2 {
		t.Fatalf("ByOwnerUID with the block watched = %v, want both", got)
	}
	// The window leaves this node's reservation to the node cache.
	if len(s.NodeReservations()) != 1 || s.WindowLen() != 1 {
		t.Fatalf("NodeReservations() = %d, WindowLen() = %d, want 1 and 1", len(s.NodeReservations()), s.WindowLen())
	}
}

// TestWindowHoldsWhatItWatches: another node's reservation is taken for
// this store only once its block, or its whole network, is watched; the
// window then follows creates and deletes in it, and a network watched
// whole covers every block of it.
func TestWindowHoldsWhatItWatches(t *testing.T) {
	inA, inB := resv("10.0.0.5", "o1", "n2"), resv("10.0.0.70", "o2", "n2")
	s, fc, ctx := startStore(t, inA, inB)
	blockA, blockB := inA.Labels[reservation.LabelBlock], inB.Labels[reservation.LabelBlock]
	if blockA == blockB {
		t.Fatal("10.0.0.5 and 10.0.0.70 lie in different /26 blocks")
	}
	if s.Taken(inA.Name) || s.Watching(blockA, "san") {
		t.Fatal("before any Watch the window holds nothing")
	}
	if err := s.Watch(ctx, "san", blockA); err != nil {
		t.Fatal(err)
	}
	if !s.Watching(blockA, "other") || s.Watching(blockB, "other") {
		t.Fatal("Watching must report block A only")
	}
	if n := len(s.win.Load().infs); n != 1 {
		t.Fatalf("%d informers: with no unlabelled reservation in the network, the block's watch is the only one", n)
	}
	// Watch returns with the block's list in the cache and the index.
	if !s.Taken(inA.Name) || s.Taken(inB.Name) {
		t.Fatalf("after Watch(A): Taken(A) %v, Taken(B) %v; want true, false", s.Taken(inA.Name), s.Taken(inB.Name))
	}
	if a, _ := s.NextUnheldAddress("san", netip.MustParseAddr("10.0.0.5")); a != netip.MustParseAddr("10.0.0.6") {
		t.Fatalf("index after Watch: next unheld from .5 is %v", a)
	}
	late := resv("10.0.0.9", "o3", "n3")
	if err := fc.Create(ctx, late); err != nil {
		t.Fatal(err)
	}
	eventually(t, ctx, "a create in a watched block reaches the window", func() bool { return s.Taken(late.Name) })
	if err := fc.Delete(ctx, inA); err != nil {
		t.Fatal(err)
	}
	eventually(t, ctx, "a delete in a watched block reaches the window", func() bool { return !s.Taken(inA.Name) })
	// The whole network: block B too, and block A is kept.
	if err := s.Watch(ctx, "san", ""); err != nil {
		t.Fatal(err)
	}
	if !s.Watching(blockB, "san") || !s.Taken(inB.Name) || !s.Taken(late.Name) {
		t.Fatal("with the network watched whole, every block of it is held")
	}
	// Block A's own informer is gone: the network's holds it.
	if err := s.Watch(ctx, "san", blockA); err != nil || s.WindowLen() != 2 || len(s.win.Load().infs) != 1 {
		t.Fatalf("Watch of a held block: %v; WindowLen %d in %d informers, want 2 (.9 and B's) in 1", err, s.WindowLen(), len(s.win.Load().infs))
	}
}

// assumedHolds reads one of the store's ledgers (assumed or released) under
// its lock.
func assumedHolds[V any](s *Store, ledger map[string]V, name string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := ledger[name]
	return ok
}

// TestWindowHoldsUnlabelledReservationsOfItsNetworks: a reservation
// without the block label (written before it existed) is in the window of
// any agent working in its network, whatever block it lies in, and in no
// other network's.
func TestWindowHoldsUnlabelledReservationsOfItsNetworks(t *testing.T) {
	legacy := resv("10.0.0.200", "o1", "n2")
	delete(legacy.Labels, reservation.LabelBlock)
	elsewhere := resv("10.0.0.201", "o2", "n2")
	elsewhere.Name, elsewhere.Labels[reservation.LabelNetwork] = reservation.AddressName("vlan", netip.MustParseAddr("10.0.0.201")), "vlan"
	delete(elsewhere.Labels, reservation.LabelBlock)
	s, _, ctx := startStore(t, legacy, elsewhere)
	if err := s.Watch(ctx, "san", resv("10.0.0.1", "x", "n1").Labels[reservation.LabelBlock]); err != nil {
		t.Fatal(err)
	}
	if !s.Taken(legacy.Name) {
		t.Fatal("an unlabelled reservation of a network the agent works in must be in its window")
	}
	if s.Taken(elsewhere.Name) {
		t.Fatal("an unlabelled reservation of another network must not be")
	}
	if a, _ := s.NextUnheldAddress("san", netip.MustParseAddr("10.0.0.200")); a != netip.MustParseAddr("10.0.0.201") {
		t.Fatalf("the index must hold the unlabelled reservation: next unheld from .200 is %v", a)
	}
}

// TestAnEventReachesOnlyTheWindowsOfItsBlock: what the window is for. Two
// agents working in different blocks of one network: a create in one's
// block reaches it, and never the other, which by then has seen a later
// create in its own block (one watch delivers events in order, so the
// first would have come before).
func TestAnEventReachesOnlyTheWindowsOfItsBlock(t *testing.T) {
	a, fc, ctx := startStore(t)
	b := New(fc, "n2")
	go b.Run(ctx)
	if err := b.WaitForSync(ctx); err != nil {
		t.Fatal(err)
	}
	inA, inB := resv("10.0.0.5", "o1", "n3"), resv("10.0.0.70", "o2", "n3")
	if err := a.Watch(ctx, "san", inA.Labels[reservation.LabelBlock]); err != nil {
		t.Fatal(err)
	}
	if err := b.Watch(ctx, "san", inB.Labels[reservation.LabelBlock]); err != nil {
		t.Fatal(err)
	}
	lateA, lateB := resv("10.0.0.6", "o3", "n3"), resv("10.0.0.71", "o4", "n3")
	for _, r := range []*tenurev1alpha1.IPReservation{inA, inB, lateA, lateB} {
		if err := fc.Create(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, ctx, "each window holds its block's creates", func() bool { return a.Taken(lateA.Name) && b.Taken(lateB.Name) })
	if !a.Taken(inA.Name) || !b.Taken(inB.Name) || a.Taken(inB.Name) || b.Taken(inA.Name) {
		t.Fatal("a create reached a window that does not hold its block")
	}
}

// TestANewWindowKeepsOurReleases: a window whose list was taken before a
// release of ours reached the API server still lets the search find the
// address (its index would otherwise hide it until its watch reported the
// delete: a waiting pod would fail once more on a full network).
func TestANewWindowKeepsOurReleases(t *testing.T) {
	r := resv("10.0.0.5", "o1", "n2")
	s, _, ctx := startStore(t, r)
	// As if the list raced our delete: the object is still in the API.
	s.Released(r.Name, r.UID)
	if err := s.Watch(ctx, "san", r.Labels[reservation.LabelBlock]); err != nil {
		t.Fatal(err)
	}
	if a, _ := s.NextUnheldAddress("san", netip.MustParseAddr("10.0.0.5")); a != netip.MustParseAddr("10.0.0.5") {
		t.Fatalf("next unheld from our released .5 is %v, want .5", a)
	}
	if s.Taken(r.Name) {
		t.Fatal("our released name is taken")
	}
}

// TestALateReleaseHidesOnlyWhatItDeleted: a DEL's delete of a reservation
// and an ADD's create of its name on the same node overlap (the informer
// reports the delete before the DEL's call has its reply, and the ADD takes
// the name it sees free): the release recorded after the create must not
// hide the new reservation, which a CHECK reads and the allocator must see
// taken.
func TestALateReleaseHidesOnlyWhatItDeleted(t *testing.T) {
	old := resv("10.0.0.9", "o1", "n1")
	s, fc, ctx := startStore(t)
	if err := fc.Create(ctx, old); err != nil {
		t.Fatal(err)
	}
	eventually(t, ctx, "the informer reports the first holder's reservation", func() bool { return s.Taken(old.Name) })
	if err := fc.Delete(ctx, old); err != nil {
		t.Fatal(err)
	}
	eventually(t, ctx, "the informer reports the delete", func() bool { return !s.Taken(old.Name) })
	mine := resv("10.0.0.9", "o2", "n1")
	if !s.TryAssume(mine) {
		t.Fatal("TryAssume of the freed name: false")
	}
	if err := fc.Create(ctx, mine); err != nil {
		t.Fatal(err)
	}
	s.Confirm(mine)
	s.Released(old.Name, old.UID) // the DEL's reply, processed only now
	check := func(when string) {
		t.Helper()
		if got := s.ByAttachment("c-o2", "net1"); len(got) != 1 || got[0].UID != mine.UID {
			t.Fatalf("%s: ByAttachment of the new holder = %v, want its reservation %s", when, got, mine.UID)
		}
		if !s.Taken(mine.Name) {
			t.Fatalf("%s: the re-created name is free", when)
		}
		if r, ok := s.Get(mine.Name); !ok || r.UID != mine.UID {
			t.Fatalf("%s: Get = %v, %v; want the new reservation", when, r, ok)
		}
	}
	check("before the informer reports the create")
	eventually(t, ctx, "the informer reports the create", func() bool {
		_, ok, _ := s.nodeCache.GetIndexer().GetByKey(mine.Name)
		return ok && !assumedHolds(s, s.assumed, mine.Name)
	})
	check("after the informer reports the create")
}

// TestIndexHoldsThisNodesReservationsFromTheNodeCache: the window leaves
// this node's reservations out, yet the index the allocator skips held
// runs by holds them: seeded from the node cache when a window is built,
// then following its creates and deletes; another node's come from the
// window as before.
func TestIndexHoldsThisNodesReservationsFromTheNodeCache(t *testing.T) {
	mine, theirs := resv("10.0.0.6", "o1", "n1"), resv("10.0.0.7", "o2", "n2")
	s, fc, ctx := startStore(t, mine, theirs)
	label := reservation.ScopeLabel("san")
	next := func() string {
		a, _ := s.NextUnheldAddress(label, netip.MustParseAddr("10.0.0.6"))
		return a.String()
	}
	if err := s.Watch(ctx, "san", mine.Labels[reservation.LabelBlock]); err != nil {
		t.Fatal(err)
	}
	if _, inWindow := s.win.Load().get(mine.Name); inWindow {
		t.Fatal("the window holds this node's reservation")
	}
	if _, inWindow := s.win.Load().get(theirs.Name); !inWindow {
		t.Fatal("the window lacks another node's reservation of its block")
	}
	if got := next(); got != "10.0.0.8" {
		t.Fatalf("first unheld from 10.0.0.6 = %s, want 10.0.0.8 (.6 this node's, .7 n2's)", got)
	}
	added := resv("10.0.0.8", "o3", "n1")
	if err := fc.Create(ctx, added); err != nil {
		t.Fatal(err)
	}
	eventually(t, ctx, "the index holds this node's new reservation", func() bool { return next() == "10.0.0.9" })
	if err := fc.Delete(ctx, mine); err != nil {
		t.Fatal(err)
	}
	eventually(t, ctx, "the index drops this node's deleted reservation", func() bool { return next() == "10.0.0.6" })
}

// TestAnAttachmentIsFoundWhileTheInformerTakesOver: between our Create and
// the node cache's report of it, and between our Delete and its report,
// every read of the attachment answers what the API holds. A read that
// took the node cache's index before the informer added the object, and
// the ledger of our writes after its handler dropped the assumption, found
// nothing: a DEL then answered success and left the reservation, and a
// retried ADD created a second address.
func TestAnAttachmentIsFoundWhileTheInformerTakesOver(t *testing.T) {
	s, fc, ctx := startStore(t)
	const rounds = 300
	for i := range rounds {
		r := resv(netip.AddrFrom4([4]byte{10, 1, byte(i >> 8), byte(i)}).String(), "o1", "n1")
		if !s.TryAssume(r) {
			t.Fatalf("round %d: TryAssume of a free name: false", i)
		}
		if err := fc.Create(ctx, r); err != nil {
			t.Fatal(err)
		}
		s.Confirm(r)
		readUntil(t, ctx, s, i, "create", 1, func() bool {
			_, inNodeCache := s.nodeCacheGet(r.Name, r.UID)
			return inNodeCache && !assumedHolds(s, s.assumed, r.Name)
		})
		if err := fc.Delete(ctx, r); err != nil {
			t.Fatal(err)
		}
		s.Released(r.Name, r.UID)
		// The record of our release outlives the report when the
		// informer's handler ran before Released: done once the cache
		// lets the object go.
		readUntil(t, ctx, s, i, "delete", 0, func() bool {
			_, inNodeCache, _ := s.nodeCache.GetIndexer().GetByKey(r.Name)
			return !inNodeCache
		})
	}
}

// readUntil reads the attachment of owner o1 from several goroutines
// without pause until done, and fails on any read that does not find want
// reservations.
func readUntil(t *testing.T, ctx context.Context, s *Store, round int, after string, want int, done func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	var stop atomic.Bool
	errs := make(chan error, readers)
	for range readers {
		go func() {
			for reads := 0; !stop.Load(); reads++ {
				if got := s.ByAttachment("c-o1", "net1"); len(got) != want {
					errs <- fmt.Errorf("round %d, read %d after our %s: ByAttachment found %d reservations, want %d", round, reads, after, len(got), want)
					return
				}
			}
			errs <- nil
		}()
	}
	for !done() && time.Now().Before(deadline) && ctx.Err() == nil {
		runtime.Gosched()
	}
	stop.Store(true)
	for range readers {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if !done() {
		t.Fatalf("round %d: the node cache never reported our %s", round, after)
	}
}

// readers is how many goroutines read at once in readUntil.
const readers = 4

// A claim's items are claim-owned reservations: node n2's pod
// reservation carrying the claim's UID (a decoy) is no item of the claim,
// whether the window holds it or only a live read finds it, and neither
// is one without a spec summary (its owner kind unknown).
func TestClaimHoldsOnlyTheClaimsOwnReservations(t *testing.T) {
	claimOwned := func(addr, node string) *tenurev1alpha1.IPReservation {
		r := resv(addr, "claim-1", node)
		r.Spec.Owner.Kind, r.Spec.Owner.Name = tenurev1alpha1.OwnerIPAMClaim, "vm1"
		a := netip.MustParseAddr(addr)
		return reservation.New(reservation.Spec{Network: "san", Kind: tenurev1alpha1.KindAddress, Item: netip.PrefixFrom(a, 32), Owner: r.Spec.Owner})
	}
	item := claimOwned("10.0.0.5", "n2")
	local := claimOwned("10.0.0.6", "n1")
	decoy := resv("10.0.0.7", "claim-1", "n2") // Pod-kind, the claim's UID
	unsummarised := claimOwned("10.0.0.8", "n2")
	delete(unsummarised.Labels, reservation.LabelSpecSummary)
	delete(unsummarised.Annotations, reservation.AnnotationSpecSummary)
	s, _, ctx := startStore(t, item, local, decoy, unsummarised)
	names := func() []string {
		t.Helper()
		held, err := s.ClaimHolds(ctx, "claim-1")
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, r := range held {
			out = append(out, r.Name)
		}
		slices.Sort(out)
		return out
	}
	want := []string{item.Name, local.Name}
	if got := names(); !slices.Equal(got, want) {
		t.Fatalf("ClaimHolds from a live read = %v, want %v", got, want)
	}
	if err := s.Watch(ctx, "san", decoy.Labels[reservation.LabelBlock]); err != nil {
		t.Fatal(err)
	}
	eventually(t, ctx, "the window holds the other node's three", func() bool { return s.WindowLen() == 3 })
	if got := names(); !slices.Equal(got, want) {
		t.Fatalf("ClaimHolds with the window = %v, want %v", got, want)
	}
}
