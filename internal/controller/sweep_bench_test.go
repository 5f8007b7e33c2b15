package controller

import (
	"fmt"
	"net/netip"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	ipamclaimsv1alpha1 "github.com/tenure-ipam/tenure/api/ipamclaims/v1alpha1"
	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/reservation"
)

// BenchmarkSweepCached is one sweep of a running controller over 100,000
// reservations, each of a live pod (nothing to release): the cache's
// share of sweep_s.
func BenchmarkSweepCached(b *testing.B) {
	const n = 100_000
	snap := &snapshot{idx: newIndex(), nodes: map[string]*corev1.Node{}, claims: map[types.NamespacedName]*ipamclaimsv1alpha1.IPAMClaim{}}
	for i := range n {
		uid := fmt.Sprintf("%08x-1111-4222-8333-%012d", uint32(i*2654435761), i)
		a := netip.AddrFrom4([4]byte{100, byte(i >> 16), byte(i >> 8), byte(i)})
		r := reservation.New(reservation.Spec{Network: "bench-scale", Kind: tenurev1alpha1.KindAddress, Item: netip.PrefixFrom(a, 32),
			Range: "100.0.0.0/14", CNINetwork: "bench-scale", Owner: podOwner("bench", fmt.Sprintf("owner-%d", i), uid,
				fmt.Sprintf("%064x", i), "node-1")})
		r.ResourceVersion, r.CreationTimestamp = fmt.Sprint(1_000_000+i), metav1.Now()
		m := metadataOf(r)
		if err := snap.idx.add(reservation.ViewOfMeta(m)); err != nil {
			b.Fatal(err)
		}
		p := pod("bench", fmt.Sprintf("owner-%d", i), uid, "node-1")
		if err := snap.idx.pods.Add(podEntryOf(p)); err != nil {
			b.Fatal(err)
		}
	}
	c := newFake()
	for b.Loop() {
		if res, _ := sweepOf(b, snap, &Releaser{Live: c, Writer: c}); res.Reservations != n || len(res.Outcomes) != 0 {
			b.Fatalf("%+v", res)
		}
	}
}
