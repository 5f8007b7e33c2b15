package bench

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestPairedRatioIsTheShimsMeanOverTheTwinsMean(t *testing.T) {
	r, s, w := pairedRatio([]cpuPair{{shim: 2, twin: 1}, {shim: 4, twin: 3}})
	if s != 3 || w != 2 || r != 1.5 {
		t.Fatalf("pairedRatio = %v, %v, %v; want 1.5, 3, 2", r, s, w)
	}
	if r, s, w := pairedRatio(nil); r != 0 || s != 0 || w != 0 {
		t.Fatalf("no pairs: %v, %v, %v; want zeros", r, s, w)
	}
	if r, _, _ := pairedRatio([]cpuPair{{shim: 2}}); r != 0 || math.IsInf(r, 0) {
		t.Fatalf("twins without CPU: ratio %v, want 0", r)
	}
}

func TestShimTargetIsReadAgainstTheWaitingTwin(t *testing.T) {
	sh := ShimFacts{Calls: 1000, CPUMsMean: 2.2, EmptyGoCPUMs: 1.5,
		PairedCalls: 200, PairedShimCPUMs: 2.4, PairedTwinCPUMs: 2.0, PairedRatio: 1.2}
	got, ok := shimVsEmptyGo(sh)
	if !ok || got.Status != "met" {
		t.Fatalf("paired 1.2× (alone 1.47×): %+v, want met", got)
	}
	for _, want := range []string{"1.20× (2.40 / 2.00 ms) against its waiting twin, 200 pairs", "1.47× (2.20 / 1.50 ms) against one exec'd alone"} {
		if !strings.Contains(got.Measured, want) {
			t.Errorf("measured %q lacks %q", got.Measured, want)
		}
	}
	sh.PairedRatio = 1.4
	if got, _ := shimVsEmptyGo(sh); got.Status == "met" {
		t.Errorf("paired 1.4×: %+v, want not met", got)
	}
	alone := ShimFacts{Calls: 1000, CPUMsMean: 1.9, EmptyGoCPUMs: 1.5}
	if got, ok := shimVsEmptyGo(alone); !ok || got.Status != "met" || strings.Contains(got.Measured, "twin") {
		t.Errorf("no twins, alone 1.27×: %+v, want met on the old figure", got)
	}
	if _, ok := shimVsEmptyGo(ShimFacts{}); ok {
		t.Error("no calls: a target, want none")
	}
}

// The twin waits until the bench closes its stdin, then exits.
func TestTwinWaitsUntilReleased(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a Go program")
	}
	bin, err := buildGoProgram("waitgo", waiterSource)
	if err != nil {
		t.Skip(err)
	}
	defer os.RemoveAll(filepath.Dir(bin))
	tw, err := startTwin(bin)
	if err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { tw.cmd.Process.Wait(); close(exited) }() //nolint:errcheck
	select {
	case <-exited:
		t.Fatal("the twin exited before its stdin closed")
	case <-time.After(300 * time.Millisecond):
	}
	tw.ours.Close()
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		t.Fatal("the twin did not exit once its stdin closed")
	}
}
