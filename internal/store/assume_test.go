package store

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/kube/kubefake"
	"github.com/tenure-ipam/tenure/internal/reservation"
)

// The store's ledger of its own writes, on an in-memory API whose watch
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
	eventually(t, ctx, "the informer reports the create and the assumption is dropped", func() bool { return !ledgerHolds(s, s.assumed, r.Name) })
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
	s.Released(existing.Name)
	if s.Taken(existing.Name) || len(s.ByAttachment("c-o1", "net1")) != 0 || len(s.Local()) != 0 {
		t.Fatal("a released name must be free at once, whatever the informer still holds")
	}
	if _, ok := s.Get(existing.Name); ok {
		t.Fatal("Get finds a released name")
	}
	fc.Resume()
	eventually(t, ctx, "the informer reports the delete and the release record goes", func() bool { return !ledgerHolds(s, s.released, existing.Name) })
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
	// A quorum read said the name is free after all (its holder released
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

func TestByOwnerUIDSeesOtherNodesAsSketches(t *testing.T) {
	other := resv("10.0.0.5", "claim-1", "n2")
	mine := resv("10.0.0.6", "claim-1", "n1")
	s, _, _ := startStore(t, other, mine)
	got := map[string]*tenurev1alpha1.IPReservation{}
	for _, r := range s.ByOwnerUID("claim-1") {
		got[r.Spec.Address] = r
	}
	if len(got) != 2 {
		t.Fatalf("ByOwnerUID = %v, want both nodes' reservations", got)
	}
	if got["10.0.0.5"].Spec.Owner.Node != "" || got["10.0.0.6"].Spec.Owner.Node != "n1" {
		t.Fatal("another node's reservation is a sketch (metadata only), this node's is whole")
	}
	if len(s.Local()) != 1 || s.Len() != 2 {
		t.Fatalf("Local() = %d, Len() = %d, want 1 and 2", len(s.Local()), s.Len())
	}
}

// ledgerHolds reads one of the store's ledgers (assumed or released) under
// its lock.
func ledgerHolds[V any](s *Store, ledger map[string]V, name string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := ledger[name]
	return ok
}
