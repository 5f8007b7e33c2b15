package bench

import (
	"context"
	"io"
	"net/http"
	"time"

	"github.com/tenure-ipam/tenure/test/testbed"
)

// sweepsDone reads tenure_sweep_duration_seconds_count from the
// controller's metrics; false when it cannot be read.
func sweepsDone(ctx context.Context, url string) (float64, bool) {
	m, ok := scrapeMetrics(ctx, url)
	if !ok {
		return 0, false
	}
	return m.Sum("tenure_sweep_duration_seconds_count")
}

// scrapeMetrics reads a /metrics endpoint; false when it cannot be read or
// parsed.
func scrapeMetrics(ctx context.Context, url string) (testbed.Metrics, bool) {
	text, ok := httpGet(ctx, url)
	if !ok {
		return nil, false
	}
	m, err := testbed.ParseMetrics(text)
	return m, err == nil
}

func httpGet(ctx context.Context, url string) (string, bool) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", false
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", false
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err == nil && resp.StatusCode == http.StatusOK
}

func httpOK(ctx context.Context, url string) bool {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return false
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// snapshot reads apiserver_request_total.
func (e *env) snapshot(ctx context.Context) (RequestCounts, error) {
	text, err := e.cp.MetricsText(ctx)
	if err != nil {
		return nil, err
	}
	return ParseRequestCounts(text)
}

// quiesce waits until the API server has been (nearly) idle for one
// sample interval: at most 2 non-watch resource requests in 300 ms, so
// pods just created have reached the agents' caches and the previous
// step's trailing work (controller reactions, events) is over.
func (e *env) quiesce(ctx context.Context, max time.Duration) {
	deadline := time.Now().Add(max)
	prev, err := e.snapshot(ctx)
	if err != nil {
		return
	}
	for time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return
		case <-time.After(300 * time.Millisecond):
		}
		cur, err := e.snapshot(ctx)
		if err != nil {
			return
		}
		if Cost(cur.Sub(prev)).Requests <= 2 {
			return
		}
		prev = cur
	}
}

// settle waits until the API server is quiet (quiesce) and every process
// of the cluster (agents, controller, kube-apiserver, etcd) has worked off
// its backlog: under 60 ms of CPU between them in 500 ms (12 % of one
// core; an idle API server uses a few %). It gives up after max.
func (e *env) settle(ctx context.Context, max time.Duration) {
	deadline := time.Now().Add(max)
	e.quiesce(ctx, max)
	ours := func() float64 {
		s := e.sampleCPU()
		return s.groups["agent"] + s.groups["controller"] + s.groups["kube-apiserver"] + s.groups["etcd"]
	}
	prev := ours()
	for time.Now().Before(deadline) && ctx.Err() == nil {
		time.Sleep(500 * time.Millisecond)
		cur := ours()
		if cur-prev < 60 {
			return
		}
		prev = cur
	}
	e.logf("the cluster's processes are still busy after %v; measuring anyway", max)
}
