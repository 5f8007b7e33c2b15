//go:build integration

package e2e

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/tenure-ipam/tenure/test/testbed"
)

// An agent killed with SIGKILL in the middle of a burst of ADDs, then
// restarted: no address is held twice, and every reservation belongs to an
// ADD that returned success or is released by CNI GC.
func TestAgentKill9MidBurst(t *testing.T) {
	ctx := testContext(t, 3*time.Minute)
	c := apiClient(t)
	const node = "nkill"
	agents := startAgents(t, ctx, node)
	first := agents[node]
	conf := netconf("crash", first.Socket, `{"range":"10.80.0.0/24","network_name":"crash"}`)

	const total = 120
	pods := make([]pod, total)
	for i := range pods {
		pods[i] = newPod(t, ctx, c, "e2e-crash", node, nil)
	}

	var (
		mu        sync.Mutex
		succeeded = map[string]string{} // containerID -> address
		failed    atomic.Int64
		answered  atomic.Int64
	)
	restarted := make(chan *testbed.Agent, 1)
	go func() {
		defer close(restarted)
		// Kill once a third of the burst has been answered, then start a new
		// agent on the same socket path, as the DaemonSet would.
		_ = wait.PollUntilContextCancel(ctx, time.Millisecond, true, func(context.Context) (bool, error) {
			return answered.Load() >= total/3, nil
		})
		first.Kill()
		a, err := testbed.StartAgent(ctx, bins, filepath.Dir(first.Socket), first.Kubeconfig, node)
		if err != nil {
			t.Error(err)
			return
		}
		restarted <- a
	}()

	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	for _, p := range pods {
		g.Go(func() error {
			defer answered.Add(1)
			r, err := add(gctx, p, conf)
			if err != nil {
				failed.Add(1) // killed mid-call: a runtime retries with a new sandbox
				return nil
			}
			mu.Lock()
			succeeded[p.containerID] = addrs(r)[0]
			mu.Unlock()
			return nil
		})
	}
	_ = g.Wait()
	second, ok := <-restarted
	if !ok {
		t.Fatal("agent did not restart")
	}
	t.Cleanup(second.Stop)
	t.Logf("%d ADDs succeeded, %d failed around the kill", len(succeeded), failed.Load())

	seen := map[string]string{}
	for cid, a := range succeeded {
		if other, dup := seen[a]; dup {
			t.Fatalf("%s handed to %s and %s", a, other, cid)
		}
		seen[a] = cid
	}

	// GC with the attachments the runtime knows to be valid: the successful ones.
	var valid []map[string]string
	for cid := range succeeded {
		valid = append(valid, map[string]string{"containerID": cid, "ifname": "net1"})
	}
	vb, _ := json.Marshal(valid)
	gcConf := strings.TrimSuffix(strings.TrimSpace(string(conf)), "}") +
		`,"cni.dev/valid-attachments":` + string(vb) + `}`
	if _, err := testbed.ExecShim(ctx, bins.Shim, testbed.CNICall{Command: "GC", Config: []byte(gcConf)}); err != nil {
		t.Fatalf("GC: %v", err)
	}

	items := reservationsOf(t, ctx, "crash")
	if len(items) != len(succeeded) {
		t.Fatalf("%d reservations after GC, %d successful ADDs", len(items), len(succeeded))
	}
	for _, r := range items {
		if succeeded[r.Spec.Owner.ContainerID] != r.Spec.Address {
			t.Fatalf("reservation %s (%s, container %s) does not match a successful ADD", r.Name, r.Spec.Address, r.Spec.Owner.ContainerID)
		}
	}
}
