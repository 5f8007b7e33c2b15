//go:build !tenure_release

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

	"github.com/tenure-ipam/tenure/internal/dev/bench"
)

func init() {
	register(&command{
		name:    "bench",
		summary: "benchmark tenure on a local control plane (see docs/performance.md)",
		run:     benchCmd,
	})
}

// benchCmd runs the benchmark: its own kube-apiserver + etcd, agents posing
// as nodes, the controller when built, and the CNI shim executed as a
// runtime executes it.
func benchCmd(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "bench", "[--quick] [--scenario NAME]... [--agents 10,100,300,1000] [-o table|json] [--out DIR] [--scale N] [--skip-scale]")
	quick := fs.Bool("quick", false, "only 500 ADDs at concurrency 50 over 4 nodes, and their DEL (under two minutes)")
	output := fs.String("o", "table", "output format on stdout: table or json")
	out := fs.String("out", filepath.Join("out", "bench"), "directory for results.json, results.md and adds-latency.svg (\"\" for none)")
	scale := fs.Int("scale", 100000, "reservations in the scale scenario")
	skipScale := fs.Bool("skip-scale", false, "leave out the scale scenario")
	var named []string
	fs.Func("scenario", "run only this named scenario (repeatable, run in the order given): "+strings.Join(bench.ScenarioNames(), ", "), func(v string) error {
		named = append(named, v)
		return nil
	})
	agentsFlag := fs.String("agents", "10,100,300,1000", "the fanout scenario's agent counts (N), comma-separated")
	baseline := fs.String("baseline-bin", "", "with --quick: a directory with an older build's tenure and tenure-agent, run alternating with this build's and reported side by side")
	psPods := fs.Int("pod-start-pods", 30, "the pod-start scenario's pods per IPAM, in waves")
	psWave := fs.Int("pod-start-wave", 10, "the pod-start scenario's pods created at once in a wave")
	psStorm := fs.Int("pod-start-storm", 50, "the pod-start scenario's pods per IPAM created at once after the waves (-1: none)")
	fullPoolFor := fs.Duration("full-pool-duration", 60*time.Second, "how long the full-pool scenario's pods retry ADD")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *output != "table" && *output != "json" {
		fmt.Fprintf(e.stderr, "tenurectl bench: -o must be table or json, got %q\n", *output)
		fs.Usage()
		return errUsage
	}
	agents, aerr := bench.ParseAgents(*agentsFlag)
	if aerr != nil {
		fmt.Fprintf(e.stderr, "tenurectl bench: %v\n", aerr)
		return errUsage
	}
	for _, n := range named {
		if !slices.Contains(bench.ScenarioNames(), n) {
			fmt.Fprintf(e.stderr, "tenurectl bench: --scenario: no scenario %q (have: %s)\n", n, strings.Join(bench.ScenarioNames(), ", "))
			return errUsage
		}
	}
	if len(named) > 0 && *quick {
		fmt.Fprintf(e.stderr, "tenurectl bench: --quick and --scenario do not combine\n")
		return errUsage
	}
	if *baseline != "" && !*quick {
		fmt.Fprintf(e.stderr, "tenurectl bench: --baseline-bin %s needs --quick\n", *baseline)
		return errUsage
	}
	if *fullPoolFor <= 0 {
		fmt.Fprintf(e.stderr, "tenurectl bench: --full-pool-duration must be positive, got %v\n", *fullPoolFor)
		return errUsage
	}
	podStart := bench.PodStartOptions{Pods: *psPods, Wave: *psWave, Storm: *psStorm}
	if *psPods <= 0 || *psWave <= 0 {
		fmt.Fprintf(e.stderr, "tenurectl bench: --pod-start-pods and --pod-start-wave must be positive, got %d and %d\n", *psPods, *psWave)
		return errUsage
	}
	if perr := podStart.Validate(); perr != nil {
		fmt.Fprintf(e.stderr, "tenurectl bench: %v\n", perr)
		return errUsage
	}
	if *scale <= 0 {
		fmt.Fprintf(e.stderr, "tenurectl bench: --scale must be positive, got %d\n", *scale)
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
		Quick:     *quick,
		Scale:     *scale,
		SkipScale: *skipScale,
		Scenarios: named,
		Agents:    agents,

		FullPoolDuration: *fullPoolFor,
		PodStart:         podStart,
		BaselineBin:      *baseline,
		Log:              e.stderr,
		Command:          "tenurectl bench " + strings.Join(args, " "),
	})
	if rep != nil && *out != "" {
		if werr := rep.WriteFiles(*out); werr != nil {
			fmt.Fprintf(e.stderr, "tenurectl bench: writing %s: %v\n", *out, werr)
		} else {
			fmt.Fprintf(e.stderr, "bench: results in %s (results.json, results.md and the plots)\n", *out)
		}
	}
	if rep != nil {
		switch *output {
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
