package bench

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/addrspace"
	"github.com/tenure-ipam/tenure/internal/agent"
)

func init() {
	registerScenario(Scenario{Name: "full-pool", Summary: "a /16 filled to the last address, 100 pods retrying ADD: the cost of a retry storm",
		Needs: Needs{Agents: true, Controller: true}, Run: (*env).fullPoolScenario, Targets: fullPoolTargets})
}

// The goals of the full-pool scenario.
const (
	targetLiveListsPerS    = 0.2 // one per network per 5 s
	targetFailedAddAgentMs = 5.0
)

func fullPoolTargets(rep *Report) []Target {
	r := rep.Find("full-pool")
	if r == nil || r.Figures == nil {
		return []Target{{Name: "full-pool", Want: "≤ 1 live LIST per network per 5 s; failed ADD < 5 ms agent CPU; freed address within one retry", Measured: "not run", Status: "n/a"}}
	}
	f := r.Figures
	within := f["freed_to_waiting_s"] >= 0 && f["failed_adds_after_del"] == 0
	return []Target{
		{Name: "full-pool: live LISTs per network", Want: fmt.Sprintf("≤ %.1f/s (one per 5 s)", targetLiveListsPerS),
			Measured: fmt.Sprintf("%.3f/s (%.0f over %.0f failed ADDs, %.1f retries/s)", f["quorum_lists_per_s_per_network"], f["quorum_lists"], f["failed_adds"], f["retries_per_s"]),
			Status:   status(f["quorum_lists_per_s_per_network"] <= targetLiveListsPerS)},
		{Name: "full-pool: agent CPU per failed ADD", Want: fmt.Sprintf("< %.0f ms", targetFailedAddAgentMs),
			Measured: fmt.Sprintf("%.2f ms (%.0f addresses full)", f["failed_add_agent_cpu_ms"], f["pool_addresses"]), Status: status(f["failed_add_agent_cpu_ms"] < targetFailedAddAgentMs)},
		{Name: "full-pool: freed address reaches a waiting pod", Want: "within one retry",
			Measured: fmt.Sprintf("%.3f s after the DEL; %.0f ADDs begun after it failed before the winning one began (%.0f more, begun before the winner, lost the race to it)", f["freed_to_waiting_s"], f["failed_adds_after_del"], f["lost_race_after_del"]), Status: status(within)},
	}
}

const (
	fullPoolWaiting = 100
	fullPoolNetwork = "bench-full"
	fullPoolOwners  = 256 // filler pods the fill's reservations are spread over
)

// fullPoolScenario fills a range to the last address (all but one
// directly through the API, the last by a pod's ADD on bench-n1), then has
// fullPoolWaiting pods on bench-n1 retry ADD, each retry a fresh exec of the
// shim as the kubelet's, for the run's FullPoolDuration. Half-way through
// the holder pod's DEL frees its address: the time until a waiting pod has
// it, and how many ADDs failed in between, say whether the freed address
// reaches a waiting pod within one retry.
func (e *env) fullPoolScenario(ctx context.Context, sc *ScenarioRun) ([]Result, error) {
	dur := sc.Opts.FullPoolDuration
	if dur <= 0 {
		dur = 60 * time.Second
	}
	bits := sc.Opts.FullPoolBits
	if bits == 0 {
		bits = 16
	}
	prefix := netip.PrefixFrom(netip.MustParseAddr("10.250.0.0"), bits).Masked()
	lo, hi := addrspace.UsableBounds(prefix)
	space := addrspace.AddressSpace{Range: addrspace.Range{Prefix: prefix, Start: lo, End: hi}}
	node := agentNodes[0]
	r := Result{ID: "full-pool", Name: fmt.Sprintf("full-pool: %s full, %d pods retrying ADD for %v", prefix, fullPoolWaiting, dur), Command: "ADD",
		Nodes: 1, Concurrency: fullPoolWaiting}

	// The fill: every address but the last free one, which the holder's
	// ADD takes through the agent.
	owners, err := e.ensureOwners(ctx, fullPoolOwners)
	if err != nil {
		return nil, err
	}
	size := space.Size()
	lastFree := size / 2
	objs := make([]*tenurev1alpha1.IPReservation, 0, size-1)
	var names []string
	for off := uint64(0); off < size; off++ {
		if off == lastFree {
			continue
		}
		// Each its own interface of its owner: one attachment, one address.
		o := directReservation(fullPoolNetwork, space.String(), space.Range.At(off), owners[int(off)%len(owners)], fmt.Sprintf("net%d", off/uint64(len(owners))))
		objs = append(objs, o)
		names = append(names, o.Name)
	}
	// The fill is set-up: as in the scale scenario, nothing watches while
	// it goes at the API server's pace; the agents and the controller start
	// again on the full pool (and sync it) before anything is measured.
	for _, n := range agentNodes {
		e.stopAgent(n)
	}
	hadController := e.controller != nil
	e.stopController()
	e.logf("full-pool: filling %s with %d reservations (agents and controller stopped)", prefix, len(objs))
	if _, _, err := e.createAll(ctx, objs, scaleFillConc, max(len(objs)/5, 1000)); err != nil {
		return nil, err
	}
	if err := e.startBenchAgents(ctx, "synced the full pool"); err != nil {
		return nil, err
	}
	if hadController {
		e.startController(ctx)
	}
	if sc.Last {
		r.fill = make(map[string]types.UID, len(objs))
		for _, o := range objs {
			r.fill[o.Name] = o.UID
		}
	} else {
		// Later scenarios get the cluster without the fill.
		defer func() {
			if _, err := e.deleteAll(context.WithoutCancel(ctx), names, scaleFillConc); err != nil {
				e.logf("full-pool: cleanup: %v", err)
			}
		}()
	}
	pods, err := e.createPods(ctx, "full", []string{node}, fullPoolWaiting+1, nil)
	if err != nil {
		return nil, err
	}
	defer func() { _ = e.deletePods(context.WithoutCancel(ctx), pods) }()
	holder, waiting := pods[0], pods[1:]
	conf := netconf(fullPoolNetwork, e.agents[node].Socket, fmt.Sprintf(`{"range":%q,"network_name":%q}`, prefix.String(), fullPoolNetwork))
	// The agent's cache must hold the fill before the holder's ADD, or it
	// would try taken addresses first; settle waits for its CPU to go quiet.
	e.settle(ctx, 5*time.Minute)
	if o := execShim(ctx, e.bins.Shim, call{pod: holder, command: "ADD", conf: conf, wantIPs: 1}); o.err != nil {
		return nil, fmt.Errorf("full-pool: the holder's ADD of the last address: %w", o.err)
	} else {
		e.logf("full-pool: holder has %v; the pool is full", o.addrs)
	}
	e.settle(ctx, 2*time.Minute)

	type attempt struct {
		start, end time.Time
		ok         bool
		full       bool // answered "range is full"
		err        error
		pod        int
	}
	var mu sync.Mutex
	var attempts []attempt
	var cpuMs []float64
	before, err := e.snapshot(ctx)
	if err != nil {
		return nil, err
	}
	cpuBefore := e.sampleCPU()
	begin := time.Now()
	deadline := begin.Add(dur)
	var wg sync.WaitGroup
	for i, p := range waiting {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) && ctx.Err() == nil {
				cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
				t := time.Now()
				o := execShim(cctx, e.bins.Shim, call{pod: p, command: "ADD", conf: conf, wantIPs: 1})
				cancel()
				mu.Lock()
				attempts = append(attempts, attempt{start: t, end: t.Add(o.dur), ok: o.err == nil, full: o.code == agent.CodeRangeFull, err: o.err, pod: i})
				cpuMs = append(cpuMs, float64(o.cpu)/float64(time.Millisecond))
				mu.Unlock()
				if o.err == nil {
					return // it has its address: it stops retrying
				}
			}
		}()
	}
	// Half-way: the holder's DEL frees the one address.
	var delEnd time.Time
	var delErr error
	select {
	case <-time.After(dur / 2):
		o := execShim(ctx, e.bins.Shim, call{pod: holder, command: "DEL", conf: conf})
		delEnd, delErr = time.Now(), o.err
	case <-ctx.Done():
	}
	wg.Wait()
	wall := time.Since(begin)
	cpuAfter := e.sampleCPU()
	after, err := e.snapshot(ctx)
	if err != nil {
		return nil, err
	}
	if delErr != nil {
		return nil, fmt.Errorf("full-pool: the holder's DEL: %w", delErr)
	}

	var failedLat []time.Duration
	var winner *attempt
	fullAnswers := 0
	for i := range attempts {
		a := &attempts[i]
		if a.ok {
			if winner == nil || a.end.Before(winner.end) {
				winner = a
			}
			continue
		}
		failedLat = append(failedLat, a.end.Sub(a.start))
		if a.full {
			fullAnswers++
		} else if len(r.Errors) < 5 {
			r.Errors = append(r.Errors, a.err.Error())
		}
	}
	failed := len(failedLat)
	freedToWaiting, failedAfterDel, lostRace := -1.0, 0, 0
	if winner != nil && !delEnd.IsZero() {
		freedToWaiting = max(0, winner.end.Sub(delEnd).Seconds())
		// ADDs that began after the DEL had returned and failed before
		// the winning one even began: each had the freed address to take
		// and did not see it (0 is "within one retry"). One that failed
		// later lost the race to the winner, which may have begun after
		// it (one exec reaches the agent before another begun earlier):
		// counted apart.
		for _, a := range attempts {
			switch {
			case a.ok || a.start.Before(delEnd) || !a.start.Before(winner.start):
			case a.end.Before(winner.start):
				failedAfterDel++
			default:
				lostRace++
			}
		}
	}
	cost := Cost(after.Sub(before))
	lists := cost.ByVerbResource["LIST ipreservations"]
	st := Summarize(failedLat)
	perFailed := func(v float64) float64 {
		if failed == 0 {
			return 0
		}
		return round3(v / float64(failed))
	}
	cpu, busy := cpuPerOp(cpuBefore, cpuAfter, 0, 1)
	r.Ops, r.WallS, r.OpsPerS = len(attempts), round3(wall.Seconds()), round3(float64(len(attempts))/wall.Seconds())
	r.P50Ms, r.P90Ms, r.P99Ms, r.MeanMs, r.MaxMs = round3(st.P50), round3(st.P90), round3(st.P99), round3(st.Mean), round3(st.Max)
	r.Failures = 0 // a failed ADD on a full pool is the expected answer, not a failure of the run
	r.shimCPU = cpuMs
	r.finish(cost, 1)
	r.MachineBusyPct = busy
	r.CPUMsPerOp = map[string]float64{}
	for g, v := range cpu {
		r.CPUMsPerOp[g] = perFailed(v)
	}
	r.Figures = map[string]float64{
		"pool_addresses":                  float64(space.Capacity()),
		"failed_adds":                     float64(failed),
		"full_answers":                    float64(fullAnswers),
		"other_failures":                  float64(failed - fullAnswers),
		"retries_per_s":                   round3(float64(len(attempts)) / wall.Seconds()),
		"quorum_lists_per_s_per_network":  round3(lists / wall.Seconds()),
		"quorum_lists":                    lists,
		"api_requests_per_failed_add":     perFailed(cost.Requests),
		"failed_add_agent_cpu_ms":         perFailed(cpu["agent"]),
		"failed_add_p50_ms":               r.P50Ms,
		"failed_add_p99_ms":               r.P99Ms,
		"apiserver_cpu_ms_per_s":          round3(cpu["kube-apiserver"] / wall.Seconds()),
		"apiserver_cpu_ms_per_failed_add": perFailed(cpu["kube-apiserver"]),
		"freed_to_waiting_s":              round3(freedToWaiting),
		"failed_adds_after_del":           float64(failedAfterDel),
		"lost_race_after_del":             float64(lostRace),
		"loadavg1":                        loadAvg(),
	}
	r.Notes = fmt.Sprintf("%d failed ADDs (%d answered full, %.0f/s); live LISTs %.0f (%.3f/s); API req/failed ADD %.3f; agent CPU/failed ADD %.2f ms; API server CPU %.0f ms/s; freed→waiting %.3f s with %d failed ADDs in between; machine %.0f %% busy",
		failed, fullAnswers, float64(failed)/wall.Seconds(), lists, lists/wall.Seconds(), r.Figures["api_requests_per_failed_add"], r.Figures["failed_add_agent_cpu_ms"],
		r.Figures["apiserver_cpu_ms_per_s"], freedToWaiting, failedAfterDel, busy)
	e.logf("%s: %s", r.Name, r.Notes)
	if winner != nil {
		_ = execShim(ctx, e.bins.Shim, call{pod: waiting[winner.pod], command: "DEL", conf: conf})
	}
	return []Result{r}, nil
}
