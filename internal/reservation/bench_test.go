package reservation

import (
	"net/netip"
	"testing"

	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
)

// BenchmarkNew is the reservation every ADD builds.
func BenchmarkNew(b *testing.B) {
	s := Spec{
		Network: "storage", Kind: tenurev1alpha1.KindAddress, Item: netip.MustParsePrefix("10.20.3.17/32"),
		Range: "10.20.0.0/16", CNINetwork: "storage",
		Owner: tenurev1alpha1.ReservationOwner{Kind: tenurev1alpha1.OwnerPod, Namespace: "default", Name: "web-7d9f8-abcde",
			UID: "3f1c2a9e-8b7d-4c6e-9a1f-2b3c4d5e6f70", ContainerID: "9b2d4f6a8c0e1f3a5b7c9d1e3f5a7b9c1d3e5f7a9b1c3d5e7f9a1b3c5d7e9f1a", Interface: "net1", Node: "worker-1"},
	}
	b.ReportAllocs()
	for b.Loop() {
		_ = New(s)
	}
}
