package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/tenure-ipam/tenure/test/testbed"
)

// Binary names a row's binaries in a run with a baseline: "baseline" (the
// old shim and agent of Options.BaselineBin) or "new" (this tree's).
const (
	binaryBaseline = "baseline"
	binaryNew      = "new"
)

// baselineOrder is the order the binaries run the quick scenario in, twice
// each: a steady drift of the machine's load over the run weighs on both
// alike.
var baselineOrder = []string{binaryBaseline, binaryNew, binaryNew, binaryBaseline}

// baselineBinaries are the shim and agent of dir (a make build of the old
// tree); the controller stays this tree's.
func baselineBinaries(dir string, cur testbed.Binaries) (testbed.Binaries, error) {
	b := cur
	b.Dir = dir
	for name, dst := range map[string]*string{"tenure": &b.Shim, "tenure-agent": &b.Agent} {
		p := filepath.Join(dir, name)
		fi, err := os.Stat(p)
		if err != nil || fi.IsDir() {
			return b, fmt.Errorf("--baseline-bin %s: no %s there (make build of the old tree writes bin/%s)", dir, name, name)
		}
		*dst = p
	}
	return b, nil
}

// flavour is one side of a side-by-side quick run: its name, binaries
// and the agents' further flags.
type flavour struct {
	name string
	bins testbed.Binaries
	args []string
}

// quickWithBaseline runs the quick scenario with the old binaries of dir
// as the baseline and this tree's as new.
func (e *env) quickWithBaseline(ctx context.Context, nets *netAlloc, dir string) ([]Result, error) {
	old, err := baselineBinaries(dir, e.bins)
	if err != nil {
		return nil, err
	}
	return e.quickSideBySide(ctx, nets, flavour{name: binaryBaseline, bins: old}, flavour{name: binaryNew, bins: e.bins})
}

// quickSideBySide runs the quick scenario (500 ADDs and DELs at
// concurrency 50 over 4 nodes) on one control plane with the two flavours
// alternating, the agents restarted for each. Rows carry Binary ("baseline"
// or "new") and Round; Report.Find ignores the baseline's, so the targets
// are the new flavour's first round.
func (e *env) quickSideBySide(ctx context.Context, nets *netAlloc, base, cur flavour) ([]Result, error) {
	// The run's shim facts (Report.Shim) are the new flavour's calls.
	var newCPU []float64
	var newFaults int64
	var newPairs []cpuPair
	bins0, args0 := e.bins, e.agentArgs
	defer func() {
		e.bins, e.agentArgs = bins0, args0
		e.cpuMu.Lock()
		e.shimCPU, e.shimMinflt, e.shimPairs = newCPU, newFaults, newPairs
		e.cpuMu.Unlock()
	}()
	var out []Result
	round := map[string]int{}
	sizes := map[string]float64{}
	for i, which := range baselineOrder {
		f := cur
		if which == binaryBaseline {
			f = base
		}
		if i == 0 || baselineOrder[i-1] != which {
			for _, n := range agentNodes {
				e.stopAgent(n)
			}
			e.bins, e.agentArgs = f.bins, f.args
			if err := e.startBenchAgents(ctx, "ready ("+f.name+")"); err != nil {
				return out, err
			}
			if err := e.warmup(ctx, nets); err != nil {
				return out, fmt.Errorf("warm-up of %s: %w", f.name, err)
			}
		}
		round[which]++
		e.cpuMu.Lock()
		calls0, faults0, pairs0 := len(e.shimCPU), e.shimMinflt, len(e.shimPairs)
		e.cpuMu.Unlock()
		rs, err := e.gridScenario(ctx, nets, 50, 4)
		e.cpuMu.Lock()
		if which == binaryNew {
			newCPU = append(newCPU, e.shimCPU[calls0:]...)
			newFaults += e.shimMinflt - faults0
			newPairs = append(newPairs, e.shimPairs[pairs0:]...)
		}
		e.cpuMu.Unlock()
		if fi, serr := os.Stat(f.bins.Shim); serr == nil {
			sizes[which] = float64(fi.Size())
		}
		for j := range rs {
			rs[j].Binary, rs[j].Round = which, round[which]
			rs[j].Name += fmt.Sprintf(" [%s %d]", f.name, round[which])
		}
		out = append(out, rs...)
		if err != nil {
			return out, err
		}
	}
	return append(out, sideBySide(out, sizes, map[string]string{binaryBaseline: base.name, binaryNew: cur.name})...), nil
}

// sideBySide is one row per binary and command with the means over its
// rounds, and the new binary's figures over the baseline's; shimBytes are
// the shims' sizes, names the flavours'.
func sideBySide(rows []Result, shimBytes map[string]float64, names map[string]string) []Result {
	figs := func(r Result) map[string]float64 {
		return map[string]float64{
			"ops_per_s": r.OpsPerS, "p50_ms": r.P50Ms, "p99_ms": r.P99Ms, "share_of_raw": r.Ratio,
			"api_requests_per_op": r.APIRequestsPerOp,
			"shim_cpu_ms":         r.CPUMsPerOp["shim"], "agent_cpu_ms": r.CPUMsPerOp["agent"],
			"apiserver_cpu_ms": r.CPUMsPerOp["kube-apiserver"], "etcd_cpu_ms": r.CPUMsPerOp["etcd"],
			"raw_client_cpu_ms": r.RawClientCPUMs, "raw_apiserver_cpu_ms": r.RawAPICPUMs,
		}
	}
	var out []Result
	for _, cmd := range []string{"ADD", "DEL"} {
		mean := map[string]map[string]float64{}
		for _, which := range []string{binaryBaseline, binaryNew} {
			sum, n := map[string]float64{}, 0
			for _, r := range rows {
				if r.Binary != which || r.Command != cmd {
					continue
				}
				n++
				for k, v := range figs(r) {
					sum[k] += v
				}
			}
			if n == 0 {
				continue
			}
			for k := range sum {
				sum[k] = round3(sum[k] / float64(n))
			}
			sum["rounds"] = float64(n)
			sum["shim_binary_bytes"] = shimBytes[which]
			mean[which] = sum
			out = append(out, Result{ID: strings.ToLower(cmd) + "-c50-n4-" + which + "-mean", Name: fmt.Sprintf("%s c50, 4 nodes, %s, mean of %d rounds", cmd, names[which], n),
				Scenario: "old and new binary", Figures: sum})
		}
		if b, nw := mean[binaryBaseline], mean[binaryNew]; b != nil && nw != nil {
			ratio := map[string]float64{}
			for k, v := range nw {
				if k != "rounds" && b[k] > 0 {
					ratio[k] = round3(v / b[k])
				}
			}
			out = append(out, Result{ID: strings.ToLower(cmd) + "-c50-n4-new/baseline", Name: cmd + " c50, 4 nodes, new / baseline", Scenario: "old and new binary", Figures: ratio})
		}
	}
	return out
}
