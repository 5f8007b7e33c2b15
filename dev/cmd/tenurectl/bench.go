package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/tenure-ipam/tenure/dev/bench"
	"github.com/tenure-ipam/tenure/dev/devnode"
)

// benchCommand runs the benchmark: its own kube-apiserver + etcd, agents
// posing as nodes, the controller when built, and the CNI shim executed as
// a runtime executes it.
func benchCommand(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bench [--quick] [--scenario NAME]... [--agents 10,100,300,1000] [-o table|json] [--out DIR] [--scale N] [--skip-scale]",
		Short: "benchmark tenure on a local control plane (see docs/performance.md)",
		Args:  noArgs(e),
	}
	var f benchFlags
	cmd.RunE = func(cmd *cobra.Command, _ []string) error { return runBench(cmd.Context(), e, cmd, &f) }
	fs := cmd.Flags()
	fs.BoolVar(&f.quick, "quick", false, "only 500 ADDs at concurrency 50 over 4 nodes, and their DEL (under two minutes)")
	fs.StringVarP(&f.output, "output", "o", "table", "output format on stdout: table or json")
	fs.StringVar(&f.out, "out", filepath.Join("out", "bench"), "directory for results.json, results.md and adds-latency.svg (\"\" for none)")
	fs.IntVar(&f.scale, "scale", 100000, "reservations in the scale scenario")
	fs.BoolVar(&f.skipScale, "skip-scale", false, "leave out the scale scenario")
	fs.Func("scenario", "run only this named scenario (repeatable, run in the order given): "+strings.Join(bench.ScenarioNames(), ", "), func(v string) error {
		f.named = append(f.named, v)
		return nil
	})
	fs.StringVar(&f.agents, "agents", "10,100,300,1000", "the fanout scenario's agent counts (N), comma-separated")
	fs.StringVar(&f.baseline, "baseline-bin", "", "with --quick or --scenario pod-start: a directory with an older build's tenure and tenure-agent, run alternating with this build's and reported side by side (pod-start: its agent beside this build's on the node, as the IPAM tenure-before)")
	fs.BoolVar(&f.compareCBOR, "compare-cbor", false, "no longer runs: the agent speaks no CBOR")
	_ = fs.MarkDeprecated("compare-cbor", "the agent speaks no CBOR: measured dearer than JSON, its client went (docs/performance.md, \"The API request in CBOR\")")
	fs.IntVar(&f.psPods, "pod-start-pods", 30, "the pod-start scenario's pods per IPAM, in waves")
	fs.IntVar(&f.psWave, "pod-start-wave", 10, "the pod-start scenario's pods created at once in a wave")
	fs.IntVar(&f.psSets, "pod-start-sets", 6, "the pod-start scenario's sets of waves: times the pods per IPAM are run in waves, the IPAMs' order rotating on (1 to 20)")
	fs.IntVar(&f.psNodes, "pod-start-nodes", 1, fmt.Sprintf("the pod-start scenario's real nodes, the pods spread over them (1 to %d; more than one: nodes in namespaces of their own, as dev up --node --nodes N)", devnode.MaxNodes))
	fs.IntVar(&f.psStorm, "pod-start-storm", 50, "the pod-start scenario's pods per IPAM created at once after the waves (-1: none)")
	fs.IntVar(&f.psStorms, "pod-start-storms", 3, "the pod-start scenario's storms per IPAM, the IPAMs' order rotating storm by storm")
	durationFlag(fs, &f.fullPoolFor, "full-pool-duration", 60*time.Second, "how long the full-pool scenario's pods retry ADD")
	_ = cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions([]string{"table", "json"}, cobra.ShellCompDirectiveNoFileComp))
	_ = cmd.RegisterFlagCompletionFunc("scenario", cobra.FixedCompletions(bench.ScenarioNames(), cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

type benchFlags struct {
	quick, skipScale                   bool
	compareCBOR                        bool
	output, out, agents                string
	baseline                           string
	scale                              int
	psPods, psWave                     int
	psStorm, psStorms, psNodes, psSets int
	named                              []string
	fullPoolFor                        time.Duration
}

func runBench(ctx context.Context, e *env, cmd *cobra.Command, f *benchFlags) error {
	if f.output != "table" && f.output != "json" {
		fmt.Fprintf(e.stderr, "tenurectl bench: -o must be table or json, got %q\n", f.output)
		return refuse(e, cmd)
	}
	agents, aerr := bench.ParseAgents(f.agents)
	if aerr != nil {
		fmt.Fprintf(e.stderr, "tenurectl bench: %v\n", aerr)
		return errUsage
	}
	for _, n := range f.named {
		if !slices.Contains(bench.ScenarioNames(), n) {
			fmt.Fprintf(e.stderr, "tenurectl bench: --scenario: no scenario %q (have: %s)\n", n, strings.Join(bench.ScenarioNames(), ", "))
			return errUsage
		}
	}
	if len(f.named) > 0 && f.quick {
		fmt.Fprintf(e.stderr, "tenurectl bench: --quick and --scenario do not combine\n")
		return errUsage
	}
	if f.baseline != "" && !f.quick && !slices.Contains(f.named, "pod-start") {
		fmt.Fprintf(e.stderr, "tenurectl bench: --baseline-bin %s needs --quick or --scenario pod-start\n", f.baseline)
		return errUsage
	}
	if f.compareCBOR {
		fmt.Fprintf(e.stderr, "tenurectl bench: --compare-cbor no longer runs: the agent speaks no CBOR\n")
		return errUsage
	}
	if f.fullPoolFor <= 0 {
		fmt.Fprintf(e.stderr, "tenurectl bench: --full-pool-duration must be positive, got %v\n", f.fullPoolFor)
		return errUsage
	}
	podStart := bench.PodStartOptions{Pods: f.psPods, Wave: f.psWave, Sets: f.psSets, Storm: f.psStorm, Storms: f.psStorms, Nodes: f.psNodes}
	if slices.Contains(f.named, "pod-start") {
		podStart.BaselineBin = f.baseline
	}
	if f.psPods <= 0 || f.psWave <= 0 || f.psSets <= 0 || f.psNodes <= 0 {
		fmt.Fprintf(e.stderr, "tenurectl bench: --pod-start-pods, --pod-start-wave, --pod-start-sets and --pod-start-nodes must be positive, got %d, %d, %d and %d\n", f.psPods, f.psWave, f.psSets, f.psNodes)
		return errUsage
	}
	if perr := podStart.Validate(); perr != nil {
		fmt.Fprintf(e.stderr, "tenurectl bench: %v\n", perr)
		return errUsage
	}
	if f.scale <= 0 {
		fmt.Fprintf(e.stderr, "tenurectl bench: --scale must be positive, got %d\n", f.scale)
		return errUsage
	}
	// Run from bin/ (make bench), use the binaries next to this one rather
	// than building the tree again.
	if os.Getenv("TENURE_BIN_DIR") == "" {
		if self, err := os.Executable(); err == nil {
			dir := filepath.Dir(self)
			if fileExists(filepath.Join(dir, "tenure")) && fileExists(filepath.Join(dir, "tenure-agent")) {
				os.Setenv("TENURE_BIN_DIR", dir)
			}
		}
	}
	rep, err := bench.Run(ctx, bench.Options{
		Quick:     f.quick,
		Scale:     f.scale,
		SkipScale: f.skipScale,
		Scenarios: f.named,
		Agents:    agents,

		FullPoolDuration: f.fullPoolFor,
		PodStart:         podStart,
		BaselineBin:      f.baseline,
		Log:              e.stderr,
		Command:          "tenurectl bench " + strings.Join(e.args[1:], " "),
	})
	if rep != nil && f.out != "" {
		if werr := rep.WriteFiles(f.out); werr != nil {
			fmt.Fprintf(e.stderr, "tenurectl bench: writing %s: %v\n", f.out, werr)
		} else {
			fmt.Fprintf(e.stderr, "bench: results in %s (results.json, results.md and the plots)\n", f.out)
		}
	}
	if rep != nil {
		switch f.output {
		case "json":
			enc := json.NewEncoder(e.stdout)
			enc.SetIndent("", "  ")
			if jerr := enc.Encode(rep); jerr != nil {
				return jerr
			}
		default:
			if terr := rep.WriteTable(e.stdout); terr != nil {
				return terr
			}
		}
	}
	return err
}

func fileExists(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && !fi.IsDir()
}
