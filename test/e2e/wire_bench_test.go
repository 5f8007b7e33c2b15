//go:build integration

package e2e

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tenure-ipam/tenure/internal/kube"
	"github.com/tenure-ipam/tenure/test/controlplane/cptest"
	"github.com/tenure-ipam/tenure/test/testbed"
)

// BenchmarkAddWithWireCheck times ADDs (the shim's call to the agent, the
// IPAM part of a pod's start) on a real bridge segment, one after
// another, with the wire check off, probing ahead of the ADDs (the
// default), and probing in each ADD (--probe-ahead 0). It reports the
// p50 and p99 of one ADD; paced is the pause between two ADDs, as pods
// of a node start over time rather than all in one instant. stream starts
// an ADD every stream without waiting for the ones before, as a storm of
// pods on one node reaches its ADDs: concurrent ADDs in a stream.
//
//	go test -tags integration -run '^$' -bench AddWithWireCheck -benchtime 100x ./test/e2e/
func BenchmarkAddWithWireCheck(b *testing.B) {
	for _, tc := range []struct {
		name   string
		args   []string
		paced  time.Duration
		stream time.Duration
	}{
		{"probe=off", []string{"--probe=false"}, 0, 0},
		{"probe=ahead/back-to-back", nil, 0, 0},
		{"probe=ahead/paced-100ms", nil, 100 * time.Millisecond, 0},
		{"probe=in-ADD", []string{"--probe-ahead", "0"}, 0, 0},
		{"probe=off/stream-20ms", []string{"--probe=false"}, 0, 20 * time.Millisecond},
		{"probe=ahead/stream-20ms", nil, 0, 20 * time.Millisecond},
	} {
		b.Run(tc.name, func(b *testing.B) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			defer cancel()
			c, err := kube.NewClient(cptest.Current().Config)
			if err != nil {
				b.Fatal(err)
			}
			s := newSegment(b, netip.MustParsePrefix("10.73.255.254/16"))
			node := fmt.Sprintf("nwb-%d", time.Now().UnixNano()%1e6)
			a, _ := startProbingAgent(b, ctx, node, s, 10*time.Second, tc.args...)
			conf := []byte(fmt.Sprintf(`{"cniVersion":"1.1.0","name":"wb-%s","type":"bridge","bridge":%q,
				"ipam":{"type":"tenure","agent_socket":%q,"range":"10.73.0.0/16","network_name":"wb-%s"}}`, node, s.bridge, a.Socket, node))
			const ns = "e2e-wirebench"
			if err := testbed.EnsureNamespace(ctx, c, ns); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			var took []time.Duration
			if tc.stream > 0 {
				took = streamADDs(b, ctx, c, ns, node, conf, tc.stream)
			} else {
				took = sequentialADDs(b, ctx, c, ns, node, conf, tc.paced)
			}
			b.StopTimer()
			slices.Sort(took)
			q := func(f float64) float64 { return float64(took[int(f*float64(len(took)-1))].Microseconds()) / 1000 }
			b.ReportMetric(q(0.5), "p50-ms")
			b.ReportMetric(q(0.99), "p99-ms")
		})
	}
}

// streamADDs creates b.N pods, then starts their ADDs one every interval,
// each without waiting for those before, and returns each ADD's time.
func streamADDs(b *testing.B, ctx context.Context, c client.Client, ns, node string, conf []byte, interval time.Duration) []time.Duration {
	b.Helper()
	calls := make([]testbed.CNICall, b.N)
	for i := range b.N {
		name := fmt.Sprintf("wb-%s-%d", node, i)
		p, err := testbed.CreatePod(ctx, c, ns, name, node, nil)
		if err != nil {
			b.Fatal(err)
		}
		calls[i] = testbed.CNICall{Command: "ADD", ContainerID: fmt.Sprintf("sandbox-%s", p.UID), IfName: "net1",
			Args: testbed.PodArgs(ns, name, string(p.UID)), Config: conf}
	}
	took := make([]time.Duration, b.N)
	errs := make([]error, b.N)
	var wg sync.WaitGroup
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for i := range b.N {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			_, errs[i] = testbed.ExecShim(ctx, bins.Shim, calls[i])
			took[i] = time.Since(start)
		}()
		<-tick.C
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		b.Fatal(err)
	}
	return took
}

// sequentialADDs creates a pod and runs its ADD, b.N times, one after
// another, pausing paced before each ADD; it times the ADDs alone.
func sequentialADDs(b *testing.B, ctx context.Context, c client.Client, ns, node string, conf []byte, paced time.Duration) []time.Duration {
	b.Helper()
	took := make([]time.Duration, 0, b.N)
	for i := range b.N {
		b.StopTimer()
		name := fmt.Sprintf("wb-%s-%d", node, i)
		p, err := testbed.CreatePod(ctx, c, ns, name, node, nil)
		if err != nil {
			b.Fatal(err)
		}
		call := testbed.CNICall{Command: "ADD", ContainerID: fmt.Sprintf("sandbox-%s", p.UID), IfName: "net1",
			Args: testbed.PodArgs(ns, name, string(p.UID)), Config: conf}
		if paced > 0 {
			time.Sleep(paced)
		}
		b.StartTimer()
		start := time.Now()
		if _, err := testbed.ExecShim(ctx, bins.Shim, call); err != nil {
			b.Fatalf("ADD %d: %v", i, err)
		}
		took = append(took, time.Since(start))
	}
	b.StopTimer()
	return took
}
