package bench

import (
	"maps"
	"os"
	"testing"
	"time"
)

func TestParseProcStatCPU(t *testing.T) {
	// The command name holds a space and a parenthesis.
	line := "1234 (tenure agent)) S 1 1234 1234 0 -1 4194560 500 0 0 0 150 50 0 0 20 0 12 0 100 1000000 2000 18446744073709551615"
	ms, err := parseProcStatCPU(line)
	if err != nil {
		t.Fatal(err)
	}
	if ms != 2000 { // (150+50) ticks at 100 Hz
		t.Fatalf("cpu %v ms, want 2000", ms)
	}
	if _, err := parseProcStatCPU("1234 no parens"); err == nil {
		t.Fatal("want an error")
	}
	self, err := procCPU(os.Getpid())
	if err != nil || self < 0 {
		t.Fatalf("own cpu %v %v", self, err)
	}
}

func TestParseMachineCPUAndPerOp(t *testing.T) {
	stat := "cpu  100 0 50 800 50 0 0 30 0 0\ncpu0 50 0 25 400 25 0 0 15 0 0\nintr 1\n"
	busy, total, steal, err := parseMachineCPU(stat)
	if err != nil || busy != 1500 || total != 10300 || steal != 300 {
		t.Fatalf("busy %v total %v steal %v err %v", busy, total, steal, err)
	}
	before := cpuSample{groups: map[string]float64{"agent": 100, "kube-apiserver": 1000}, busy: 0, total: 0}
	after := cpuSample{groups: map[string]float64{"agent": 300, "kube-apiserver": 1400}, busy: 2000, total: 4000}
	per, pct := cpuPerOp(before, after, 1000, 100)
	if per["shim"] != 10 || per["agent"] != 2 || per["kube-apiserver"] != 4 || per["other"] != 4 || pct != 50 {
		t.Fatalf("per op %v busy %v", per, pct)
	}
	after.steal = 200 // of the 4000 ms the machine's CPUs had
	if got := stolenPct(before, after); got != 5 {
		t.Fatalf("stolen %v %%, want 5", got)
	}
	if got := stolenPct(before, before); got != 0 {
		t.Fatalf("stolen %v %% over no time, want 0", got)
	}
}

func TestCPUByGroupCountsEachProcessOnceAndTheExitedInBusy(t *testing.T) {
	before := machineCPU{procs: map[int]procCPUUse{
		10: {"kube-apiserver", 1000},
		20: {"tenure-agent", 50},
		30: {"other", 7},
		40: {"containerd-shim", 5}, // exits in between
		50: {"kubelet", 300},       // its pid reused by another process
	}, busy: 10000, steal: 100}
	after := machineCPU{procs: map[int]procCPUUse{
		10: {"kube-apiserver", 1400},
		20: {"tenure-agent", 80},
		30: {"other", 9},
		50: {"containerd-shim", 4},  // new: counted whole
		60: {"containerd-shim", 11}, // new
	}, busy: 10600, steal: 125}
	got := cpuByGroup(before, after)
	want := map[string]float64{
		"kube-apiserver": 400, "tenure-agent": 30, "containerd-shim": 15,
		"exited or other": 600 - 445, "machine busy": 600, "steal": 25,
	}
	if !maps.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}

func TestSampleMachineCPUNamesThisProcess(t *testing.T) {
	s := sampleMachineCPU()
	p, ok := s.procs[os.Getpid()]
	if !ok {
		t.Fatalf("this process (%d) is not in the sample", os.Getpid())
	}
	if p.ms < 0 || s.busy <= 0 || s.total < s.busy {
		t.Errorf("this process %v ms, machine busy %v of %v ms", p.ms, s.busy, s.total)
	}
}

func TestProcGroupReadsNamesAsTheKernelCutsThem(t *testing.T) {
	for name, want := range map[string]string{
		"kube-apiserver-": "kube-apiserver", "etcd-v3.7.3": "etcd", "kubelet-v1.37.2": "kubelet",
		"kube-controller": "kube-controller-manager", "kube-scheduler-": "kube-scheduler",
		"containerd-shim": "containerd-shim", "containerd-v2.1": "containerd", "containerd": "containerd",
		"tenure-agent": "tenure-agent", "tenure-controll": "tenure-controller", "multus-daemon": "multus",
		"runc": "other", "kube": "other",
	} {
		if got := procGroup(name); got != want {
			t.Errorf("%q: got %q, want %q", name, got, want)
		}
	}
}

// settle waits window by window until one is quiet enough, and gives up
// at its deadline with the last window's share.
func TestSettleWaitsForAQuietWindowOrItsDeadline(t *testing.T) {
	shares := func(s ...float64) func() (float64, float64) {
		var busy, total float64
		i := 0
		return func() (float64, float64) {
			if i > 0 {
				busy += s[min(i-1, len(s)-1)] * 1000
				total += 1000
			}
			i++
			return busy, total
		}
	}
	waited, share, err := settle(t.Context(), shares(0.9, 0.6, 0.2, 0.9), time.Millisecond, 0.25, time.Minute)
	if err != nil || share != 0.2 || waited < 3*time.Millisecond {
		t.Fatalf("settle: waited %v, share %v, %v; want the third window's 0.2", waited, share, err)
	}
	_, share, err = settle(t.Context(), shares(0.9), time.Millisecond, 0.25, 5*time.Millisecond)
	if err != nil || share != 0.9 {
		t.Fatalf("settle past its deadline: share %v, %v; want the last window's 0.9", share, err)
	}
	_, share, err = settle(t.Context(), shares(0.7, 0.1), time.Millisecond, 0, 0)
	if err != nil || share != 0.7 {
		t.Fatalf("settle with no deadline: share %v, %v; want one window's 0.7", share, err)
	}
}
