package store

import (
	"fmt"
	"runtime"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/reservation"
)

func metadata(name, uid, owner string) *metav1.PartialObjectMetadata {
	return &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID(uid), ResourceVersion: "7",
		Labels: map[string]string{reservation.LabelOwnerUID: owner, reservation.LabelNode: "n1", reservation.LabelNetwork: "san"}}}
}

func TestPartialReadsTheName(t *testing.T) {
	for _, tc := range []struct {
		name, kind, address string
	}{
		{"san.10.0.0.5", string(tenurev1alpha1.KindAddress), "10.0.0.5"},
		{"vm-net.2001-0db8-0000-0000-0000-0000-0000-0001", string(tenurev1alpha1.KindAddress), "2001:db8::1"},
		{"vm-net.pd.2001-0db8-0000-0100-0000-0000-0000-0000.56", string(tenurev1alpha1.KindDelegatedPrefix), "2001:db8:0:100::/56"},
	} {
		e, _ := reservation.ToView(metadata(tc.name, "u-"+tc.name, "owner-1"))
		r := partial(e.(*reservation.View))
		if r.Name != tc.name || string(r.UID) != "u-"+tc.name || r.Spec.Owner.UID != "owner-1" || string(r.Spec.Kind) != tc.kind || r.Spec.Address != tc.address {
			t.Errorf("partial reservation of %s = %+v %+v", tc.name, r.ObjectMeta, r.Spec)
		}
	}
}

// TestEntryKeysLikeTheObject: the informer keys an entry as it keys the
// object it came from, so lookups by reservation name find it.
func TestEntryKeysLikeTheObject(t *testing.T) {
	m := metadata("san.10.0.0.5", "u1", "o1")
	want, err := cache.DeletionHandlingMetaNamespaceKeyFunc(m)
	if err != nil {
		t.Fatal(err)
	}
	e, _ := reservation.ToView(m)
	if got, err := cache.DeletionHandlingMetaNamespaceKeyFunc(e); err != nil || got != want {
		t.Fatalf("entry key %q, %v; object key %q", got, err, want)
	}
	if name, uid, ok := nameUID(e); !ok || name != "san.10.0.0.5" || uid != "u1" {
		t.Fatalf("nameUID(entry) = %q %q %v", name, uid, ok)
	}
}

func TestOwnerBucketsAreFilteredToTheOwner(t *testing.T) {
	win := cache.NewSharedIndexInformer(nil, &metav1.PartialObjectMetadata{}, 0, windowIndexers())
	s := &Store{nodeCache: cache.NewSharedIndexInformer(nil, &tenurev1alpha1.IPReservation{}, 0, cache.Indexers{indexOwnerUID: cache.MetaNamespaceIndexFunc}),
		assumed: map[string]assumedEntry{}, released: map[string]releasedEntry{}}
	s.win.Store(&window{infs: []cache.SharedIndexInformer{win}, held: &heldIndex{}})
	// Same bucket ("abc"), different owners.
	for i, owner := range []string{"abc-1", "abc-2", "abc-1"} {
		e, _ := reservation.ToView(metadata(fmt.Sprintf("san.10.0.0.%d", i+1), fmt.Sprint("u", i), owner))
		if err := win.GetIndexer().Add(e); err != nil {
			t.Fatal(err)
		}
	}
	got := s.ByOwnerUID("abc-1")
	if len(got) != 2 || got[0].Spec.Owner.UID != "abc-1" || got[1].Spec.Owner.UID != "abc-1" {
		t.Fatalf("ByOwnerUID(abc-1) = %d reservations: %v", len(got), got)
	}
	s.Released("san.10.0.0.1", "")
	if got := s.ByOwnerUID("abc-1"); len(got) != 1 || got[0].Name != "san.10.0.0.3" {
		t.Fatalf("after releasing .1, ByOwnerUID(abc-1) = %v", got)
	}
	if s.Taken("san.10.0.0.1") || !s.Taken("san.10.0.0.2") {
		t.Fatal("Taken must hide our release and show the other owner's")
	}
}

// BenchmarkClusterCacheMemory reports the heap one cluster-wide
// reservation costs an agent (entry, key, indexes).
func BenchmarkClusterCacheMemory(b *testing.B) {
	const n = 100_000
	idx := func() cache.Indexer {
		return cache.NewIndexer(cache.DeletionHandlingMetaNamespaceKeyFunc, windowIndexers())
	}
	for b.Loop() {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		x := idx()
		for i := 0; i < n; i++ {
			e, _ := reservation.ToView(metadata(fmt.Sprintf("bench-scale.100.%d.%d.%d", i>>16, (i>>8)&255, i&255),
				fmt.Sprintf("0f3b2c1a-1111-4222-8333-%012d", i), fmt.Sprintf("%08x-1111-4222-8333-%012d", i*2654435761, i)))
			_ = x.Add(e)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "B/reservation")
		runtime.KeepAlive(x)
	}
}
