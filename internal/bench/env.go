package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"golang.org/x/sync/errgroup"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tenurev1 "github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/deploy"
	"github.com/tenure-ipam/tenure/internal/controlplane"
	"github.com/tenure-ipam/tenure/internal/kube"
	"github.com/tenure-ipam/tenure/internal/reservation"
	"github.com/tenure-ipam/tenure/internal/testbed"
)

const (
	benchNamespace = "bench"
	// fillerNode carries the pods that own reservations made directly
	// through the API (pool pre-fill, the 100k cluster, raw creates). No
	// agent serves it, so no agent's pod cache holds them; it is Ready, so
	// the controller keeps what they own.
	fillerNode = "bench-filler"
	rawNetwork = "bench-raw"
)

// env is one run's cluster: control plane, agents, controller.
type env struct {
	log  io.Writer
	cp   *controlplane.ControlPlane
	c    client.WithWatch
	bins testbed.Binaries
	dir  string // sockets and process logs

	agents map[string]*testbed.Agent

	controller        *testbed.Process
	controllerState   string
	controllerMetrics string // its /metrics URL while running

	rawOwner benchPod
	rawSeq   atomic.Uint64

	// perOwner reservations made directly through the API share one owner
	// pod (and one containerID, so the controller's EarlierSandbox rule
	// never applies among them).
	perOwner int
	ownersMu sync.Mutex
	owners   []benchPod

	podSeq atomic.Int64

	cpuMu      sync.Mutex
	shimCPU    []float64 // every shim call of the run, ms
	shimMinflt int64     // their minor page faults, summed
}

func (e *env) logf(format string, args ...any) {
	fmt.Fprintf(e.log, "bench: "+format+"\n", args...)
}

// startEnv starts the control plane, installs the CRDs and creates what
// every scenario shares.
func startEnv(ctx context.Context, log io.Writer, bins testbed.Binaries) (*env, error) {
	e := &env{log: log, bins: bins, agents: map[string]*testbed.Agent{}, perOwner: 1}
	dir, err := os.MkdirTemp("", "tbench-")
	if err != nil {
		return nil, err
	}
	e.dir = dir
	begin := time.Now()
	cp, err := controlplane.Start(ctx, controlplane.Options{})
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	e.cp = cp
	crds, err := fs.Sub(deploy.CRDs, "crds")
	if err == nil {
		err = controlplane.InstallCRDs(ctx, cp.Config, crds)
	}
	if err != nil {
		e.close()
		return nil, fmt.Errorf("installing CRDs: %w", err)
	}
	if e.c, err = kube.NewClient(cp.Config); err != nil {
		e.close()
		return nil, err
	}
	if err := testbed.EnsureNamespace(ctx, e.c, benchNamespace); err != nil {
		e.close()
		return nil, err
	}
	if _, err := testbed.CreateNode(ctx, e.c, fillerNode); err != nil {
		e.close()
		return nil, err
	}
	owner, err := e.createPods(ctx, "raw-owner", []string{fillerNode}, 1, nil)
	if err != nil {
		e.close()
		return nil, err
	}
	e.rawOwner = owner[0]
	// The first custom object after a CRD is established waits ~2 s on
	// the server; pay that here, not in a scenario.
	if _, _, _, err := e.rawCreate(ctx, 1, 1); err != nil {
		e.close()
		return nil, fmt.Errorf("first reservation create: %w", err)
	}
	e.logf("control plane at %s ready with CRDs in %v (work dir %s)", cp.URL, time.Since(begin).Round(time.Millisecond), dir)
	return e, nil
}

func (e *env) close() {
	for _, a := range e.agents {
		a.Stop()
	}
	e.stopController()
	if e.cp != nil {
		if err := e.cp.Stop(); err != nil {
			e.logf("stopping the control plane: %v", err)
		}
	}
	if e.dir != "" {
		os.RemoveAll(e.dir)
	}
}

// startAgent creates the node and starts its agent; it returns the time
// from process start to ready (every cache synced).
func (e *env) startAgent(ctx context.Context, node string) (*testbed.Agent, time.Duration, error) {
	if _, err := testbed.CreateNode(ctx, e.c, node); err != nil {
		return nil, 0, err
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	begin := time.Now()
	a, err := testbed.StartAgent(ctx, e.bins, e.dir, e.cp.KubeconfigPath, node)
	if err != nil {
		return nil, 0, err
	}
	took := time.Since(begin)
	e.agents[node] = a
	return a, took, nil
}

func (e *env) stopAgent(node string) {
	if a := e.agents[node]; a != nil {
		a.Stop()
		delete(e.agents, node)
	}
}

// startController runs tenure-controller as one process when it is built,
// and waits for its /readyz.
func (e *env) startController(ctx context.Context) {
	if e.bins.Controller == "" {
		e.controllerState = "not built (no tenure-controller binary): scenarios ran without it"
		return
	}
	ports := make([]int, 2)
	for i := range ports {
		p, err := freePort()
		if err != nil {
			e.controllerState = "not started: " + err.Error()
			return
		}
		ports[i] = p
	}
	// The periodic sweep is a backstop; at its default interval it could
	// land inside a scenario's window and be billed to it. A full sweep is
	// measured on its own (--once) in the scale scenario.
	p, err := testbed.StartProcess("controller", e.bins.Controller, filepath.Join(e.dir, "controller.log"),
		"--kubeconfig", e.cp.KubeconfigPath, "--leader-elect=false", "--sweep-interval", "1h",
		"--metrics-addr", "127.0.0.1:"+strconv.Itoa(ports[0]), "--health-addr", "127.0.0.1:"+strconv.Itoa(ports[1]))
	if err != nil {
		e.controllerState = "not started: " + err.Error()
		return
	}
	ready := "http://127.0.0.1:" + strconv.Itoa(ports[1]) + "/readyz"
	deadline := time.Now().Add(2 * time.Minute)
	for {
		if !p.Running() {
			e.controllerState = "exited at start: " + lastLines(p.Log, 3)
			e.logf("tenure-controller exited at start; continuing without it: %s", lastLines(p.Log, 3))
			return
		}
		if httpOK(ctx, ready) {
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			p.Stop()
			e.controllerState = "not ready within 2 minutes: " + lastLines(p.Log, 3)
			e.logf("tenure-controller not ready; continuing without it")
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	e.controller = p
	e.controllerState = "running (--leader-elect=false --sweep-interval 1h)"
	// The controller sweeps once at start; that sweep must not land in a
	// scenario's window.
	metrics := "http://127.0.0.1:" + strconv.Itoa(ports[0]) + "/metrics"
	for ctx.Err() == nil && time.Now().Before(deadline.Add(5*time.Minute)) {
		if n, ok := sweepsDone(ctx, metrics); ok && n >= 1 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	e.controllerMetrics = metrics
	e.quiesce(ctx, 15*time.Second)
}

// sweepsDone reads tenure_sweep_duration_seconds_count from the
// controller's metrics; false when it cannot be read.
func sweepsDone(ctx context.Context, url string) (float64, bool) {
	text, ok := httpGet(ctx, url)
	if !ok {
		return 0, false
	}
	return metricValue(text, "tenure_sweep_duration_seconds_count")
}

// metricValue returns the value of an unlabelled series in a Prometheus
// text exposition.
func metricValue(text, name string) (float64, bool) {
	for _, line := range strings.Split(text, "\n") {
		if rest, found := strings.CutPrefix(line, name+" "); found {
			v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			return v, err == nil
		}
	}
	return 0, false
}

func httpGet(ctx context.Context, url string) (string, bool) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", false
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", false
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err == nil && resp.StatusCode == http.StatusOK
}

func httpOK(ctx context.Context, url string) bool {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return false
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

func (e *env) stopController() {
	if e.controller != nil {
		e.controller.Stop()
		e.controller = nil
		e.controllerMetrics = ""
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func lastLines(path string, n int) string {
	b, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

// snapshot reads apiserver_request_total.
func (e *env) snapshot(ctx context.Context) (RequestCounts, error) {
	text, err := e.cp.MetricsText(ctx)
	if err != nil {
		return nil, err
	}
	return ParseRequestCounts(text)
}

// quiesce waits until the API server has been (nearly) idle for one
// sample interval: at most 2 non-watch resource requests in 300 ms, so
// pods just created have reached the agents' caches and the previous
// step's trailing work (controller reactions, events) is over.
func (e *env) quiesce(ctx context.Context, max time.Duration) {
	deadline := time.Now().Add(max)
	prev, err := e.snapshot(ctx)
	if err != nil {
		return
	}
	for time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return
		case <-time.After(300 * time.Millisecond):
		}
		cur, err := e.snapshot(ctx)
		if err != nil {
			return
		}
		if Cost(cur.Sub(prev)).Requests <= 2 {
			return
		}
		prev = cur
	}
}

// settle waits until the API server is quiet (quiesce) and every process
// of the cluster (agents, controller, kube-apiserver, etcd) has worked off
// its backlog: under 60 ms of CPU between them in 500 ms (12 % of one
// core; an idle API server uses a few %). It gives up after max.
func (e *env) settle(ctx context.Context, max time.Duration) {
	deadline := time.Now().Add(max)
	e.quiesce(ctx, max)
	ours := func() float64 {
		s := e.sampleCPU()
		return s.groups["agent"] + s.groups["controller"] + s.groups["kube-apiserver"] + s.groups["etcd"]
	}
	prev := ours()
	for time.Now().Before(deadline) && ctx.Err() == nil {
		time.Sleep(500 * time.Millisecond)
		cur := ours()
		if cur-prev < 60 {
			return
		}
		prev = cur
	}
	e.logf("the cluster's processes are still busy after %v; measuring anyway", max)
}

// benchPod is a pod bound to a node, as the kubelet sees it before ADD.
type benchPod struct {
	ns, name, uid, node, containerID string
}

func (p benchPod) args() string { return testbed.PodArgs(p.ns, p.name, p.uid) }

// createPods creates n pods spread round-robin over nodes.
func (e *env) createPods(ctx context.Context, prefix string, nodes []string, n int, annotations func(i int) map[string]string) ([]benchPod, error) {
	out := make([]benchPod, n)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(48)
	for i := range n {
		g.Go(func() error {
			seq := e.podSeq.Add(1)
			name := fmt.Sprintf("%s-%d", prefix, seq)
			var ann map[string]string
			if annotations != nil {
				ann = annotations(i)
			}
			node := nodes[i%len(nodes)]
			p, err := testbed.CreatePod(gctx, e.c, benchNamespace, name, node, ann)
			if err != nil {
				return fmt.Errorf("creating pod %s: %w", name, err)
			}
			out[i] = benchPod{ns: benchNamespace, name: name, uid: string(p.UID), node: node, containerID: fmt.Sprintf("sandbox-%d-%s", seq, p.UID)}
			return nil
		})
	}
	return out, g.Wait()
}

// deletePods force-deletes pods (there is no kubelet to finish a graceful
// delete).
func (e *env) deletePods(ctx context.Context, pods []benchPod) error {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(32)
	for _, p := range pods {
		g.Go(func() error { return testbed.ForceDeletePod(gctx, e.c, p.ns, p.name) })
	}
	return g.Wait()
}

// owner returns the i-th owner pod on the filler node, creating owner
// pods as needed; reservations made directly through the API are spread
// perOwner to a pod.
func (e *env) ensureOwners(ctx context.Context, reservations int) ([]benchPod, error) {
	want := (reservations + e.perOwner - 1) / e.perOwner
	e.ownersMu.Lock()
	defer e.ownersMu.Unlock()
	if n := want - len(e.owners); n > 0 {
		begin := time.Now()
		more, err := e.createPods(ctx, "owner", []string{fillerNode}, n, nil)
		if err != nil {
			return nil, err
		}
		e.owners = append(e.owners, more...)
		if n >= 1000 {
			e.logf("created %d owner pods in %v", n, time.Since(begin).Round(time.Millisecond))
		}
	}
	return e.owners[:want], nil
}

// directReservation is a reservation as the agent would have made it for
// owner, created by the bench straight through the API.
func directReservation(network, rng string, addr netip.Addr, owner benchPod) *tenurev1.IPReservation {
	return reservation.New(reservation.Spec{
		Network: network, Kind: tenurev1.KindAddress, Item: netip.PrefixFrom(addr, addr.BitLen()), Range: rng, CNINetwork: network,
		Owner: tenurev1.ReservationOwner{
			Kind: tenurev1.OwnerPod, Namespace: owner.ns, Name: owner.name, UID: owner.uid,
			PodName: owner.name, PodUID: owner.uid, ContainerID: owner.containerID, Interface: "net1", Node: owner.node,
		},
	})
}

// createAll creates objs at concurrency conc and returns each create's
// latency. progress, when > 0, logs every that many objects.
func (e *env) createAll(ctx context.Context, objs []*tenurev1.IPReservation, conc int, progress int) ([]time.Duration, time.Duration, error) {
	lat := make([]time.Duration, len(objs))
	var done atomic.Int64
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(conc)
	begin := time.Now()
	for i, o := range objs {
		g.Go(func() error {
			t := time.Now()
			err := e.c.Create(gctx, o)
			lat[i] = time.Since(t)
			if err != nil && !apierrors.IsAlreadyExists(err) {
				return fmt.Errorf("creating reservation %s: %w", o.Name, err)
			}
			if n := done.Add(1); progress > 0 && n%int64(progress) == 0 {
				e.logf("  %d/%d created (%.0f/s)", n, len(objs), float64(n)/time.Since(begin).Seconds())
			}
			return nil
		})
	}
	err := g.Wait()
	return lat, time.Since(begin), err
}

// deleteAll deletes reservations by name at concurrency conc.
func (e *env) deleteAll(ctx context.Context, names []string, conc int) (time.Duration, error) {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(conc)
	begin := time.Now()
	for _, n := range names {
		g.Go(func() error {
			err := e.c.Delete(gctx, &tenurev1.IPReservation{ObjectMeta: metav1.ObjectMeta{Name: n}})
			if err != nil && !apierrors.IsNotFound(err) {
				return err
			}
			return nil
		})
	}
	err := g.Wait()
	return time.Since(begin), err
}

// rawCreate measures the API server's plain create rate: n small
// IPReservations (a throwaway network, owned by a pod that exists so the
// controller leaves them be) at concurrency conc, with a plain client;
// then it deletes them at the same concurrency. It returns creates/s, the
// creates' p50 and deletes/s.
func (e *env) rawCreate(ctx context.Context, n, conc int) (perS float64, stats Stats, delPerS float64, err error) {
	objs := make([]*tenurev1.IPReservation, n)
	names := make([]string, n)
	base := netip.MustParseAddr("10.192.0.0").As4()
	for i := range objs {
		seq := e.rawSeq.Add(1) % (1 << 20)
		a := base
		a[1] += byte(seq >> 16)
		a[2] = byte(seq >> 8)
		a[3] = byte(seq)
		objs[i] = directReservation(rawNetwork, "10.192.0.0/12", netip.AddrFrom4(a), e.rawOwner)
		names[i] = objs[i].Name
	}
	lat, wall, err := e.createAll(ctx, objs, conc, 0)
	if err != nil {
		return 0, Stats{}, 0, err
	}
	delWall, err := e.deleteAll(ctx, names, conc)
	if err != nil {
		return 0, Stats{}, 0, err
	}
	return float64(n) / wall.Seconds(), Summarize(lat), float64(n) / delWall.Seconds(), nil
}

// call is one CNI invocation of the shim for a pod.
type call struct {
	pod       benchPod
	command   string
	conf      []byte
	wantIPs   int    // addresses the result must hold (ADD)
	wantAddrs string // exact addresses expected (migration), "" when any
}

// callOutcome is what one shim execution did.
type callOutcome struct {
	dur    time.Duration
	cpu    time.Duration
	minflt int64 // minor page faults of the child
	addrs  []string
	err    error
}

// execShim runs the tenure binary once, as a runtime does (the same
// environment as testbed.ExecShim), and keeps the child's CPU time from
// its rusage.
func execShim(ctx context.Context, shim string, c call) callOutcome {
	cmd := exec.CommandContext(ctx, shim)
	cmd.Env = []string{
		"CNI_COMMAND=" + c.command, "CNI_CONTAINERID=" + c.pod.containerID, "CNI_NETNS=/var/run/netns/none",
		"CNI_IFNAME=net1", "CNI_ARGS=" + c.pod.args(), "CNI_PATH=" + filepath.Dir(shim),
	}
	cmd.Stdin = bytes.NewReader(c.conf)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	begin := time.Now()
	err := cmd.Run()
	out := callOutcome{dur: time.Since(begin)}
	if ps := cmd.ProcessState; ps != nil {
		out.cpu = ps.UserTime() + ps.SystemTime()
		if ru, ok := ps.SysUsage().(*syscall.Rusage); ok {
			out.minflt = ru.Minflt
		}
	}
	if err != nil {
		var exitErr *exec.ExitError
		var cniErr types.Error
		if errors.As(err, &exitErr) && json.Unmarshal(stdout.Bytes(), &cniErr) == nil && cniErr.Code != 0 {
			out.err = fmt.Errorf("%s %s: CNI error %d: %s %s", c.command, c.pod.name, cniErr.Code, cniErr.Msg, cniErr.Details)
		} else {
			out.err = fmt.Errorf("%s %s: shim: %v: stdout %q stderr %q", c.command, c.pod.name, err, stdout.String(), strings.TrimSpace(stderr.String()))
		}
		return out
	}
	if c.command != "ADD" {
		return out
	}
	r := &current.Result{}
	if err := json.Unmarshal(stdout.Bytes(), r); err != nil {
		out.err = fmt.Errorf("ADD %s: result %q: %v", c.pod.name, stdout.String(), err)
		return out
	}
	for _, ip := range r.IPs {
		out.addrs = append(out.addrs, ip.Address.IP.String())
	}
	switch {
	case len(out.addrs) != c.wantIPs:
		out.err = fmt.Errorf("ADD %s: %d addresses %v, want %d", c.pod.name, len(out.addrs), out.addrs, c.wantIPs)
	case c.wantAddrs != "" && strings.Join(out.addrs, ",") != c.wantAddrs:
		out.err = fmt.Errorf("ADD %s: got %v, the claim holds %s", c.pod.name, out.addrs, c.wantAddrs)
	}
	return out
}

// runResult is a batch of calls.
type runResult struct {
	wall     time.Duration
	lat      []time.Duration // successful and failed calls alike
	cpu      []float64       // ms
	outcomes []callOutcome
	failures int
	dups     int
	errs     []string
}

// run executes calls at concurrency conc (the calls in flight at once,
// across all nodes).
func (e *env) run(ctx context.Context, calls []call, conc int, checkDuplicates bool) runResult {
	res := runResult{outcomes: make([]callOutcome, len(calls))}
	sem := make(chan struct{}, conc)
	var wg sync.WaitGroup
	begin := time.Now()
	for i, c := range calls {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
			defer cancel()
			res.outcomes[i] = execShim(cctx, e.bins.Shim, c)
		}()
	}
	wg.Wait()
	res.wall = time.Since(begin)
	owner := map[string]int{}
	for i, o := range res.outcomes {
		res.lat = append(res.lat, o.dur)
		ms := float64(o.cpu) / float64(time.Millisecond)
		res.cpu = append(res.cpu, ms)
		if o.err != nil {
			res.failures++
			if len(res.errs) < 5 {
				res.errs = append(res.errs, o.err.Error())
			}
			continue
		}
		if checkDuplicates {
			for _, a := range o.addrs {
				if j, dup := owner[a]; dup && calls[j].pod.uid != calls[i].pod.uid {
					res.dups++
					res.failures++
					if len(res.errs) < 5 {
						res.errs = append(res.errs, fmt.Sprintf("%s handed to %s and %s", a, calls[j].pod.name, calls[i].pod.name))
					}
				}
				owner[a] = i
			}
		}
	}
	var faults int64
	for _, o := range res.outcomes {
		faults += o.minflt
	}
	e.cpuMu.Lock()
	e.shimCPU = append(e.shimCPU, res.cpu...)
	e.shimMinflt += faults
	e.cpuMu.Unlock()
	return res
}

// netconf is a network configuration as the runtime passes it to the main
// plugin and the main plugin to its IPAM plugin.
func netconf(name, socket, ipam string) []byte {
	ipam = strings.TrimSpace(ipam)
	ipam = strings.TrimSuffix(strings.TrimPrefix(ipam, "{"), "}")
	return []byte(fmt.Sprintf(`{"cniVersion":"1.1.0","name":%q,"type":"macvlan","master":"eth0","ipam":{"type":"tenure","agent_socket":%q,%s}}`,
		name, socket, ipam))
}

// readRSS returns VmRSS and VmHWM of a process in MiB.
func readRSS(pid int) (rss, hwm float64, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		kb, perr := strconv.ParseFloat(f[1], 64)
		if perr != nil {
			continue
		}
		switch f[0] {
		case "VmRSS:":
			rss = kb / 1024
		case "VmHWM:":
			hwm = kb / 1024
		}
	}
	if rss == 0 {
		return 0, 0, fmt.Errorf("no VmRSS in /proc/%d/status", pid)
	}
	return rss, hwm, nil
}
