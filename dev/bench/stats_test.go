package bench

import (
	"strings"
	"testing"
	"time"
)

func TestPercentileNearestRank(t *testing.T) {
	hundred := make([]float64, 100)
	for i := range hundred {
		hundred[i] = float64(i + 1) // 1..100
	}
	two00 := make([]float64, 200)
	for i := range two00 {
		two00[i] = float64(i + 1)
	}
	for _, tc := range []struct {
		name   string
		values []float64
		p      float64
		want   float64
	}{
		{"empty", nil, 50, 0},
		{"one value", []float64{7}, 99, 7},
		{"p50 of 1..100", hundred, 50, 50},
		{"p90 of 1..100", hundred, 90, 90},
		{"p99 of 1..100", hundred, 99, 99},
		{"p100 of 1..100", hundred, 100, 100},
		{"p0 is the minimum", hundred, 0, 1},
		{"p50 of 1..200 is rank 100", two00, 50, 100},
		{"p99 of 1..200 is rank 198", two00, 99, 198},
		{"p50 of four", []float64{1, 2, 3, 4}, 50, 2},
		{"p51 of four", []float64{1, 2, 3, 4}, 51, 3},
		{"p99 of ten is the max", []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 99, 10},
		{"p90 of ten", []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 90, 9},
	} {
		if got := Percentile(tc.values, tc.p); got != tc.want {
			t.Errorf("%s: Percentile(p%v) = %v, want %v", tc.name, tc.p, got, tc.want)
		}
	}
}

func TestSummarizeDoesNotReorderAndConvertsToMs(t *testing.T) {
	ds := []time.Duration{30 * time.Millisecond, 10 * time.Millisecond, 20 * time.Millisecond, 1500 * time.Microsecond}
	s := Summarize(ds)
	if s.N != 4 || s.P50 != 10 || s.Max != 30 || s.P99 != 30 {
		t.Fatalf("stats %+v", s)
	}
	if want := (30 + 10 + 20 + 1.5) / 4; s.Mean != want {
		t.Fatalf("mean %v, want %v", s.Mean, want)
	}
	in := []float64{3, 1, 2}
	_ = SummarizeMs(in)
	if in[0] != 3 || in[1] != 1 || in[2] != 2 {
		t.Fatalf("input reordered: %v", in)
	}
	if (SummarizeMs(nil) != Stats{}) {
		t.Fatal("empty sample must give zero stats")
	}
}

func TestFlagBusyAPIServer(t *testing.T) {
	row := func(name string, apiCPU, reqs float64) Result {
		return Result{Name: name, Ops: 200, APIRequestsPerOp: reqs, CPUMsPerOp: map[string]float64{"kube-apiserver": apiCPU}}
	}
	rows := []Result{
		row("seq", 8, 1), row("c50", 4, 1), row("dual", 18, 2), row("claim", 18, 5),
		row("disturbed", 39, 1), row("one op", 0, 0),
	}
	rows[5].Ops = 1
	flagBusyAPIServer(rows)
	for _, r := range rows {
		flagged := strings.Contains(r.Notes, "API server busy")
		if flagged != (r.Name == "disturbed") {
			t.Errorf("%s: notes %q", r.Name, r.Notes)
		}
	}
	if !strings.Contains(rows[4].Notes, "39 ms of CPU per request, 4.9× the run's median") {
		t.Errorf("disturbed row: %q", rows[4].Notes)
	}
}
