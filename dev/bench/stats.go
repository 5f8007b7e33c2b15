package bench

import (
	"fmt"
	"math"
	"slices"
	"time"
)

// Percentile returns the p-th percentile (0 < p <= 100) of sorted values by
// the nearest-rank method: the smallest value such that at least p % of the
// values are less than or equal to it. It returns 0 for no values.
func Percentile(sorted []float64, p float64) float64 {
	n := len(sorted)
	if n == 0 {
		return 0
	}
	if p <= 0 {
		return sorted[0]
	}
	if p >= 100 {
		return sorted[n-1]
	}
	// Nearest rank: ceil(p/100 * n), 1-based. The epsilon keeps 50 % of
	// 200 at rank 100 despite floating point (0.5*200 = 100.00000000000001).
	rank := int(math.Ceil(p/100*float64(n) - 1e-9))
	if rank < 1 {
		rank = 1
	}
	return sorted[rank-1]
}

// Stats summarises a sample of latencies in milliseconds.
type Stats struct {
	N    int
	Mean float64
	P50  float64
	P90  float64
	P99  float64
	Max  float64
}

// Summarize computes Stats over durations.
func Summarize(ds []time.Duration) Stats {
	ms := make([]float64, len(ds))
	for i, d := range ds {
		ms[i] = float64(d) / float64(time.Millisecond)
	}
	return SummarizeMs(ms)
}

// SummarizeMs computes Stats over values already in milliseconds. The
// slice is not modified.
func SummarizeMs(ms []float64) Stats {
	if len(ms) == 0 {
		return Stats{}
	}
	s := slices.Clone(ms)
	slices.Sort(s)
	var sum float64
	for _, v := range s {
		sum += v
	}
	return Stats{
		N:    len(s),
		Mean: sum / float64(len(s)),
		P50:  Percentile(s, 50),
		P90:  Percentile(s, 90),
		P99:  Percentile(s, 99),
		Max:  s[len(s)-1],
	}
}

// flagBusyAPIServer notes the rows in which the API server spent far more
// CPU per request than it does in the run's typical row: its own background
// work (garbage collection after a large list, compaction) fell into those
// calls, and their latencies say more about that than about tenure.
func flagBusyAPIServer(rows []Result) {
	perRequest := func(r *Result) (float64, bool) {
		cpu, ok := r.CPUMsPerOp["kube-apiserver"]
		if !ok || r.Ops < 2 || r.APIRequestsPerOp <= 0 {
			return 0, false
		}
		return cpu / r.APIRequestsPerOp, true
	}
	var all []float64
	for i := range rows {
		if v, ok := perRequest(&rows[i]); ok {
			all = append(all, v)
		}
	}
	if len(all) < 3 {
		return
	}
	median := SummarizeMs(all).P50
	for i := range rows {
		r := &rows[i]
		if v, ok := perRequest(r); ok && v > 3*median && v > 10 {
			if r.Notes != "" {
				r.Notes += "; "
			}
			r.Notes += fmt.Sprintf("API server busy with its own work: %.0f ms of CPU per request, %.1f× the run's median", v, v/median)
		}
	}
}
