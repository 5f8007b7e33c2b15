//go:build integration

package chaos_test

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/reservation"
	"github.com/tenure-ipam/tenure/test/controlplane"
	"github.com/tenure-ipam/tenure/test/testbed"
)

var burstRuns = flag.Int("chaos.burst-runs", 5, "how many bursts TestKillDuringBurst runs")

const (
	burstPods   = 300
	burstAgents = 3
	// A /24 hands out 254 addresses: the last 46 ADDs must be told "full".
	burstCapacity = 254
	burstParallel = 30
)

// TestKillDuringBurst: 300 ADDs into a /24 from three agents,
// with kube-apiserver killed -9 while reservation creates are in flight
// and restarted; five runs, each on a network of its own. The agents reach
// the API server through a proxy, which times the kill: it fires as a
// seeded create (the 10th to the 100th of the run) is forwarded. The
// runtime runs an ADD answered "try again" (or not answered in its
// patience) again in the same sandbox, as a runtime may, until it
// gets an address or "full". Then, per run:
//   - no address answered to two sandboxes;
//   - no sandbox holding two reservations of a family, and no reservation
//     that was not answered to its sandbox (read live after the burst);
//   - no false "full": a sandbox told full holds nothing (read live right
//     after the answer), and "full" comes only once every address is
//     answered;
//   - once every sandbox's DEL has answered success, no reservation of the
//     run is left.
func TestKillDuringBurst(t *testing.T) {
	s := *seed
	if s == 0 {
		s = rand.Uint64()
	}
	t.Logf("seed %d (reproduce with -chaos.seed=%d)", s, s)
	rnd := rand.New(rand.NewPCG(s, s^0xb0257))
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(*burstRuns)*4*time.Minute+2*time.Minute)
	defer cancel()

	dir, cp, c := ownControlPlane(ctx, t, "tenure-burst-")
	proxy := newProxy(t, cp.Config, s, 0, 0)
	var agents []*testbed.Agent
	for i := range burstAgents {
		node := fmt.Sprintf("burst-%c", 'a'+i)
		if _, err := testbed.CreateNode(ctx, c, node); err != nil {
			t.Fatal(err)
		}
		kc, err := testbed.NodeAgentKubeconfig(ctx, cp.Config, node, dir)
		if err != nil {
			t.Fatal(err)
		}
		a, err := testbed.StartAgent(ctx, bins, dir, proxy.via(t, kc), node)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(a.Stop)
		agents = append(agents, a)
	}

	for run := 1; run <= *burstRuns; run++ {
		killAt := int64(10 + rnd.IntN(91))
		t.Run(fmt.Sprintf("run-%d", run), func(t *testing.T) {
			burst(ctx, t, c, cp, proxy, agents, run, killAt)
		})
	}
}

// burstSandbox is one pod's sandbox and what its ADD was answered.
type burstSandbox struct {
	pod, uid, node, sandbox string
	address                 string // answered
	full                    bool   // answered "full"
	retries                 int    // ADDs run again in the sandbox
	fullWhileHolding        []string
}

func burst(ctx context.Context, t *testing.T, c client.Client, cp *controlplane.ControlPlane, proxy *faultyProxy,
	agents []*testbed.Agent, run int, killAt int64) {
	ns := fmt.Sprintf("burst-%d", run)
	if err := testbed.EnsureNamespace(ctx, c, ns); err != nil {
		t.Fatal(err)
	}
	network := ns
	rangeSpec := fmt.Sprintf("10.90.%d.0/24", run)
	conf := func(a *testbed.Agent) []byte {
		return []byte(fmt.Sprintf(`{"cniVersion":"1.1.0","name":%q,"type":"macvlan","master":"eth0",
			"ipam":{"type":"tenure","agent_socket":%q,"range":%q,"network_name":%q}}`, network, a.Socket, rangeSpec, network))
	}
	agentOf := map[string]*testbed.Agent{}
	for _, a := range agents {
		agentOf[a.Node] = a
	}

	// The pods, bound to their nodes before the burst.
	sandboxes := make([]*burstSandbox, burstPods)
	parallel(burstParallel, burstPods, func(i int) {
		node := agents[i%len(agents)].Node
		name := fmt.Sprintf("p-%d", i)
		pod, err := testbed.CreatePod(ctx, c, ns, name, node, nil)
		if err != nil {
			t.Errorf("pod %s: %v", name, err)
			return
		}
		sandboxes[i] = &burstSandbox{pod: name, uid: string(pod.UID), node: node, sandbox: fmt.Sprintf("%s-sandbox-%d", ns, i)}
	})
	if t.Failed() {
		return
	}
	exec := func(cmd string, sb *burstSandbox) ([]byte, error) {
		cctx, ccancel := context.WithTimeout(ctx, patience)
		defer ccancel()
		return testbed.ExecShim(cctx, bins.Shim, testbed.CNICall{Command: cmd, ContainerID: sb.sandbox, IfName: "net1",
			Args: testbed.PodArgs(ns, sb.pod, sb.uid), Config: conf(agentOf[sb.node])})
	}
	// held reads live what sandbox sb holds, through API outages.
	held := func(sb *burstSandbox) []string {
		var out []string
		err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
			var list tenurev1alpha1.IPReservationList
			if err := c.List(ctx, &list, client.MatchingLabels{reservation.LabelOwnerUID: sb.uid}); err != nil {
				return false, nil
			}
			out = nil
			for _, r := range list.Items {
				if r.Spec.Owner.ContainerID == sb.sandbox {
					out = append(out, r.Spec.Address)
				}
			}
			return true, nil
		})
		if err != nil {
			t.Errorf("reading the reservations of %s: %v", sb.sandbox, err)
		}
		return out
	}

	// The kill: once killAt creates of this run have been forwarded, the
	// next one triggers it while it is in flight.
	var killedAt atomic.Int64 // the run's create that was in flight at the kill
	killed := make(chan error, 1)
	createsBefore := proxy.creates.Load()
	armCtx, disarm := context.WithCancel(ctx)
	defer disarm()
	var armMu sync.Mutex
	armed := false
	go func() {
		if wait.PollUntilContextCancel(armCtx, time.Millisecond, true, func(context.Context) (bool, error) {
			return proxy.creates.Load()-createsBefore >= killAt, nil
		}) != nil {
			return
		}
		armMu.Lock()
		defer armMu.Unlock()
		if armCtx.Err() != nil {
			return
		}
		proxy.OnCreate(func(create int64) {
			killedAt.Store(create - createsBefore)
			killed <- cp.Crash(ctx, "kube-apiserver")
		})
		armed = true
	}()

	start := time.Now()
	var unexpected atomic.Int64
	parallel(burstParallel, burstPods, func(i int) {
		sb := sandboxes[i]
		deadline := time.Now().Add(3 * time.Minute)
		for {
			out, err := exec("ADD", sb)
			var cniErr *types.Error
			switch {
			case err == nil:
				var res current.Result
				if err := json.Unmarshal(out, &res); err != nil || len(res.IPs) != 1 {
					t.Errorf("%s: result %s: %v", sb.sandbox, out, err)
					return
				}
				sb.address = res.IPs[0].Address.IP.String()
				return
			case errors.As(err, &cniErr) && cniErr.Code == 100:
				sb.full = true
				sb.fullWhileHolding = held(sb)
				return
			case errors.As(err, &cniErr) && cniErr.Code != types.ErrTryAgainLater:
				unexpected.Add(1)
				t.Errorf("%s: ADD answered code %d: %s", sb.sandbox, cniErr.Code, cniErr.Msg)
				return
			}
			// "Try again", or no answer in the runtime's patience: the
			// same ADD again, in the same sandbox.
			if time.Now().After(deadline) {
				t.Errorf("%s: no address and no \"full\" in 3 minutes: %v", sb.sandbox, err)
				return
			}
			sb.retries++
			time.Sleep(200 * time.Millisecond)
		}
	})
	burstTook := time.Since(start)
	disarm()
	armMu.Lock()
	wasArmed := armed
	armMu.Unlock()
	var killErr error
	switch {
	case !wasArmed || proxy.createHook.Swap(nil) != nil:
		t.Errorf("kube-apiserver was never killed: the burst made fewer than %d creates", killAt+1)
	default:
		killErr = <-killed
	}
	if killErr != nil {
		t.Fatalf("restarting kube-apiserver: %v", killErr)
	}

	// What the API holds for this run, read live.
	list := func() []tenurev1alpha1.IPReservation {
		var l tenurev1alpha1.IPReservationList
		if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			return c.List(ctx, &l) == nil, nil
		}); err != nil {
			t.Fatalf("listing reservations: %v", err)
		}
		var out []tenurev1alpha1.IPReservation
		for _, r := range l.Items {
			if r.Spec.Owner.Namespace == ns {
				out = append(out, r)
			}
		}
		return out
	}

	// Duplicates, by holder: every address answered to one sandbox only.
	holders := map[string][]string{}
	answered, fulls, retries := 0, 0, 0
	var falseFull []string
	for _, sb := range sandboxes {
		retries += sb.retries
		switch {
		case sb.address != "":
			answered++
			holders[sb.address] = append(holders[sb.address], sb.sandbox)
		case sb.full:
			fulls++
			if len(sb.fullWhileHolding) > 0 {
				falseFull = append(falseFull, fmt.Sprintf("%s told full while holding %v", sb.sandbox, sb.fullWhileHolding))
			}
		}
	}
	var duplicates []string
	for a, hs := range holders {
		if len(hs) > 1 {
			duplicates = append(duplicates, fmt.Sprintf("%s answered to %v", a, hs))
		}
	}
	if fulls > 0 && answered < burstCapacity {
		falseFull = append(falseFull, fmt.Sprintf("%d ADDs told full while only %d of the %d addresses were answered", fulls, answered, burstCapacity))
	}
	bySandbox := map[string]string{}
	for _, sb := range sandboxes {
		bySandbox[sb.sandbox] = sb.address
	}
	perFamily := map[string][]string{}
	var orphans []string
	for _, r := range list() {
		o := r.Spec.Owner
		family := "IPv4"
		if strings.Contains(r.Spec.Address, ":") {
			family = "IPv6"
		}
		perFamily[o.ContainerID+" "+family] = append(perFamily[o.ContainerID+" "+family], r.Spec.Address)
		if bySandbox[o.ContainerID] != r.Spec.Address {
			orphans = append(orphans, fmt.Sprintf("%s held by %s, which was answered %q", r.Spec.Address, o.ContainerID, bySandbox[o.ContainerID]))
		}
	}
	var doubles []string
	for k, as := range perFamily {
		if len(as) > 1 {
			doubles = append(doubles, fmt.Sprintf("%s: %v", k, as))
		}
	}

	// Every sandbox torn down: DEL until it answers success.
	parallel(burstParallel, burstPods, func(i int) {
		sb := sandboxes[i]
		deadline := time.Now().Add(2 * time.Minute)
		for {
			_, err := exec("DEL", sb)
			if err == nil {
				return
			}
			if time.Now().After(deadline) {
				t.Errorf("DEL of %s never succeeded: %v", sb.sandbox, err)
				return
			}
			time.Sleep(200 * time.Millisecond)
		}
	})
	var left []string
	for _, r := range list() {
		left = append(left, fmt.Sprintf("%s (%s)", r.Spec.Address, r.Spec.Owner.ContainerID))
	}

	sort.Strings(duplicates)
	sort.Strings(doubles)
	sort.Strings(falseFull)
	sort.Strings(orphans)
	slices.Sort(left)
	t.Logf("run %d: %d ADDs in %v, kube-apiserver killed as create %d of the run was forwarded (%d already had been); %d answered an address, %d full, %d ADDs run again in their sandbox; "+
		"duplicates %d, sandboxes with two reservations of a family %d, false full %d, orphans %d, reservations left after every DEL answered success %d",
		run, burstPods, burstTook.Round(time.Millisecond), killedAt.Load(), killAt, answered, fulls, retries,
		len(duplicates), len(doubles), len(falseFull), len(orphans), len(left))
	for _, d := range duplicates {
		t.Errorf("duplicate: %s", d)
	}
	for _, d := range doubles {
		t.Errorf("two reservations of a family: %s", d)
	}
	for _, f := range falseFull {
		t.Errorf("false full: %s", f)
	}
	for _, o := range orphans {
		t.Errorf("orphan: %s", o)
	}
	for _, l := range left {
		t.Errorf("left after every DEL answered success: %s", l)
	}
	if answered+fulls+int(unexpected.Load()) != burstPods && !t.Failed() {
		t.Errorf("%d answered, %d full, of %d ADDs", answered, fulls, burstPods)
	}
}

// parallel runs f(0..n-1) with at most width at once.
func parallel(width, n int, f func(i int)) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, width)
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			f(i)
		}()
	}
	wg.Wait()
}
