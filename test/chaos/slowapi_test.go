//go:build integration

// Package chaos_test holds tenure to its promises while the world around it
// misbehaves. TestSlowAPIServer puts a loopback proxy between an
// agent and kube-apiserver that delays and drops a seeded fraction of the
// requests.
package chaos_test

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"k8s.io/client-go/rest"

	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/kube"
	"github.com/tenure-ipam/tenure/test/controlplane"
	"github.com/tenure-ipam/tenure/test/controlplane/cptest"
	"github.com/tenure-ipam/tenure/test/testbed"
)

var (
	bins testbed.Binaries
	seed = flag.Uint64("chaos.seed", 0, "seed of the faults (0: a new one, printed)")
)

func TestMain(m *testing.M) {
	ctrllog.SetLogger(logr.Discard())
	var err error
	if bins, err = testbed.Build(""); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(cptest.Main(m, func(cp *controlplane.ControlPlane) error {
		// The agent's RBAC and node-restriction policy, as deploy/ ships them.
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, err := testbed.InstallAgentAccess(ctx, cp.Config)
		return err
	}))
}

// faultyProxy drives a testbed.FaultProxy between agents and the API
// server. Per request it drops the connection with probability drop or
// delays the request by up to maxDelay with probability delay. Three
// faults aim at reservation creates: DropAfterCommit lets the API server
// commit a create and resets the caller's connection before the answer
// reaches it; AfterCommit does the same and runs a function (kill -9 of
// kube-apiserver) in between; and OnCreate runs a function as a create is
// forwarded, its outcome unknown.
type faultyProxy struct {
	*testbed.FaultProxy
	mu          sync.Mutex
	rnd         *rand.Rand
	delay, drop float64
	maxDelay    time.Duration
	on          atomic.Bool

	delayed, dropped, forwarded atomic.Int64

	creates     atomic.Int64 // reservation creates forwarded
	dropCommits atomic.Int64 // creates still to drop after their commit
	createHook  atomic.Pointer[func(create int64)]
	commitHook  atomic.Pointer[func()]
	// droppedAfterCommit: creates the API server answered 201 whose
	// answer was replaced by a reset.
	droppedAfterCommit atomic.Int64
}

func newFaultyProxy(t *testing.T, upstream *rest.Config, seed uint64) *faultyProxy {
	return newProxy(t, upstream, seed, 0.3, 0.1)
}

// newProxy is a faultyProxy with the given probabilities of delay and drop
// (0, 0: the create faults only).
func newProxy(t *testing.T, upstream *rest.Config, seed uint64, delay, drop float64) *faultyProxy {
	t.Helper()
	fp, err := testbed.NewFaultProxy(upstream)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fp.Close)
	p := &faultyProxy{FaultProxy: fp, rnd: rand.New(rand.NewPCG(seed, seed^0x5eed)), delay: delay, drop: drop, maxDelay: 2 * time.Second}
	p.on.Store(true)
	fp.SetDecide(p.decide)
	fp.SetOnWithheld(p.withheld)
	return p
}

func (p *faultyProxy) decide(r *http.Request) testbed.Fault {
	if p.on.Load() {
		p.mu.Lock()
		x, d := p.rnd.Float64(), time.Duration(p.rnd.Int64N(int64(p.maxDelay)))
		p.mu.Unlock()
		switch {
		case x < p.drop:
			p.dropped.Add(1)
			return testbed.Reset
		case x < p.drop+p.delay:
			p.delayed.Add(1)
			select {
			case <-time.After(d):
			case <-r.Context().Done():
				return testbed.Reset
			}
		}
	}
	p.forwarded.Add(1)
	if !testbed.IsCreateOf(r, "ipreservations") {
		return testbed.Forward
	}
	n := p.creates.Add(1)
	if hook := p.createHook.Swap(nil); hook != nil {
		go (*hook)(n)
	}
	if p.commitHook.Load() != nil || p.takeDropCommit() {
		return testbed.ForwardThenReset
	}
	return testbed.Forward
}

// withheld sees each answer the proxy keeps from its caller, before the
// reset: the commit hook runs on a committed create; a drop that found no
// commit stays armed for a later create.
func (p *faultyProxy) withheld(w testbed.Withheld) {
	if w.Status != http.StatusCreated {
		if p.commitHook.Load() == nil {
			p.dropCommits.Add(1)
		}
		return
	}
	if hook := p.commitHook.Swap(nil); hook != nil {
		(*hook)()
		return
	}
	p.droppedAfterCommit.Add(1)
}

// DropAfterCommit arms the proxy to drop the answers of the next n
// reservation creates the API server commits.
func (p *faultyProxy) DropAfterCommit(n int64) { p.dropCommits.Add(n) }

// AfterCommit arms the proxy to run f once the API server has committed
// the next reservation create (answered 201), then reset the caller's
// connection: the caller never learns the outcome. f runs before the
// reset, so kill -9 of kube-apiserver there leaves the caller a server
// that restarted while its create was unanswered.
func (p *faultyProxy) AfterCommit(f func()) { p.commitHook.Store(&f) }

// OnCreate arms the proxy to run f once, as the next reservation create is
// forwarded, with that create's number (creates counts them).
func (p *faultyProxy) OnCreate(f func(create int64)) { p.createHook.Store(&f) }

func (p *faultyProxy) takeDropCommit() bool {
	for {
		n := p.dropCommits.Load()
		if n <= 0 {
			return false
		}
		if p.dropCommits.CompareAndSwap(n, n-1) {
			return true
		}
	}
}

// via rewrites the kubeconfig at path to reach the API server through the
// proxy, with the same credential.
func (p *faultyProxy) via(t *testing.T, path string) string {
	t.Helper()
	out, err := p.Kubeconfig(path, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// A slow, lossy API server: every ADD through an agent behind the proxy
// ends, before a runtime's timeout, either with an address or with a
// retryable error (CNI code 11); the runtime's DEL of a failed sandbox and
// its next sandbox's ADD then settle it. Once the faults stop, every pod
// holds exactly the address its last ADD returned, no failed sandbox holds
// anything, and no address is held twice.
func TestSlowAPIServer(t *testing.T) {
	s := *seed
	if s == 0 {
		s = rand.Uint64()
	}
	t.Logf("seed %d (reproduce with -chaos.seed=%d)", s, s)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cp := cptest.Current()
	c, err := kube.NewClient(cp.Config)
	if err != nil {
		t.Fatal(err)
	}
	proxy := newFaultyProxy(t, cp.Config, s)
	const node = "slow-node"
	if _, err := testbed.CreateNode(ctx, c, node); err != nil {
		t.Fatal(err)
	}
	// The agent's own credential, a token bound to a pod on its node.
	direct, err := testbed.NodeAgentKubeconfig(ctx, cp.Config, node, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	agent, err := testbed.StartAgent(ctx, bins, t.TempDir(), proxy.via(t, direct), node)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(agent.Stop)
	conf := []byte(fmt.Sprintf(`{"cniVersion":"1.1.0","name":"slow","type":"macvlan","master":"eth0",
		"ipam":{"type":"tenure","agent_socket":%q,"range":"10.77.0.0/24"}}`, agent.Socket))
	if err := testbed.EnsureNamespace(ctx, c, "slow"); err != nil {
		t.Fatal(err)
	}

	// The runtime's patience for one CNI call (the kubelet's CRI
	// runtime-request-timeout).
	const runtimeTimeout = 2 * time.Minute
	const pods = 40
	type outcome struct {
		name, uid, container, address string
		failed                        []string // sandboxes whose ADD failed (DEL run)
	}
	results := make([]outcome, pods)
	var codes sync.Map // CNI code -> *atomic.Int64
	count := func(code uint) {
		v, _ := codes.LoadOrStore(code, new(atomic.Int64))
		v.(*atomic.Int64).Add(1)
	}
	var wg sync.WaitGroup
	errs := make(chan error, pods)
	sem := make(chan struct{}, 8)
	for i := range pods {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			name := fmt.Sprintf("slow-%d", i)
			pod, err := testbed.CreatePod(ctx, c, "slow", name, node, nil)
			if err != nil {
				errs <- err
				return
			}
			o := outcome{name: name, uid: string(pod.UID)}
			for attempt := 0; ; attempt++ {
				sandbox := fmt.Sprintf("sandbox-%d-%d", i, attempt)
				call := testbed.CNICall{Command: "ADD", ContainerID: sandbox, IfName: "net1", Args: testbed.PodArgs("slow", name, o.uid), Config: conf}
				callCtx, callCancel := context.WithTimeout(ctx, runtimeTimeout)
				out, err := testbed.ExecShim(callCtx, bins.Shim, call)
				callCancel()
				var cniErr *types.Error
				switch {
				case err == nil:
					var res current.Result
					if err := json.Unmarshal(out, &res); err != nil || len(res.IPs) != 1 {
						errs <- fmt.Errorf("%s: result %s: %v", name, out, err)
						return
					}
					o.container, o.address = sandbox, res.IPs[0].Address.IP.String()
					results[i] = o
					count(0)
					return
				case errors.As(err, &cniErr) && cniErr.Code == 11:
					count(cniErr.Code)
				default:
					errs <- fmt.Errorf("%s: ADD ended without an address or a retryable error: %v", name, err)
					return
				}
				// The runtime tears the failed sandbox down (DEL until it
				// succeeds) and makes a new one.
				o.failed = append(o.failed, sandbox)
				call.Command = "DEL"
				for {
					callCtx, callCancel := context.WithTimeout(ctx, runtimeTimeout)
					_, err := testbed.ExecShim(callCtx, bins.Shim, call)
					callCancel()
					if err == nil {
						break
					}
					if !errors.As(err, &cniErr) || cniErr.Code != 11 || ctx.Err() != nil {
						errs <- fmt.Errorf("%s: DEL of %s: %v", name, sandbox, err)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	proxy.on.Store(false)

	// What the API holds, read directly.
	var list tenurev1alpha1.IPReservationList
	if err := c.List(ctx, &list); err != nil {
		t.Fatal(err)
	}
	byContainer := map[string][]string{}
	byAddress := map[string]int{}
	for _, r := range list.Items {
		if r.Spec.Owner.Namespace != "slow" {
			continue
		}
		byContainer[r.Spec.Owner.ContainerID] = append(byContainer[r.Spec.Owner.ContainerID], r.Spec.Address)
		byAddress[r.Spec.Address]++
	}
	retries := 0
	for _, o := range results {
		if o.container == "" {
			continue // reported above
		}
		if got := byContainer[o.container]; len(got) != 1 || got[0] != o.address {
			t.Errorf("%s: sandbox %s got %s, the API holds %v for it", o.name, o.container, o.address, got)
		}
		for _, f := range o.failed {
			if got := byContainer[f]; len(got) > 0 {
				t.Errorf("%s: failed sandbox %s still holds %v after its DEL: half-written", o.name, f, got)
			}
		}
		retries += len(o.failed)
	}
	for a, n := range byAddress {
		if n > 1 {
			t.Errorf("%s is held %d times", a, n)
		}
	}
	succeeded := int64(0)
	if v, ok := codes.Load(uint(0)); ok {
		succeeded = v.(*atomic.Int64).Load()
	}
	t.Logf("seed %d: %d requests forwarded, %d delayed (up to %v), %d dropped; %d pods, %d ADDs succeeded, %d ADDs failed with code 11 and were retried in a new sandbox",
		s, proxy.forwarded.Load(), proxy.delayed.Load(), proxy.maxDelay, proxy.dropped.Load(), pods, succeeded, retries)
}
