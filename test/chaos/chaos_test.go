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
	"slices"
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
	"github.com/tenure-ipam/tenure/internal/kube"
	tenureops "github.com/tenure-ipam/tenure/internal/ops"
	"github.com/tenure-ipam/tenure/internal/reservation"
	"github.com/tenure-ipam/tenure/test/controlplane"
	"github.com/tenure-ipam/tenure/test/testbed"
)

var duration = flag.Duration("chaos.duration", 2*time.Minute, "how long workers and faults run")

// The runtime's patience for one CNI call here: short, so that an agent
// paused past it (SIGSTOP) makes the runtime give up, as a kubelet does
// after its runtime-request-timeout.
const patience = 15 * time.Second

// A chaos run: four agents and the controller; workers
// doing random ADD (retried in the same sandbox on "try again", as a
// runtime may), DEL and CHECK, pod deletions without DEL,
// StatefulSet-style re-creations under the same name, claims and sticky
// StatefulSets; a fault injector that kill -9s an agent or the controller
// and restarts it, crashes kube-apiserver or etcd (SIGKILL and restart),
// pauses an agent (SIGSTOP) past the runtime's patience, lets the API
// server commit a reservation create and resets the agent's connection
// before the answer (the agents reach the API server through a proxy),
// kill -9s kube-apiserver while a reservation create is in flight, and
// kill -9s it once a create is committed, before the answer. The
// first faults are every kind once, in a seeded order, and the run lasts
// until each has happened; then faults are drawn at random. Every run
// prints its seed (-chaos.seed reproduces the schedule of operations and
// faults, though not the processes' timing) and its count of each fault.
//
// Checked while it runs: no address answered to two holders (a pod's
// sandbox, a claim) at once, whatever the holders are doing (a CHECK
// included); after every ADD that answered, a live read finds exactly the
// answered reservation for its sandbox; after every "full", none; after
// every DEL that answered success, none. After the faults stop and the
// controller has swept: no orphan (every reservation is a live sandbox's,
// the one it was answered), no attachment with two reservations of one
// family, no reservation of a sandbox whose DEL succeeded, every answered
// reservation still there, and `tenurectl check` (ops.Check) finds nothing.
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

	dir, cp, c := ownControlPlane(ctx, t, "tenure-chaos-")
	if err := testbed.EnsureNamespace(ctx, c, "chaos"); err != nil {
		t.Fatal(err)
	}

	// The agents reach the API server through a proxy that injects no
	// fault of its own until the injector arms one.
	proxy := newProxy(t, cp.Config, s, 0, 0)
	nodes := []string{"chaos-a", "chaos-b", "chaos-c", "chaos-d"}
	agents := map[string]*testbed.Agent{}
	var agentsMu sync.Mutex
	for _, n := range nodes {
		if _, err := testbed.CreateNode(ctx, c, n); err != nil {
			t.Fatal(err)
		}
		kc, err := testbed.NodeAgentKubeconfig(ctx, cp.Config, n, dir)
		if err != nil {
			t.Fatal(err)
		}
		a, err := testbed.StartAgent(ctx, bins, dir, proxy.via(t, kc), n)
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
			"--kubeconfig", ctrlKC, "--leader-election-namespace", "tenure-system", "--sweep-interval", "2s",
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
		live     = map[string]*livePod{} // by pod name: the pods no worker is operating on
		ops      = map[string]int{}
		faults   = map[string]int{}
		problems []string
		seq      int
		// holds is every holder's answered address, by holder (a pod's
		// sandbox, a claim, a sticky StatefulSet's claim): a holder stays
		// in it while workers CHECK it, until its hold ends (its DEL
		// begins, or the deletion of what it is bound to is asked).
		holds = map[string]string{}
		// delOK: the sandboxes whose DEL answered success.
		delOK = map[string]bool{}
	)
	count := func(m map[string]int, k string) { mu.Lock(); m[k]++; mu.Unlock() }
	violation := func(format string, args ...any) {
		mu.Lock()
		problems = append(problems, fmt.Sprintf(format, args...))
		mu.Unlock()
	}
	// hold records that holder was answered address; any other holder of
	// it is a duplicate.
	hold := func(holder, address string) {
		mu.Lock()
		defer mu.Unlock()
		for other, a := range holds {
			if a == address && other != holder {
				problems = append(problems, fmt.Sprintf("%s and %s both hold %s", holder, other, address))
			}
		}
		holds[holder] = address
	}
	unhold := func(holder string) { mu.Lock(); delete(holds, holder); mu.Unlock() }
	podHolder := func(p *livePod) string { return "pod " + p.name + " (sandbox " + p.sandbox + ")" }

	// sandboxReservations reads from the API server (no cache) the
	// reservations pod p's sandbox holds, retrying through outages.
	sandboxReservations := func(p *livePod) ([]string, bool) {
		var held []string
		err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
			var list tenurev1alpha1.IPReservationList
			if err := c.List(ctx, &list, client.MatchingLabels{reservation.LabelOwnerUID: p.uid}); err != nil {
				count(ops, "api-error")
				return false, nil
			}
			held = nil
			for _, r := range list.Items {
				if r.Spec.Owner.Kind == tenurev1alpha1.OwnerPod && r.Spec.Owner.ContainerID == p.sandbox {
					held = append(held, r.Spec.Address)
				}
			}
			return true, nil
		})
		if err != nil {
			violation("reading the reservations of %s: %v", podHolder(p), err)
			return nil, false
		}
		sort.Strings(held)
		return held, true
	}

	call := func(cmd string, p *livePod) (*current.Result, error) {
		cctx, ccancel := context.WithTimeout(ctx, patience)
		defer ccancel()
		config := conf(agentOf(p.node), p.requested)
		if cmd == "CHECK" {
			// The runtime's CHECK carries what the ADD answered.
			config = []byte(strings.Replace(string(config), `"ipam":`,
				fmt.Sprintf(`"prevResult":{"cniVersion":"1.1.0","ips":[{"address":"%s/26"}]},"ipam":`, p.address), 1))
		}
		out, err := testbed.ExecShim(cctx, bins.Shim, testbed.CNICall{Command: cmd, ContainerID: p.sandbox, IfName: "net1",
			Args: testbed.PodArgs("chaos", p.name, p.uid), Config: config})
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
	// a failed DEL for as long as it takes). A DEL that answered success
	// must have left nothing of the sandbox: a live read says so. The
	// sandbox's hold ends as its DEL begins: the runtime DELs a sandbox
	// that no longer uses its address, and the agent frees the address
	// before its answer gets back, so another ADD may be answered it first.
	teardown := func(p *livePod, deadline time.Time) bool {
		unhold(podHolder(p))
		for time.Now().Before(deadline) {
			if _, err := call("DEL", p); err == nil {
				mu.Lock()
				delOK[p.sandbox] = true
				mu.Unlock()
				if left, ok := sandboxReservations(p); ok && len(left) > 0 {
					violation("DEL of %s answered success and left %v", podHolder(p), left)
				}
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
	// gone deletes a pod's object; its holds end as the deletion is
	// asked, since the controller may release what it held, and another
	// ADD be answered it, before the delete call returns.
	gone := func(p *livePod) {
		unhold(podHolder(p))
		deletePod(p.name)
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
		delete(live, p.name) // this worker owns it now; its hold stays
		return p
	}
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
		var res *current.Result
		var cniErr *types.Error
		for attempt := 0; ; attempt++ {
			res, err = call("ADD", p)
			// "Try again": the runtime may run the same ADD again, same
			// sandbox, before it gives up on the sandbox.
			if attempt < 3 && errors.As(err, &cniErr) && cniErr.Code == types.ErrTryAgainLater {
				count(ops, "add-retried-in-its-sandbox")
				time.Sleep(200 * time.Millisecond)
				continue
			}
			break
		}
		switch {
		case err == nil && len(res.IPs) == 1:
			p.address = res.IPs[0].Address.IP.String()
			if requested != "" && p.address != requested {
				violation("%s asked for %s and got %s", name, requested, p.address)
			}
			hold(podHolder(p), p.address)
			if held, ok := sandboxReservations(p); ok && !slices.Equal(held, []string{p.address}) {
				violation("ADD of %s answered %s, the API holds %v for the sandbox", podHolder(p), p.address, held)
			}
			mu.Lock()
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
			if cniErr.Code == 100 {
				if held, ok := sandboxReservations(p); ok && len(held) > 0 {
					violation("ADD of %s was told %q while the sandbox holds %v", podHolder(p), cniErr.Msg, held)
				}
			}
		default:
			count(ops, "add-failed-runtime-timeout")
		}
		// The runtime tears the sandbox down and gives up on the pod.
		teardown(p, time.Now().Add(2*time.Minute))
		gone(p)
	}

	// letGo ends a claim's hold and deletes the object the address was
	// bound to (the claim, the StatefulSet), retrying through faults; the
	// controller then releases the address.
	letGo := func(holder string, owner client.Object) {
		unhold(holder)
		_ = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
			err := c.Delete(ctx, owner)
			return err == nil || apierrors.IsNotFound(err), nil
		})
	}

	// addBound runs the ADD of a new sandbox of pod on node for an address
	// bound to holder, something other than the pod (a claim, a sticky
	// StatefulSet ordinal): every ADD must return the address the earlier
	// ones did. It records the address in *address and reports whether the
	// ADD succeeded (failures counted under failed).
	addBound := func(pod *corev1.Pod, node string, address *string, failed, holder string) (*livePod, bool) {
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
			violation("%s got %s, where it had %s before", holder, got, *address)
		}
		*address = got
		hold(holder, got)
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
			p, added := addBound(pod, node, &address, "claim-add-failed", "claim "+name)
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
			gone(p)
		}
		letGo("claim "+name, claim)
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
		holder := "sticky " + name + "-0"
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
			p, added := addBound(pod, node, &address, "sticky-add-failed", holder)
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
			gone(last)
		}
		letGo(holder, sts)
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
						gone(p)
					}
				case x < 80:
					if p := pickLive(); p != nil {
						_, err := call("CHECK", p)
						var cniErr *types.Error
						switch {
						case err == nil:
							count(ops, "check")
						case errors.As(err, &cniErr) && cniErr.Code == 103:
							violation("CHECK of live %s: %s", p.name, cniErr.Msg)
						case errors.As(err, &cniErr):
							count(ops, fmt.Sprintf("check-failed-code-%d", cniErr.Code))
						default:
							count(ops, "check-failed-runtime-timeout")
						}
						mu.Lock()
						live[p.name] = p
						mu.Unlock()
					}
				case x < 90:
					// The pod is deleted and no DEL ever runs (a node
					// lost its runtime's state): the controller releases.
					if p := pickLive(); p != nil {
						gone(p)
						count(ops, "delete-without-del")
					}
				default:
					// StatefulSet-style: the same name, a new UID, maybe
					// another node, the old sandbox never DELed.
					if p := pickLive(); p != nil {
						gone(p)
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

	// The fault injector. Each kind happens at least once, in a seeded
	// order, before any is drawn at random; the workers run until then.
	kinds := []string{"kill-agent", "kill-controller", "crash-apiserver", "crash-etcd", "pause-agent",
		"drop-after-commit", "kill-apiserver-in-create", "kill-apiserver-after-commit"}
	rndMu.Lock()
	firstRound := rnd.Perm(len(kinds))
	rndMu.Unlock()
	everyKind := make(chan struct{})
	// armed waits up to a minute for an armed proxy fault to fire, which
	// needs a worker's reservation create.
	armed := func(fired func() bool) bool {
		return wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
			return fired(), nil
		}) == nil
	}
	// killed waits for a kill the proxy was armed with to have run and
	// restarted kube-apiserver; disarm reports whether it had not fired.
	killed := func(done chan error, disarm func() bool) bool {
		var err error
		fired := armed(func() bool {
			select {
			case err = <-done:
				return true
			default:
				return false
			}
		})
		if !fired {
			if disarm() {
				return false
			}
			err = <-done // it fired as the wait ended
		}
		if err != nil {
			violation("restarting kube-apiserver: %v", err)
		}
		return true
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			if i >= len(firstRound) {
				select {
				case <-stop:
					return
				default:
				}
			}
			select {
			case <-stop:
				return
			case <-time.After(time.Duration(2000+roll(4000)) * time.Millisecond):
			}
			node := nodes[roll(len(nodes))]
			kind := kinds[roll(len(kinds))]
			if i < len(firstRound) {
				kind = kinds[firstRound[i]]
			}
			switch kind {
			case "kill-agent":
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
				count(faults, kind)
			case "kill-controller":
				ctrlMu.Lock()
				ctrl.Kill()
				ctrl, err = startController()
				ctrlMu.Unlock()
				if err != nil {
					violation("restarting the controller: %v", err)
				}
				count(faults, kind)
			case "crash-apiserver":
				if err := cp.Crash(ctx, "kube-apiserver"); err != nil {
					violation("restarting kube-apiserver: %v", err)
				}
				count(faults, kind)
			case "crash-etcd":
				if err := cp.Crash(ctx, "etcd"); err != nil {
					violation("restarting etcd: %v", err)
				}
				count(faults, kind)
			case "pause-agent":
				a := agentOf(node)
				_ = a.Cmd.Process.Signal(syscall.SIGSTOP)
				time.Sleep(patience + 5*time.Second) // paused past the runtime's patience
				_ = a.Cmd.Process.Signal(syscall.SIGCONT)
				count(faults, kind)
			case "drop-after-commit":
				before := proxy.droppedAfterCommit.Load()
				proxy.DropAfterCommit(1)
				if armed(func() bool { return proxy.droppedAfterCommit.Load() > before }) {
					count(faults, kind)
				}
			case "kill-apiserver-in-create":
				done := make(chan error, 1)
				proxy.OnCreate(func(int64) { done <- cp.Crash(ctx, "kube-apiserver") })
				if killed(done, func() bool { return proxy.createHook.Swap(nil) != nil }) {
					count(faults, kind)
				}
			case "kill-apiserver-after-commit":
				done := make(chan error, 1)
				proxy.AfterCommit(func() { done <- cp.Crash(ctx, "kube-apiserver") })
				if killed(done, func() bool { return proxy.commitHook.Swap(nil) != nil }) {
					count(faults, kind)
				}
			}
			if i == len(firstRound)-1 {
				close(everyKind)
			}
		}
	}()

	time.Sleep(*duration)
	select {
	case <-everyKind:
	case <-ctx.Done():
	}
	close(stop)
	wg.Wait()
	// A drop armed as the run ended may still have fired.
	mu.Lock()
	faults["drop-after-commit"] = int(proxy.droppedAfterCommit.Load())
	mu.Unlock()

	// Settled: every agent serves, the controller has swept (2 s), and
	// the reservations are exactly the live pods'.
	for _, n := range nodes {
		if err := agentOf(n).WaitReady(ctx); err != nil {
			t.Fatal(err)
		}
	}
	answered := map[string]string{} // sandbox -> address
	mu.Lock()
	for _, p := range live {
		answered[p.sandbox] = p.address
	}
	for h, a := range holds {
		if !strings.HasPrefix(h, "pod ") {
			problems = append(problems, fmt.Sprintf("%s still holds %s after the run", h, a))
		}
	}
	mu.Unlock()
	var orphans, missing, doubles, delLeft []string
	err = wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		var list tenurev1alpha1.IPReservationList
		if err := c.List(ctx, &list); err != nil {
			return false, nil
		}
		orphans, missing, doubles, delLeft = nil, nil, nil, nil
		held := map[string]string{} // sandbox -> address
		perFamily := map[string][]string{}
		for _, r := range list.Items {
			o := r.Spec.Owner
			desc := fmt.Sprintf("%s (%s %s/%s, sandbox %s)", r.Spec.Address, o.Kind, o.Namespace, o.Name, o.ContainerID)
			attachment := string(o.Kind) + "/" + o.UID + "/" + o.Interface
			if o.Kind == tenurev1alpha1.OwnerPod {
				attachment += "/" + o.ContainerID
				held[o.ContainerID] = r.Spec.Address
				mu.Lock()
				if delOK[o.ContainerID] {
					delLeft = append(delLeft, desc)
				}
				mu.Unlock()
			}
			if o.Kind != tenurev1alpha1.OwnerPod || answered[o.ContainerID] != r.Spec.Address {
				orphans = append(orphans, desc)
			}
			family := "IPv4"
			if strings.Contains(r.Spec.Address, ":") {
				family = "IPv6"
			}
			perFamily[attachment+"/"+family] = append(perFamily[attachment+"/"+family], desc)
		}
		for k, rs := range perFamily {
			if len(rs) > 1 {
				doubles = append(doubles, fmt.Sprintf("%s: %v", k, rs))
			}
		}
		for sb, a := range answered {
			if held[sb] != a {
				missing = append(missing, a+" of "+sb)
			}
		}
		return len(orphans) == 0 && len(missing) == 0 && len(doubles) == 0 && len(delLeft) == 0, nil
	})
	for _, m := range missing {
		violation("a successful ADD's reservation is gone with no DEL or release to explain it: %s", m)
	}
	for _, d := range doubles {
		violation("an attachment holds two reservations of a family: %s", d)
	}
	for _, d := range delLeft {
		violation("a reservation of a sandbox whose DEL answered success: %s", d)
	}
	// And what an operator would run: `tenurectl check` must be clean.
	checked, err2 := tenureops.New(c).Check(ctx, tenureops.CheckOptions{NodeGracePeriod: 3 * time.Second})
	if err2 != nil {
		t.Fatal(err2)
	}
	for _, f := range checked.Findings {
		violation("tenurectl check: %+v", f)
	}
	mu.Lock()
	defer mu.Unlock()
	t.Logf("seed %d, %v: operations %v; live pods %d; invariant violations %d; orphans after sweep %d; duplicate addresses %d; attachments with two reservations of a family %d; reservations left by a successful DEL %d; tenurectl check findings %d over %d reservations",
		s, *duration, ops, len(live), len(problems), len(orphans), countDuplicates(problems), len(doubles), len(delLeft), len(checked.Findings), checked.Counts.Reservations)
	t.Logf("faults by kind: %s", perKind(faults, kinds))
	for _, p := range problems {
		t.Error(p)
	}
	for _, o := range orphans {
		t.Errorf("orphan after the sweep (no live sandbox was answered it): %s", o)
	}
	if err != nil && len(problems) == 0 && len(orphans) == 0 {
		t.Error(err)
	}
	for _, k := range kinds {
		if faults[k] == 0 {
			t.Errorf("fault %s never happened: faults %v", k, faults)
		}
	}
	if ops["add"] == 0 {
		t.Errorf("the run did nothing to prove: operations %v", ops)
	}
}

// perKind prints the count of each kind, in kinds' order, then any other
// key of counts.
func perKind(counts map[string]int, kinds []string) string {
	var parts []string
	for _, k := range kinds {
		parts = append(parts, fmt.Sprintf("%s=%d", k, counts[k]))
	}
	var rest []string
	for k, n := range counts {
		if !slices.Contains(kinds, k) {
			rest = append(rest, fmt.Sprintf("%s=%d", k, n))
		}
	}
	sort.Strings(rest)
	return strings.Join(append(parts, rest...), " ")
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

// ownControlPlane starts a control plane of the test's own (a chaos test
// kills its kube-apiserver) with tenure's CRDs and policy installed, in a
// directory named for prefix that is kept, with the logs in it, when the
// test fails.
func ownControlPlane(ctx context.Context, t *testing.T, prefix string) (dir string, cp *controlplane.ControlPlane, c client.WithWatch) {
	t.Helper()
	dir, err := os.MkdirTemp("", prefix)
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
	cp, err = controlplane.Start(ctx, controlplane.Options{Dir: filepath.Join(dir, "cp")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cp.Stop() })
	if err := installTenure(ctx, cp); err != nil {
		t.Fatal(err)
	}
	if c, err = kube.NewClient(cp.Config); err != nil {
		t.Fatal(err)
	}
	return dir, cp, c
}
