package testbed

import "testing"

// What tenure-controller's /metrics looks like: typed families, a histogram,
// labelled counters; plus an untyped series as older exporters write it.
const scrape = `# HELP tenure_releases_total Reservations released.
# TYPE tenure_releases_total counter
tenure_releases_total{reason="PodGone"} 3
tenure_releases_total{reason="ClaimDeleted"} 2
# HELP tenure_reservations Reservations by pool and state.
# TYPE tenure_reservations gauge
tenure_reservations{pool="p",state="allocated"} 5
tenure_reservations{pool="p",state="free"} 11
tenure_reservations{pool="q",state="allocated"} 1
# HELP tenure_sweep_duration_seconds Duration of full sweeps.
# TYPE tenure_sweep_duration_seconds histogram
tenure_sweep_duration_seconds_bucket{le="1"} 1
tenure_sweep_duration_seconds_bucket{le="+Inf"} 2
tenure_sweep_duration_seconds_sum 2.5
tenure_sweep_duration_seconds_count 2
plain_total{path="we\"ird\\x"} 7 1700000000000
`

func TestMetricsSum(t *testing.T) {
	m, err := ParseMetrics(scrape)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		labels []string
		sum    float64
		found  bool
	}{
		{"tenure_releases_total", nil, 5, true},
		{"tenure_releases_total", []string{`reason="PodGone"`}, 3, true},
		{"tenure_releases_total", []string{`reason="NodeGone"`}, 0, false},
		{"tenure_reservations", []string{`state="allocated"`}, 6, true},
		{"tenure_reservations", []string{`pool="p"`, `state="free"`}, 11, true},
		{"tenure_sweep_duration_seconds_count", nil, 2, true},
		{"tenure_sweep_duration_seconds_sum", nil, 2.5, true},
		{"tenure_sweep_duration_seconds", nil, 0, false},
		{"tenure_releases", nil, 0, false}, // a prefix is no match
		{"plain_total", []string{`path="we\"ird\\x"`}, 7, true},
	} {
		sum, found := m.Sum(tc.name, tc.labels...)
		if sum != tc.sum || found != tc.found {
			t.Errorf("Sum(%s, %q) = %v, %v; want %v, %v", tc.name, tc.labels, sum, found, tc.sum, tc.found)
		}
	}
}
