package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/addrspace"
	"github.com/tenure-ipam/tenure/internal/allocator"
	"github.com/tenure-ipam/tenure/internal/kube"
	"github.com/tenure-ipam/tenure/internal/reservation"
	"github.com/tenure-ipam/tenure/internal/store"
)

func init() {
	registerScenario(Scenario{Name: "fanout", Summary: "N agents working in one network: what one ADD costs the API server as N grows",
		Run: (*env).fanoutScenario, Targets: fanoutTargets, Plots: fanoutPlots})
}

// The goals of the fan-out scenario.
const (
	targetFanoutCPURatio  = 5.0
	targetConflictsPerAdd = 0.05
)

// fanoutRows are the fanout rows whose ADDs ran, by ascending N.
func fanoutRows(rep *Report) []Result {
	var rows []Result
	for _, r := range rep.Scenarios {
		if _, ran := r.Figures["apiserver_cpu_ms_per_add"]; r.Scenario == "fanout" && ran {
			rows = append(rows, r)
		}
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].Figures["agents"] < rows[j].Figures["agents"] })
	return rows
}

func fanoutTargets(rep *Report) []Target {
	rows := fanoutRows(rep)
	if len(rows) == 0 {
		return []Target{{Name: "fanout", Want: "API server CPU per ADD at the largest N within 5× of the smallest; no failure; conflicts per ADD < 0.05", Measured: "not run", Status: "n/a"}}
	}
	lo, hi := rows[0].Figures, rows[len(rows)-1].Figures
	var ts []Target
	if len(rows) > 1 && lo["apiserver_cpu_ms_per_add"] > 0 {
		ratio := hi["apiserver_cpu_ms_per_add"] / lo["apiserver_cpu_ms_per_add"]
		ts = append(ts, Target{Name: fmt.Sprintf("fanout: API server CPU per ADD, N=%.0f vs N=%.0f", hi["agents"], lo["agents"]),
			Want: fmt.Sprintf("within %.0f×", targetFanoutCPURatio), Measured: fmt.Sprintf("%.2f× (%.2f vs %.2f ms)", ratio, hi["apiserver_cpu_ms_per_add"], lo["apiserver_cpu_ms_per_add"]),
			Status: status(ratio <= targetFanoutCPURatio)})
	}
	var failures, worst float64
	worstN := 0.0
	for _, r := range rows {
		failures += r.Figures["failures"]
		if c := r.Figures["conflicts_per_add"]; c >= worst {
			worst, worstN = c, r.Figures["agents"]
		}
	}
	for _, r := range rep.Scenarios {
		if _, ran := r.Figures["apiserver_cpu_ms_per_add"]; r.Scenario == "fanout" && !ran {
			ts = append(ts, Target{Name: fmt.Sprintf("fanout: N=%.0f", r.Figures["agents"]), Want: "measured", Measured: r.Notes, Status: "not met"})
		}
	}
	ts = append(ts,
		Target{Name: "fanout: ADD failures", Want: "0", Measured: fmt.Sprintf("%.0f over %d rounds", failures, len(rows)), Status: status(failures == 0)},
		Target{Name: "fanout: conflicts per ADD", Want: fmt.Sprintf("< %.2f at every N", targetConflictsPerAdd), Measured: fmt.Sprintf("at most %.3f (N=%.0f)", worst, worstN), Status: status(worst < targetConflictsPerAdd)},
	)
	return ts
}

func fanoutPlots(rep *Report) map[string]Plot {
	rows := fanoutRows(rep)
	if len(rows) == 0 {
		return nil
	}
	series := func(label, color, dash, key string) Series {
		s := Series{Label: label, Color: color, Dashed: dash}
		for _, r := range rows {
			s.Points = append(s.Points, Point{X: r.Figures["agents"], Y: r.Figures[key]})
		}
		return s
	}
	note := fmt.Sprintf("%s · %d CPUs · load %.1f→%.1f · %s", rep.Command, rep.Machine.NumCPU, rep.Machine.LoadAvgStart, rep.Machine.LoadAvgEnd, rep.Started.UTC().Format("2006-01-02 15:04 UTC"))
	cpu := Plot{
		Title:  fmt.Sprintf("API server CPU per ADD against agents in the network (%d reservations, %d ADDs c%d)", fanoutPresent, fanoutOps, fanoutConc),
		XLabel: "agent caches (N)", YLabel: "CPU ms per ADD",
		Series: []Series{series("kube-apiserver", "#1f77b4", "", "apiserver_cpu_ms_per_add"), series("etcd", "#2ca02c", "4 3", "etcd_cpu_ms_per_add")},
		Note:   note,
	}
	if base := rows[0].Figures["apiserver_cpu_ms_per_add"]; base > 0 && len(rows) > 1 {
		cpu.HLines = []HLine{{Y: targetFanoutCPURatio * base, Label: fmt.Sprintf("goal: %.0f× N=%.0f", targetFanoutCPURatio, rows[0].Figures["agents"])}}
	}
	lag := Plot{
		Title:  "Cache lag: a create until every agent cache watching its block holds it",
		XLabel: "agent caches (N)", YLabel: "ms",
		Series: []Series{series("lag p50", "#d62728", "", "cache_lag_p50_ms"), series("lag p99", "#d62728", "2 3", "cache_lag_p99_ms"),
			series("ADD p99", "#7f7f7f", "8 4", "add_p99_ms")},
		Note: note,
	}
	return map[string]Plot{"fanout-cpu.svg": cpu, "fanout-lag.svg": lag}
}

const (
	fanoutPresent = 2000 // reservations in the network before the ADDs
	fanoutOps     = 500
	fanoutConc    = 50
	fanoutNetwork = "bench-fanout"
	// fanoutStartConc caches sync at once at most.
	fanoutStartConc = 50
	fanoutSyncLimit = 20 * time.Minute
)

// DefaultFanoutAgents is fanout's N when --agents is not given.
var DefaultFanoutAgents = []int{10, 100, 300, 1000}

// fanAgent is one simulated node agent: the agent's own window cache
// (internal/store: the window of the blocks it allocates from, and the
// watch of its node's) and allocator, on a client and TCP connection of its
// own, as a tenure-agent process has. Many live in this process so that a thousand
// fit on one machine; the API server cannot tell them from real agents.
type fanAgent struct {
	node  string
	store *store.Store
	alloc allocator.Interface
	http  *http.Client
}

// fanTrack is what the caches reported of one created name.
type fanTrack struct {
	created atomic.Int64 // unix ns when the Create returned; 0 until then
	last    atomic.Int64 // unix ns of the latest cache to add it
	count   atomic.Int32 // caches that hold it
	seen    []atomic.Uint64
}

// fanTracker records, per name created during the ADDs, when each cache
// added it.
type fanTracker struct {
	n      int
	active atomic.Bool
	names  sync.Map // name -> *fanTrack
}

func (t *fanTracker) get(name string) *fanTrack {
	if v, ok := t.names.Load(name); ok {
		return v.(*fanTrack)
	}
	v, _ := t.names.LoadOrStore(name, &fanTrack{seen: make([]atomic.Uint64, (t.n+63)/64)})
	return v.(*fanTrack)
}

func (t *fanTracker) added(cache int, name string) {
	if !t.active.Load() {
		return
	}
	now := time.Now().UnixNano()
	tr := t.get(name)
	word, bit := cache/64, uint64(1)<<(cache%64)
	if tr.seen[word].Or(bit)&bit != 0 {
		return // a relist's second add of the same name
	}
	tr.count.Add(1)
	for {
		old := tr.last.Load()
		if now <= old || tr.last.CompareAndSwap(old, now) {
			break
		}
	}
}

// countingWriter counts the creates the API server refused as
// AlreadyExists (a stale cache offered a taken name) and tells the tracker
// when each create returned.
type countingWriter struct {
	client.WithWatch
	conflicts *atomic.Int64
	track     *fanTracker
}

func (w countingWriter) Create(ctx context.Context, obj client.Object, opts ...client.CreateOption) error {
	err := w.WithWatch.Create(ctx, obj, opts...)
	if apierrors.IsAlreadyExists(err) {
		w.conflicts.Add(1)
	}
	if err == nil {
		w.track.get(obj.GetName()).created.Store(time.Now().UnixNano())
	}
	return err
}

// newFanAgent builds one simulated agent. Its rest.Config gets a dialer of
// its own, which keeps client-go from sharing a cached transport (and so
// one HTTP/2 connection) among the agents.
//
// The agents share one RESTMapper: API discovery is each real agent's
// once at start, and a thousand of them at once here only measured this
// machine's TLS handshakes.
func (e *env) newFanAgent(i int, space addrspace.Space, mapper meta.RESTMapper, conflicts *atomic.Int64, track *fanTracker) (*fanAgent, error) {
	cfg := rest.CopyConfig(e.cp.Config)
	cfg.Dial = (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	cfg.QPS, cfg.Burst = 50, 100
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, err
	}
	c, err := client.NewWithWatch(cfg, client.Options{Scheme: kube.Scheme, HTTPClient: hc, Mapper: mapper})
	if err != nil {
		return nil, err
	}
	node := fmt.Sprintf("fan-%04d", i)
	s := store.New(c, node)
	s.OnClusterAdd(func(name string) { track.added(i, name) })
	f := &allocator.Factory{Store: s, Writer: countingWriter{WithWatch: c, conflicts: conflicts, track: track}, Live: c, Node: node}
	return &fanAgent{node: node, store: s, alloc: f.For(fanoutNetwork, space), http: hc}, nil
}

func (e *env) fanoutScenario(ctx context.Context, sc *ScenarioRun) ([]Result, error) {
	counts := sc.Opts.Agents
	if len(counts) == 0 {
		counts = DefaultFanoutAgents
	}
	v4, _ := sc.nets.next()
	prefix := netip.MustParsePrefix(v4)
	lo, hi := addrspace.UsableBounds(prefix)
	space := addrspace.AddressSpace{Range: addrspace.Range{Prefix: prefix, Start: lo, End: hi}}
	if err := e.fanoutFill(ctx, space); err != nil {
		return nil, err
	}
	var out []Result
	for _, n := range counts {
		r, err := e.fanoutRound(ctx, n, space)
		out = append(out, r)
		if err != nil {
			return out, err
		}
	}
	return out, nil
}

// fanoutFill creates the reservations present before the ADDs, at random
// addresses of the range, owned by filler pods.
func (e *env) fanoutFill(ctx context.Context, space addrspace.AddressSpace) error {
	owners, err := e.ensureOwners(ctx, fanoutPresent)
	if err != nil {
		return err
	}
	rng := rand.New(rand.NewPCG(2000, 500))
	picked := map[uint64]bool{}
	objs := make([]*tenurev1alpha1.IPReservation, 0, fanoutPresent)
	for len(objs) < fanoutPresent {
		off := rng.Uint64N(space.Size())
		if picked[off] {
			continue
		}
		picked[off] = true
		objs = append(objs, directReservation(fanoutNetwork, space.String(), space.Range.At(off), owners[len(objs)/e.perOwner], "net1"))
	}
	e.logf("fanout: creating %d reservations in %s", len(objs), space)
	_, _, err = e.createAll(ctx, objs, 32, 0)
	return err
}

// fanoutRound starts n caches, times their sync, runs the ADDs spread over
// them and waits until every cache holds every new reservation.
func (e *env) fanoutRound(ctx context.Context, n int, space addrspace.AddressSpace) (Result, error) {
	r := Result{ID: fmt.Sprintf("fanout-n%d", n), Name: fmt.Sprintf("fanout: %d agent caches, ADD ×%d c%d", n, fanoutOps, fanoutConc),
		Command: "ADD", Nodes: n, Concurrency: fanoutConc}
	var conflicts atomic.Int64
	track := &fanTracker{n: n}
	agents := make([]*fanAgent, n)
	hc, err := rest.HTTPClientFor(e.cp.Config)
	if err != nil {
		return r, err
	}
	mapper, err := apiutil.NewDynamicRESTMapper(e.cp.Config, hc)
	if err != nil {
		return r, err
	}
	for i := range agents {
		a, err := e.newFanAgent(i, space, mapper, &conflicts, track)
		if err != nil {
			return r, err
		}
		agents[i] = a
	}
	actx, stop := context.WithCancel(ctx)
	defer func() {
		stop()
		for _, a := range agents {
			a.http.CloseIdleConnections()
		}
	}()
	e.quiesce(ctx, 5*time.Second)
	rssBefore := e.apiserverRSS()
	// Caches start fanoutStartConc at a time, as a DaemonSet rolls out, and
	// the next starts as one syncs: sync_s is from the first start to the
	// last synced.
	begin := time.Now()
	started := 0
	syncedCount := func() int {
		k := 0
		for _, a := range agents[:started] {
			if a.store.HasSynced() {
				k++
			}
		}
		return k
	}
	for {
		k := syncedCount()
		for started < n && started-k < fanoutStartConc {
			go agents[started].store.Run(actx)
			started++
		}
		if k == n {
			break
		}
		if time.Since(begin) > fanoutSyncLimit || ctx.Err() != nil {
			// Where the measurement stops: reported, not an error, so the
			// rounds before it keep their figures.
			r.Notes = fmt.Sprintf("%d of %d caches synced after %v: stopped here", k, n, time.Since(begin).Round(time.Second))
			r.Figures = map[string]float64{"agents": float64(n), "caches_synced": float64(k), "sync_s": -1, "loadavg1": loadAvg()}
			e.logf("fanout: %s", r.Notes)
			return r, nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	r.SyncS = round3(time.Since(begin).Seconds())
	e.logf("fanout: %d caches synced in %.2f s", n, r.SyncS)
	// Every agent works in the network before the measured ADDs, as every
	// node of a cluster has pods on it: one ADD each, so that each has the
	// window of the block it allocates from and receives that block's
	// events, as it would in the life of a cluster.
	warm, err := e.fanoutWarmUp(ctx, agents)
	if err != nil {
		return r, err
	}
	e.quiesce(ctx, 10*time.Second)

	before, err := e.snapshot(ctx)
	if err != nil {
		return r, err
	}
	rebuildsBefore := windowRebuilds(agents)
	cpuBefore := e.sampleCPU()
	track.active.Store(true)
	lat := make([]time.Duration, fanoutOps)
	var failures atomic.Int64
	var errMu sync.Mutex
	var errs []string
	var created sync.Map
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(fanoutConc)
	addBegin := time.Now()
	for i := range fanoutOps {
		a := agents[i%n]
		g.Go(func() error {
			uid := fmt.Sprintf("fanout-%d-%d", n, i)
			t := allocator.Template{CNINetwork: fanoutNetwork, Owner: tenurev1alpha1.ReservationOwner{Kind: tenurev1alpha1.OwnerPod, Namespace: benchNamespace,
				Name: uid, UID: uid, PodName: uid, PodUID: uid, ContainerID: uid, Interface: "net1", Node: a.node}}
			start := time.Now()
			res, err := a.alloc.AllocateNext(gctx, t)
			lat[i] = time.Since(start)
			if err != nil {
				failures.Add(1)
				errMu.Lock()
				if len(errs) < 5 {
					errs = append(errs, err.Error())
				}
				errMu.Unlock()
				return nil
			}
			created.Store(res.Name, a.node)
			return nil
		})
	}
	_ = g.Wait()
	addWall := time.Since(addBegin)
	// The fan-out is done when every cache that watches a created name's
	// block holds it: the window of each agent is what it needs to know.
	// The creating agent's window leaves its own reservation out (its
	// node cache holds it), so it is no watcher of it.
	var names []string
	creator := map[string]string{}
	created.Range(func(k, v any) bool {
		names = append(names, k.(string))
		creator[k.(string)] = v.(string)
		return true
	})
	watchers := make(map[string]int, len(names))
	var watchersSum int
	for _, name := range names {
		block, _ := reservation.BlockOfName(name)
		for _, a := range agents {
			if a.node != creator[name] && a.store.Watching(block, reservation.ScopeLabelOf(name)) {
				watchers[name]++
			}
		}
		watchersSum += watchers[name]
	}
	waitBegin := time.Now()
	for {
		missing := 0
		for _, name := range names {
			if int(track.get(name).count.Load()) < watchers[name] {
				missing++
			}
		}
		if missing == 0 {
			break
		}
		if time.Since(waitBegin) > 10*time.Minute {
			return r, fmt.Errorf("fanout: %d of %d reservations not in every cache watching their block after %v", missing, len(names), time.Since(waitBegin).Round(time.Second))
		}
		time.Sleep(10 * time.Millisecond)
	}
	cpuAfter := e.sampleCPU()
	rebuilds := windowRebuilds(agents) - rebuildsBefore
	fanWall := time.Since(addBegin)
	e.quiesce(ctx, 5*time.Second)
	after, err := e.snapshot(ctx)
	if err != nil {
		return r, err
	}
	rssAfter := e.apiserverRSS()

	var lags []time.Duration
	for _, name := range names {
		tr := track.get(name)
		if c := tr.created.Load(); c > 0 {
			lags = append(lags, max(0, time.Duration(tr.last.Load()-c)))
		}
	}
	sort.Slice(lags, func(i, j int) bool { return lags[i] < lags[j] })
	lagSt, st := Summarize(lags), Summarize(lat)
	r.Ops, r.WallS, r.OpsPerS = fanoutOps, addWall.Seconds(), float64(fanoutOps)/addWall.Seconds()
	r.P50Ms, r.P90Ms, r.P99Ms, r.MeanMs, r.MaxMs = round3(st.P50), round3(st.P90), round3(st.P99), round3(st.Mean), round3(st.Max)
	r.Failures, r.Errors = int(failures.Load()), errs
	r.CPUMsPerOp, r.MachineBusyPct = cpuPerOp(cpuBefore, cpuAfter, 0, fanoutOps)
	delete(r.CPUMsPerOp, "shim")
	r.finish(Cost(after.Sub(before)), 1)
	r.RSSMiB = round3(rssAfter)
	cpuAPI := r.CPUMsPerOp["kube-apiserver"]
	r.Figures = map[string]float64{
		"agents":                   float64(n),
		"apiserver_cpu_ms_per_add": cpuAPI,
		"etcd_cpu_ms_per_add":      r.CPUMsPerOp["etcd"],
		"caches_cpu_ms_per_add":    r.CPUMsPerOp["bench"],
		"cache_lag_p50_ms":         round3(lagSt.P50),
		"cache_lag_p99_ms":         round3(lagSt.P99),
		"conflicts_per_add":        round3(float64(conflicts.Load()) / fanoutOps),
		"add_p50_ms":               r.P50Ms,
		"add_p99_ms":               r.P99Ms,
		"failures":                 float64(r.Failures),
		"sync_s":                   r.SyncS,
		"apiserver_rss_mib":        round3(rssAfter),
		"apiserver_rss_before_mib": round3(rssBefore),
		"fanout_wall_s":            round3(fanWall.Seconds()),
		"watchers_per_add":         round3(float64(watchersSum) / float64(max(1, len(names)))),
		"window_rebuilds":          float64(rebuilds),
		"loadavg1":                 loadAvg(),
	}
	r.Notes = fmt.Sprintf("reservations present %d (+%d, one per agent); sync of all %d caches %.2f s; caches watching each new reservation %.2f; windows rebuilt %d; cache lag p50 %.1f p99 %.1f ms; conflicts %d; API server CPU %.2f ms/ADD, RSS %.0f→%.0f MiB; caches (this process) %.2f ms CPU/ADD; machine %.0f %% busy",
		fanoutPresent, len(warm), n, r.SyncS, r.Figures["watchers_per_add"], rebuilds, lagSt.P50, lagSt.P99, conflicts.Load(), cpuAPI, rssBefore, rssAfter, r.CPUMsPerOp["bench"], r.MachineBusyPct)
	e.logf("%s: %s", r.Name, r.Notes)
	for _, msg := range r.Errors {
		e.logf("  error: %s", msg)
	}
	// Back to the reservations present before, for the next N.
	if _, err := e.deleteAll(ctx, append(names, warm...), 32); err != nil {
		return r, err
	}
	return r, nil
}

func windowRebuilds(agents []*fanAgent) (n int64) {
	for _, a := range agents {
		n += a.store.Rebuilds()
	}
	return n
}

// fanoutWarmUp has every agent allocate once, fanoutConc at a time, and
// returns the names created.
func (e *env) fanoutWarmUp(ctx context.Context, agents []*fanAgent) ([]string, error) {
	names := make([]string, len(agents))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(fanoutConc)
	for i, a := range agents {
		g.Go(func() error {
			uid := fmt.Sprintf("fanout-warm-%d-%d", len(agents), i)
			res, err := a.alloc.AllocateNext(gctx, allocator.Template{CNINetwork: fanoutNetwork, Owner: tenurev1alpha1.ReservationOwner{Kind: tenurev1alpha1.OwnerPod,
				Namespace: benchNamespace, Name: uid, UID: uid, PodName: uid, PodUID: uid, ContainerID: uid, Interface: "net1", Node: a.node}})
			if err != nil {
				return fmt.Errorf("fanout: warm-up ADD on %s: %w", a.node, err)
			}
			names[i] = res.Name
			return nil
		})
	}
	err := g.Wait()
	return names, err
}

// apiserverRSS is the kube-apiserver's resident memory in MiB (0 if unknown).
func (e *env) apiserverRSS() float64 {
	if pids := e.cp.Pids(); len(pids) == 2 {
		if rss, _, err := readRSS(pids[1]); err == nil {
			return rss
		}
	}
	return 0
}
