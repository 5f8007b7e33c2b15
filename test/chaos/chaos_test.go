//go:build integration

package chaos_test

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipamclaimsv1alpha1 "github.com/tenure-ipam/tenure/api/ipamclaims/v1alpha1"
	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/deploy"
	"github.com/tenure-ipam/tenure/internal/controlplane"
	"github.com/tenure-ipam/tenure/internal/kube"
	tenureops "github.com/tenure-ipam/tenure/internal/ops"
	"github.com/tenure-ipam/tenure/internal/testbed"
)

var duration = flag.Duration("chaos.duration", 2*time.Minute, "how long workers and faults run")

// The runtime's patience for one CNI call here: short, so that an agent
// paused past it (SIGSTOP) makes the runtime give up, as a kubelet does
// after its runtime-request-timeout.
const patience = 15 * time.Second

// A chaos run (issue 14): four agents and the controller; workers doing
// random ADD, DEL and CHECK, pod deletions without DEL, StatefulSet-style
// re-creations under the same name; a fault injector that at random instants
// kill -9s an agent or the controller and restarts it, crashes
// kube-apiserver or etcd (SIGKILL and restart), and pauses an agent
// (SIGSTOP) past the runtime's patience. Every run prints its seed
// (-chaos.seed reproduces the schedule of operations and faults, though not
// the processes' timing). Checked while it runs: no address held by two
// live pods, every ADD that succeeded still holds its reservation unless
// its DEL or a release explains it; after the faults stop and the
// controller has swept: the reservations are exactly the live pods', and
// `tenurectl check` (ops.Check) finds nothing.
func TestChaos(t *testing.T) {
	s := *seed
	if s == 0 {
		s = rand.Uint64()
	}
	t.Logf("seed %d (reproduce with -chaos.seed=%d)", s, s)
	ctx, cancel := context.WithTimeout(context.Background(), *duration+6*time.Minute)
	defer cancel()
	rnd := rand.New(rand.NewPCG(s, s^0xc4a05))
	var rndMu sync.Mutex
	roll := func(n int) int {
		rndMu.Lock()
		defer rndMu.Unlock()
		return rnd.IntN(n)
	}

	// Kept when the run fails: the agents' and the controller's logs.
	dir, err := os.MkdirTemp("", "tenure-chaos-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("logs kept in %s", dir)
			return
		}
		_ = os.RemoveAll(dir)
	})
	cp, err := controlplane.Start(ctx, controlplane.Options{Dir: filepath.Join(dir, "cp")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cp.Stop() })
	if err := installTenure(ctx, cp); err != nil {
		t.Fatal(err)
	}
	c, err := kube.NewClient(cp.Config)
	if err != nil {
		t.Fatal(err)
	}
	if err := testbed.EnsureNamespace(ctx, c, "chaos"); err != nil {
		t.Fatal(err)
	}

	nodes := []string{"chaos-a", "chaos-b", "chaos-c", "chaos-d"}
	agents := map[string]*testbed.Agent{}
	var agentsMu sync.Mutex
	for _, n := range nodes {
		a, err := testbed.StartNodeAgent(ctx, bins, dir, cp.Config, n)
		if err != nil {
			t.Fatal(err)
		}
		agents[n] = a
	}
	t.Cleanup(func() {
		agentsMu.Lock()
		defer agentsMu.Unlock()
		for _, a := range agents {
			_ = a.Cmd.Process.Signal(syscall.SIGCONT)
			a.Stop()
		}
	})
	ctrlKC := filepath.Join(dir, "controller.kubeconfig")
	if err := testbed.ServiceAccountKubeconfig(ctx, cp.Config, "tenure-system", "tenure-controller", ctrlKC); err != nil {
		t.Fatal(err)
	}
	startController := func() (*testbed.Process, error) {
		return testbed.StartProcess("controller", bins.Controller, filepath.Join(dir, "controller.log"),
			"--kubeconfig", ctrlKC, "--leader-election-namespace", "tenure-system", "--sweep-interval", "2s", "--node-grace-period", "3s",
			"--metrics-addr", "0", "--health-addr", "0")
	}
	ctrl, err := startController()
	if err != nil {
		t.Fatal(err)
	}
	var ctrlMu sync.Mutex
	t.Cleanup(func() { ctrlMu.Lock(); ctrl.Stop(); ctrlMu.Unlock() })

	// conf is the network configuration as the runtime passes it; with
	// requested set, Multus' runtimeConfig.ips asks for that address.
	conf := func(a *testbed.Agent, requested string) []byte {
		rc := ""
		if requested != "" {
			rc = fmt.Sprintf(`"runtimeConfig":{"ips":[%q]},`, requested+"/26")
		}
		return []byte(fmt.Sprintf(`{"cniVersion":"1.1.0","name":"chaos","type":"macvlan","master":"eth0",%s
			"ipam":{"type":"tenure","agent_socket":%q,"range":"10.88.0.0/26"}}`, rc, a.Socket))
	}
	agentOf := func(node string) *testbed.Agent {
		agentsMu.Lock()
		defer agentsMu.Unlock()
		return agents[node]
	}

	// The model: what the runtime believes each live pod holds.
	type livePod struct {
		name, uid, node, sandbox, address string
		requested                         string // the address asked for, if any
	}
	var (
		mu       sync.Mutex
		live     = map[string]*livePod{} // by pod name
		ops      = map[string]int{}
		faults   = map[string]int{}
		problems []string
		seq      int
	)
	count := func(m map[string]int, k string) { mu.Lock(); m[k]++; mu.Unlock() }
	violation := func(format string, args ...any) {
		mu.Lock()
		problems = append(problems, fmt.Sprintf(format, args...))
		mu.Unlock()
	}
	call := func(cmd string, p *livePod) (*current.Result, error) {
		cctx, ccancel := context.WithTimeout(ctx, patience)
		defer ccancel()
		out, err := testbed.ExecShim(cctx, bins.Shim, testbed.CNICall{Command: cmd, ContainerID: p.sandbox, IfName: "net1",
			Args: testbed.PodArgs("chaos", p.name, p.uid), Config: conf(agentOf(p.node), p.requested)})
		if err != nil || cmd != "ADD" {
			return nil, err
		}
		var res current.Result
		if err := json.Unmarshal(out, &res); err != nil {
			return nil, err
		}
		return &res, nil
	}
	// teardown DELs a sandbox until the agent answers (the runtime retries
	// a failed DEL for as long as it takes).
	teardown := func(p *livePod, deadline time.Time) bool {
		for time.Now().Before(deadline) {
			if _, err := call("DEL", p); err == nil {
				return true
			}
			time.Sleep(200 * time.Millisecond) // the runtime's retry pace
		}
		return false
	}
	// deletePod deletes the pod object, retrying through API outages as
	// the deleting user or controller would.
	deletePod := func(name string) {
		err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
			err := c.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "chaos", Name: name}}, client.GracePeriodSeconds(0))
			if err != nil && !apierrors.IsNotFound(err) {
				count(ops, "api-error")
				return false, nil
			}
			return true, nil
		})
		if err != nil {
			violation("pod %s could not be deleted: %v", name, err)
		}
	}
	pickLive := func() *livePod {
		mu.Lock()
		defer mu.Unlock()
		if len(live) == 0 {
			return nil
		}
		names := make([]string, 0, len(live))
		for n := range live {
			names = append(names, n)
		}
		sort.Strings(names)
		p := live[names[roll(len(names))]]
		delete(live, p.name) // this worker owns it now
		return p
	}
	// claimHeld maps the addresses of live claims to the claim.
	claimHeld := map[string]string{}
	add := func(name, node string, requested string) {
		pod, err := testbed.CreatePod(ctx, c, "chaos", name, node, nil)
		if err != nil {
			count(ops, "api-error")
			time.Sleep(200 * time.Millisecond) // an outage: try another operation shortly
			return
		}
		mu.Lock()
		seq++
		p := &livePod{name: name, uid: string(pod.UID), node: node, sandbox: fmt.Sprintf("sandbox-%d", seq), requested: requested}
		mu.Unlock()
		res, err := call("ADD", p)
		var cniErr *types.Error
		switch {
		case err == nil && len(res.IPs) == 1:
			p.address = res.IPs[0].Address.IP.String()
			if requested != "" && p.address != requested {
				violation("%s asked for %s and got %s", name, requested, p.address)
			}
			mu.Lock()
			for _, other := range live {
				if other.address == p.address {
					problems = append(problems, fmt.Sprintf("%s and %s both hold %s", p.name, other.name, p.address))
				}
			}
			if cl, ok := claimHeld[p.address]; ok {
				problems = append(problems, fmt.Sprintf("%s and claim %s both hold %s", p.name, cl, p.address))
			}
			live[name] = p
			mu.Unlock()
			if requested != "" {
				count(ops, "add-requested")
			} else {
				count(ops, "add")
			}
			return
		case errors.As(err, &cniErr):
			count(ops, fmt.Sprintf("add-failed-code-%d", cniErr.Code))
		default:
			count(ops, "add-failed-runtime-timeout")
		}
		// The runtime tears the sandbox down and gives up on the pod.
		teardown(p, time.Now().Add(2*time.Minute))
		deletePod(name)
	}

	// holdForClaim records that a claim (who) holds address, and that no
	// live pod holds it too.
	holdForClaim := func(address, who string) {
		mu.Lock()
		defer mu.Unlock()
		for _, other := range live {
			if other.address == address {
				problems = append(problems, fmt.Sprintf("%s and %s both hold %s", who, other.name, address))
			}
		}
		claimHeld[address] = who
	}
	// letGo ends what holdForClaim recorded and deletes the object the
	// address was bound to (the claim, the StatefulSet), retrying through
	// faults; the controller then releases the address.
	letGo := func(address string, owner client.Object) {
		mu.Lock()
		delete(claimHeld, address)
		mu.Unlock()
		_ = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
			err := c.Delete(ctx, owner)
			return err == nil || apierrors.IsNotFound(err), nil
		})
	}

	// addBound runs the ADD of a new sandbox of pod on node for an address
	// bound to something other than the pod (a claim, a sticky StatefulSet
	// ordinal): every ADD must return the address the earlier ones did.
	// It records the address in *address and reports whether the ADD
	// succeeded (failures counted under failed).
	addBound := func(pod *corev1.Pod, node string, address *string, failed, who string) (*livePod, bool) {
		mu.Lock()
		seq++
		p := &livePod{name: pod.Name, uid: string(pod.UID), node: node, sandbox: fmt.Sprintf("sandbox-%d", seq)}
		mu.Unlock()
		res, err := call("ADD", p)
		if err != nil || len(res.IPs) != 1 {
			count(ops, failed)
			return p, false
		}
		got := res.IPs[0].Address.IP.String()
		if *address != "" && got != *address {
			violation("%s got %s, where it had %s before", who, got, *address)
		}
		*address = got
		holdForClaim(got, who)
		return p, true
	}

	// claimLifecycle: a VM's IPAMClaim, its pod on one node, the migration
	// target on another (same address), the source's DEL, the target's
	// DEL, the claim deleted: the controller releases what it held.
	claimLifecycle := func(name string) {
		claim := &ipamclaimsv1alpha1.IPAMClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "chaos", Name: name},
			Spec: ipamclaimsv1alpha1.IPAMClaimSpec{Network: "chaos", Interface: "net1"}}
		if err := c.Create(ctx, claim); err != nil {
			count(ops, "api-error")
			return
		}
		ann := map[string]string{"k8s.v1.cni.cncf.io/networks": fmt.Sprintf(`[{"name":"chaos","interface":"net1","ipam-claim-reference":%q}]`, name)}
		var pods []*livePod
		address := ""
		for i, suffix := range []string{"-source", "-target"} {
			node := nodes[(roll(len(nodes))+i)%len(nodes)]
			pod, err := testbed.CreatePod(ctx, c, "chaos", name+suffix, node, ann)
			if err != nil {
				count(ops, "api-error")
				break
			}
			p, added := addBound(pod, node, &address, "claim-add-failed", "claim "+name+suffix)
			pods = append(pods, p)
			if !added {
				break
			}
		}
		if len(pods) == 2 && address != "" {
			count(ops, "claim-migrate")
		}
		for _, p := range pods {
			teardown(p, time.Now().Add(2*time.Minute))
			deletePod(p.name)
		}
		letGo(address, claim)
		count(ops, "claim-delete")
	}

	// stickyLifecycle: a one-replica StatefulSet whose pods are sticky
	// (ipam.tenure.dev/sticky): its pod gets an address, is deleted with no
	// DEL and re-created under its name with a new UID on another node (as
	// the StatefulSet controller does), and must get the same address; then
	// its DEL, the pod and the StatefulSet go, and the controller releases
	// the sticky claim's addresses.
	stickyLifecycle := func(name string) {
		labels := map[string]string{"app": name}
		one := int32(1)
		sts := &appsv1.StatefulSet{
			ObjectMeta: metav1.ObjectMeta{Namespace: "chaos", Name: name},
			Spec: appsv1.StatefulSetSpec{Replicas: &one, Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
					Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}}}},
		}
		if err := c.Create(ctx, sts); err != nil {
			count(ops, "api-error")
			return
		}
		address := ""
		var last *livePod
		for round := range 2 {
			node := nodes[(roll(len(nodes))+round)%len(nodes)]
			yes := true
			pod := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Namespace: "chaos", Name: name + "-0", Labels: labels,
					Annotations:     map[string]string{"ipam.tenure.dev/sticky": "true"},
					OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "StatefulSet", Name: name, UID: sts.UID, Controller: &yes}}},
				Spec: corev1.PodSpec{NodeName: node, Containers: sts.Spec.Template.Spec.Containers},
			}
			if err := c.Create(ctx, pod); err != nil {
				count(ops, "api-error")
				break
			}
			p, added := addBound(pod, node, &address, "sticky-add-failed", "sticky "+name+"-0")
			last = p
			if !added {
				break
			}
			if round == 0 {
				deletePod(pod.Name) // no DEL: the StatefulSet controller re-creates it
				_ = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
					err := c.Get(ctx, client.ObjectKey{Namespace: "chaos", Name: pod.Name}, &corev1.Pod{})
					return apierrors.IsNotFound(err), nil
				})
			}
		}
		if last != nil {
			teardown(last, time.Now().Add(2*time.Minute))
			deletePod(last.name)
		}
		letGo(address, sts)
		count(ops, "sticky-statefulset")
	}

	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				switch x := roll(100); {
				case x < 30:
					add(fmt.Sprintf("w%d-%d", w, i), nodes[roll(len(nodes))], "")
				case x < 40:
					add(fmt.Sprintf("w%d-%d", w, i), nodes[roll(len(nodes))], fmt.Sprintf("10.88.0.%d", 1+roll(62)))
				case x < 45:
					claimLifecycle(fmt.Sprintf("w%d-%d", w, i))
				case x < 48:
					stickyLifecycle(fmt.Sprintf("sts-w%d-%d", w, i))
				case x < 65:
					if p := pickLive(); p != nil {
						if teardown(p, time.Now().Add(2*time.Minute)) {
							count(ops, "del")
						} else {
							violation("DEL of %s never succeeded", p.name)
						}
						deletePod(p.name)
					}
				case x < 80:
					if p := pickLive(); p != nil {
						_, err := call("CHECK", p)
						var cniErr *types.Error
						if errors.As(err, &cniErr) && cniErr.Code == 103 {
							violation("CHECK of live %s: %s", p.name, cniErr.Msg)
						}
						count(ops, "check")
						mu.Lock()
						live[p.name] = p
						mu.Unlock()
					}
				case x < 90:
					// The pod is deleted and no DEL ever runs (a node
					// lost its runtime's state): the controller releases.
					if p := pickLive(); p != nil {
						deletePod(p.name)
						count(ops, "delete-without-del")
					}
				default:
					// StatefulSet-style: the same name, a new UID, maybe
					// another node, the old sandbox never DELed.
					if p := pickLive(); p != nil {
						deletePod(p.name)
						_ = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
							err := c.Get(ctx, client.ObjectKey{Namespace: "chaos", Name: p.name}, &corev1.Pod{})
							return apierrors.IsNotFound(err), nil
						})
						add(p.name, nodes[roll(len(nodes))], "")
						count(ops, "recreate")
					}
				}
			}
		}()
	}

	// The fault injector.
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Duration(2000+roll(4000)) * time.Millisecond):
			}
			node := nodes[roll(len(nodes))]
			switch roll(5) {
			case 0:
				a := agentOf(node)
				a.Kill()
				restarted, err := testbed.StartAgent(ctx, bins, dir, a.Kubeconfig, node)
				if err != nil {
					violation("restarting agent %s: %v", node, err)
					continue
				}
				agentsMu.Lock()
				agents[node] = restarted
				agentsMu.Unlock()
				count(faults, "kill-agent")
			case 1:
				ctrlMu.Lock()
				ctrl.Kill()
				ctrl, err = startController()
				ctrlMu.Unlock()
				if err != nil {
					violation("restarting the controller: %v", err)
				}
				count(faults, "kill-controller")
			case 2:
				if err := cp.Crash(ctx, "kube-apiserver"); err != nil {
					violation("restarting kube-apiserver: %v", err)
				}
				count(faults, "crash-apiserver")
			case 3:
				if err := cp.Crash(ctx, "etcd"); err != nil {
					violation("restarting etcd: %v", err)
				}
				count(faults, "crash-etcd")
			case 4:
				a := agentOf(node)
				_ = a.Cmd.Process.Signal(syscall.SIGSTOP)
				time.Sleep(patience + 5*time.Second) // paused past the runtime's patience
				_ = a.Cmd.Process.Signal(syscall.SIGCONT)
				count(faults, "pause-agent")
			}
		}
	}()

	time.Sleep(*duration)
	close(stop)
	wg.Wait()

	// Settled: every agent serves, the controller has swept (2 s), and
	// the reservations are exactly the live pods'.
	for _, n := range nodes {
		if err := agentOf(n).WaitReady(ctx); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string]string{} // address -> sandbox
	mu.Lock()
	for _, p := range live {
		want[p.address] = p.sandbox
	}
	mu.Unlock()
	var leaked, missing []string
	err = wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		var list tenurev1alpha1.IPReservationList
		if err := c.List(ctx, &list); err != nil {
			return false, nil
		}
		leaked, missing = nil, nil
		held := map[string]bool{}
		for _, r := range list.Items {
			held[r.Spec.Address] = true
			if want[r.Spec.Address] != r.Spec.Owner.ContainerID {
				leaked = append(leaked, fmt.Sprintf("%s (pod %s, sandbox %s)", r.Spec.Address, r.Spec.Owner.Name, r.Spec.Owner.ContainerID))
			}
		}
		for a, sb := range want {
			if !held[a] {
				missing = append(missing, a+" of "+sb)
			}
		}
		return len(leaked) == 0 && len(missing) == 0, nil
	})
	for _, m := range missing {
		violation("a successful ADD's reservation is gone with no DEL or release to explain it: %s", m)
	}
	// And what an operator would run: `tenurectl check` must be clean.
	checked, err := tenureops.New(c).Check(ctx, tenureops.CheckOptions{NodeGracePeriod: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range checked.Findings {
		violation("tenurectl check: %+v", f)
	}
	mu.Lock()
	defer mu.Unlock()
	t.Logf("seed %d, %v: operations %v; faults %v; live pods %d; invariant violations %d; leaked reservations after sweep %d; duplicate addresses %d; tenurectl check findings %d over %d reservations",
		s, *duration, ops, faults, len(live), len(problems), len(leaked), countDuplicates(problems), len(checked.Findings), checked.Counts.Reservations)
	for _, p := range problems {
		t.Error(p)
	}
	for _, l := range leaked {
		t.Errorf("leaked after the sweep: %s", l)
	}
	if err != nil && len(problems) == 0 && len(leaked) == 0 {
		t.Error(err)
	}
	if ops["add"] == 0 || len(faults) == 0 {
		t.Errorf("the run did nothing to prove: operations %v, faults %v", ops, faults)
	}
}

func countDuplicates(problems []string) int {
	n := 0
	for _, p := range problems {
		if strings.Contains(p, "both hold") {
			n++
		}
	}
	return n
}

// installTenure installs the CRDs, the agents' RBAC and node-restriction
// policy, and the controller's RBAC.
func installTenure(ctx context.Context, cp *controlplane.ControlPlane) error {
	crds, err := fs.Sub(deploy.CRDs, "crds")
	if err != nil {
		return err
	}
	if err := controlplane.InstallCRDs(ctx, cp.Config, crds); err != nil {
		return err
	}
	_, err = testbed.InstallAgentAccess(ctx, cp.Config)
	return err
}
