//go:build integration

package ops_test

import (
	"context"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/kube"
	"github.com/tenure-ipam/tenure/internal/ops"
	"github.com/tenure-ipam/tenure/internal/reservation"
	"github.com/tenure-ipam/tenure/test/controlplane/cptest"
	"github.com/tenure-ipam/tenure/test/testbed"
)

func TestMain(m *testing.M) { os.Exit(cptest.Main(m, nil)) }

var (
	checkScale = flag.Int("check-scale", 1000, "reservations TestCheckAtScale and BenchmarkCheck create (tenure is built for 100000)")
	checkBin   = flag.String("check-binary", "", "a built tenurectl: TestCheckAtScale also runs its check and reports wall time and peak RSS")
)

const (
	scaleNS        = "scale"
	scaleNode      = "scale-node"
	scaleNetwork   = "scale"
	scaleRange     = "10.0.0.0/8"
	perOwner       = 100 // reservations per owner pod
	createParallel = 32
)

var populated struct {
	once sync.Once
	err  error
	took time.Duration
}

// populate creates *checkScale reservations of one network, owned by live
// pods on a Ready node, once per test binary: what a healthy cluster of
// that size holds.
func populate(ctx context.Context, c client.Client, log func(string, ...any)) error {
	populated.once.Do(func() {
		begin := time.Now()
		populated.err = fill(ctx, c, log)
		populated.took = time.Since(begin)
	})
	return populated.err
}

func fill(ctx context.Context, c client.Client, log func(string, ...any)) error {
	n := *checkScale
	if err := testbed.EnsureNamespace(ctx, c, scaleNS); err != nil {
		return err
	}
	if _, err := testbed.CreateNode(ctx, c, scaleNode); err != nil {
		return err
	}
	owners := make([]*corev1.Pod, (n+perOwner-1)/perOwner)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(createParallel)
	for i := range owners {
		g.Go(func() (err error) {
			owners[i], err = testbed.CreatePod(gctx, c, scaleNS, fmt.Sprintf("owner-%d", i), scaleNode, nil)
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	base := netip.MustParseAddr("10.0.0.1")
	var done atomic.Int64
	begin := time.Now()
	g, gctx = errgroup.WithContext(ctx)
	g.SetLimit(createParallel)
	for i := range n {
		g.Go(func() error {
			b := base.As4()
			v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3]) + uint32(i)
			a := netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
			p := owners[i/perOwner]
			r := reservation.New(reservation.Spec{Network: scaleNetwork, Kind: tenurev1alpha1.KindAddress, Item: netip.PrefixFrom(a, 32), Range: scaleRange,
				CNINetwork: scaleNetwork, Owner: tenurev1alpha1.ReservationOwner{Kind: tenurev1alpha1.OwnerPod, Namespace: scaleNS, Name: p.Name, UID: string(p.UID),
					PodName: p.Name, PodUID: string(p.UID), ContainerID: "sandbox-" + p.Name, Interface: fmt.Sprintf("net%d", i%perOwner), Node: scaleNode}})
			if err := c.Create(gctx, r); err != nil {
				return fmt.Errorf("creating %s: %w", r.Name, err)
			}
			if d := done.Add(1); d%10000 == 0 {
				log("created %d/%d reservations (%.0f/s)", d, n, float64(d)/time.Since(begin).Seconds())
			}
			return nil
		})
	}
	return g.Wait()
}

// peakHeap samples the heap in use until stop is called.
func peakHeap() (stop func() uint64) {
	var peak atomic.Uint64
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		var ms runtime.MemStats
		for {
			runtime.ReadMemStats(&ms)
			if ms.HeapAlloc > peak.Load() {
				peak.Store(ms.HeapAlloc)
			}
			select {
			case <-quit:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	return func() uint64 { close(quit); <-done; return peak.Load() }
}

func scaleClient(t testing.TB) (context.Context, client.Client) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	t.Cleanup(cancel)
	c, err := kube.NewClient(cptest.Config())
	if err != nil {
		t.Fatal(err)
	}
	if err := populate(ctx, c, t.Logf); err != nil {
		t.Fatal(err)
	}
	return ctx, c
}

// TestCheckAtScale: check over -check-scale reservations of a healthy
// cluster finds nothing, reads them in pages, and reports how long it took
// and the peak heap (go test -tags integration ./internal/ops -run
// TestCheckAtScale -check-scale 100000 -v). With -check-binary it also
// runs that tenurectl's check and reports its wall time and peak RSS.
func TestCheckAtScale(t *testing.T) {
	ctx, c := scaleClient(t)
	t.Logf("%d reservations of %d owner pods created in %v", *checkScale, (*checkScale+perOwner-1)/perOwner, populated.took.Round(time.Millisecond))

	oc := ops.New(c)
	pages := map[string]int{}
	oc.Progress = func(what string, n int) { pages[what]++ }
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	stop := peakHeap()
	begin := time.Now()
	rep, err := oc.Check(ctx, ops.CheckOptions{})
	took := time.Since(begin)
	peak := stop()
	if err != nil {
		t.Fatal(err)
	}
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	if !rep.OK() || rep.Counts.Reservations != *checkScale {
		t.Fatalf("check of a healthy cluster of %d reservations: %+v, first findings %+v", *checkScale, rep.Counts, rep.Findings[:min(3, len(rep.Findings))])
	}
	if want := *checkScale / ops.DefaultPageSize; pages["reservations"] < want {
		t.Errorf("reservations read in %d full pages, want %d: the list is not paged", pages["reservations"], want)
	}
	t.Logf("check of %d reservations, %d pods: %v, peak heap %.1f MiB (%.1f MiB before), %.1f MiB allocated",
		rep.Counts.Reservations, rep.Counts.Pods, took.Round(time.Millisecond), float64(peak)/(1<<20), float64(before.HeapAlloc)/(1<<20),
		float64(after.TotalAlloc-before.TotalAlloc)/(1<<20))

	if *checkBin == "" {
		return
	}
	cmd := exec.CommandContext(ctx, *checkBin, "check", "--kubeconfig", cptest.Current().KubeconfigPath)
	begin = time.Now()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s check: %v\n%s", *checkBin, err, out)
	}
	ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	t.Logf("%s check: %v wall, %v user, %v system, peak RSS %.1f MiB\n%s", *checkBin, time.Since(begin).Round(time.Millisecond),
		time.Duration(ru.Utime.Nano()).Round(time.Millisecond), time.Duration(ru.Stime.Nano()).Round(time.Millisecond), float64(ru.Maxrss)/1024, out)
}

// BenchmarkCheck: one check of the -check-scale cluster per iteration.
func BenchmarkCheck(b *testing.B) {
	ctx, c := scaleClient(b)
	oc := ops.New(c)
	b.ReportAllocs()
	for b.Loop() {
		rep, err := oc.Check(ctx, ops.CheckOptions{})
		if err != nil || !rep.OK() {
			b.Fatalf("check: %v, %+v", err, rep)
		}
	}
}
