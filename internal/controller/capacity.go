package controller

import (
	"context"
	"log/slog"
	"maps"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/inventory"
	"github.com/tenure-ipam/tenure/internal/reservation"
)

// The per-range usage metrics: one series per range tenure knows of, the
// rows of `tenurectl pools` (declared IPPools, the tenure configurations of
// NetworkAttachmentDefinitions, and every range reservations name).
var (
	rangeCapacityDesc = prometheus.NewDesc("tenure_range_capacity",
		"Assignable addresses (delegated prefixes for kind DelegatedPrefix) of a range of an allocation scope; "+
			"0 when only reservations name the range and it does not parse.",
		rangeLabels, nil)
	rangeAllocatedDesc = prometheus.NewDesc("tenure_range_allocated",
		"Reservations of a range of an allocation scope.", rangeLabels, nil)
	rangeFreeDesc = prometheus.NewDesc("tenure_range_free",
		"Capacity minus allocated of a range of an allocation scope, not below 0.", rangeLabels, nil)
	// rangeLabels: scope is the allocation scope (spec.network of the
	// reservations); network the CNI network names (the configurations'
	// "name") allocating from it, comma-separated, "" when only
	// reservations name it; range as reservations record it; kind
	// Address or DelegatedPrefix.
	rangeLabels = []string{"scope", "network", "range", "kind"}
)

// rangeUsage is the registered collector; a controller's Start points it
// at its caches (the last one started wins, as only one runs per process
// outside tests).
var rangeUsage = &rangeCollector{}

func init() {
	crmetrics.Registry.MustRegister(rangeUsage)
}

// rangeKey is what a reservation says of its range: the network's label
// (the only form of the scope every cached reservation carries), kind and
// spec.range.
type rangeKey struct {
	label string
	kind  tenurev1alpha1.ReservationKind
	rng   string
}

// rangeCounts is the number of reservations per range, kept from the
// reservation informers' events so a scrape costs the number of ranges.
type rangeCounts struct {
	mu sync.Mutex
	n  map[rangeKey]uint64
}

func (c *rangeCounts) add(obj any, delta int) {
	e, ok := unwrapEntry[*reservation.View](obj)
	if !ok {
		return
	}
	k := rangeKey{e.Scope, e.Kind, e.Range}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[rangeKey]uint64{}
	}
	if delta > 0 {
		c.n[k]++
	} else if c.n[k] <= 1 {
		delete(c.n, k)
	} else {
		c.n[k]--
	}
}

func (c *rangeCounts) handler() toolscache.ResourceEventHandler {
	return toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { c.add(obj, 1) },
		UpdateFunc: func(old, obj any) { c.add(old, -1); c.add(obj, 1) },
		DeleteFunc: func(obj any) { c.add(obj, -1) },
	}
}

func (c *rangeCounts) snapshot() map[rangeKey]uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.n)
}

// rangeSource is what the collector reads: reservation counts and a reader
// of IPPools and NetworkAttachmentDefinitions (the controller's cache).
type rangeSource struct {
	counts *rangeCounts
	reader client.Reader
	log    *slog.Logger
}

type rangeCollector struct {
	mu  sync.Mutex
	src *rangeSource
}

// watchRangeUsage counts the reservations of the informers and points
// the per-range metrics at them and at reader.
func watchRangeUsage(reservations []toolscache.SharedIndexInformer, reader client.Reader, log *slog.Logger) error {
	counts := &rangeCounts{}
	for _, inf := range reservations {
		if _, err := inf.AddEventHandler(counts.handler()); err != nil {
			return err
		}
	}
	rangeUsage.mu.Lock()
	rangeUsage.src = &rangeSource{counts: counts, reader: reader, log: log}
	rangeUsage.mu.Unlock()
	return nil
}

func (r *rangeCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- rangeCapacityDesc
	ch <- rangeAllocatedDesc
	ch <- rangeFreeDesc
}

func (r *rangeCollector) Collect(ch chan<- prometheus.Metric) {
	r.mu.Lock()
	src := r.src
	r.mu.Unlock()
	if src == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, row := range src.rows(ctx) {
		labels := []string{row.scope, strings.Join(row.networks, ","), row.rng, string(row.kind)}
		free := uint64(0)
		if row.capacity > row.allocated {
			free = row.capacity - row.allocated
		}
		ch <- prometheus.MustNewConstMetric(rangeCapacityDesc, prometheus.GaugeValue, gaugeValue(row.capacity), labels...)
		ch <- prometheus.MustNewConstMetric(rangeAllocatedDesc, prometheus.GaugeValue, gaugeValue(row.allocated), labels...)
		ch <- prometheus.MustNewConstMetric(rangeFreeDesc, prometheus.GaugeValue, gaugeValue(free), labels...)
	}
}

// gaugeValue: a saturated capacity (2^64-1, an IPv6 range) is +Inf, so
// usage ratios read 0 rather than a rounding artefact.
func gaugeValue(n uint64) float64 {
	if n == math.MaxUint64 {
		return math.Inf(1)
	}
	return float64(n)
}

type rangeRow struct {
	scope, rng          string
	networks            []string
	kind                tenurev1alpha1.ReservationKind
	capacity, allocated uint64
}

// rows joins the known ranges with the reservation counts. A configuration
// that cannot be read leaves out its ranges (as `tenurectl pools` notes
// it); the reservations of those ranges still show.
func (s *rangeSource) rows(ctx context.Context) []rangeRow {
	var pools tenurev1alpha1.IPPoolList
	if err := s.reader.List(ctx, &pools); err != nil {
		s.log.Info("range metrics: IPPools not read", "err", err)
	}
	nads, err := s.networkConfigs(ctx)
	if err != nil {
		s.log.Info("range metrics: NetworkAttachmentDefinitions not read", "err", err)
	}
	inv := inventory.BuildInventory(pools.Items, nads)
	counts := s.counts.snapshot()
	var out []rangeRow
	for _, sp := range inv.Spaces() {
		k := rangeKey{reservation.ScopeLabel(sp.Scope), sp.Space.Kind(), sp.Space.String()}
		out = append(out, rangeRow{scope: sp.Scope, rng: sp.Space.String(), networks: slices.Sorted(slices.Values(sp.CNINetworks)),
			kind: sp.Space.Kind(), capacity: sp.Space.Capacity(), allocated: counts[k]})
		delete(counts, k)
	}
	for k, n := range counts {
		out = append(out, rangeRow{scope: k.label, rng: k.rng, kind: k.kind, capacity: inventory.RangeCapacity(k.kind, k.rng), allocated: n})
	}
	return out
}

func (s *rangeSource) networkConfigs(ctx context.Context) ([]inventory.NetworkConfig, error) {
	l := &unstructured.UnstructuredList{}
	l.SetGroupVersionKind(inventory.NADListGVK)
	if err := s.reader.List(ctx, l); err != nil {
		if meta.IsNoMatchError(err) {
			return nil, nil
		}
		return nil, err
	}
	out := make([]inventory.NetworkConfig, 0, len(l.Items))
	for _, u := range l.Items {
		out = append(out, inventory.NetworkConfigOf(&u))
	}
	return out, nil
}
