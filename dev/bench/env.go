package bench

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tenure-ipam/tenure/deploy"
	"github.com/tenure-ipam/tenure/dev/devnode"
	"github.com/tenure-ipam/tenure/internal/kube"
	"github.com/tenure-ipam/tenure/test/controlplane"
	"github.com/tenure-ipam/tenure/test/testbed"
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
	// agentArgs are further flags of the agents started next.
	agentArgs []string
	dir       string // sockets and process logs

	agents map[string]*testbed.Agent
	node   *devnode.Node // the real node, for scenarios that need it
	// cluster, nodes: the real nodes, when there are more than one; and
	// the admin kubeconfig as they reach the API server.
	cluster        *devnode.Cluster
	nodes          []*devnode.Node
	nodeKubeconfig string

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
	shimPairs  []cpuPair // one shim call in pairEvery and its waiting twin (paired.go)

	waiterOnce sync.Once
	waiter     string // the twin's binary
}

func (e *env) logf(format string, args ...any) {
	fmt.Fprintf(e.log, "bench: "+format+"\n", args...)
}

// startEnv starts the control plane, installs the CRDs and creates what
// every scenario shares.
func startEnv(ctx context.Context, log io.Writer, bins testbed.Binaries, cpOpts controlplane.Options) (*env, error) {
	e := &env{log: log, bins: bins, agents: map[string]*testbed.Agent{}, perOwner: 1}
	dir, err := os.MkdirTemp("", "tbench-")
	if err != nil {
		return nil, err
	}
	e.dir = dir
	begin := time.Now()
	cp, err := controlplane.Start(ctx, cpOpts)
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
	if _, _, _, _, err := e.rawCreate(ctx, 1, 1); err != nil {
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
	if e.node != nil {
		if err := e.node.Stop(); err != nil {
			e.logf("stopping the node: %v", err)
		} else if left, err := devnode.Leftovers(e.node.Dir); err != nil || len(left) > 0 {
			e.logf("the node left behind: %v %v", left, err)
		}
	}
	if e.cluster != nil {
		if err := e.cluster.Stop(); err != nil {
			e.logf("stopping the nodes: %v", err)
		} else if left, err := devnode.ClusterLeftovers(e.cluster.Dir); err != nil || len(left) > 0 {
			e.logf("the nodes left behind: %v %v", left, err)
		}
	}
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
	a, err := testbed.StartAgent(ctx, e.bins, e.dir, e.cp.KubeconfigPath, node, e.agentArgs...)
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
