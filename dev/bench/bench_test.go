//go:build integration

package bench

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/tenure-ipam/tenure/test/controlplane"
	"github.com/tenure-ipam/tenure/test/testbed"
)

// One control plane and one agent serve every benchmark of the test
// binary; the unit tests never start them.
var (
	sharedOnce sync.Once
	shared     *env
	sharedErr  error
	sharedSkip string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if shared != nil {
		shared.close()
	}
	os.Exit(code)
}

func benchEnv(b *testing.B) *env {
	b.Helper()
	sharedOnce.Do(func() {
		if _, err := controlplane.BinDir(); err != nil {
			sharedSkip = err.Error()
			return
		}
		bins, err := testbed.Build("")
		if err != nil {
			sharedErr = err
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		e, err := startEnv(ctx, testLogWriter{}, bins, controlplane.Options{})
		if err != nil {
			sharedErr = err
			return
		}
		if _, _, err := e.startAgent(ctx, agentNodes[0]); err != nil {
			e.close()
			sharedErr = err
			return
		}
		e.startController(ctx)
		shared = e
	})
	if sharedSkip != "" {
		b.Skip(sharedSkip)
	}
	if sharedErr != nil {
		b.Fatal(sharedErr)
	}
	return shared
}

type testLogWriter struct{}

func (testLogWriter) Write(p []byte) (int, error) {
	if testing.Verbose() {
		return os.Stderr.Write(p)
	}
	return len(p), nil
}

var benchNet = &netAlloc{n: 100}

// BenchmarkAdd measures CNI ADD through the real shim against one agent:
// ns/op is wall time over b.N ADDs at the given concurrency (so 1e9/ns/op
// is ADDs per second); the latency percentiles and the API cost per ADD
// are reported as extra metrics.
func BenchmarkAdd(b *testing.B) {
	for _, conc := range []int{1, 10} {
		b.Run(fmt.Sprintf("c%d", conc), func(b *testing.B) {
			e := benchEnv(b)
			ctx := context.Background()
			v4, _ := benchNet.next()
			network := fmt.Sprintf("gobench-%d", benchNet.n)
			pods, err := e.createPods(ctx, network, agentNodes[:1], b.N, nil)
			if err != nil {
				b.Fatal(err)
			}
			confs := e.confs(network, fmt.Sprintf(`{"range":%q,"network_name":%q}`, v4, network))
			e.quiesce(ctx, 5*time.Second)
			before, err := e.snapshot(ctx)
			if err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			rr := e.run(ctx, calls(pods, "ADD", confs, 1), conc, true)
			b.StopTimer()
			e.quiesce(ctx, 5*time.Second)
			after, err := e.snapshot(ctx)
			if err != nil {
				b.Fatal(err)
			}
			cost := Cost(after.Sub(before))
			st := Summarize(rr.lat)
			b.ReportMetric(st.P50, "p50-ms")
			b.ReportMetric(st.P99, "p99-ms")
			b.ReportMetric(cost.Requests/float64(b.N), "api-req/op")
			b.ReportMetric(cost.Writes/float64(b.N), "api-writes/op")
			if rr.failures > 0 {
				b.Errorf("%d of %d ADDs failed: %v", rr.failures, b.N, rr.errs)
			}
			e.run(ctx, calls(pods, "DEL", confs, 0), 8, false)
			if err := e.deletePods(ctx, pods); err != nil {
				b.Fatal(err)
			}
		})
	}
}
