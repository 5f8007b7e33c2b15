//go:build integration

package e2e

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tenure-ipam/tenure/internal/controller"
	"github.com/tenure-ipam/tenure/internal/controller/repair"
	tenureops "github.com/tenure-ipam/tenure/internal/ops"
	"github.com/tenure-ipam/tenure/test/testbed"
)

// fencingCluster is two nodes with agents, pods on both, each holding one
// address of network: on lost, two that are deleted once the node is lost
// (Terminating for good: no kubelet confirms) and one that is not; on
// ready, two.
type fencingCluster struct {
	c                  client.WithWatch
	network, ns        string
	ready, lost        string
	agents             map[string]*testbed.Agent
	terminating, other []pod
}

// Its network, namespace and nodes are named base and a number of the
// run, so that a test run again (-count) starts afresh.
func newFencingCluster(t *testing.T, ctx context.Context, base, cidr string) *fencingCluster {
	t.Helper()
	network := fmt.Sprintf("%s%d", base, podSeq.Add(1))
	ns := "e2e-" + network
	fc := &fencingCluster{c: apiClient(t), network: network, ns: ns, ready: network + "-ready", lost: network + "-lost"}
	fc.agents = startAgents(t, ctx, fc.ready, fc.lost)
	for range 2 {
		fc.terminating = append(fc.terminating, newPod(t, ctx, fc.c, ns, fc.lost, nil))
		fc.other = append(fc.other, newPod(t, ctx, fc.c, ns, fc.ready, nil))
	}
	fc.other = append(fc.other, newPod(t, ctx, fc.c, ns, fc.lost, nil))
	conf := func(p pod) []byte {
		return netconf(network, fc.agents[p.node].Socket, `{"range":"`+cidr+`","network_name":"`+network+`"}`)
	}
	addAll(t, ctx, append(append([]pod{}, fc.terminating...), fc.other...), conf, 5)
	return fc
}

// lose makes the lost node NotReady with its agent gone, and deletes its
// two pods gracefully: they stay Terminating.
func (fc *fencingCluster) lose(t *testing.T, ctx context.Context) {
	t.Helper()
	fc.agents[fc.lost].Kill()
	if err := testbed.SetNodeReady(ctx, fc.c, fc.lost, false); err != nil {
		t.Fatal(err)
	}
	for _, p := range fc.terminating {
		if err := fc.c.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: p.ns, Name: p.name}}); err != nil {
			t.Fatal(err)
		}
		got := &corev1.Pod{}
		if err := fc.c.Get(ctx, client.ObjectKey{Namespace: p.ns, Name: p.name}, got); err != nil || got.DeletionTimestamp == nil {
			t.Fatalf("pod %s is not Terminating: %v", p.name, err)
		}
	}
}

// held maps each pod's UID to the names of the reservations it holds.
func (fc *fencingCluster) held(t *testing.T, ctx context.Context) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, r := range reservationsOf(t, ctx, fc.network) {
		out[r.Spec.Owner.UID] = append(out[r.Spec.Owner.UID], r.Name)
	}
	return out
}

// fenceWaitEvents returns, by pod name, the messages of the controller's
// WaitingForFence Warning Events on the pods of ns.
func fenceWaitEvents(t *testing.T, ctx context.Context, c client.Client, ns string) map[string][]string {
	t.Helper()
	evs := &corev1.EventList{}
	if err := c.List(ctx, evs, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for _, e := range evs.Items {
		if e.Reason == controller.EventReasonFenceWait && e.Type == corev1.EventTypeWarning && e.InvolvedObject.Kind == "Pod" {
			out[e.InvolvedObject.Name] = append(out[e.InvolvedObject.Name], e.Message)
		}
	}
	return out
}

// A node that is NotReady past --node-grace-period is not fenced: the
// addresses of its terminating pods stay theirs, through two full sweeps
// after the grace period, and the controller's Event, its metric and
// `tenurectl why` say that they wait for the node to be fenced, naming
// the taint that would release them.
func TestTerminatingPodOnUnfencedNodeKeepsItsAddresses(t *testing.T) {
	ctx := testContext(t, 3*time.Minute)
	fc := newFencingCluster(t, ctx, "unfenced", "10.62.0.0/24")
	before := present(t, ctx, fc.network)
	if len(before) != 5 {
		t.Fatalf("%d reservations, want 5: %v", len(before), before)
	}
	const grace = time.Second
	// --node-grace-period without --release-unfenced releases nothing.
	ctrl := ctlStart(t, ctx, fc.ns, "--node-grace-period", grace.String(), "--sweep-interval", "1s")
	ctrl.waitLeading(t, ctx)

	fc.lose(t, ctx)
	down := time.Now()
	ctrl.waitSweepAfter(t, ctx, down.Add(grace+time.Second))
	ctrl.waitSweepAfter(t, ctx, time.Now())
	if after := present(t, ctx, fc.network); !maps.Equal(after, before) {
		t.Fatalf("reservations (name: uid) after two sweeps past the grace period:\n%v\nbefore the node was lost:\n%v", after, before)
	}
	// (The metrics count what other tests left on the shared API server
	// too: their exact values are asserted where this test moves them.)
	if n, _ := ctrl.metric(t, "tenure_releases_total", `reason="NodeNotReady"`); n != 0 {
		t.Errorf("tenure_releases_total{reason=NodeNotReady} = %v, want 0", n)
	}
	if n, _ := ctrl.metric(t, "tenure_reservations_waiting_for_fence"); n < 2 {
		t.Errorf("tenure_reservations_waiting_for_fence = %v, want at least the 2 terminating pods' reservations", n)
	}

	taint := "kubectl taint node " + fc.lost + " node.kubernetes.io/out-of-service=nodeshutdown:NoExecute"
	held := fc.held(t, ctx)
	var events map[string][]string
	ctlPoll(t, ctx, "a WaitingForFence Event on each terminating pod", func() (bool, error) {
		events = fenceWaitEvents(t, ctx, fc.c, fc.ns)
		for _, p := range fc.terminating {
			if len(events[p.name]) == 0 {
				return false, nil
			}
		}
		return true, nil
	})
	for _, p := range fc.terminating {
		if len(events[p.name]) != 1 || len(held[p.uid]) != 1 {
			t.Errorf("pod %s: events %q for reservations %v, want one", p.name, events[p.name], held[p.uid])
			continue
		}
		for _, want := range []string{"(IPReservation " + held[p.uid][0] + ")", "waiting for node " + fc.lost + " to be fenced", taint, "or delete the Node"} {
			if !strings.Contains(events[p.name][0], want) {
				t.Errorf("pod %s: event %q lacks %q", p.name, events[p.name][0], want)
			}
		}
	}
	for _, p := range fc.other {
		if len(events[p.name]) != 0 {
			t.Errorf("pod %s, not terminating: events %q", p.name, events[p.name])
		}
	}

	rep, err := tenureops.New(fc.c).Why(ctx, fc.ns, fc.terminating[0].name, repair.Policy{})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(rep.Fence, "waiting for node "+fc.lost+" to be fenced") || !strings.Contains(rep.Fence, taint) ||
		len(rep.Attachments) != 1 || !strings.Contains(rep.Attachments[0].Outcome, "kept: waiting for node "+fc.lost+" to be fenced") {
		t.Errorf("tenurectl why: fence %q, attachments %+v", rep.Fence, rep.Attachments)
	}
	if rep, err = tenureops.New(fc.c).Why(ctx, fc.ns, fc.other[2].name, repair.Policy{}); err != nil || rep.Fence != "" {
		t.Errorf("tenurectl why of the running pod on the lost node: fence %q, %v; want none", rep.Fence, err)
	}
}

// The taint node.kubernetes.io/out-of-service on a NotReady node releases
// the addresses of its terminating pods at once: on the node's watch
// event, not at a sweep (an hour apart here). Everything else stays.
func TestOutOfServiceTaintReleasesAtOnce(t *testing.T) {
	ctx := testContext(t, 3*time.Minute)
	fc := newFencingCluster(t, ctx, "oos", "10.63.0.0/24")
	ctrl := ctlStart(t, ctx, fc.ns, "--sweep-interval", "1h")
	ctrl.waitLeading(t, ctx)
	fc.lose(t, ctx)
	// The controller has judged the terminating pods, on their events (the
	// sweep is an hour away), and keeps their addresses.
	ctlPoll(t, ctx, "a WaitingForFence Event on each terminating pod", func() (bool, error) {
		events := fenceWaitEvents(t, ctx, fc.c, fc.ns)
		return len(events[fc.terminating[0].name]) > 0 && len(events[fc.terminating[1].name]) > 0, nil
	})
	waiting, _ := ctrl.metric(t, "tenure_reservations_waiting_for_fence")
	before := present(t, ctx, fc.network)
	held := fc.held(t, ctx)
	want := maps.Clone(before)
	for _, p := range fc.terminating {
		if len(held[p.uid]) != 1 {
			t.Fatalf("pod %s holds %v before the taint, want one reservation", p.name, held[p.uid])
		}
		delete(want, held[p.uid][0])
	}
	if len(want) != 3 {
		t.Fatalf("%d reservations to keep, want 3: %v", len(want), want)
	}

	node := &corev1.Node{}
	if err := fc.c.Get(ctx, client.ObjectKey{Name: fc.lost}, node); err != nil {
		t.Fatal(err)
	}
	node.Spec.Taints = append(node.Spec.Taints, corev1.Taint{Key: corev1.TaintNodeOutOfService, Value: "nodeshutdown", Effect: corev1.TaintEffectNoExecute})
	if err := fc.c.Update(ctx, node); err != nil {
		t.Fatal(err)
	}
	tainted := time.Now()
	deadline, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	ctlPoll(t, deadline, "the terminating pods' reservations released", func() (bool, error) {
		return len(present(t, ctx, fc.network)) == len(want), nil
	})
	t.Logf("released %v after the taint", time.Since(tainted).Round(time.Millisecond))
	if got := present(t, ctx, fc.network); !maps.Equal(got, want) {
		t.Errorf("reservations (name: uid) after the taint:\n%v\nwant those of the pods not terminating on the fenced node:\n%v", got, want)
	}
	ctlPoll(t, ctx, "tenure_releases_total{reason=NodeOutOfService} = 2", func() (bool, error) {
		n, _ := ctrl.metric(t, "tenure_releases_total", `reason="NodeOutOfService"`)
		return n == 2, nil
	})
	// Forgotten as the informer reports the deletes, a moment after them.
	ctlPoll(t, ctx, fmt.Sprintf("tenure_reservations_waiting_for_fence = %v - 2", waiting), func() (bool, error) {
		n, _ := ctrl.metric(t, "tenure_reservations_waiting_for_fence")
		return n == waiting-2, nil
	})
}
