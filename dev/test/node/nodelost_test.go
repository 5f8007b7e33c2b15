//go:build integration

package node_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/tenure-ipam/tenure/dev/nodetest"
)

// The node is lost hard (kubelet and containerd
// killed; the containers, tenure's agent and controller among them, run
// on, as on a node cut off from the API server). The controller-manager
// marks it NotReady and evicts the test pods (they tolerate that for one
// second), and their deletion never completes with no kubelet. The node is
// not fenced, so the tenure controller keeps their reservations and says
// that they wait for the fence; once the node is tainted out-of-service it
// releases them. The node comes back, the taint is removed, and a new pod
// gets an address.
//
// TestMain runs it after every other test: the node is gone for a while.
func lostNodeReleasesItsPodsAddresses(t *testing.T) {
	ctx := nodetest.Context(t, 6*time.Minute)
	ns := kc.Namespace(ctx, t, "lost")
	hostLink(t, &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "tnlost0"}})
	kc.NAD(ctx, t, ns, "lost-net", `{"cniVersion": "1.0.0", "name": "lost-net", "type": "bridge", "bridge": "tnlost0",
		"ipam": {"type": "tenure", "range": "10.220.0.0/24"}}`)
	const pods = 3
	for i := range pods {
		if err := cl.Create(ctx, podSpecOn(ns, fmt.Sprintf("lost-%d", i), "lost-net")); err != nil {
			t.Fatal(err)
		}
	}
	for i := range pods {
		kc.WaitRunning(ctx, t, ns, fmt.Sprintf("lost-%d", i))
	}
	if n := len(kc.Reservations(ctx, t, ns)); n != pods {
		t.Fatalf("%d reservations for %d pods", n, pods)
	}

	lost := time.Now()
	if err := node.Lose(); err != nil {
		t.Fatal(err)
	}
	returned := false
	t.Cleanup(func() {
		if !returned {
			if err := node.Return(ctx); err != nil {
				t.Error(err)
			}
		}
	})
	kc.WaitNotReady(ctx, t, node.Name)
	notReady := time.Since(lost)
	// The taint manager evicts them (1 s tolerations). But with one node,
	// every node is NotReady, and the lifecycle controller may take that
	// for a control-plane fault ("master disruption mode") and stop
	// evicting. Then the pods are deleted as an operator would: either
	// way they are terminating on a NotReady node and no DEL ever runs.
	evictCtx, cancelEvict := context.WithTimeout(ctx, time.Minute)
	evictedAll := wait.PollUntilContextCancel(evictCtx, 250*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		for i := range pods {
			p, err := kc.Pod(ctx, ns, fmt.Sprintf("lost-%d", i))
			if err != nil || p.DeletionTimestamp == nil {
				return false, nil
			}
		}
		return true, nil
	}) == nil
	cancelEvict()
	if !evictedAll {
		t.Logf("the controller-manager did not evict the pods within a minute (one node, all NotReady: master disruption mode); deleting them")
		for i := range pods {
			deletePod(ctx, t, ns, fmt.Sprintf("lost-%d", i))
		}
	}
	evicted := time.Since(lost)
	held := map[string]string{} // reservation name: uid
	for _, r := range kc.Reservations(ctx, t, ns) {
		held[r.Name] = string(r.UID)
	}
	for i := range pods {
		kc.WaitFenceWait(ctx, t, ns, fmt.Sprintf("lost-%d", i))
	}
	for _, r := range kc.Reservations(ctx, t, ns) {
		if held[r.Name] == string(r.UID) {
			delete(held, r.Name)
		}
	}
	if len(held) > 0 {
		t.Fatalf("reservations released while the node was not fenced: %v", held)
	}
	// NoSchedule: the tenure controller runs on this node, and a NoExecute
	// taint would have its pod evicted as well. The key releases, whatever
	// the effect (as it makes the pod GC force-delete the pods).
	kc.Fence(ctx, t, node.Name, corev1.TaintEffectNoSchedule)
	fenced := true
	t.Cleanup(func() {
		if fenced {
			kc.Unfence(context.Background(), t, node.Name)
		}
	})
	kc.Poll(ctx, t, "the tenure controller to release the evicted pods' reservations", func() error {
		if left := kc.Reservations(ctx, t, ns); len(left) > 0 {
			return fmt.Errorf("%d left", len(left))
		}
		return nil
	})
	t.Logf("after the node was lost: NotReady at %v, pods evicted at %v, reservations released at %v",
		notReady.Round(time.Second), evicted.Round(time.Second), time.Since(lost).Round(time.Second))

	returned = true
	if err := node.Return(ctx); err != nil {
		t.Fatal(err)
	}
	fenced = false
	kc.Unfence(ctx, t, node.Name)
	for i := range pods {
		kc.WaitGone(ctx, t, ns, fmt.Sprintf("lost-%d", i))
	}
	if err := cl.Create(ctx, podSpecOn(ns, "after", "lost-net")); err != nil {
		t.Fatal(err)
	}
	p := kc.WaitRunning(ctx, t, ns, "after")
	if addrs := interfaceAddrs(t, p, "net1"); len(addrs) != 1 {
		t.Errorf("the pod after the node's return has net1 %v", addrs)
	}
	deletePod(ctx, t, ns, "after")
	kc.WaitGone(ctx, t, ns, "after")
}
