//go:build integration

package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipamclaimsv1alpha1 "github.com/tenure-ipam/tenure/api/ipamclaims/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/agent"
	"github.com/tenure-ipam/tenure/test/testbed"
)

// TestKubeVirtMigrationsBackAndForthWithTheSourcePaused: 20 live
// migrations between two nodes, each with the source node's agent stopped
// (SIGSTOP) from before the target's domain is ready until after the
// migration completed, so that it wakes with caches that saw neither. Each
// switchover moves the route to the target at targetNodeDomainReadyTimestamp
// and gives exactly one ownerPod write, to the target pod (a watch on the
// claim counts them); the woken source never moves it back and records no
// Event of a move; the guest's DHCPv6 client renews throughout, its Renew
// after each switchover is answered by the target, and it keeps its
// address and prefix.
func TestKubeVirtMigrationsBackAndForthWithTheSourcePaused(t *testing.T) {
	const migrations = 20
	ctx, c := dhcpTest(t, 10*time.Minute)
	installKubeVirtCRDs(t, ctx)

	nodeA, nodeB, pathA, pathB := twoNodes(t, ctx, "tbf")
	guest := plugGuest(t, ctx, nodeA+"-g", nodeA, "vg", dhcpVMMAC)
	agentA, _ := startDataplaneAgent(t, ctx, "bf-a", pathA, "")
	agentB, metricsB := startDataplaneAgent(t, ctx, "bf-b", pathB, "")
	waitVMIsServed(t, ctx, agentA, agentB)
	type side struct {
		netns string
		agent *testbed.Agent
		conf  []byte
	}
	sides := map[string]side{
		"bf-a": {nodeA, agentA, netconf("dhcpnet", agentA.Socket, migIPAM)},
		"bf-b": {nodeB, agentB, netconf("dhcpnet", agentB.Socket, migIPAM)},
	}

	vm := createVM(t, ctx, c, "kvbackforth", "vm1", dhcpVMMAC)
	vm.Start(ctx, t, c)
	cur := launcher(t, ctx, c, vm, "bf-a", "")
	if _, err := add(ctx, cur, sides["bf-a"].conf); err != nil {
		t.Fatalf("ADD of the first pod: %v", err)
	}
	vm.Running(ctx, t, c, cur.launcher())
	wantAddr, wantPrefix := claimHolds(t, ctx, c, vm.Namespace, vm.Claim)
	wantRoute := fmt.Sprintf("%s via %s dev br0", wantPrefix, wantAddr)
	dhc := startDhclient(t, guest)
	if l := dhc.waitLease(ctx); l.addr != wantAddr || l.prefix != wantPrefix {
		t.Fatalf("dhclient leased %s and %s, the claim holds %s and %s", l.addr, l.prefix, wantAddr, wantPrefix)
	}
	waitRoute(t, ctx, nodeA, wantPrefix, wantRoute, true)

	owners := watchOwnerPod(t, ctx, c, vm.Namespace, vm.Claim)
	owners.waitFor(t, ctx, 1)
	if got := owners.values(); got[0] != cur.name {
		t.Fatalf("ownerPod %v, want %s", got, cur.name)
	}

	want := []string{cur.name}
	var gaps []time.Duration
	for i := 1; i <= migrations; i++ {
		src := sides[cur.node]
		dstNode := "bf-b"
		if cur.node == "bf-b" {
			dstNode = "bf-a"
		}
		dst := sides[dstNode]
		m := kvMigration{uid: fmt.Sprintf("migration-%d", i), src: cur}
		m.dst = launcher(t, ctx, c, vm, dstNode, m.uid)
		if _, err := add(ctx, m.dst, dst.conf); err != nil {
			t.Fatalf("migration %d: ADD of the target pod: %v", i, err)
		}
		vm.MigrationStart(ctx, t, c, m.kv())

		pause(t, src.agent)
		mustIP(t, src.netns, "link", "set", "vg", "netns", dst.netns)
		mustIP(t, dst.netns, "link", "set", "vg", "master", "br0", "up")
		signalled := vm.DomainReady(ctx, t, c)
		waitRoute(t, ctx, dst.netns, wantPrefix, wantRoute, true)
		gaps = append(gaps, time.Since(signalled))
		vm.MigrationEnd(ctx, t, c, m.kv(), false)
		want = append(want, m.dst.name)
		owners.waitFor(t, ctx, len(want))
		// The target answers the guest's next Renew with the same address
		// and prefix while the source is still stopped.
		waitRenewed(t, ctx, dhc, wantAddr, wantPrefix, fmt.Sprintf("from %s after switchover %d", dstNode, i))
		resume(t, src.agent)

		waitRoute(t, ctx, src.netns, wantPrefix, "", false)
		if err := del(ctx, m.src, src.conf); err != nil {
			t.Fatalf("migration %d: DEL of the source pod: %v", i, err)
		}
		if err := testbed.ForceDeletePod(ctx, c, vm.Namespace, m.src.name); err != nil {
			t.Fatal(err)
		}
		// The woken source agent removed the route: its VMI cache has
		// caught up, past the moment its claim cache (ownerPod on the
		// target) ran ahead of it. ownerPod must not have moved back.
		if got := owners.values(); !slices.Equal(got, want) {
			t.Fatalf("migration %d: ownerPod went %v, want %v", i, got, want)
		}
		cur = m.dst
	}
	waitRenewed(t, ctx, dhc, wantAddr, wantPrefix, "after the last migration")
	if got := owners.values(); !slices.Equal(got, want) {
		t.Fatalf("ownerPod went %v, want exactly one write per switchover: %v", got, want)
	}
	// Every lease the client reported (PREINIT6 and the like report none;
	// dhclient reports the address and the prefix in separate calls) is
	// the claim's address or prefix.
	for _, l := range dhc.scriptCalls() {
		addr, prefix := scriptField(l, "address"), scriptField(l, "prefix")
		if addr != "" && addr != "/" && !strings.HasPrefix(addr, wantAddr.String()+"/") || prefix != "" && prefix != wantPrefix.String() {
			t.Fatalf("the guest's client was given another address or prefix: %s\n%s", l, dhc.dump())
		}
	}

	// Every Event of a move names a switchover in the order they happened:
	// from the source pod to the target pod, never back.
	forward := map[string]bool{}
	for i := 1; i < len(want); i++ {
		forward[fmt.Sprintf("status.ownerPod moved from %s to %s:", want[i-1], want[i])] = true
	}
	var events corev1.EventList
	if err := c.List(ctx, &events, client.InNamespace(vm.Namespace)); err != nil {
		t.Fatal(err)
	}
	moves := 0
	for _, e := range events.Items {
		if e.Reason != agent.EventOwnerPodFollowsVM || e.InvolvedObject.Name != vm.Claim {
			continue
		}
		moves++
		// client-go's event correlator aggregates similar Events under
		// this prefix.
		msg, _, _ := strings.Cut(strings.TrimPrefix(e.Message, "(combined from similar events): "), " VirtualMachineInstance")
		if !forward[msg] {
			t.Errorf("Event %q is no switchover that happened", e.Message)
		}
	}
	if moves == 0 {
		t.Errorf("no %s Event for %d switchovers", agent.EventOwnerPodFollowsVM, migrations)
	}
	var sum time.Duration
	for _, g := range gaps {
		sum += g
	}
	mb := scrape(t, metricsB)
	t.Logf("%d switchovers: route on the target %v after targetNodeDomainReadyTimestamp on average (max %v); node-b's agent timed %v of them, %vs in all, against the one-second timestamps",
		migrations, (sum / time.Duration(len(gaps))).Round(time.Millisecond), maxDuration(gaps).Round(time.Millisecond),
		metricValue(t, mb, "tenure_kubevirt_switchover_route_seconds_count"), metricValue(t, mb, "tenure_kubevirt_switchover_route_seconds_sum"))
}

// pause stops an agent (SIGSTOP) until resume; a test that fails meanwhile
// resumes it when it ends.
func pause(t *testing.T, a *testbed.Agent) {
	t.Helper()
	if err := syscall.Kill(a.Cmd.Process.Pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(a.Cmd.Process.Pid, syscall.SIGCONT) })
}

func resume(t *testing.T, a *testbed.Agent) {
	t.Helper()
	if err := syscall.Kill(a.Cmd.Process.Pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
}

// ownerPodWatch records every value the claim's status.ownerPod takes, as a
// watch on the claim sees its writes.
type ownerPodWatch struct {
	mu   sync.Mutex
	seen []string
}

func watchOwnerPod(t *testing.T, ctx context.Context, c client.WithWatch, ns, name string) *ownerPodWatch {
	t.Helper()
	w, err := c.Watch(ctx, &ipamclaimsv1alpha1.IPAMClaimList{}, client.InNamespace(ns), client.MatchingFields{"metadata.name": name})
	if err != nil {
		t.Fatal(err)
	}
	o := &ownerPodWatch{}
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer w.Stop()
		for {
			select {
			case <-wctx.Done():
				return
			case ev, ok := <-w.ResultChan():
				if !ok {
					o.mu.Lock()
					o.seen = append(o.seen, "<watch closed>")
					o.mu.Unlock()
					return
				}
				cl, isClaim := ev.Object.(*ipamclaimsv1alpha1.IPAMClaim)
				if !isClaim || ev.Type == watch.Deleted || cl.Status.OwnerPod == nil {
					continue
				}
				o.mu.Lock()
				if n := len(o.seen); n == 0 || o.seen[n-1] != cl.Status.OwnerPod.Name {
					o.seen = append(o.seen, cl.Status.OwnerPod.Name)
				}
				o.mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return o
}

func (o *ownerPodWatch) values() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]string(nil), o.seen...)
}

// waitFor waits until the watch saw n values of ownerPod.
func (o *ownerPodWatch) waitFor(t *testing.T, ctx context.Context, n int) {
	t.Helper()
	poll(t, ctx, 20*time.Second, fmt.Sprintf("%d values of ownerPod", n), func() bool { return len(o.values()) >= n })
}

// scriptField is the value of key in one of the client's script calls
// ("reason=RENEW6 address=A/128 prefix=P").
func scriptField(line, key string) string {
	for _, f := range strings.Fields(line) {
		if v, ok := strings.CutPrefix(f, key+"="); ok {
			return v
		}
	}
	return ""
}

func maxDuration(ds []time.Duration) time.Duration {
	var m time.Duration
	for _, d := range ds {
		m = max(m, d)
	}
	return m
}
