package bench

import (
	"context"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestPodStartOptionsRefuseWhatCannotRunNamingTheField(t *testing.T) {
	for _, tc := range []struct {
		o    PodStartOptions
		want string
	}{
		{PodStartOptions{Pods: -1}, "pod-start pods: -1"},
		{PodStartOptions{Wave: -2}, "pod-start wave: -2"},
		{PodStartOptions{Storm: -3}, "pod-start storm: -3"},
		{PodStartOptions{Storm: 500}, "storm 500"},
		{PodStartOptions{Nodes: 4}, "pod-start nodes: 4"},
		{PodStartOptions{Nodes: -1}, "pod-start nodes: -1"},
		{PodStartOptions{Sets: -1}, "pod-start sets: -1"},
		{PodStartOptions{Sets: 21}, "pod-start sets: 21"},
	} {
		err := tc.o.withDefaults().Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: got %v, want an error naming %q", tc.o, err, tc.want)
		}
	}
	if err := (PodStartOptions{Pods: 3, Wave: 3, Storm: -1}).withDefaults().Validate(); err != nil {
		t.Errorf("3 pods, waves of 3, no storm: %v", err)
	}
	if err := (PodStartOptions{Nodes: 3}).withDefaults().Validate(); err != nil {
		t.Errorf("3 nodes: %v", err)
	}
}

func TestPodStartRowsRatioTenureToEachOtherIPAM(t *testing.T) {
	samples := map[string]*podSample{
		"waves/host-local":  {ready: []float64{100, 200}, netStatus: []float64{50}, addWall: []float64{10}, addCPU: []float64{4}},
		"waves/tenure":      {ready: []float64{150, 300}, netStatus: []float64{100}, addWall: []float64{20}, addCPU: []float64{2}, notReady: 1},
		"waves/whereabouts": {ready: []float64{300, 600}, netStatus: []float64{200}, addWall: []float64{40}, addCPU: []float64{40}},
	}
	rows := podStartRows(samples)
	byID := map[string]Result{}
	for _, r := range rows {
		byID[r.ID] = r
	}
	tn := byID["pod-start-waves-tenure"]
	if tn.Figures["pods"] != 3 || tn.Figures["not_ready"] != 1 || tn.Figures["ready_p50_ms"] != 150 || tn.Figures["ready_p99_ms"] != 300 {
		t.Errorf("tenure row: %v", tn.Figures)
	}
	h := byID["pod-start-waves-tenure/host-local"].Figures
	if h["ready_p50_ms"] != 1.5 || h["netstatus_p50_ms"] != 2 || h["ipam_add_p50_ms"] != 2 || h["ipam_add_cpu_ms_mean"] != 0.5 {
		t.Errorf("tenure / host-local: %v", h)
	}
	w := byID["pod-start-waves-tenure/whereabouts"].Figures
	if w["ready_p50_ms"] != 0.5 || w["ipam_add_cpu_ms_mean"] != 0.05 {
		t.Errorf("tenure / whereabouts: %v", w)
	}
	if _, ok := byID["pod-start-storm-tenure/host-local"]; ok {
		t.Error("a storm ratio without a storm")
	}
	rep := &Report{Scenarios: rows}
	for i := range rep.Scenarios {
		rep.Scenarios[i].Scenario = "pod-start"
	}
	got := map[string]string{}
	for _, tg := range podStartTargets(rep) {
		got[tg.Name] = tg.Status
	}
	if got["pod start (to Ready) p50, waves, tenure / host-local"] != "not met" || got["pod start p99, storm, tenure / host-local"] != "n/a" ||
		got["pod start, waves, tenure: every pod Ready"] != "not met" {
		t.Errorf("targets: %v", got)
	}
}

func TestPodStartRatioCarriesTheSpreadOfItsBatches(t *testing.T) {
	// Two batches per IPAM: tenure's p50s 100 and 140 (mean 120, standard
	// deviation 28.28, CV 0.2357), host-local's steady at 100; the pooled
	// p50s 120 and 100.
	samples := map[string]*podSample{
		"waves/host-local": {ready: []float64{100, 100}, batchReadyP50: []float64{100, 100}},
		"waves/tenure":     {ready: []float64{120}, batchReadyP50: []float64{100, 140}},
		"storm/host-local": {ready: []float64{100}, batchReadyP50: []float64{100}},
		"storm/tenure":     {ready: []float64{100}, batchReadyP50: []float64{100}},
	}
	byID := map[string]Result{}
	for _, r := range podStartRows(samples) {
		byID[r.ID] = r
	}
	tn := byID["pod-start-waves-tenure"].Figures
	if tn["batches"] != 2 || tn["ready_p50_batch_cv"] != 0.236 {
		t.Errorf("tenure's waves: batches %v, CV %v; want 2 and 0.236", tn["batches"], tn["ready_p50_batch_cv"])
	}
	// ratio 1.2 (120 / 100) × √(0.2357² / 2 + 0)
	if se := byID["pod-start-waves-tenure/host-local"].Figures["ready_p50_ms_stderr"]; se != 0.2 {
		t.Errorf("the ratio's standard error: %v, want 0.2", se)
	}
	if _, ok := byID["pod-start-storm-tenure/host-local"].Figures["ready_p50_ms_stderr"]; ok {
		t.Error("a standard error from one batch per IPAM")
	}
	rep := &Report{Scenarios: []Result{byID["pod-start-waves-tenure/host-local"]}}
	measured := map[string]string{}
	for _, tg := range podStartTargets(rep) {
		measured[tg.Name] = tg.Measured
	}
	if m := measured["pod start (to Ready) p50, waves, tenure / host-local"]; m != "1.20× (± 0.20 from batch to batch)" {
		t.Errorf("the waves' p50 target measured %q", m)
	}
}

func TestBatchRunAgainOnlyWhenTheHypervisorTookTheMachineAndNothingFailed(t *testing.T) {
	for _, tc := range []struct {
		name    string
		b       podSample
		stolen  float64
		attempt int
		want    bool
	}{
		{"quiet", podSample{}, 0.01, 0, false},
		{"at the limit", podSample{}, stolenLimit, 0, false},
		{"stolen", podSample{}, 0.12, 0, true},
		{"stolen, third rerun", podSample{}, 0.12, rerunsPerBatch - 1, true},
		{"stolen, reruns spent", podSample{}, 0.12, rerunsPerBatch, false},
		{"stolen, a pod not Ready", podSample{notReady: 1}, 0.3, 0, false},
		{"stolen, an ADD failed", podSample{addFailures: 1}, 0.3, 0, false},
	} {
		if got := runAgain(&tc.b, tc.stolen, tc.attempt); got != tc.want {
			t.Errorf("%s: run again %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestPodSamplePoolsBatches(t *testing.T) {
	post := RequestKey{Verb: "POST", Resource: "pods", Code: "201"}
	s := &podSample{cpu: map[string]float64{}, api: RequestCounts{}, reruns: 1}
	s.add(&podSample{ready: []float64{1, 2}, batchReadyP50: []float64{1}, notReady: 1, cpu: map[string]float64{"kubelet": 5}, api: RequestCounts{post: 2}})
	s.add(&podSample{ready: []float64{3}, batchReadyP50: []float64{3}, addFailures: 2, cpu: map[string]float64{"kubelet": 7}, api: RequestCounts{post: 1}})
	if len(s.ready) != 3 || len(s.batchReadyP50) != 2 || s.notReady != 1 || s.addFailures != 2 || s.cpu["kubelet"] != 12 || s.api[post] != 3 || s.reruns != 1 {
		t.Errorf("pooled: %+v", s)
	}
}

func TestSideBySideMeansPerBinaryAndTheirRatio(t *testing.T) {
	row := func(bin string, opsPerS, shim float64) Result {
		return Result{Command: "ADD", Binary: bin, OpsPerS: opsPerS, CPUMsPerOp: map[string]float64{"shim": shim}}
	}
	out := sideBySide([]Result{row(binaryBaseline, 100, 2), row(binaryNew, 120, 1), row(binaryNew, 80, 1.5), row(binaryBaseline, 60, 3)},
		map[string]float64{binaryBaseline: 10, binaryNew: 12}, map[string]string{binaryBaseline: "old", binaryNew: "new"})
	byID := map[string]map[string]float64{}
	for _, r := range out {
		byID[r.ID] = r.Figures
	}
	if b := byID["add-c50-n4-baseline-mean"]; b["ops_per_s"] != 80 || b["shim_cpu_ms"] != 2.5 || b["rounds"] != 2 || b["shim_binary_bytes"] != 10 {
		t.Errorf("baseline mean: %v", b)
	}
	if r := byID["add-c50-n4-new/baseline"]; r["ops_per_s"] != 1.25 || r["shim_cpu_ms"] != 0.5 || r["shim_binary_bytes"] != 1.2 {
		t.Errorf("new / baseline: %v", r)
	}
	if _, ok := byID["del-c50-n4-new/baseline"]; ok {
		t.Error("a DEL ratio without DEL rows")
	}
}

func TestAwaitHostProbesUntilTheHypervisorGivesTheMachineBack(t *testing.T) {
	probes := func(shares ...float64) (func(time.Duration) float64, *int) {
		n := new(int)
		return func(time.Duration) float64 {
			s := shares[min(*n, len(shares)-1)]
			*n++
			return s
		}, n
	}
	ctx := context.Background()
	p, n := probes(0.01)
	if waited, stolen, err := awaitHost(ctx, p, 0, time.Millisecond, time.Minute); err != nil || waited != 0 || stolen != 0.01 || *n != 1 {
		t.Errorf("a quiet host: waited %v, stolen %v, %d probes, %v; want no wait after one probe", waited, stolen, *n, err)
	}
	p, n = probes(0.2, 0.1, 0.01)
	if waited, stolen, err := awaitHost(ctx, p, 0, time.Millisecond, time.Minute); err != nil || waited <= 0 || stolen != 0.01 || *n != 3 {
		t.Errorf("a burst of steal: waited %v, stolen %v, %d probes, %v; want three probes, the last quiet", waited, stolen, *n, err)
	}
	p, _ = probes(0.5)
	if waited, stolen, err := awaitHost(ctx, p, 0, time.Millisecond, 20*time.Millisecond); err != nil || waited < 20*time.Millisecond || stolen != 0.5 {
		t.Errorf("steal past the deadline: waited %v, stolen %v, %v; want the deadline's wait and the last share", waited, stolen, err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	p, _ = probes(0.5)
	if _, _, err := awaitHost(cctx, p, 0, time.Hour, time.Hour); err == nil {
		t.Error("a cancelled context: no error")
	}
}

// TestProbeStealKeepsTheMachineBusy: steal shows only on a busy vCPU, so
// the probe spins over its whole window rather than waiting it out: this
// process's own CPU time over the probe is a large part of its wall time.
// Other load on the host can take CPUs from the probe but cannot add to
// this process's CPU time, so the test fails for a probe that does not
// spin however busy the host is. The stolen share is of the same readings,
// so it lies in [0, 1].
func TestProbeStealKeepsTheMachineBusy(t *testing.T) {
	const window = 300 * time.Millisecond
	cpu0, start := ownCPU(t), time.Now()
	s := probeSteal(window)
	cpu1, wall := ownCPU(t), time.Since(start)
	if s < 0 || s > 1 {
		t.Errorf("stolen share %v, want within [0, 1]", s)
	}
	if wall < window {
		t.Errorf("the probe returned after %v, before its window of %v", wall, window)
	}
	// A spinning goroutine per CPU holds at least one CPU for most of the
	// window on an idle machine and a fair part of one under heavy load;
	// a probe that sleeps uses next to none.
	if used := cpu1 - cpu0; used < wall/4 {
		t.Errorf("the probe used %v of CPU over %v of wall time, want at least a quarter of it: it did not spin", used, wall)
	}
}

// ownCPU is this process's user and system CPU time so far.
func ownCPU(t *testing.T) time.Duration {
	t.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatalf("getrusage: %v", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func TestPodStartIPAMsTheBeforeBuildOnlyWithABaseline(t *testing.T) {
	if got := podStartIPAMsFor(PodStartOptions{}); strings.Join(got, ",") != "host-local,tenure,tenure-probe-off,whereabouts" {
		t.Errorf("without a baseline: %v", got)
	}
	if got := podStartIPAMsFor(PodStartOptions{BaselineBin: "/old/bin"}); strings.Join(got, ",") != "host-local,tenure,tenure-probe-off,whereabouts,tenure-before" {
		t.Errorf("with a baseline: %v", got)
	}
}

func TestPodStartBaselineBinWithoutTheOldBinariesIsRefusedNamingIt(t *testing.T) {
	dir := t.TempDir()
	err := PodStartOptions{BaselineBin: dir}.withDefaults().Validate()
	if err == nil || !strings.Contains(err.Error(), "--baseline-bin "+dir+": no tenure") {
		t.Errorf("an empty directory: %v, want an error naming --baseline-bin and the directory", err)
	}
}

// TestPodStartRowsProbeOffAndBeforeAgainstHostLocalAndTenure: the
// probe-off and before IPAMs get their rows and their ratios to host-local,
// tenure its ratios to each of them with the ADD time it adds in ms, and
// the targets record them without judging them.
func TestPodStartRowsProbeOffAndBeforeAgainstHostLocalAndTenure(t *testing.T) {
	samples := map[string]*podSample{
		"waves/host-local":       {ready: []float64{100, 200}, netStatus: []float64{50}, addWall: []float64{2, 4}},
		"waves/tenure":           {ready: []float64{110, 220}, netStatus: []float64{55}, addWall: []float64{12, 40}},
		"waves/tenure-probe-off": {ready: []float64{105, 210}, netStatus: []float64{50}, addWall: []float64{10, 30}},
		"waves/tenure-before":    {ready: []float64{100, 250}, netStatus: []float64{60}, addWall: []float64{8, 20}},
		"storm/host-local":       {ready: []float64{400}, addWall: []float64{5}},
		"storm/tenure":           {ready: []float64{500}, addWall: []float64{25}},
		"storm/tenure-probe-off": {ready: []float64{440}, addWall: []float64{20}},
	}
	rows := podStartRows(samples)
	byID := map[string]Result{}
	var order []string
	for _, r := range rows {
		byID[r.ID] = r
		order = append(order, r.ID)
	}
	if r := byID["pod-start-waves-tenure-probe-off"]; r.Name != "pod start, waves, tenure, probe off" || r.Figures["ipam_add_p50_ms"] != 10 {
		t.Errorf("probe-off row: %q %v", r.Name, r.Figures)
	}
	if r := byID["pod-start-waves-tenure-before"]; r.Name != "pod start, waves, tenure before" || r.Figures["ready_p99_ms"] != 250 {
		t.Errorf("before row: %q %v", r.Name, r.Figures)
	}
	// The per-IPAM rows come in podStartIPAMs' order, waves then storm.
	if want := "pod-start-waves-host-local,pod-start-waves-tenure,pod-start-waves-tenure-probe-off,pod-start-waves-tenure-before,pod-start-storm-host-local,pod-start-storm-tenure,pod-start-storm-tenure-probe-off"; strings.Join(order[:7], ",") != want {
		t.Errorf("row order %v, want %s first", order, want)
	}
	if f := byID["pod-start-waves-tenure-probe-off/host-local"].Figures; f["ready_p50_ms"] != 1.05 || f["ipam_add_p50_ms"] != 5 {
		t.Errorf("probe off / host-local: %v", f)
	}
	if f := byID["pod-start-waves-tenure-before/host-local"].Figures; f["ready_p99_ms"] != 1.25 || f["netstatus_p99_ms"] != 1.2 {
		t.Errorf("before / host-local: %v", f)
	}
	p := byID["pod-start-waves-tenure/tenure-probe-off"]
	if p.Name != "pod start, waves, tenure / tenure, probe off (ratios)" || p.Figures["ipam_add_p50_ms_added"] != 2 || p.Figures["ipam_add_p99_ms_added"] != 10 ||
		p.Figures["ready_p50_ms_added"] != 5 || p.Figures["ipam_add_p50_ms"] != 1.2 {
		t.Errorf("tenure / probe off: %q %v", p.Name, p.Figures)
	}
	if f := byID["pod-start-waves-tenure/tenure-before"].Figures; f["ipam_add_p50_ms_added"] != 4 || f["ready_p99_ms_added"] != -30 {
		t.Errorf("tenure / before: %v", f)
	}
	if _, ok := byID["pod-start-waves-tenure/host-local"].Figures["ipam_add_p50_ms_added"]; ok {
		t.Error("a difference in ms against host-local, another IPAM")
	}
	if _, ok := byID["pod-start-storm-tenure/tenure-before"]; ok {
		t.Error("a storm ratio to the before build, which had no storm")
	}
	rep := &Report{Scenarios: rows}
	got := map[string]Target{}
	for _, tg := range podStartTargets(rep) {
		got[tg.Name] = tg
	}
	for name, want := range map[string]string{
		"pod start (to Ready) p50, waves, tenure, probe off / host-local": "1.05×",
		"pod start p99, waves, tenure before / host-local":                "1.25×",
		"pod start p99, storm, tenure, probe off / host-local":            "1.10×",
		"IPAM ADD time added by probing, waves, p50 / p99":                "+2.0 / +10.0 ms",
		"IPAM ADD time added by probing, storm, p50 / p99":                "+5.0 / +5.0 ms",
		"IPAM ADD time added since tenure before, waves, p50 / p99":       "+4.0 / +20.0 ms",
	} {
		if tg, ok := got[name]; !ok || tg.Measured != want || tg.Status != "measured" {
			t.Errorf("target %q: %+v, want measured %s", name, tg, want)
		}
	}
	if _, ok := got["IPAM ADD time added since tenure before, storm, p50 / p99"]; ok {
		t.Error("a before storm target without a before storm")
	}
	// The existing targets stay tenure's against host-local.
	if tg := got["pod start (to Ready) p50, waves, tenure / host-local"]; tg.Measured != "1.10×" || tg.Status != "not met" {
		t.Errorf("tenure's waves p50 target: %+v", tg)
	}
	// An IPAM none of whose pods got Ready has no ratios, so no target of
	// its reads as met.
	samples["waves/tenure"] = &podSample{notReady: 2, addWall: []float64{3, 4}, addFailures: 2}
	rows = podStartRows(samples)
	rep = &Report{Scenarios: rows}
	for i := range rep.Scenarios {
		rep.Scenarios[i].Scenario = "pod-start"
	}
	for _, r := range rows {
		if r.ID == "pod-start-waves-tenure/host-local" || r.ID == "pod-start-waves-tenure/tenure-probe-off" {
			if _, ok := r.Figures["ready_p50_ms"]; ok {
				t.Errorf("%s: a Ready ratio with no pod Ready: %v", r.ID, r.Figures)
			}
			if _, ok := r.Figures["ready_p50_ms_added"]; ok {
				t.Errorf("%s: a Ready difference with no pod Ready: %v", r.ID, r.Figures)
			}
		}
	}
	got = map[string]Target{}
	for _, tg := range podStartTargets(rep) {
		got[tg.Name] = tg
	}
	if tg := got["pod start (to Ready) p50, waves, tenure / host-local"]; tg.Status != "n/a" {
		t.Errorf("tenure's waves p50 target with no tenure pod Ready: %+v", tg)
	}
	if tg := got["pod start, waves, tenure: every pod Ready"]; tg.Status != "not met" || tg.Measured != "2 not Ready" {
		t.Errorf("every pod Ready: %+v", tg)
	}
}

// A straggler took at least half as long again as the batch's p50 and
// 2 s more; the slowest comes first.
func TestStragglers(t *testing.T) {
	for _, tc := range []struct {
		name  string
		ready map[string]float64
		p50   float64
		want  []string
	}{
		{"a storm's two late pods", map[string]float64{"a": 9000, "b": 9300, "c": 19900, "d": 18500}, 10332, []string{"c", "d"}},
		{"1.5 times p50 but not 2 s more", map[string]float64{"a": 500, "b": 1200}, 500, nil},
		{"2 s more but not 1.5 times p50", map[string]float64{"a": 9000, "b": 11500}, 9000, nil},
		{"none Ready", map[string]float64{}, 0, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := stragglers(tc.ready, tc.p50); !slices.Equal(got, tc.want) {
				t.Errorf("stragglers = %v, want %v", got, tc.want)
			}
		})
	}
}
