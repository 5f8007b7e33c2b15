package controller

import (
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/inventory"
	"github.com/tenure-ipam/tenure/internal/reservation"
)

// TestRangeMetricsCoverEveryKnownRange: a declared IPPool a configuration
// names, a range written inline in a NetworkAttachmentDefinition and a range only reservations
// name each get capacity, allocated and free, under their allocation
// scope and the CNI network name that allocates from them.
func TestRangeMetricsCoverEveryKnownRange(t *testing.T) {
	pool := &tenurev1alpha1.IPPool{ObjectMeta: metav1.ObjectMeta{Name: "storage"},
		Spec: tenurev1alpha1.IPPoolSpec{Ranges: []tenurev1alpha1.PoolRange{{Range: "10.2.0.0/24"}}}}
	nad := func(name, config string) *unstructured.Unstructured {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(inventory.NADListGVK.GroupVersion().WithKind("NetworkAttachmentDefinition"))
		u.SetNamespace("ns")
		u.SetName(name)
		_ = unstructured.SetNestedField(u.Object, config, "spec", "config")
		return u
	}
	objs := []client.Object{pool,
		nad("san", `{"cniVersion":"1.1.0","name":"san-net","type":"macvlan","ipam":{"type":"tenure","range":"10.1.0.0/29","network_name":"san"}}`),
		nad("storage", `{"cniVersion":"1.1.0","name":"storage-net","type":"macvlan","ipam":{"type":"tenure","pool":"storage","network_name":"storage"}}`),
	}
	var entries []*reservation.View
	held := func(scope, rng, addr string) {
		a := netip.MustParseAddr(addr)
		r := reservation.New(reservation.Spec{Network: scope, Kind: tenurev1alpha1.KindAddress, Item: netip.PrefixFrom(a, 32), Range: rng,
			Owner: podOwner("ns", "p-"+addr, "uid-"+addr, "c", "node-a")})
		objs = append(objs, r)
		entries = append(entries, reservation.ViewOf(r))
	}
	for i := 1; i <= 6; i++ {
		held("san", "10.1.0.0/29", fmt.Sprintf("10.1.0.%d", i))
	}
	held("storage", "10.2.0.0/24", "10.2.0.7")
	held("gone", "10.9.0.0/30", "10.9.0.1")

	counts := &rangeCounts{}
	h := counts.handler()
	for _, e := range entries {
		h.OnAdd(e, true)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(&rangeCollector{src: &rangeSource{counts: counts, reader: newFake(objs...), log: slog.Default()}})
	got := gatherSeries(t, reg)
	want := []string{
		`tenure_range_allocated{kind="Address",network="",range="10.9.0.0/30",scope="gone"} 1`,
		`tenure_range_allocated{kind="Address",network="san-net",range="10.1.0.0/29",scope="san"} 6`,
		`tenure_range_allocated{kind="Address",network="storage-net",range="10.2.0.0/24",scope="storage"} 1`,
		`tenure_range_capacity{kind="Address",network="",range="10.9.0.0/30",scope="gone"} 2`,
		`tenure_range_capacity{kind="Address",network="san-net",range="10.1.0.0/29",scope="san"} 6`,
		`tenure_range_capacity{kind="Address",network="storage-net",range="10.2.0.0/24",scope="storage"} 254`,
		`tenure_range_free{kind="Address",network="",range="10.9.0.0/30",scope="gone"} 1`,
		`tenure_range_free{kind="Address",network="san-net",range="10.1.0.0/29",scope="san"} 0`,
		`tenure_range_free{kind="Address",network="storage-net",range="10.2.0.0/24",scope="storage"} 253`,
	}
	if !slices.Equal(got, want) {
		t.Fatalf("series:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	// Freeing one address of the full range shows at the next scrape.
	h.OnDelete(entries[0])
	got = gatherSeries(t, reg)
	if !slices.Contains(got, `tenure_range_free{kind="Address",network="san-net",range="10.1.0.0/29",scope="san"} 1`) {
		t.Fatalf("after a release:\n%s", strings.Join(got, "\n"))
	}
}

// gatherSeries renders every series of reg as `name{labels} value`, sorted.
func gatherSeries(t *testing.T, reg *prometheus.Registry) []string {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, lp := range m.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%q", lp.GetName(), lp.GetValue()))
			}
			out = append(out, fmt.Sprintf("%s{%s} %v", mf.GetName(), strings.Join(labels, ","), m.GetGauge().GetValue()))
		}
	}
	slices.Sort(out)
	return out
}
