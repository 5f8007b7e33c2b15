package bench

import (
	"context"
	"fmt"
	"math/bits"
	"math/rand/v2"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"k8s.io/apimachinery/pkg/types"

	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
)

func clientKey(ns, name string) types.NamespacedName {
	return types.NamespacedName{Namespace: ns, Name: name}
}

const (
	scaleNetwork  = "bench-scale"
	scaleNode     = "bench-scale-a"
	scaleFillConc = 64
)

// scaleRange is an IPv4 range of at least 2.5 n addresses, so n random
// reservations fill it to about 40 %.
func scaleRange(n int) netip.Prefix {
	need := uint64(float64(n)*2.5) + 2
	b := 32 - bits.Len64(need-1)
	if b < 8 {
		b = 8
	}
	if b > 24 {
		b = 24
	}
	return netip.PrefixFrom(netip.MustParseAddr("100.0.0.0"), b).Masked()
}

// scaleScenario fills the cluster with n reservations through the API,
// then measures a fresh agent's start-up (cache sync) and memory, a
// controller full sweep (--once --dry-run) and sequential ADDs in that
// cluster against the empty-cluster sequential ADDs.
func (e *env) scaleScenario(ctx context.Context, n int, rep *Report) ([]Result, error) {
	var out []Result
	// The fill is set-up, not a property of tenure: with nothing watching
	// it goes at the API server's pace. The four agents of the earlier
	// scenarios and the controller are stopped for it; the controller is
	// started again before the ADDs are measured.
	for _, node := range agentNodes {
		e.stopAgent(node)
	}
	hadController := e.controller != nil
	e.stopController()

	prefix := scaleRange(n)
	owners, err := e.ensureOwners(ctx, n)
	if err != nil {
		return out, err
	}
	size := uint64(1) << (32 - prefix.Bits())
	base := prefix.Addr().As4()
	baseU := uint64(base[0])<<24 | uint64(base[1])<<16 | uint64(base[2])<<8 | uint64(base[3])
	rng := rand.New(rand.NewPCG(100000, uint64(n)))
	picked := make(map[uint64]bool, n)
	objs := make([]*tenurev1alpha1.IPReservation, 0, n)
	for len(objs) < n {
		off := 1 + rng.Uint64N(size-2) // neither network nor broadcast address
		if picked[off] {
			continue
		}
		picked[off] = true
		v := baseU + off
		a := netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
		objs = append(objs, directReservation(scaleNetwork, prefix.String(), a, owners[len(objs)/e.perOwner], "net1"))
	}
	e.logf("scale: creating %d reservations in %s (owned by %d pods) at concurrency %d", n, prefix, len(owners), scaleFillConc)
	e.quiesce(ctx, 10*time.Second)
	before, err := e.snapshot(ctx)
	if err != nil {
		return out, err
	}
	lat, wall, err := e.createAll(ctx, objs, scaleFillConc, max(n/10, 1000))
	if err != nil {
		return out, err
	}
	after, err := e.snapshot(ctx)
	if err != nil {
		return out, err
	}
	st := Summarize(lat)
	fill := Result{
		ID: "scale-fill", Name: fmt.Sprintf("scale: create %d reservations (plain client, c%d)", n, scaleFillConc),
		Ops: n, Concurrency: scaleFillConc, WallS: wall.Seconds(), OpsPerS: float64(n) / wall.Seconds(),
		P50Ms: round3(st.P50), P90Ms: round3(st.P90), P99Ms: round3(st.P99), MeanMs: round3(st.Mean), MaxMs: round3(st.Max),
		Reservation: n, Notes: fmt.Sprintf("set-up; %s, owned by %d pods", prefix, len(owners)),
	}
	fill.RawCreatePerS = fill.OpsPerS // it is itself a raw create run
	fill.finish(Cost(after.Sub(before)), 0)
	out = append(out, fill)
	e.logf("scale: %d reservations created in %v (%.0f/s)", n, wall.Round(time.Millisecond), fill.OpsPerS)
	e.quiesce(ctx, 30*time.Second)

	// A fresh agent: process start to ready (every cache synced).
	startBefore, _ := e.snapshot(ctx)
	cpuBefore := e.sampleCPU()
	a, took, err := e.startAgent(ctx, scaleNode)
	if err != nil {
		return out, err
	}
	rss, hwm, rerr := readRSS(a.Cmd.Process.Pid)
	cpuAfter := e.sampleCPU()
	startAfter, _ := e.snapshot(ctx)
	start := Result{
		ID: "scale-agent-start", Name: fmt.Sprintf("scale: agent start-up, %d reservations", n),
		Ops: 1, WallS: round3(took.Seconds()), SyncS: round3(took.Seconds()), RSSMiB: round3(rss), HWMMiB: round3(hwm), Reservation: n,
		Notes: fmt.Sprintf("start to ready %.2f s; RSS %.0f MiB after sync (peak %.0f MiB)", took.Seconds(), rss, hwm),
	}
	if rerr != nil {
		start.Notes += "; RSS: " + rerr.Error()
	}
	// Where the start-up went: CPU by process (the new agent's whole
	// life so far is its start-up) and the API requests it made.
	start.CPUMsPerOp, start.MachineBusyPct = cpuPerOp(cpuBefore, cpuAfter, 0, 1)
	delete(start.CPUMsPerOp, "shim")
	start.Notes += fmt.Sprintf("; CPU ms: %s (machine %.0f %% busy)", FormatBreakdown(start.CPUMsPerOp, 1), start.MachineBusyPct)
	if startBefore != nil && startAfter != nil {
		c := Cost(startAfter.Sub(startBefore))
		start.APIRequests, start.APIWrites = c.Requests, c.Writes
		start.APIRequestsPerOp, start.APIWritesPerOp = c.Requests, c.Writes
		start.APIByVerbResource = c.ByVerbResource
		requests, events := splitWatchEvents(c.ByVerbResource)
		start.Notes += "; API: " + FormatBreakdown(requests, 1) + "; watch events sent: " + FormatBreakdown(events, 1)
	}
	out = append(out, start)
	e.logf("scale: %s", start.Notes)

	// A controller full sweep, alone.
	sw := e.sweep(ctx, n)

	pods, err := e.createPods(ctx, "scale", []string{scaleNode}, 2*seqOps, nil)
	if err != nil {
		return append(out, sw), err
	}
	conf := netconf(scaleNetwork, a.Socket, fmt.Sprintf(`{"range":%q,"network_name":%q}`, prefix.String(), scaleNetwork))
	confs := map[string][]byte{scaleNode: conf}
	// ADDs with the agent alone (no controller), then with the controller
	// running as in the other scenarios: the second row is the target's.
	alone, err := e.measure(ctx, spec{
		id: "scale-add-no-controller", name: fmt.Sprintf("scale: ADD ×%d sequential, %d reservations, no controller", seqOps, n), command: "ADD",
		nodes: 1, conc: 1, calls: calls(pods[:seqOps], "ADD", confs, 1), perOp: 1, checkDuplicates: true,
	})
	alone.Reservation = n
	if base := rep.Find("add-seq"); base != nil && base.P50Ms > 0 {
		alone.P50VsEmpty = round3(alone.P50Ms / base.P50Ms)
		alone.Notes = fmt.Sprintf("p50 %.2f× of the empty cluster's sequential ADD", alone.P50VsEmpty)
	}
	if err != nil {
		return append(out, sw, alone), err
	}

	if hadController {
		// The long-running controller sweeps once at start (and
		// startController waits for it): its own histogram says how long
		// that took.
		begin := time.Now()
		e.startController(ctx)
		if e.controllerMetrics != "" {
			sw.Notes += fmt.Sprintf("; a running controller took %.0f s from start to its first sweep done", time.Since(begin).Seconds())
			if m, ok := scrapeMetrics(ctx, e.controllerMetrics); ok {
				sum, ok1 := m.Sum("tenure_sweep_duration_seconds_sum")
				cnt, ok2 := m.Sum("tenure_sweep_duration_seconds_count")
				if ok1 && ok2 && cnt > 0 {
					sw.Notes += fmt.Sprintf(" (the sweep itself %.2f s by tenure_sweep_duration_seconds)", sum/cnt)
				}
			}
			if rss, _, err := readRSS(e.controller.Cmd.Process.Pid); err == nil {
				sw.Notes += fmt.Sprintf("; its RSS %.0f MiB", rss)
			}
		}
	}
	out = append(out, sw, alone)
	r, err := e.measure(ctx, spec{
		id: "scale-add", name: fmt.Sprintf("scale: ADD ×%d sequential, %d reservations", seqOps, n), command: "ADD",
		nodes: 1, conc: 1, calls: calls(pods[seqOps:], "ADD", confs, 1), perOp: 1, checkDuplicates: true,
	})
	r.Reservation = n
	if base := rep.Find("add-seq"); base != nil && base.P50Ms > 0 {
		r.P50VsEmpty = round3(r.P50Ms / base.P50Ms)
		r.Notes = fmt.Sprintf("p50 %.2f× of the empty cluster's sequential ADD; controller running; same network as the %d (%.0f %% used)",
			r.P50VsEmpty, n, 100*float64(n)/float64(size-2))
	}
	if rss2, _, err := readRSS(a.Cmd.Process.Pid); err == nil {
		r.RSSMiB = round3(rss2)
		r.Notes += fmt.Sprintf("; agent RSS %.0f MiB after", rss2)
	}
	out = append(out, r)
	if err != nil {
		return out, err
	}
	if rr := e.run(ctx, calls(pods, "DEL", confs, 0), 8, false); rr.failures > 0 {
		e.logf("scale cleanup DELs: %d failed", rr.failures)
	}
	return out, e.deletePods(ctx, pods)
}

// sweep times `tenure-controller --once --dry-run` against the cluster.
func (e *env) sweep(ctx context.Context, n int) Result {
	r := Result{ID: "scale-sweep", Name: fmt.Sprintf("scale: controller --once --dry-run, %d reservations", n), Reservation: n}
	if e.bins.Controller == "" {
		r.Notes = "n/a: no tenure-controller binary"
		return r
	}
	logPath := filepath.Join(e.dir, "controller-once.log")
	f, err := os.Create(logPath)
	if err != nil {
		r.Notes = "n/a: " + err.Error()
		return r
	}
	defer f.Close()
	cctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(cctx, e.bins.Controller, "--kubeconfig", e.cp.KubeconfigPath, "--leader-elect=false", "--once", "--dry-run",
		"--metrics-addr", "0", "--health-addr", "0")
	cmd.Stdout, cmd.Stderr = f, f
	before, _ := e.snapshot(ctx)
	begin := time.Now()
	maxRSS, err := runPeakRSS(cmd)
	took := time.Since(begin)
	after, _ := e.snapshot(ctx)
	if err != nil {
		r.Failures = 1
		r.Notes = fmt.Sprintf("failed after %.2f s: %v: %s", took.Seconds(), err, lastLines(logPath, 2))
		e.logf("scale: sweep %s", r.Notes)
		return r
	}
	r.Ops, r.WallS, r.SweepS = 1, round3(took.Seconds()), round3(took.Seconds())
	if before != nil && after != nil {
		c := Cost(after.Sub(before))
		r.APIRequests, r.APIWrites, r.APIByVerbResource = c.Requests, c.Writes, c.ByVerbResource
		r.APIRequestsPerOp, r.APIWritesPerOp = c.Requests, c.Writes
	}
	r.HWMMiB = round3(maxRSS)
	r.Notes = fmt.Sprintf("full sweep %.2f s, peak RSS %.0f MiB, %s", took.Seconds(), maxRSS, FormatBreakdown(nonWatch(r.APIByVerbResource), 1))
	e.logf("scale: sweep: %s", r.Notes)
	return r
}
