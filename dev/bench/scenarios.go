package bench

import (
	"context"
	"debug/elf"
	"fmt"
	"io"
	"math/rand/v2"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	ipamclaimsv1alpha1 "github.com/tenure-ipam/tenure/api/ipamclaims/v1alpha1"
	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/addrspace"
	"github.com/tenure-ipam/tenure/internal/config"
	"github.com/tenure-ipam/tenure/test/controlplane"
	"github.com/tenure-ipam/tenure/test/testbed"
)

// Operations per scenario of the default grid.
const (
	gridOps   = 500
	seqOps    = 200
	usageOps  = 40
	dualOps   = 100
	claimOps  = 100
	claimConc = 10
	warmupOps = 10
)

var (
	gridConcurrency = []int{10, 25, 50}
	gridNodes       = []int{1, 4}
	usagePercents   = []int{0, 50, 90, 99}
	agentNodes      = []string{"bench-n1", "bench-n2", "bench-n3", "bench-n4"}
)

func gridID(cmd string, conc, nodes int) string { return fmt.Sprintf("%s-c%d-n%d", cmd, conc, nodes) }

// Options configure Run.
type Options struct {
	// Quick runs only 500 ADDs at concurrency 50 over 4 nodes and their DEL.
	Quick bool
	// Scale is the number of reservations of the scale scenario.
	Scale int
	// SkipScale leaves the scale scenario out.
	SkipScale bool
	// Log receives progress lines; nil discards them.
	Log io.Writer
	// Command is recorded in the report (how the run was started).
	Command string
	// Scenarios, when set, runs only these named scenarios (registry.go),
	// in this order, instead of the grid.
	Scenarios []string
	// Agents is fanout's N, one row per count.
	Agents []int
	// FullPoolDuration is how long full-pool's pods retry.
	FullPoolDuration time.Duration
	// FullPoolBits is full-pool's IPv4 prefix length (16 when 0; tests
	// use a smaller pool).
	FullPoolBits int
	// WebhookOps is the webhook scenario's ADDs of each kind per phase
	// (100 when 0; tests use fewer).
	WebhookOps int
	// BaselineBin, with Quick, names a directory with an older build's
	// tenure and tenure-agent: the quick scenario runs with both, the
	// baseline's and this tree's alternating, reported side by side.
	BaselineBin string
	// PodStart sizes the pod-start scenario.
	PodStart PodStartOptions
}

// Run starts a control plane, agents and (when built) the controller,
// runs the scenarios and returns the report. Binaries come from
// testbed.Build: $TENURE_BIN_DIR when set, else built from the source tree.
func Run(ctx context.Context, opts Options) (*Report, error) {
	if opts.Log == nil {
		opts.Log = io.Discard
	}
	if opts.Scale <= 0 {
		opts.Scale = 100000
	}
	if err := checkScenarios(opts.Scenarios); err != nil {
		return nil, err
	}
	if err := checkNodeMix(opts.Scenarios); err != nil {
		return nil, err
	}
	bins, err := testbed.Build("")
	if err != nil {
		return nil, err
	}
	rep := &Report{Command: opts.Command, Mode: "full", Started: time.Now(), Machine: machineInfo()}
	if opts.Quick {
		rep.Mode = "quick"
	}
	if needsNode(opts.Scenarios) {
		return runOnNode(ctx, opts, bins, rep)
	}
	e, err := startEnv(ctx, opts.Log, bins, controlplane.Options{})
	if err != nil {
		return nil, err
	}
	defer e.close()
	if cs, err := kubernetes.NewForConfig(e.cp.Config); err == nil {
		if v, err := cs.Discovery().ServerVersion(); err == nil {
			rep.APIServer = "kube-apiserver " + v.GitVersion
		}
	}

	if len(opts.Scenarios) > 0 {
		rep.Mode = "scenarios " + strings.Join(opts.Scenarios, ",")
		err := e.runNamed(ctx, opts, rep)
		e.cpuMu.Lock()
		shimCalls := len(e.shimCPU)
		e.cpuMu.Unlock()
		if shimCalls > 0 {
			rep.Shim = e.shimFacts()
		}
		rep.Machine.LoadAvgEnd = loadAvg()
		rep.DurationS = round3(time.Since(rep.Started).Seconds())
		rep.Targets = namedTargets(opts.Scenarios, rep)
		rep.plots = namedPlots(opts.Scenarios, rep)
		return rep, err
	}

	if err := e.startBenchAgents(ctx, "ready"); err != nil {
		return nil, err
	}
	e.startController(ctx)
	rep.Controller = e.controllerState
	nets := &netAlloc{}

	if err := e.warmup(ctx, nets); err != nil {
		return nil, fmt.Errorf("warm-up: %w", err)
	}
	add := func(rs ...Result) { rep.Scenarios = append(rep.Scenarios, rs...) }

	if opts.Quick && opts.BaselineBin != "" {
		rs, err := e.quickWithBaseline(ctx, nets, opts.BaselineBin)
		add(rs...)
		if err != nil {
			return rep, err
		}
	} else if opts.Quick {
		rs, err := e.gridScenario(ctx, nets, 50, 4)
		if err != nil {
			return nil, err
		}
		add(rs...)
	} else {
		steps := []func() ([]Result, error){
			func() ([]Result, error) { return e.sequentialScenario(ctx, nets) },
		}
		for _, nodes := range gridNodes {
			for _, c := range gridConcurrency {
				steps = append(steps, func() ([]Result, error) { return e.gridScenario(ctx, nets, c, nodes) })
			}
		}
		steps = append(steps,
			func() ([]Result, error) { return e.dualStackScenario(ctx, nets) },
			func() ([]Result, error) { return e.claimScenario(ctx, nets) },
			func() ([]Result, error) { return e.usageScenario(ctx, nets) },
		)
		if !opts.SkipScale {
			steps = append(steps, func() ([]Result, error) { return e.scaleScenario(ctx, opts.Scale, rep) })
		}
		for _, step := range steps {
			rs, err := step()
			add(rs...)
			if err != nil {
				return rep, err
			}
		}
	}

	rep.Shim = e.shimFacts()
	rep.Machine.LoadAvgEnd = loadAvg()
	rep.DurationS = round3(time.Since(rep.Started).Seconds())
	flagBusyAPIServer(rep.Scenarios)
	rep.Targets = evaluate(rep)
	rep.Observations = observe(rep)
	return rep, nil
}

// netAlloc hands each scenario its own network and ranges.
type netAlloc struct{ n int }

func (a *netAlloc) next() (v4 string, v6 string) {
	a.n++
	return fmt.Sprintf("10.%d.0.0/16", 15+a.n), fmt.Sprintf("fd00:%x::/64", 0x100+a.n)
}

// warmup runs a few ADDs and DELs on every agent, unmeasured, so the
// first scenario does not pay for cold connections and page cache.
func (e *env) warmup(ctx context.Context, nets *netAlloc) error {
	v4, _ := nets.next()
	pods, err := e.createPods(ctx, "warm", agentNodes, warmupOps*len(agentNodes), nil)
	if err != nil {
		return err
	}
	confs := e.confs("bench-warmup", fmt.Sprintf(`{"range":%q,"network_name":"bench-warmup"}`, v4))
	e.quiesce(ctx, 5*time.Second)
	for _, cmd := range []string{"ADD", "DEL"} {
		rr := e.run(ctx, calls(pods, cmd, confs, 1), 4, false)
		if rr.failures > 0 {
			return fmt.Errorf("%d of %d warm-up %ss failed: %s", rr.failures, len(pods), cmd, strings.Join(rr.errs, "; "))
		}
	}
	e.cpuMu.Lock()
	e.shimCPU, e.shimMinflt, e.shimPairs = nil, 0, nil // the run's figures start after the warm-up
	e.cpuMu.Unlock()
	return e.deletePods(ctx, pods)
}

// confs is one network configuration per node (each names its agent's
// socket).
func (e *env) confs(name, ipam string) map[string][]byte {
	out := map[string][]byte{}
	for n, a := range e.agents {
		out[n] = netconf(name, a.Socket, ipam)
	}
	return out
}

func calls(pods []benchPod, cmd string, confs map[string][]byte, wantIPs int) []call {
	out := make([]call, len(pods))
	for i, p := range pods {
		out[i] = call{pod: p, command: cmd, conf: confs[p.node], wantIPs: wantIPs}
	}
	return out
}

// spec describes one measured batch of calls.
type spec struct {
	id, name, command string
	nodes, conc       int
	calls             []call
	perOp             float64 // reservations one call holds
	checkDuplicates   bool
	notes             string
}

// measure runs one batch between two metric snapshots, then the raw
// create rate at the same size and concurrency.
func (e *env) measure(ctx context.Context, s spec) (Result, error) {
	e.settle(ctx, 3*time.Minute)
	before, err := e.snapshot(ctx)
	if err != nil {
		return Result{}, err
	}
	cpuBefore := e.sampleCPU()
	rr := e.run(ctx, s.calls, s.conc, s.checkDuplicates)
	cpuAfter := e.sampleCPU()
	// Trailing work the calls caused (controller reactions, events) is
	// theirs; wait for it before the second snapshot.
	e.quiesce(ctx, 5*time.Second)
	after, err := e.snapshot(ctx)
	if err != nil {
		return Result{}, err
	}
	cost := Cost(after.Sub(before))
	st := Summarize(rr.lat)
	r := Result{
		ID: s.id, Name: s.name, Command: s.command, Nodes: s.nodes, Concurrency: s.conc,
		Ops: len(s.calls), WallS: rr.wall.Seconds(), OpsPerS: float64(len(s.calls)) / rr.wall.Seconds(),
		P50Ms: round3(st.P50), P90Ms: round3(st.P90), P99Ms: round3(st.P99), MeanMs: round3(st.Mean), MaxMs: round3(st.Max),
		Failures: rr.failures, Duplicates: rr.dups, Errors: rr.errs, Notes: s.notes, shimCPU: rr.cpu,
	}
	var shimMs float64
	for _, v := range rr.cpu {
		shimMs += v
	}
	r.CPUMsPerOp, r.MachineBusyPct = cpuPerOp(cpuBefore, cpuAfter, shimMs, len(s.calls))
	r.MachineStolenPct = stolenPct(cpuBefore, cpuAfter)
	if other := r.CPUMsPerOp["other"]; other >= 2 {
		// Other users of the machine took CPU during the calls: the wall
		// times of this row are pessimistic; per-op API figures are not.
		if r.Notes != "" {
			r.Notes += "; "
		}
		r.Notes += fmt.Sprintf("busy machine: others used %.0f ms CPU per call", other)
	}
	raw, rawStats, rawDel, rcpu, err := e.rawCreate(ctx, len(s.calls), s.conc)
	if err != nil {
		return r, fmt.Errorf("raw create rate after %s: %w", s.name, err)
	}
	r.RawCreatePerS, r.RawCreateP50, r.RawDeletePerS = raw, round3(rawStats.P50), round3(rawDel)
	r.RawClientCPUMs, r.RawAPICPUMs = round3(rcpu.clientMs), round3(rcpu.apiMs)
	r.finish(cost, s.perOp)
	_, events := splitWatchEvents(cost.ByVerbResource)
	e.logf("%-34s %4d ops %7.1f/s  p50 %6.1f  p99 %6.1f ms  fail %d  req/op %.2f  writes/op %.2f  raw %.0f/s (%.0f %%)  [%s]  watch events/op [%s]",
		r.Name, r.Ops, r.OpsPerS, r.P50Ms, r.P99Ms, r.Failures, r.APIRequestsPerOp, r.APIWritesPerOp, r.RawCreatePerS, 100*r.Ratio,
		FormatBreakdown(nonWatch(cost.ByVerbResource), float64(r.Ops)), FormatBreakdown(events, float64(r.Ops)))
	for _, msg := range r.Errors {
		e.logf("  error: %s", msg)
	}
	return r, nil
}

func nonWatch(m map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for k, v := range m {
		if verb, _, _ := strings.Cut(k, " "); !IsWatch(verb) {
			out[k] = v
		}
	}
	return out
}

// addDel measures ADD of one address for n fresh pods spread over nodes,
// then the DEL of the same attachments.
func (e *env) addDel(ctx context.Context, nets *netAlloc, id, label string, nodes []string, n, conc int) ([]Result, error) {
	v4, _ := nets.next()
	network := "bench-" + id
	pods, err := e.createPods(ctx, id, nodes, n, nil)
	if err != nil {
		return nil, err
	}
	confs := e.confs(network, fmt.Sprintf(`{"range":%q,"network_name":%q}`, v4, network))
	var out []Result
	for _, cmd := range []string{"ADD", "DEL"} {
		wantIPs := 1
		if cmd == "DEL" {
			wantIPs = 0
		}
		r, err := e.measure(ctx, spec{
			id: strings.ToLower(cmd) + "-" + id, name: cmd + " " + label, command: cmd,
			nodes: len(nodes), conc: conc, calls: calls(pods, cmd, confs, wantIPs), perOp: 1, checkDuplicates: cmd == "ADD",
		})
		if err != nil {
			return out, err
		}
		out = append(out, r)
	}
	return out, e.deletePods(ctx, pods)
}

func (e *env) sequentialScenario(ctx context.Context, nets *netAlloc) ([]Result, error) {
	return e.addDel(ctx, nets, "seq", fmt.Sprintf("×%d sequential, 1 node", seqOps), agentNodes[:1], seqOps, 1)
}

func (e *env) gridScenario(ctx context.Context, nets *netAlloc, conc, nodes int) ([]Result, error) {
	id := fmt.Sprintf("c%d-n%d", conc, nodes)
	return e.addDel(ctx, nets, id, fmt.Sprintf("×%d c%d, %d node%s", gridOps, conc, nodes, plural(nodes)), agentNodes[:nodes], gridOps, conc)
}

func (e *env) dualStackScenario(ctx context.Context, nets *netAlloc) ([]Result, error) {
	v4, v6 := nets.next()
	const network = "bench-dual"
	pods, err := e.createPods(ctx, "dual", agentNodes[:1], dualOps, nil)
	if err != nil {
		return nil, err
	}
	confs := e.confs(network, fmt.Sprintf(`{"ipRanges":[{"range":%q},{"range":%q}],"network_name":%q}`, v4, v6, network))
	var out []Result
	for _, cmd := range []string{"ADD", "DEL"} {
		want := 2
		if cmd == "DEL" {
			want = 0
		}
		r, err := e.measure(ctx, spec{
			id: strings.ToLower(cmd) + "-dualstack", name: fmt.Sprintf("%s dual-stack ×%d sequential", cmd, dualOps), command: cmd,
			nodes: 1, conc: 1, calls: calls(pods, cmd, confs, want), perOp: 2, checkDuplicates: cmd == "ADD",
		})
		if err != nil {
			return out, err
		}
		out = append(out, r)
	}
	return out, e.deletePods(ctx, pods)
}

// claimScenario: claim-bound ADDs (IPv4 + IPv6 + a delegated /56, owned by
// the claim) on one node, then the migration targets of the same claims on
// another node while the sources still run.
func (e *env) claimScenario(ctx context.Context, nets *netAlloc) ([]Result, error) {
	v4, v6 := nets.next()
	const network = "bench-claims"
	ipam := fmt.Sprintf(`{"ipRanges":[{"range":%q},{"range":%q}],"prefix_delegation":{"range":"fd00:3100::/40","prefix_length":56},"network_name":%q}`, v4, v6, network)
	confs := e.confs(network, ipam)
	names := make([]string, claimOps)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(16)
	for i := range names {
		names[i] = fmt.Sprintf("vm%d.%s", i, network)
		g.Go(func() error {
			return e.c.Create(gctx, &ipamclaimsv1alpha1.IPAMClaim{
				ObjectMeta: metav1.ObjectMeta{Namespace: benchNamespace, Name: names[i]},
				Spec:       ipamclaimsv1alpha1.IPAMClaimSpec{Network: network, Interface: "net1"},
			})
		})
	}
	if err := g.Wait(); err != nil {
		return nil, fmt.Errorf("creating claims: %w", err)
	}
	ann := func(i int) map[string]string {
		return map[string]string{"k8s.v1.cni.cncf.io/networks": fmt.Sprintf(`[{"name":%q,"interface":"net1","ipam-claim-reference":%q}]`, network, names[i])}
	}
	src, err := e.createPods(ctx, "vm-src", agentNodes[:1], claimOps, ann)
	if err != nil {
		return nil, err
	}
	r1, err := e.measure(ctx, spec{
		id: "add-claim", name: fmt.Sprintf("ADD claim-bound v4+v6+/56 ×%d c%d", claimOps, claimConc), command: "ADD",
		nodes: 1, conc: claimConc, calls: calls(src, "ADD", confs, 2), perOp: 3, checkDuplicates: true,
		notes: "3 reservations + claim status per ADD",
	})
	if err != nil {
		return []Result{r1}, err
	}
	// The source's addresses, from the claims' status, are what each
	// migration target must get.
	want := make([]string, claimOps)
	for i, n := range names {
		cl := &ipamclaimsv1alpha1.IPAMClaim{}
		if err := e.c.Get(ctx, clientKey(benchNamespace, n), cl); err != nil {
			return []Result{r1}, err
		}
		var addrs []string
		for _, ip := range cl.Status.IPs {
			if p, err := netip.ParsePrefix(ip); err == nil {
				addrs = append(addrs, p.Addr().String())
			}
		}
		want[i] = strings.Join(addrs, ",")
	}
	dst, err := e.createPods(ctx, "vm-dst", agentNodes[1:2], claimOps, ann)
	if err != nil {
		return []Result{r1}, err
	}
	mcalls := calls(dst, "ADD", confs, 2)
	for i := range mcalls {
		mcalls[i].wantAddrs = want[i]
	}
	r2, err := e.measure(ctx, spec{
		id: "add-migration", name: fmt.Sprintf("ADD migration target ×%d c%d", claimOps, claimConc), command: "ADD",
		nodes: 1, conc: claimConc, calls: mcalls, perOp: 3, checkDuplicates: true,
		notes: "same claim on another node, source running",
	})
	out := []Result{r1, r2}
	if err != nil {
		return out, err
	}
	return out, e.deletePods(ctx, append(src, dst...))
}

// usageScenario: ADDs into a /20 that is 0, 50, 90 and 99 % reserved
// already (random addresses, reservations created through the API and
// owned by pods that exist).
func (e *env) usageScenario(ctx context.Context, nets *netAlloc) ([]Result, error) {
	type pool struct {
		pct     int
		network string
		conf    string
		fill    int
		free    uint64
	}
	var pools []pool
	var objs []*tenurev1alpha1.IPReservation
	rng := rand.New(rand.NewPCG(42, 20))
	for _, pct := range usagePercents {
		v4, _ := nets.next()
		r20 := strings.Replace(v4, "/16", "/20", 1)
		network := fmt.Sprintf("bench-usage-%d", pct)
		ipam := fmt.Sprintf(`{"range":%q,"network_name":%q}`, r20, network)
		cfg, err := config.Parse(netconf(network, "/run/x.sock", ipam), nil)
		if err != nil {
			return nil, err
		}
		space := addrspace.AddressSpace{Range: cfg.Ranges[0]}
		var cands []netip.Addr
		for i, p, ok := space.Next(0); ok; i, p, ok = space.Next(i + 1) {
			cands = append(cands, p.Addr())
		}
		fill := len(cands) * pct / 100
		owners, err := e.ensureOwners(ctx, fill)
		if err != nil {
			return nil, err
		}
		rng.Shuffle(len(cands), func(i, j int) { cands[i], cands[j] = cands[j], cands[i] })
		for i, a := range cands[:fill] {
			objs = append(objs, directReservation(network, space.String(), a, owners[i/e.perOwner], "net1"))
		}
		pools = append(pools, pool{pct: pct, network: network, conf: ipam, fill: fill, free: uint64(len(cands) - fill)})
	}
	e.logf("pre-filling 4 /20 pools with %d reservations", len(objs))
	if _, _, err := e.createAll(ctx, objs, 32, 0); err != nil {
		return nil, err
	}
	// The agents (and the controller) learn of the fill through their
	// watches; measure() settles until they have worked it off.

	var out []Result
	for _, p := range pools {
		pods, err := e.createPods(ctx, fmt.Sprintf("use%d", p.pct), agentNodes[:1], usageOps, nil)
		if err != nil {
			return out, err
		}
		r, err := e.measure(ctx, spec{
			id: fmt.Sprintf("add-usage-%d", p.pct), name: fmt.Sprintf("ADD ×%d seq, /20 %d %% used", usageOps, p.pct), command: "ADD",
			nodes: 1, conc: 1, calls: calls(pods, "ADD", e.confs(p.network, p.conf), 1), perOp: 1, checkDuplicates: true,
			notes: fmt.Sprintf("%d reserved, %d free before", p.fill, p.free),
		})
		out = append(out, r)
		if err != nil {
			return out, err
		}
		if rr := e.run(ctx, calls(pods, "DEL", e.confs(p.network, p.conf), 0), 8, false); rr.failures > 0 {
			e.logf("cleanup DELs: %d failed: %s", rr.failures, strings.Join(rr.errs, "; "))
		}
		if err := e.deletePods(ctx, pods); err != nil {
			return out, err
		}
	}
	if base := findIn(out, "add-usage-0"); base != nil && base.P50Ms > 0 {
		for i := range out {
			out[i].P50VsEmpty = round3(out[i].P50Ms / base.P50Ms)
			if out[i].ID != "add-usage-0" {
				out[i].Notes += fmt.Sprintf("; p50 %.2f× of 0 %%", out[i].P50VsEmpty)
			}
		}
	}
	return out, nil
}

func findIn(rs []Result, id string) *Result {
	for i := range rs {
		if rs[i].ID == id {
			return &rs[i]
		}
	}
	return nil
}

func (e *env) shimFacts() ShimFacts {
	f := ShimFacts{Binary: e.bins.Shim}
	if fi, err := os.Stat(e.bins.Shim); err == nil {
		f.BinaryBytes = fi.Size()
	}
	if ef, err := elf.Open(e.bins.Shim); err == nil {
		f.Stripped = ef.Section(".symtab") == nil
		ef.Close()
	}
	e.cpuMu.Lock()
	s := SummarizeMs(e.shimCPU)
	faults := e.shimMinflt
	e.cpuMu.Unlock()
	f.Calls, f.CPUMsMean, f.CPUMsP50, f.CPUMsP99 = s.N, round3(s.Mean), round3(s.P50), round3(s.P99)
	if s.N > 0 {
		f.MinorFaultsPerCall = round3(float64(faults) / float64(s.N))
	}
	cpu, flt := execCPU("/bin/true", 50)
	f.TrueCPUMs, f.TrueMinorFaults = round3(cpu), round3(flt)
	if bin, err := buildEmptyGo(); err == nil {
		cpu, flt := execCPU(bin, 50)
		f.EmptyGoCPUMs, f.EmptyGoMinorFaults = round3(cpu), round3(flt)
		os.RemoveAll(filepath.Dir(bin))
	} else {
		e.logf("no empty-Go exec floor: %v", err)
	}
	e.cpuMu.Lock()
	r, shimMs, twinMs := pairedRatio(e.shimPairs)
	f.PairedCalls = len(e.shimPairs)
	e.cpuMu.Unlock()
	f.PairedRatio, f.PairedShimCPUMs, f.PairedTwinCPUMs = round3(r), round3(shimMs), round3(twinMs)
	if e.waiter != "" {
		os.RemoveAll(filepath.Dir(e.waiter))
	}
	return f
}

// buildEmptyGo builds `func main() {}` as make build builds the shim
// (static, -trimpath, -s -w) and returns the binary's path.
func buildEmptyGo() (string, error) {
	return buildGoProgram("emptygo", "package main\n\nfunc main() {}\n")
}

// execCPU is the mean CPU (user+system, from the child's rusage) in ms
// and minor page faults of executing bin n times, one after another.
func execCPU(bin string, n int) (cpuMs, minflt float64) {
	var total time.Duration
	var faults int64
	ok := 0
	for range n {
		cmd := exec.Command(bin)
		if cmd.Run() != nil || cmd.ProcessState == nil {
			continue
		}
		total += cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
		if ru, isRU := cmd.ProcessState.SysUsage().(*syscall.Rusage); isRU {
			faults += ru.Minflt
		}
		ok++
	}
	if ok == 0 {
		return 0, 0
	}
	return float64(total) / float64(ok) / float64(time.Millisecond), float64(faults) / float64(ok)
}

func machineInfo() Machine {
	m := Machine{NumCPU: runtime.NumCPU(), GoVersion: runtime.Version(), LoadAvgStart: loadAvg()}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(line); len(f) >= 2 && f[0] == "MemTotal:" {
				kb, _ := strconv.Atoi(f[1])
				m.MemTotalMiB = kb / 1024
			}
		}
	}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	return m
}

func loadAvg() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}
