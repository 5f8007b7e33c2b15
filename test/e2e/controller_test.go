//go:build integration

package e2e

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/resourceversion"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipamclaimsv1alpha1 "github.com/tenure-ipam/tenure/api/ipamclaims/v1alpha1"
	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/controller"
	"github.com/tenure-ipam/tenure/internal/controller/repair"
	"github.com/tenure-ipam/tenure/internal/reservation"
	"github.com/tenure-ipam/tenure/test/controlplane/cptest"
	"github.com/tenure-ipam/tenure/test/testbed"
)

// addAll runs ADD for every pod, concurrency at a time.
func addAll(t *testing.T, ctx context.Context, pods []pod, conf func(pod) []byte, concurrency int) {
	t.Helper()
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(concurrency)
	for _, p := range pods {
		g.Go(func() error {
			if _, err := add(gctx, p, conf(p)); err != nil {
				return fmt.Errorf("ADD %s on %s: %w", p.name, p.node, err)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
}

// byOwnerUID maps pod UID to the names and object UIDs of its reservations.
func byOwnerUID(t *testing.T, ctx context.Context, network string) map[string]map[string]string {
	t.Helper()
	out := map[string]map[string]string{}
	for _, r := range reservationsOf(t, ctx, network) {
		m := out[r.Spec.Owner.UID]
		if m == nil {
			m = map[string]string{}
			out[r.Spec.Owner.UID] = m
		}
		m[r.Name] = string(r.UID)
	}
	return out
}

func TestControllerHardNodeLoss(t *testing.T) {
	begin := time.Now()
	ctx := testContext(t, 4*time.Minute)
	c := apiClient(t)
	const network, ns, perNode = "hardloss", "e2e-hardloss", 50
	agents := startAgents(t, ctx, "hl-a", "hl-b")
	conf := func(p pod) []byte {
		return netconf(network, agents[p.node].Socket, `{"range":"10.60.0.0/23","network_name":"hardloss"}`)
	}
	var onA, onB []pod
	for range perNode {
		onA = append(onA, newPod(t, ctx, c, ns, "hl-a", nil))
		onB = append(onB, newPod(t, ctx, c, ns, "hl-b", nil))
	}
	addAll(t, ctx, append(append([]pod{}, onA...), onB...), conf, 20)
	// Where the test's time goes, should its deadline pass on a busy machine.
	t.Logf("agents started, %d pods created and added %v after the start", 2*perNode, time.Since(begin).Round(time.Millisecond))
	before := byOwnerUID(t, ctx, network)
	if len(before) != 2*perNode {
		t.Fatalf("%d pods hold reservations, want %d", len(before), 2*perNode)
	}

	ctrl := ctlStart(t, ctx, "e2e-hardloss", "--sweep-interval", "1m")
	ctrl.waitLeading(t, ctx)

	// Node B dies hard: its agent is killed, the node goes NotReady, and its
	// pods are force-deleted without any CNI DEL.
	agents["hl-b"].Kill()
	if err := testbed.SetNodeReady(ctx, c, "hl-b", false); err != nil {
		t.Fatal(err)
	}
	lost := time.Now()
	for _, p := range onB {
		if err := testbed.ForceDeletePod(ctx, c, p.ns, p.name); err != nil {
			t.Fatal(err)
		}
	}
	deadline, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	ctlPoll(t, deadline, "node B's 50 reservations released", func() (bool, error) {
		left := 0
		for _, r := range reservationsOf(t, ctx, network) {
			if r.Spec.Owner.Node == "hl-b" {
				left++
			}
		}
		return left == 0, nil
	})
	t.Logf("node B's %d reservations released %v after the node was lost (watch-driven; the sweep interval is 1m)", perNode, time.Since(lost).Round(time.Millisecond))

	after := byOwnerUID(t, ctx, network)
	for _, p := range onA {
		if fmt.Sprint(after[p.uid]) != fmt.Sprint(before[p.uid]) || len(after[p.uid]) != 1 {
			t.Errorf("pod %s on node A: reservations %v, before the loss %v", p.name, after[p.uid], before[p.uid])
		}
	}
	if len(after) != perNode {
		t.Errorf("%d owners hold reservations, want node A's %d", len(after), perNode)
	}
	// The counter moves right after the delete is acknowledged, a moment
	// after the list above can see it. (Its own wait: the 30 s above bound
	// the release, not a scrape on a loaded machine.)
	// The reason is PodGone: a pod the live read catches between its
	// deletion's two steps (deletionTimestamp set, on a node NotReady and
	// not fenced) keeps its address until it is gone.
	lossReasons := []repair.Reason{repair.PodGone}
	var byReason map[string]float64
	defer func() {
		if t.Failed() {
			t.Logf("tenure_releases_total by reason at the last scrape: %v", byReason)
		}
	}()
	ctlPoll(t, ctx, "tenure_releases_total{reason=PodGone} >= 50", func() (bool, error) {
		text, err := ctrl.scrape()
		if err != nil {
			return false, err
		}
		m, err := testbed.ParseMetrics(text)
		if err != nil {
			return false, err
		}
		byReason = map[string]float64{}
		for _, r := range repair.Reasons {
			byReason[string(r)], _ = m.Sum("tenure_releases_total", fmt.Sprintf("reason=%q", r))
		}
		return byReason[string(repair.PodGone)] >= perNode, nil
	})
	// One Event per release. With no pool and the pod gone, it is about
	// the reservation (namespace default); its message names the
	// reservation.
	seen := map[string]bool{}
	var sample []string
	defer func() {
		if t.Failed() {
			t.Logf("%d release events seen, e.g. %q", len(seen), sample)
		}
	}()
	ctlPoll(t, deadline, "release events", func() (bool, error) {
		for _, evNS := range []string{"default", ns} {
			evs := &corev1.EventList{}
			if err := c.List(ctx, evs, client.InNamespace(evNS)); err != nil {
				return false, err
			}
			for _, e := range evs.Items {
				_, rest, named := strings.Cut(e.Message, "(IPReservation ")
				name, _, _ := strings.Cut(rest, ")")
				if e.Reason == controller.EventReason && named && strings.Contains(e.Message, "network hardloss") &&
					slices.ContainsFunc(lossReasons, func(r repair.Reason) bool { return strings.Contains(e.Message, ": "+string(r)+": ") }) {
					seen[name] = true
					if len(sample) < 2 {
						sample = append(sample, e.Message)
					}
				}
			}
		}
		return len(seen) >= perNode, nil
	})
}

// With --release-unfenced, the terminating pods of a node NotReady for the
// grace period would lose their addresses though the node is not fenced,
// once an agent of another Ready node heard nothing answer for them on the
// wire; here no agent runs the wire check, so the controller asks (an
// IPProbe per address) and keeps them, saying so. Those of a deleted node
// are released, with or without it; live pods, and terminating pods on a
// Ready node, keep theirs. (The release on a silent probe:
// TestGracePeriodReleaseWaitsWhileTheAddressAnswers.)
func TestControllerTerminatingPodsOnLostNodes(t *testing.T) {
	ctx := testContext(t, 3*time.Minute)
	c := apiClient(t)
	const network, ns = "tlost", "e2e-tlost"
	agents := startAgents(t, ctx, "tl-ready", "tl-notready", "tl-deleted")
	conf := func(p pod) []byte {
		return netconf(network, agents[p.node].Socket, `{"range":"10.61.0.0/24","network_name":"tlost"}`)
	}
	pods := map[string][]pod{}
	var all []pod
	for _, n := range []string{"tl-ready", "tl-notready", "tl-deleted"} {
		for range 4 {
			p := newPod(t, ctx, c, ns, n, nil)
			pods[n] = append(pods[n], p)
			all = append(all, p)
		}
	}
	addAll(t, ctx, all, conf, 8)
	before := byOwnerUID(t, ctx, network)

	const grace = 3 * time.Second
	ctrl := ctlStart(t, ctx, "e2e-tlost", "--release-unfenced", "--node-grace-period", grace.String(), "--sweep-interval", "1s")
	ctrl.waitLeading(t, ctx)

	agents["tl-notready"].Kill()
	agents["tl-deleted"].Kill()
	if err := testbed.SetNodeReady(ctx, c, "tl-notready", false); err != nil {
		t.Fatal(err)
	}
	down := time.Now()
	if err := c.Delete(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "tl-deleted"}}); err != nil {
		t.Fatal(err)
	}
	// Half the pods of each node are deleted gracefully: without a kubelet
	// to confirm, they stay Terminating for good.
	terminating := map[string]bool{}
	for _, n := range []string{"tl-ready", "tl-notready", "tl-deleted"} {
		for _, p := range pods[n][:2] {
			if err := c.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: p.ns, Name: p.name}}); err != nil {
				t.Fatal(err)
			}
			got := &corev1.Pod{}
			if err := c.Get(ctx, client.ObjectKey{Namespace: p.ns, Name: p.name}, got); err != nil || got.DeletionTimestamp == nil {
				t.Fatalf("pod %s is not Terminating: %v", p.name, err)
			}
			terminating[p.uid] = true
		}
	}
	isReleased := func(p pod) bool {
		cur := byOwnerUID(t, ctx, network)
		return len(cur[p.uid]) == 0
	}
	ctlPoll(t, ctx, "terminating pods of the deleted node released", func() (bool, error) {
		return isReleased(pods["tl-deleted"][0]) && isReleased(pods["tl-deleted"][1]), nil
	})
	// Past the grace period, the controller asks the wire about each
	// address of the NotReady node's terminating pods, and of no other.
	wantProbes := map[string]bool{}
	for _, p := range pods["tl-notready"][:2] {
		for name := range before[p.uid] {
			wantProbes[name] = true
		}
	}
	ctlPoll(t, ctx, "an IPProbe of each address of the NotReady node's terminating pods", func() (bool, error) {
		return probesOf(t, ctx, c, wantProbes) == len(wantProbes), nil
	})
	// The Ready condition's lastTransitionTime has one-second resolution.
	if waited := time.Since(down); waited < grace-time.Second {
		t.Errorf("the NotReady node's addresses were asked about after %v, before the %v grace period", waited, grace)
	}
	// Two more full sweeps: what is live stays, on every node.
	ctrl.waitSweepAfter(t, ctx, time.Now().Add(time.Second))
	after := byOwnerUID(t, ctx, network)
	for _, p := range all {
		released := len(after[p.uid]) == 0
		wantReleased := terminating[p.uid] && p.node == "tl-deleted"
		if released != wantReleased {
			t.Errorf("pod %s on %s (terminating %v): released %v, want %v", p.name, p.node, terminating[p.uid], released, wantReleased)
		}
		if !released && fmt.Sprint(after[p.uid]) != fmt.Sprint(before[p.uid]) {
			t.Errorf("pod %s: reservations changed from %v to %v", p.name, before[p.uid], after[p.uid])
		}
	}
	for reason, want := range map[string]float64{"NodeDeleted": 2, "NodeNotReady": 0} {
		if n, _ := ctrl.metric(t, "tenure_releases_total", `reason="`+reason+`"`); n != want {
			t.Errorf("tenure_releases_total{reason=%s} = %v, want %v", reason, n, want)
		}
	}
	if n := probesOf(t, ctx, c, wantProbes); n != len(wantProbes) {
		t.Errorf("%d of the IPProbes %v remain, want all", n, wantProbes)
	}
	// The Event is on the pod, which still exists: it waits for the node to
	// be fenced, the wire check being off on every other node.
	p := pods["tl-notready"][0]
	ctlPoll(t, ctx, "a WaitingForFence event on the terminating pod", func() (bool, error) {
		evs := &corev1.EventList{}
		if err := c.List(ctx, evs, client.InNamespace(ns)); err != nil {
			return false, err
		}
		for _, e := range evs.Items {
			if e.Reason == controller.EventReasonFenceWait && e.InvolvedObject.Kind == "Pod" && e.InvolvedObject.Name == p.name &&
				strings.Contains(e.Message, "to be fenced") {
				return true, nil
			}
		}
		return false, nil
	})
}

// probesOf counts the IPProbes of the given names that exist.
func probesOf(t *testing.T, ctx context.Context, c client.Client, names map[string]bool) int {
	t.Helper()
	l := &tenurev1alpha1.IPProbeList{}
	if err := c.List(ctx, l); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, p := range l.Items {
		if names[p.Name] && p.DeletionTimestamp == nil {
			n++
		}
	}
	return n
}

// statefulPod creates a pod with a fixed name, as a StatefulSet does.
func statefulPod(t *testing.T, ctx context.Context, c client.Client, ns, name, node, sandbox string) pod {
	t.Helper()
	if err := testbed.EnsureNamespace(ctx, c, ns); err != nil {
		t.Fatal(err)
	}
	p, err := testbed.CreatePod(ctx, c, ns, name, node, nil)
	if err != nil {
		t.Fatal(err)
	}
	return pod{ns: ns, name: name, uid: string(p.UID), node: node, containerID: sandbox + "-" + string(p.UID)}
}

func TestControllerStatefulSetChurn(t *testing.T) {
	ctx := testContext(t, 2*time.Minute)
	c := apiClient(t)
	const network, ns = "stschurn", "e2e-sts"
	agents := startAgents(t, ctx, "sts-a")
	conf := netconf(network, agents["sts-a"].Socket, `{"range":"10.63.0.0/24","network_name":"stschurn"}`)

	old := statefulPod(t, ctx, c, ns, "db-0", "sts-a", "sandbox-1")
	r1, err := add(ctx, old, conf)
	if err != nil {
		t.Fatal(err)
	}
	if err := testbed.ForceDeletePod(ctx, c, ns, "db-0"); err != nil {
		t.Fatal(err)
	}
	cur := statefulPod(t, ctx, c, ns, "db-0", "sts-a", "sandbox-2")
	if cur.uid == old.uid {
		t.Fatal("the recreated pod has the old UID")
	}
	r2, err := add(ctx, cur, conf)
	if err != nil {
		t.Fatal(err)
	}
	oldName, newName := reservationName(network, addrs(r1)[0]), reservationName(network, addrs(r2)[0])
	if oldName == newName {
		t.Fatalf("both pods got %s", oldName)
	}
	held := present(t, ctx, network)
	newUID := held[newName]
	if held[oldName] == "" || newUID == "" {
		t.Fatalf("reservations before the controller runs: %v", held)
	}

	ctrl := ctlStart(t, ctx, "e2e-sts", "--sweep-interval", "1s")
	ctlPoll(t, ctx, "db-0 uid 1's reservation released", func() (bool, error) {
		_, ok := present(t, ctx, network)[oldName]
		return !ok, nil
	})
	ctrl.waitSweepAfter(t, ctx, time.Now())
	if got := present(t, ctx, network); got[newName] != newUID || len(got) != 1 {
		t.Fatalf("after release and a full sweep: %v; want only %s (uid %s), the new db-0's", got, newName, newUID)
	}
	if n, _ := ctrl.metric(t, "tenure_releases_total", `reason="PodReplaced"`); n != 1 {
		t.Errorf("tenure_releases_total{reason=PodReplaced} = %v, want 1", n)
	}
}

func TestControllerReleasesEarlierSandbox(t *testing.T) {
	ctx := testContext(t, 2*time.Minute)
	c := apiClient(t)
	const network, ns = "sandbox", "e2e-sandbox"
	agents := startAgents(t, ctx, "sb-a")
	conf := netconf(network, agents["sb-a"].Socket, `{"ipRanges":[{"range":"10.64.0.0/24"},{"range":"fd00:64::/64"}],"network_name":"sandbox"}`)
	ctrl := ctlStart(t, ctx, "e2e-sandbox", "--sweep-interval", "1s")
	ctrl.waitLeading(t, ctx)

	p := newPod(t, ctx, c, ns, "sb-a", nil)
	first := p
	first.containerID = "crashed-" + p.uid
	r1, err := add(ctx, first, conf)
	if err != nil {
		t.Fatal(err)
	}
	// The runtime crashed mid-ADD: no DEL for the first sandbox. A second
	// sandbox of the same pod gets new addresses.
	second := p
	second.containerID = "retry-" + p.uid
	r2, err := add(ctx, second, conf)
	if err != nil {
		t.Fatal(err)
	}
	var oldNames, newNames []string
	for _, a := range addrs(r1) {
		oldNames = append(oldNames, reservationName(network, a))
	}
	for _, a := range addrs(r2) {
		newNames = append(newNames, reservationName(network, a))
	}
	if len(oldNames) != 2 || len(newNames) != 2 {
		t.Fatalf("want dual-stack: %v %v", addrs(r1), addrs(r2))
	}
	ctlPoll(t, ctx, "the earlier sandbox's reservations released", func() (bool, error) {
		got := present(t, ctx, network)
		return got[oldNames[0]] == "" && got[oldNames[1]] == "", nil
	})
	ctrl.waitSweepAfter(t, ctx, time.Now())
	got := present(t, ctx, network)
	if len(got) != 2 || got[newNames[0]] == "" || got[newNames[1]] == "" {
		t.Fatalf("after a full sweep: %v, want exactly the second sandbox's %v", got, newNames)
	}
	if n, _ := ctrl.metric(t, "tenure_releases_total", `reason="EarlierSandbox"`); n != 2 {
		t.Errorf("tenure_releases_total{reason=EarlierSandbox} = %v, want 2", n)
	}
	ctlPoll(t, ctx, "event on the pod", func() (bool, error) {
		evs := &corev1.EventList{}
		if err := c.List(ctx, evs, client.InNamespace(ns)); err != nil {
			return false, err
		}
		n := 0
		for _, e := range evs.Items {
			if e.Reason == controller.EventReason && e.InvolvedObject.Name == p.name && string(e.InvolvedObject.UID) == p.uid {
				n++
			}
		}
		return n == 2, nil
	})
}

func TestControllerNeverReleasesLiveReservationsDuringConcurrentAdds(t *testing.T) {
	ctx := testContext(t, 4*time.Minute)
	c := apiClient(t)
	const network, ns, total = "racectl", "e2e-racectl", 200
	nodes := []string{"rc-a", "rc-b"}
	agents := startAgents(t, ctx, nodes...)
	if err := testbed.EnsureNamespace(ctx, c, ns); err != nil {
		t.Fatal(err)
	}
	conf := func(p pod) []byte {
		return netconf(network, agents[p.node].Socket, `{"range":"10.65.0.0/23","network_name":"racectl"}`)
	}
	ctrl := ctlStart(t, ctx, "e2e-racectl", "--sweep-interval", "200ms")
	ctrl.waitLeading(t, ctx)

	type held struct{ name, ownerUID string }
	var (
		mu       sync.Mutex
		returned []held
		problems []string
	)
	// Poll the API server while the ADDs run: every address an ADD has
	// returned must still have its reservation, owned by its pod.
	stopPoll := make(chan struct{})
	// polls counts the polls that checked at least one returned address.
	pollDone := make(chan int)
	go func() {
		polls := 0
		defer func() { pollDone <- polls }()
		for {
			select {
			case <-stopPoll:
				return
			case <-time.After(50 * time.Millisecond):
			}
			mu.Lock()
			snapshot := append([]held(nil), returned...)
			mu.Unlock()
			list := &tenurev1alpha1.IPReservationList{}
			if err := c.List(ctx, list, client.MatchingLabels{reservation.LabelNetwork: network}); err != nil {
				mu.Lock()
				problems = append(problems, fmt.Sprintf("poll %d: listing the reservations: %v", polls, err))
				mu.Unlock()
				return
			}
			if len(snapshot) == 0 {
				continue
			}
			owner := map[string]string{}
			for _, r := range list.Items {
				owner[r.Name] = r.Spec.Owner.UID
			}
			for _, h := range snapshot {
				if owner[h.name] != h.ownerUID {
					mu.Lock()
					problems = append(problems, fmt.Sprintf("poll %d: %s (pod uid %s) has owner %q", polls, h.name, h.ownerUID, owner[h.name]))
					mu.Unlock()
				}
			}
			polls++
		}
	}()

	// Each pod is created just before its ADD, so the controller's pod
	// cache often learns of the reservation before the pod.
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(50)
	for i := range total {
		node := nodes[i%len(nodes)]
		g.Go(func() error {
			name := fmt.Sprintf("race-%d", i)
			po, err := testbed.CreatePod(gctx, c, ns, name, node, nil)
			if err != nil {
				return err
			}
			p := pod{ns: ns, name: name, uid: string(po.UID), node: node, containerID: "race-sandbox-" + string(po.UID)}
			r, err := add(gctx, p, conf(p))
			if err != nil {
				return fmt.Errorf("ADD %s: %w", name, err)
			}
			mu.Lock()
			returned = append(returned, held{reservationName(network, addrs(r)[0]), p.uid})
			mu.Unlock()
			return nil
		})
	}
	err := g.Wait()
	end := time.Now()
	ctrl.waitSweepAfter(t, ctx, end.Add(500*time.Millisecond)) // several sweeps after the last ADD
	close(stopPoll)
	polls := <-pollDone
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Error(p)
	}
	if polls == 0 {
		t.Error("no poll checked a returned address while the ADDs ran")
	}
	got := reservationsOf(t, ctx, network)
	owner := map[string]string{}
	for _, r := range got {
		owner[r.Name] = r.Spec.Owner.UID
	}
	for _, h := range returned {
		if owner[h.name] != h.ownerUID {
			t.Errorf("%s (pod uid %s) now has owner %q", h.name, h.ownerUID, owner[h.name])
		}
	}
	if len(returned) != total || len(got) != total {
		t.Errorf("%d ADDs returned, %d reservations, want %d", len(returned), len(got), total)
	}
	logText, _ := os.ReadFile(ctrl.Log)
	nominated := strings.Count(string(logText), "the cache nominated a reservation that the live read keeps")
	t.Logf("%d polls during the ADDs; all %d reservations survived sweeps every 200ms; %d times a cache nominated a live reservation and the live read kept it",
		polls, total, nominated)
}

func TestControllerClaimDeletion(t *testing.T) {
	ctx := testContext(t, 3*time.Minute)
	c := apiClient(t)
	const network, ns = "ctlclaim", "e2e-ctlclaim"
	if err := testbed.EnsureNamespace(ctx, c, ns); err != nil {
		t.Fatal(err)
	}
	// makeClaim creates a claim holding an address and a delegated prefix,
	// recorded in its status, as an agent's ADD leaves it.
	makeClaim := func(name, addr, prefix string) (*ipamclaimsv1alpha1.IPAMClaim, []string) {
		t.Helper()
		cl := &ipamclaimsv1alpha1.IPAMClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: ipamclaimsv1alpha1.IPAMClaimSpec{Network: network, Interface: "net1"}}
		if err := c.Create(ctx, cl); err != nil {
			t.Fatal(err)
		}
		cl.Status.IPs = []string{addr + "/24"}
		cl.Status.DelegatedPrefixes = []string{prefix}
		if err := c.Status().Update(ctx, cl); err != nil {
			t.Fatal(err)
		}
		owner := tenurev1alpha1.ReservationOwner{Kind: tenurev1alpha1.OwnerIPAMClaim, Namespace: ns, Name: name, UID: string(cl.UID),
			PodName: "virt-launcher-" + name, PodUID: "pod-of-" + name, ContainerID: "sandbox-" + name, Interface: "net1", Node: "claim-node"}
		a := ctlReservation(t, ctx, c, network, addr, owner)
		p := ctlReservation(t, ctx, c, network, prefix, owner)
		return cl, []string{a.Name, p.Name}
	}
	claimGone := func(name string) bool {
		err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &ipamclaimsv1alpha1.IPAMClaim{})
		return apierrors.IsNotFound(err)
	}
	waitFinalizer := func(name string) {
		ctlPoll(t, ctx, "finalizer on "+name, func() (bool, error) {
			cl := &ipamclaimsv1alpha1.IPAMClaim{}
			if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, cl); err != nil {
				return false, err
			}
			for _, f := range cl.Finalizers {
				if f == controller.ClaimFinalizer {
					return true, nil
				}
			}
			return false, nil
		})
	}
	gone := func(names []string) bool {
		got := present(t, ctx, network)
		for _, n := range names {
			if got[n] != "" {
				return false
			}
		}
		return true
	}

	t.Run("controller running", func(t *testing.T) {
		ctrl := ctlStart(t, ctx, "e2e-claim-up", "--sweep-interval", "1m")
		ctrl.waitLeading(t, ctx)
		cl, names := makeClaim("vm-up", "10.66.0.10", "2001:db8:66:100::/56")
		waitFinalizer(cl.Name)
		if err := c.Delete(ctx, cl); err != nil {
			t.Fatal(err)
		}
		ctlPoll(t, ctx, "vm-up's address and prefix released and the claim gone", func() (bool, error) {
			return gone(names) && claimGone(cl.Name), nil
		})
		if n, _ := ctrl.metric(t, "tenure_releases_total", `reason="ClaimDeleted"`); n != 2 {
			t.Errorf("tenure_releases_total{reason=ClaimDeleted} = %v, want 2", n)
		}
		ctlPoll(t, ctx, "events on the claim", func() (bool, error) {
			evs := &corev1.EventList{}
			if err := c.List(ctx, evs, client.InNamespace(ns)); err != nil {
				return false, err
			}
			n := 0
			for _, e := range evs.Items {
				if e.Reason == controller.EventReason && e.InvolvedObject.Kind == "IPAMClaim" && e.InvolvedObject.Name == "vm-up" {
					n++
				}
			}
			return n == 2, nil
		})
	})

	t.Run("controller down at deletion", func(t *testing.T) {
		ctrl := ctlStart(t, ctx, "e2e-claim-down", "--sweep-interval", "1m")
		ctrl.waitLeading(t, ctx)
		cl, names := makeClaim("vm-down", "10.66.0.20", "2001:db8:66:200::/56")
		waitFinalizer(cl.Name)
		ctrl.Stop()

		// A claim the controller never saw: no finalizer, gone at once.
		never, neverNames := makeClaim("vm-never", "10.66.0.30", "2001:db8:66:300::/56")
		if err := c.Delete(ctx, never); err != nil {
			t.Fatal(err)
		}
		if !claimGone(never.Name) {
			t.Fatal("vm-never has a finalizer though no controller ran")
		}
		if err := c.Delete(ctx, cl); err != nil {
			t.Fatal(err)
		}
		term := &ipamclaimsv1alpha1.IPAMClaim{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: cl.Name}, term); err != nil || term.DeletionTimestamp == nil {
			t.Fatalf("vm-down must stay Terminating while the controller is down: %v", err)
		}
		if len(present(t, ctx, network)) != 4 {
			t.Fatalf("reservations changed while the controller was down: %v", present(t, ctx, network))
		}

		// Watch from now on: the claim must disappear only after its
		// reservations (resourceVersions are etcd revisions, comparable
		// across resources of one etcd).
		rw, err := c.Watch(ctx, &tenurev1alpha1.IPReservationList{}, client.MatchingLabels{reservation.LabelOwnerUID: string(cl.UID)})
		if err != nil {
			t.Fatal(err)
		}
		defer rw.Stop()
		cw, err := c.Watch(ctx, &ipamclaimsv1alpha1.IPAMClaimList{}, client.InNamespace(ns))
		if err != nil {
			t.Fatal(err)
		}
		defer cw.Stop()

		ctrl2 := ctlStart(t, ctx, "e2e-claim-down", "--sweep-interval", "1m")
		resDeleted := map[string]string{}
		claimDeleted := ""
		for claimDeleted == "" || len(resDeleted) < 2 {
			select {
			case <-ctx.Done():
				t.Fatalf("waiting for deletions: reservations %v, claim %q", resDeleted, claimDeleted)
			case ev := <-rw.ResultChan():
				if ev.Type == watch.Deleted {
					r := ev.Object.(*tenurev1alpha1.IPReservation)
					resDeleted[r.Name] = r.ResourceVersion
				}
			case ev := <-cw.ResultChan():
				if cl2, ok := ev.Object.(*ipamclaimsv1alpha1.IPAMClaim); ok && ev.Type == watch.Deleted && cl2.Name == cl.Name {
					claimDeleted = cl2.ResourceVersion
				}
			}
		}
		for _, n := range names {
			rv, ok := resDeleted[n]
			if !ok {
				t.Fatalf("no deletion seen for %s: %v", n, resDeleted)
			}
			if cmp, err := resourceversion.CompareResourceVersion(rv, claimDeleted); err != nil || cmp >= 0 {
				t.Errorf("reservation %s deleted at rv %s, the claim at rv %s: the claim must go last (%v)", n, rv, claimDeleted, err)
			}
		}
		ctlPoll(t, ctx, "vm-never's reservations released", func() (bool, error) { return gone(neverNames), nil })
		// The count follows each delete's answer, which may come after a
		// watch has seen the deletion.
		ctlPoll(t, ctx, "tenure_releases_total{reason=ClaimGone} >= 2", func() (bool, error) {
			n, _ := ctrl2.metric(t, "tenure_releases_total", `reason="ClaimGone"`)
			return n >= 2, nil
		})
	})
}

func TestControllerTwoReplicasOnlyTheLeaderActs(t *testing.T) {
	ctx := testContext(t, 2*time.Minute)
	c := apiClient(t)
	const network, ns = "replicas", "e2e-replicas"
	r1 := ctlStart(t, ctx, "e2e-replicas", "--sweep-interval", "1h")
	r2 := ctlStart(t, ctx, "e2e-replicas", "--sweep-interval", "1h")
	var leader, follower *ctl
	ctlPoll(t, ctx, "one leader", func() (bool, error) {
		l1, l2 := r1.leading(t), r2.leading(t)
		if l1 && l2 {
			return false, fmt.Errorf("both replicas lead")
		}
		switch {
		case l1:
			leader, follower = r1, r2
		case l2:
			leader, follower = r2, r1
		}
		return leader != nil, nil
	})
	base, _ := leader.metric(t, "tenure_releases_total")

	orphans := func(from, n int) []string {
		var out []string
		for i := from; i < from+n; i++ {
			r := ctlReservation(t, ctx, c, network, fmt.Sprintf("10.67.0.%d", i), ghostOwner(ns, i))
			out = append(out, r.Name)
		}
		return out
	}
	allGone := func(names []string) func() (bool, error) {
		return func() (bool, error) {
			got := present(t, ctx, network)
			for _, n := range names {
				if got[n] != "" {
					return false, nil
				}
			}
			return true, nil
		}
	}
	ctlPoll(t, ctx, "10 orphans released", allGone(orphans(1, 10)))
	ctlPoll(t, ctx, "the leader to count 10 releases", func() (bool, error) {
		n, _ := leader.metric(t, "tenure_releases_total")
		return n-base >= 10, nil
	})
	if n, _ := follower.metric(t, "tenure_releases_total"); n != 0 {
		t.Errorf("the follower released %v reservations", n)
	}
	if follower.leading(t) {
		t.Error("the follower reports itself leader")
	}

	// Failover: the leader stops (releasing the Lease); the follower takes
	// over and acts.
	leader.Stop()
	follower.waitLeading(t, ctx)
	ctlPoll(t, ctx, "5 more orphans released by the new leader", allGone(orphans(20, 5)))
	// The counter moves a moment after the delete is visible.
	ctlPoll(t, ctx, "the new leader to count 5 releases", func() (bool, error) {
		n, _ := follower.metric(t, "tenure_releases_total")
		return n >= 5, nil
	})
}

func TestControllerOnceDryRunThenOnce(t *testing.T) {
	ctx := testContext(t, 2*time.Minute)
	c := apiClient(t)
	const network, ns = "oncectl", "e2e-once"
	if err := testbed.EnsureNamespace(ctx, c, ns); err != nil {
		t.Fatal(err)
	}
	orphans := map[string]string{} // name -> reason
	for i := 1; i <= 4; i++ {
		r := ctlReservation(t, ctx, c, network, fmt.Sprintf("10.68.0.%d", i), ghostOwner(ns, i))
		orphans[r.Name] = "PodGone"
	}
	claimOrphan := ctlReservation(t, ctx, c, network, "10.68.0.9", tenurev1alpha1.ReservationOwner{Kind: tenurev1alpha1.OwnerIPAMClaim,
		Namespace: ns, Name: "deleted-claim", UID: "00000000-0000-4000-8000-00000000c1a1"})
	orphans[claimOrphan.Name] = "ClaimGone"
	livePod, err := testbed.CreatePod(ctx, c, ns, "alive", "once-node", nil)
	if err != nil {
		t.Fatal(err)
	}
	live := ctlReservation(t, ctx, c, network, "10.68.0.100", tenurev1alpha1.ReservationOwner{Kind: tenurev1alpha1.OwnerPod, Namespace: ns,
		Name: "alive", UID: string(livePod.UID), PodName: "alive", PodUID: string(livePod.UID), ContainerID: "s", Interface: "net1", Node: "once-node"})
	before := map[string]string{}
	for _, r := range reservationsOf(t, ctx, network) {
		before[r.Name] = string(r.UID) + "@" + r.ResourceVersion
	}

	runOnce := func(extra ...string) []string {
		t.Helper()
		cmd := exec.CommandContext(ctx, bins.Controller, append([]string{"--kubeconfig", cptest.Current().KubeconfigPath, "--once"}, extra...)...)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%v: %v\n%s", cmd.Args, err, stderr.String())
		}
		return strings.Split(strings.TrimSpace(string(out)), "\n")
	}
	check := func(lines []string, verb string) {
		t.Helper()
		seen := map[string]bool{}
		for _, l := range lines {
			for name, reason := range orphans {
				if strings.HasPrefix(l, verb+" "+name+" ") {
					if !strings.Contains(l, "reason="+reason+": ") {
						t.Errorf("line %q lacks reason %s", l, reason)
					}
					seen[name] = true
				}
			}
			if strings.Contains(l, " "+live.Name+" ") {
				t.Errorf("the live reservation is listed: %q", l)
			}
		}
		for name := range orphans {
			if !seen[name] {
				t.Errorf("%s missing from the %s output:\n%s", name, verb, strings.Join(lines, "\n"))
			}
		}
	}

	dry := runOnce("--dry-run")
	check(dry, "would-release")
	t.Logf("--once --dry-run printed, e.g.: %s", dry[0])
	after := map[string]string{}
	for _, r := range reservationsOf(t, ctx, network) {
		after[r.Name] = string(r.UID) + "@" + r.ResourceVersion
	}
	if fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("--dry-run changed reservations:\nbefore %v\nafter  %v", before, after)
	}

	check(runOnce(), "released")
	got := present(t, ctx, network)
	if len(got) != 1 || got[live.Name] == "" {
		t.Fatalf("after --once: %v, want only %s", got, live.Name)
	}

	// --dry-run alone is refused.
	cmd := exec.CommandContext(ctx, bins.Controller, "--kubeconfig", cptest.Current().KubeconfigPath, "--dry-run")
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "--dry-run needs --once") {
		t.Errorf("--dry-run without --once: %v %s", err, out)
	}
}

func TestControllerPoolStatus(t *testing.T) {
	ctx := testContext(t, 2*time.Minute)
	c := apiClient(t)
	agents := startAgents(t, ctx, "ps-a")
	pool := &tenurev1alpha1.IPPool{ObjectMeta: metav1.ObjectMeta{Name: "ctl-pool"},
		Spec: tenurev1alpha1.IPPoolSpec{Ranges: []tenurev1alpha1.PoolRange{{Range: "10.69.0.0/28"}}, NetworkName: "ctlpool"}}
	if err := c.Create(ctx, pool); err != nil {
		t.Fatal(err)
	}
	conf := netconf("ctlpool", agents["ps-a"].Socket, `{"pool":"ctl-pool"}`)
	ctrl := ctlStart(t, ctx, "e2e-pool", "--sweep-interval", "1m")
	ctrl.waitLeading(t, ctx)
	var pods []pod
	for range 3 {
		pods = append(pods, newPod(t, ctx, c, "e2e-ctlpool", "ps-a", nil))
	}
	addAll(t, ctx, pods, func(pod) []byte { return conf }, 3)
	waitStatus := func(allocated int64) {
		t.Helper()
		ctlPoll(t, ctx, fmt.Sprintf("pool status allocated=%d", allocated), func() (bool, error) {
			got := &tenurev1alpha1.IPPool{}
			if err := c.Get(ctx, client.ObjectKey{Name: pool.Name}, got); err != nil {
				return false, err
			}
			st := got.Status
			return st.Capacity == 14 && st.Allocated == allocated && st.Free == 14-allocated && st.LastUpdated != nil, nil
		})
		ctlPoll(t, ctx, "tenure_reservations gauge", func() (bool, error) {
			v, _ := ctrl.metric(t, "tenure_reservations", `pool="ctl-pool"`, `state="allocated"`)
			f, _ := ctrl.metric(t, "tenure_reservations", `pool="ctl-pool"`, `state="free"`)
			return v == float64(allocated) && f == float64(14-allocated), nil
		})
	}
	waitStatus(3)
	if err := del(ctx, pods[0], conf); err != nil {
		t.Fatal(err)
	}
	waitStatus(2)
}

// The controller's cache reads most reservations as metadata alone, whose
// spec summary says what the rules read of the spec. Reservations made
// before the summary existed (as an older agent made them: neither label
// nor annotation), ones that lost the annotation, and ones whose spec
// changed after the summary was written are still judged by what their
// spec says: released when their owner is gone, never while it lives.
func TestControllerJudgesReservationsWithoutATrustworthySpecSummary(t *testing.T) {
	ctx := testContext(t, 2*time.Minute)
	c := apiClient(t)
	const network, ns = "summary", "e2e-summary"
	live, live2 := newPod(t, ctx, c, ns, "sum-a", nil), newPod(t, ctx, c, ns, "sum-a", nil)
	ownerOf := func(p pod, sandbox string) tenurev1alpha1.ReservationOwner {
		return tenurev1alpha1.ReservationOwner{Kind: tenurev1alpha1.OwnerPod, Namespace: ns, Name: p.name, UID: p.uid,
			PodName: p.name, PodUID: p.uid, ContainerID: sandbox, Interface: "net1", Node: "sum-a"}
	}
	// Each on an interface of its own: two of one interface's range would
	// be a DuplicateAttachment.
	ifaces := 0
	liveOwner := func(sandbox string) tenurev1alpha1.ReservationOwner {
		o := ownerOf(live, sandbox)
		ifaces++
		o.Interface = fmt.Sprint("net1", ifaces)
		return o
	}
	older := func(r *tenurev1alpha1.IPReservation) {
		delete(r.Labels, reservation.LabelSpecSummary)
		delete(r.Annotations, reservation.AnnotationSpecSummary)
	}
	lostAnnotation := func(r *tenurev1alpha1.IPReservation) { delete(r.Annotations, reservation.AnnotationSpecSummary) }
	asNew := func(*tenurev1alpha1.IPReservation) {}
	n := 0
	create := func(owner tenurev1alpha1.ReservationOwner, shape func(*tenurev1alpha1.IPReservation)) *tenurev1alpha1.IPReservation {
		t.Helper()
		n++
		a := netip.MustParseAddr(fmt.Sprintf("10.66.0.%d", n))
		r := reservation.New(reservation.Spec{Network: network, Kind: tenurev1alpha1.KindAddress, Item: netip.PrefixFrom(a, 32), Owner: owner})
		shape(r)
		if err := c.Create(ctx, r); err != nil {
			t.Fatal(err)
		}
		return r
	}
	// changeOwner changes the spec after the summary was written: the
	// generation goes to 2 and the annotation says the first owner.
	changeOwner := func(r *tenurev1alpha1.IPReservation, owner tenurev1alpha1.ReservationOwner) {
		t.Helper()
		r.Spec.Owner = owner
		// Admission holds the labels to the spec; the summary may go stale.
		r.Labels[reservation.LabelOwnerUID], r.Labels[reservation.LabelNode] = owner.UID, reservation.NodeLabel(owner.Node)
		if err := c.Update(ctx, r); err != nil {
			t.Fatal(err)
		}
		if r.Generation != 2 || r.Annotations[reservation.AnnotationSpecSummary] == reservation.EncodeSpecSummary(&r.Spec) {
			t.Fatalf("after the spec change: generation %d, summary %q", r.Generation, r.Annotations[reservation.AnnotationSpecSummary])
		}
	}

	kept, released := map[string]string{}, map[string]string{}
	note := func(m map[string]string, why string, r *tenurev1alpha1.IPReservation) { m[r.Name] = why }
	note(released, "older, pod gone", create(ghostOwner(ns, 1), older))
	note(kept, "older, pod live", create(liveOwner("current"), older))
	// One pod's earlier sandbox made by an older agent, its later one
	// with the summary: siblings of both kinds.
	note(released, "older, earlier sandbox", create(tenurev1alpha1.ReservationOwner{Kind: tenurev1alpha1.OwnerPod, Namespace: ns, Name: live.name,
		UID: live.uid, PodName: live.name, PodUID: live.uid, ContainerID: "crashed", Interface: "net2", Node: "sum-a"}, older))
	note(kept, "summary, later sandbox", create(tenurev1alpha1.ReservationOwner{Kind: tenurev1alpha1.OwnerPod, Namespace: ns, Name: live.name,
		UID: live.uid, PodName: live.name, PodUID: live.uid, ContainerID: "retried", Interface: "net2", Node: "sum-a"}, asNew))
	note(released, "no annotation, pod gone", create(ghostOwner(ns, 2), lostAnnotation))
	note(kept, "no annotation, pod live", create(liveOwner("current"), lostAnnotation))
	// Of another live pod, so that no sibling the cache cannot read sends
	// these to the live reads anyway.
	r := create(ownerOf(live2, "current"), asNew)
	changeOwner(r, ghostOwner(ns, 3))
	note(released, "summary says a live pod, spec a gone one", r)
	r = create(ghostOwner(ns, 4), asNew)
	changeOwner(r, ownerOf(live2, "current"))
	note(kept, "summary says a gone pod, spec a live one", r)
	note(kept, "summary, pod live", create(liveOwner("current"), asNew))
	note(released, "summary, pod gone", create(ghostOwner(ns, 5), asNew))

	ctrl := ctlStart(t, ctx, "e2e-summary", "--sweep-interval", "1s")
	ctrl.waitLeading(t, ctx)
	wantLeft := func() bool {
		got := present(t, ctx, network)
		return slices.Equal(slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(kept)))
	}
	ctlPoll(t, ctx, "exactly the reservations of live owners left", func() (bool, error) { return wantLeft(), nil })
	ctrl.waitSweepAfter(t, ctx, time.Now())
	if got := present(t, ctx, network); !wantLeft() {
		t.Fatalf("after a full sweep: %v left, want %v (released: %v)", slices.Sorted(maps.Keys(got)), kept, released)
	}

	// While it runs: an older agent's reservation of a gone pod is
	// released, one of the live pod stays.
	gone := create(ghostOwner(ns, 6), older)
	note(kept, "older, made while running, pod live", create(liveOwner("current"), older))
	ctlPoll(t, ctx, "the older reservation of a gone pod made while running released", func() (bool, error) {
		err := c.Get(ctx, client.ObjectKeyFromObject(gone), &tenurev1alpha1.IPReservation{})
		return client.IgnoreNotFound(err) == nil && err != nil, client.IgnoreNotFound(err)
	})
	ctrl.waitSweepAfter(t, ctx, time.Now())
	if got := present(t, ctx, network); !wantLeft() {
		t.Fatalf("after a full sweep: %v left, want %v", slices.Sorted(maps.Keys(got)), kept)
	}
}
