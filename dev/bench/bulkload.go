package bench

import (
	"context"
	"fmt"
	"net/netip"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
)

// createAll creates objs at concurrency conc and returns each create's
// latency. progress, when > 0, logs every that many objects.
func (e *env) createAll(ctx context.Context, objs []*tenurev1alpha1.IPReservation, conc int, progress int) ([]time.Duration, time.Duration, error) {
	lat := make([]time.Duration, len(objs))
	var done atomic.Int64
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(conc)
	begin := time.Now()
	for i, o := range objs {
		g.Go(func() error {
			t := time.Now()
			err := e.c.Create(gctx, o)
			lat[i] = time.Since(t)
			if err != nil && !apierrors.IsAlreadyExists(err) {
				return fmt.Errorf("creating reservation %s: %w", o.Name, err)
			}
			if n := done.Add(1); progress > 0 && n%int64(progress) == 0 {
				e.logf("  %d/%d created (%.0f/s)", n, len(objs), float64(n)/time.Since(begin).Seconds())
			}
			return nil
		})
	}
	err := g.Wait()
	return lat, time.Since(begin), err
}

// deleteAll deletes reservations by name at concurrency conc.
func (e *env) deleteAll(ctx context.Context, names []string, conc int) (time.Duration, error) {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(conc)
	begin := time.Now()
	for _, n := range names {
		g.Go(func() error {
			err := e.c.Delete(gctx, &tenurev1alpha1.IPReservation{ObjectMeta: metav1.ObjectMeta{Name: n}})
			if err != nil && !apierrors.IsNotFound(err) {
				return err
			}
			return nil
		})
	}
	err := g.Wait()
	return time.Since(begin), err
}

// rawCreate measures the API server's plain create rate: n small
// IPReservations (a throwaway network, owned by a pod that exists so the
// controller leaves them be) at concurrency conc, with a plain client;
// then it deletes them at the same concurrency. It returns creates/s, the
// creates' p50, deletes/s, and the CPU per create of this process (the
// creating client) and of the API server while it created.
func (e *env) rawCreate(ctx context.Context, n, conc int) (perS float64, stats Stats, delPerS float64, cpu rawCPU, err error) {
	objs := make([]*tenurev1alpha1.IPReservation, n)
	names := make([]string, n)
	base := netip.MustParseAddr("10.192.0.0").As4()
	for i := range objs {
		seq := e.rawSeq.Add(1) % (1 << 20)
		a := base
		a[1] += byte(seq >> 16)
		a[2] = byte(seq >> 8)
		a[3] = byte(seq)
		objs[i] = directReservation(rawNetwork, "10.192.0.0/12", netip.AddrFrom4(a), e.rawOwner, fmt.Sprintf("net%d", seq))
		names[i] = objs[i].Name
	}
	before := e.sampleCPU()
	lat, wall, err := e.createAll(ctx, objs, conc, 0)
	after := e.sampleCPU()
	if err != nil {
		return 0, Stats{}, 0, rawCPU{}, err
	}
	perCreate := func(g string) float64 { return max(after.groups[g]-before.groups[g], 0) / float64(n) }
	cpu = rawCPU{clientMs: perCreate("bench"), apiMs: perCreate("kube-apiserver")}
	delWall, err := e.deleteAll(ctx, names, conc)
	if err != nil {
		return 0, Stats{}, 0, rawCPU{}, err
	}
	return float64(n) / wall.Seconds(), Summarize(lat), float64(n) / delWall.Seconds(), cpu, nil
}

// rawCPU is the CPU (ms) per raw create: of the creating client, this
// process (which does nothing else meanwhile but its own bookkeeping), and
// of the API server.
type rawCPU struct{ clientMs, apiMs float64 }
