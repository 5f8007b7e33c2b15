package bench

import (
	"context"
	"fmt"
	"net/netip"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/reservation"
	"github.com/tenure-ipam/tenure/test/testbed"
)

// The controller-scale scenario: the controller in a
// cluster of n reservations each owned by a live pod. A fresh
// tenure-controller process is started and timed to its first sweep done;
// its memory is read from /proc/PID/status (VmRSS once the sweep is done
// and the process has settled, VmHWM for the peak of its whole life so
// far); then one `--once --dry-run` sweep alone.

const (
	ctlScaleNetwork = "bench-controller-scale"
	// ctlScaleRange holds 2^20 addresses: room for a million.
	ctlScaleRange = "101.0.0.0/12"
	// ctlScaleSettle is how long the controller idles after its first
	// sweep before its steady RSS is read.
	ctlScaleSettle = 10 * time.Second
)

// Figures of the controller-scale scenario; a script reads them by these
// names.
const (
	FigReservations         = "reservations"
	FigControllerRSSMiB     = "controller_rss_mib"
	FigControllerPeakRSSMiB = "controller_peak_rss_mib"
	FigSweepS               = "sweep_s"
	FigFirstSweepDoneS      = "first_sweep_done_s"
	// The same sweep as `tenure-controller --once --dry-run`: wall time
	// (start-up and every live list included) and peak RSS.
	FigOnceSweepS      = "once_sweep_s"
	FigOncePeakRSSMiB  = "once_peak_rss_mib"
	FigPods            = "pods"
	FigControllerCPUMs = "controller_cpu_ms_to_first_sweep"
)

func init() {
	registerScenario(Scenario{Name: "controller-scale", Summary: "the controller at --scale reservations and pods: start to first sweep done, sweep, RSS and peak",
		Run: (*env).controllerScaleScenario})
}

// controllerScaleScenario fills the cluster to --scale reservations and
// as many pods (counting what an earlier scenario left), measures a fresh
// controller and a --once sweep, and deletes the reservations it created.
func (e *env) controllerScaleScenario(ctx context.Context, sc *ScenarioRun) ([]Result, error) {
	r, err := e.controllerScale(ctx, sc.Opts.Scale)
	return []Result{r}, err
}

func (e *env) controllerScale(ctx context.Context, n int) (Result, error) {
	r := Result{ID: "controller-scale", Name: fmt.Sprintf("controller-scale: %d reservations, %d pods", n, n), Reservation: n}
	if e.bins.Controller == "" {
		r.Notes = "n/a: no tenure-controller binary"
		return r, nil
	}
	// Nothing else runs: the agents watch every reservation, and the
	// long-running controller is the process being replaced. Both come
	// back for the scenarios that follow.
	var stopped []string
	for node := range e.agents {
		e.stopAgent(node)
		stopped = append(stopped, node)
	}
	hadController := e.controller != nil
	e.stopController()
	defer func() {
		for _, node := range stopped {
			if _, _, err := e.startAgent(ctx, node); err != nil {
				e.logf("controller-scale: restarting agent %s: %v", node, err)
			}
		}
		if hadController {
			e.startController(ctx)
		}
	}()

	created, err := e.fillReservations(ctx, n)
	if err != nil {
		return r, err
	}
	defer func() {
		if _, err := e.deleteAll(ctx, created, scaleFillConc); err != nil {
			e.logf("controller-scale: deleting its reservations: %v", err)
		}
	}()
	e.quiesce(ctx, 30*time.Second)

	fig := map[string]float64{FigReservations: float64(n), FigPods: float64(len(e.owners))}
	r.Figures = fig
	first, err := e.firstSweep(ctx, fig)
	if err != nil {
		r.Failures = 1
		r.Notes = err.Error()
		return r, nil
	}
	r.Ops, r.WallS, r.SweepS = 1, round3(first.Seconds()), fig[FigSweepS]
	r.RSSMiB, r.HWMMiB = fig[FigControllerRSSMiB], fig[FigControllerPeakRSSMiB]

	once := e.sweep(ctx, n)
	if once.Failures == 0 {
		fig[FigOnceSweepS], fig[FigOncePeakRSSMiB] = once.SweepS, once.HWMMiB
	}
	r.Notes = fmt.Sprintf("start to first sweep done %.2f s (the sweep %.2f s by tenure_sweep_duration_seconds, %.0f ms of controller CPU to get there); "+
		"RSS %.0f MiB %s after, peak %.0f MiB; --once --dry-run: %s",
		first.Seconds(), fig[FigSweepS], fig[FigControllerCPUMs], fig[FigControllerRSSMiB], ctlScaleSettle, fig[FigControllerPeakRSSMiB], once.Notes)
	e.logf("controller-scale: %s", r.Notes)
	return r, nil
}

// fillReservations creates reservations until the cluster holds n, each
// owned by one of n live pods on the filler node; it returns the names it
// created.
func (e *env) fillReservations(ctx context.Context, n int) ([]string, error) {
	list := reservation.NewMetadataList()
	if err := e.c.List(ctx, list, client.Limit(1)); err != nil {
		return nil, err
	}
	have := len(list.Items)
	if rest := list.GetRemainingItemCount(); rest != nil {
		have += int(*rest)
	}
	owners, err := e.ensureOwners(ctx, n)
	if err != nil {
		return nil, err
	}
	if have >= n {
		e.logf("controller-scale: the cluster already holds %d reservations", have)
		return nil, nil
	}
	base := netip.MustParsePrefix(ctlScaleRange).Addr()
	objs := make([]*tenurev1alpha1.IPReservation, n-have)
	names := make([]string, len(objs))
	a := base
	for i := range objs {
		a = a.Next()
		objs[i] = directReservation(ctlScaleNetwork, ctlScaleRange, a, owners[i%len(owners)], "net1")
		names[i] = objs[i].Name
	}
	e.logf("controller-scale: creating %d reservations (the cluster holds %d) at concurrency %d", len(objs), have, scaleFillConc)
	_, wall, err := e.createAll(ctx, objs, scaleFillConc, max(len(objs)/10, 1000))
	if err != nil {
		return names, err
	}
	e.logf("controller-scale: created in %v", wall.Round(time.Millisecond))
	return names, nil
}

// firstSweep starts a controller, waits for its first sweep to be done,
// lets it idle, reads its memory and stops it. It returns the time from
// process start to the sweep done and fills the figures.
func (e *env) firstSweep(ctx context.Context, fig map[string]float64) (time.Duration, error) {
	ports := make([]int, 2)
	for i := range ports {
		p, err := freePort()
		if err != nil {
			return 0, err
		}
		ports[i] = p
	}
	metrics := "http://127.0.0.1:" + strconv.Itoa(ports[0]) + "/metrics"
	begin := time.Now()
	p, err := testbed.StartProcess("controller", e.bins.Controller, filepath.Join(e.dir, "controller-scale.log"),
		"--kubeconfig", e.cp.KubeconfigPath, "--leader-elect=false", "--sweep-interval", "1h",
		"--metrics-addr", "127.0.0.1:"+strconv.Itoa(ports[0]), "--health-addr", "127.0.0.1:"+strconv.Itoa(ports[1]))
	if err != nil {
		return 0, err
	}
	defer p.Stop()
	deadline := begin.Add(10 * time.Minute)
	for {
		if n, ok := sweepsDone(ctx, metrics); ok && n >= 1 {
			break
		}
		if !p.Running() {
			return 0, fmt.Errorf("tenure-controller exited: %s", lastLines(p.Log, 3))
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return 0, fmt.Errorf("no sweep done within %v: %s", time.Since(begin).Round(time.Second), lastLines(p.Log, 3))
		}
		time.Sleep(100 * time.Millisecond)
	}
	took := time.Since(begin)
	fig[FigFirstSweepDoneS] = round3(took.Seconds())
	if ms, err := procCPU(p.Cmd.Process.Pid); err == nil {
		fig[FigControllerCPUMs] = round3(ms)
	}
	if m, ok := scrapeMetrics(ctx, metrics); ok {
		sum, ok1 := m.Sum("tenure_sweep_duration_seconds_sum")
		cnt, ok2 := m.Sum("tenure_sweep_duration_seconds_count")
		if ok1 && ok2 && cnt > 0 {
			fig[FigSweepS] = round3(sum / cnt)
		}
	}
	select {
	case <-ctx.Done():
		return took, ctx.Err()
	case <-time.After(ctlScaleSettle):
	}
	rss, hwm, err := readRSS(p.Cmd.Process.Pid)
	if err != nil {
		return took, err
	}
	fig[FigControllerRSSMiB], fig[FigControllerPeakRSSMiB] = round3(rss), round3(hwm)
	return took, nil
}

// runPeakRSS runs cmd and returns its peak RSS in MiB, the last VmHWM read
// from /proc while it ran (every 20 ms). Not wait4's ru_maxrss: Go starts
// a child with vfork semantics, and Linux carries the high-water mark of
// the address space it leaves at exec (the bench's own, hundreds of MiB
// after a fill) into the child's maxrss.
func runPeakRSS(cmd *exec.Cmd) (float64, error) {
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	peak := 0.0
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if _, hwm, err := readRSS(cmd.Process.Pid); err == nil {
			peak = max(peak, hwm)
		}
		select {
		case err := <-done:
			return peak, err
		case <-tick.C:
		}
	}
}
