//go:build integration

package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	"golang.org/x/sync/errgroup"
	"k8s.io/apimachinery/pkg/util/wait"

	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/agent"
	"github.com/tenure-ipam/tenure/test/testbed"
)

func TestSlash29GivesSixThenExhaustsThenReuses(t *testing.T) {
	ctx := testContext(t, 2*time.Minute)
	c := apiClient(t)
	agents := startAgents(t, ctx, "n29")
	conf := netconf("san29", agents["n29"].Socket, `{"range":"10.29.0.0/29","network_name":"san29"}`)

	var pods []pod
	seen := map[string]bool{}
	for i := 0; i < 6; i++ {
		p := newPod(t, ctx, c, "e2e-29", "n29", nil)
		r, err := add(ctx, p, conf)
		if err != nil {
			t.Fatalf("ADD %d: %v", i+1, err)
		}
		if len(r.IPs) != 1 {
			t.Fatalf("ADD %d: %d IPs, want 1", i+1, len(r.IPs))
		}
		a := r.IPs[0].Address
		if seen[a.IP.String()] {
			t.Fatalf("address %s handed out twice", a.IP)
		}
		if ones, _ := a.Mask.Size(); ones != 29 {
			t.Fatalf("mask /%d, want /29", ones)
		}
		seen[a.IP.String()] = true
		pods = append(pods, p)
	}
	for _, want := range []string{"10.29.0.1", "10.29.0.2", "10.29.0.3", "10.29.0.4", "10.29.0.5", "10.29.0.6"} {
		if !seen[want] {
			t.Errorf("%s was never handed out; got %v", want, seen)
		}
	}

	seventh := newPod(t, ctx, c, "e2e-29", "n29", nil)
	_, err := add(ctx, seventh, conf)
	if cniCode(err) != agent.CodeRangeFull {
		t.Fatalf("7th ADD: err %v, want CNI code %d", err, agent.CodeRangeFull)
	}
	if msg := err.Error(); !strings.Contains(msg, "10.29.0.0/29") || !strings.Contains(msg, "6") {
		t.Fatalf("exhaustion error %q must name the range and its 6 addresses", msg)
	}
	if n := len(reservationsOf(t, ctx, "san29")); n != 6 {
		t.Fatalf("%d reservations after the failed ADD, want 6", n)
	}

	if err := del(ctx, pods[2], conf); err != nil {
		t.Fatalf("DEL: %v", err)
	}
	r, err := add(ctx, seventh, conf)
	if err != nil {
		t.Fatalf("ADD after DEL: %v", err)
	}
	if got := r.IPs[0].Address.IP.String(); seen[got] && got != "" {
		// The freed address is the only free one, so it must be the one.
		t.Logf("reused %s", got)
	}
	if n := len(reservationsOf(t, ctx, "san29")); n != 6 {
		t.Fatalf("%d reservations, want 6", n)
	}
}

func TestAddIsIdempotentAndDelOfNothingSucceeds(t *testing.T) {
	ctx := testContext(t, time.Minute)
	c := apiClient(t)
	agents := startAgents(t, ctx, "nidem")
	conf := netconf("idem", agents["nidem"].Socket, `{"range":"10.30.0.0/24","network_name":"idem"}`)
	p := newPod(t, ctx, c, "e2e-idem", "nidem", nil)
	r1, err := add(ctx, p, conf)
	if err != nil {
		t.Fatal(err)
	}
	r2, err := add(ctx, p, conf)
	if err != nil {
		t.Fatal(err)
	}
	if addrs(r1)[0] != addrs(r2)[0] {
		t.Fatalf("repeated ADD gave %v then %v", addrs(r1), addrs(r2))
	}
	if n := len(reservationsOf(t, ctx, "idem")); n != 1 {
		t.Fatalf("%d reservations after two ADDs of one attachment, want 1", n)
	}
	if err := del(ctx, p, conf); err != nil {
		t.Fatal(err)
	}
	if err := del(ctx, p, conf); err != nil {
		t.Fatalf("second DEL must succeed: %v", err)
	}
	if n := len(reservationsOf(t, ctx, "idem")); n != 0 {
		t.Fatalf("%d reservations after DEL, want 0", n)
	}
}

func TestFourAgentsFourHundredConcurrentDualStackAdds(t *testing.T) {
	ctx := testContext(t, 5*time.Minute)
	c := apiClient(t)
	nodes := []string{"ds-a", "ds-b", "ds-c", "ds-d"}
	agents := startAgents(t, ctx, nodes...)
	ipam := `{"ipRanges":[{"range":"10.40.0.0/22"},{"range":"fd00:40::/64"}],"network_name":"ds"}`

	const total, concurrency = 400, 40
	pods := make([]pod, total)
	for i := range pods {
		pods[i] = newPod(t, ctx, c, "e2e-ds", nodes[i%len(nodes)], nil)
	}
	confFor := func(p pod) []byte { return netconf("ds", agents[p.node].Socket, ipam) }

	var mu sync.Mutex
	owner := map[string]string{} // address -> pod
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(concurrency)
	for _, p := range pods {
		g.Go(func() error {
			r, err := add(gctx, p, confFor(p))
			if err != nil {
				return fmt.Errorf("ADD %s on %s: %w", p.name, p.node, err)
			}
			if len(r.IPs) != 2 {
				return fmt.Errorf("ADD %s: %d IPs, want 2 (dual-stack)", p.name, len(r.IPs))
			}
			mu.Lock()
			defer mu.Unlock()
			for _, a := range addrs(r) {
				if other, dup := owner[a]; dup {
					return fmt.Errorf("%s handed to %s and %s", a, other, p.name)
				}
				owner[a] = p.name
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	if len(owner) != 2*total {
		t.Fatalf("%d distinct addresses, want %d", len(owner), 2*total)
	}
	items := reservationsOf(t, ctx, "ds")
	if len(items) != len(owner) {
		t.Fatalf("API server holds %d reservations for %d addresses handed out", len(items), len(owner))
	}
	for _, r := range items {
		if owner[r.Spec.Address] != r.Spec.Owner.Name {
			t.Fatalf("reservation %s for %s is owned by %s, the ADD gave it to %q", r.Name, r.Spec.Address, r.Spec.Owner.Name, owner[r.Spec.Address])
		}
	}

	g, gctx = errgroup.WithContext(ctx)
	g.SetLimit(concurrency)
	for _, p := range pods {
		g.Go(func() error { return del(gctx, p, confFor(p)) })
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	if n := len(reservationsOf(t, ctx, "ds")); n != 0 {
		t.Fatalf("%d reservations left after 400 DELs", n)
	}
}

func TestOverlappingRangesOnOneNetwork(t *testing.T) {
	ctx := testContext(t, 2*time.Minute)
	c := apiClient(t)
	agents := startAgents(t, ctx, "ov")
	sock := agents["ov"].Socket

	fill := func(t *testing.T, confs ...[]byte) map[string]int {
		counts := map[string]int{}
		for _, conf := range confs {
			for {
				p := newPod(t, ctx, c, "e2e-ov", "ov", nil)
				r, err := add(ctx, p, conf)
				if cniCode(err) == agent.CodeRangeFull {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				counts[addrs(r)[0]]++
			}
		}
		return counts
	}

	t.Run("protected by default", func(t *testing.T) {
		wide := netconf("ov-wide", sock, `{"range":"10.50.0.0/28","network_name":"ov1"}`)
		narrow := netconf("ov-narrow", sock, `{"range":"10.50.0.0/29","network_name":"ov1"}`)
		counts := fill(t, narrow, wide)
		for a, n := range counts {
			if n > 1 {
				t.Errorf("%s handed out %d times", a, n)
			}
		}
		if len(counts) != 14 {
			t.Errorf("%d addresses handed out over the union, want the /28's 14", len(counts))
		}
	})
	t.Run("enable_overlapping_ranges false", func(t *testing.T) {
		wide := netconf("ov-wide2", sock, `{"range":"10.51.0.0/28","network_name":"ov2","enable_overlapping_ranges":false}`)
		narrow := netconf("ov-narrow2", sock, `{"range":"10.51.0.0/29","network_name":"ov2","enable_overlapping_ranges":false}`)
		counts := fill(t, narrow, wide)
		twice := 0
		for _, n := range counts {
			if n == 2 {
				twice++
			}
		}
		if twice != 6 {
			t.Errorf("%d addresses handed out by both ranges, want the /29's 6: %v", twice, counts)
		}
	})
}

func TestBadConfigNamesTheKeyAndWritesNothing(t *testing.T) {
	ctx := testContext(t, time.Minute)
	c := apiClient(t)
	agents := startAgents(t, ctx, "nbad")
	sock := agents["nbad"].Socket
	before := &tenurev1alpha1.IPReservationList{}
	if err := c.List(ctx, before); err != nil {
		t.Fatal(err)
	}
	p := newPod(t, ctx, c, "e2e-bad", "nbad", nil)
	cases := []struct{ ipam, wantInMsg string }{
		{`{"range":"10.0.0.0/33"}`, "10.0.0.0/33"},
		{`{"range":"10.0.0.0/24","rnage_start":"10.0.0.5"}`, "rnage_start"},
		{`{"range":"10.0.0.0/24","range_start":"10.0.1.5"}`, "range_start"},
		{`{"range":"10.0.0.0/24","pool":"p"}`, "pool"},
	}
	for _, tc := range cases {
		_, err := add(ctx, p, netconf("bad", sock, tc.ipam))
		if cniCode(err) != types.ErrInvalidNetworkConfig {
			t.Errorf("%s: err %v, want CNI code 7", tc.ipam, err)
			continue
		}
		if !strings.Contains(err.Error(), tc.wantInMsg) {
			t.Errorf("%s: error %q does not name %q", tc.ipam, err, tc.wantInMsg)
		}
	}
	after := &tenurev1alpha1.IPReservationList{}
	if err := c.List(ctx, after); err != nil {
		t.Fatal(err)
	}
	for _, r := range after.Items {
		if r.Spec.Owner.UID == p.uid {
			t.Fatalf("bad config wrote reservation %s", r.Name)
		}
	}
}

func TestMissingAgentFailsFastWithTheSpecCodes(t *testing.T) {
	ctx := testContext(t, time.Minute)
	conf := netconf("noagent", t.TempDir()+"/absent.sock", `{"range":"10.60.0.0/24"}`)
	p := pod{ns: "x", name: "y", containerID: "c1"}
	start := time.Now()
	_, err := add(ctx, p, conf)
	if cniCode(err) != types.ErrTryAgainLater {
		t.Fatalf("ADD without agent: %v, want code 11", err)
	}
	_, err = testbed.ExecShim(ctx, bins.Shim, testbed.CNICall{Command: "STATUS", Config: conf})
	if cniCode(err) != 50 {
		t.Fatalf("STATUS without agent: %v, want code 50", err)
	}
	t.Logf("both answered in %v", time.Since(start))
}

func TestStatusCheckAndVersion(t *testing.T) {
	ctx := testContext(t, time.Minute)
	c := apiClient(t)
	agents := startAgents(t, ctx, "nchk")
	conf := netconf("chk", agents["nchk"].Socket, `{"range":"10.61.0.0/24","network_name":"chk"}`)
	if _, err := testbed.ExecShim(ctx, bins.Shim, testbed.CNICall{Command: "STATUS", Config: conf}); err != nil {
		t.Fatalf("STATUS with a ready agent: %v", err)
	}
	out, err := testbed.ExecShim(ctx, bins.Shim, testbed.CNICall{Command: "VERSION", Config: []byte(`{"cniVersion":"1.1.0"}`)})
	if err != nil || !strings.Contains(string(out), `"1.1.0"`) || !strings.Contains(string(out), `"0.3.1"`) {
		t.Fatalf("VERSION: %s %v", out, err)
	}
	p := newPod(t, ctx, c, "e2e-chk", "nchk", nil)
	r, err := add(ctx, p, conf)
	if err != nil {
		t.Fatal(err)
	}
	withPrev := func() []byte {
		prev, _ := r.GetAsVersion("1.1.0")
		b, _ := jsonMarshal(prev)
		s := strings.TrimSuffix(strings.TrimSpace(string(conf)), "}")
		return []byte(s + `,"prevResult":` + string(b) + `}`)
	}
	if _, err := testbed.ExecShim(ctx, bins.Shim, p.call("CHECK", withPrev())); err != nil {
		t.Fatalf("CHECK of a live attachment: %v", err)
	}
	// Lose the reservation behind the agent's back: CHECK must notice.
	items := reservationsOf(t, ctx, "chk")
	if len(items) != 1 {
		t.Fatalf("%d reservations", len(items))
	}
	if err := c.Delete(ctx, &items[0]); err != nil {
		t.Fatal(err)
	}
	// Until the agent's informer sees the delete.
	_ = wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err = testbed.ExecShim(ctx, bins.Shim, p.call("CHECK", withPrev()))
		return err != nil, nil
	})
	if cniCode(err) != agent.CodeCheckFailed {
		t.Fatalf("CHECK after the reservation vanished: %v, want code %d", err, agent.CodeCheckFailed)
	}
}

func TestDeclaredPool(t *testing.T) {
	ctx := testContext(t, time.Minute)
	c := apiClient(t)
	agents := startAgents(t, ctx, "npool")
	pool := &tenurev1alpha1.IPPool{}
	pool.Name = "san-pool"
	pool.Spec = tenurev1alpha1.IPPoolSpec{Ranges: []tenurev1alpha1.PoolRange{{Range: "10.62.0.0/29"}}, NetworkName: "sanpool"}
	if err := c.Create(ctx, pool); err != nil {
		t.Fatal(err)
	}
	conf := netconf("pooled", agents["npool"].Socket, `{"pool":"san-pool"}`)
	p := newPod(t, ctx, c, "e2e-pool", "npool", nil)
	r, err := add(ctx, p, conf)
	if err != nil {
		t.Fatal(err)
	}
	a := netip.MustParseAddr(addrs(r)[0])
	if !netip.MustParsePrefix("10.62.0.0/29").Contains(a) {
		t.Fatalf("address %s is not from the pool", a)
	}
	if n := len(reservationsOf(t, ctx, "sanpool")); n != 1 {
		t.Fatalf("%d reservations in the pool's network", n)
	}
	_, err = add(ctx, newPod(t, ctx, c, "e2e-pool", "npool", nil), netconf("pooled", agents["npool"].Socket, `{"pool":"no-such-pool"}`))
	if cniCode(err) != types.ErrInvalidNetworkConfig || !strings.Contains(err.Error(), "no-such-pool") {
		t.Fatalf("unknown pool: %v", err)
	}
}

// TestCooldownGivesANewPodADifferentAddress: on a /29 with a free address,
// a pod deleted and another created at once on the same node: the new pod
// gets the free address, not the one just released, although the agent's
// search meets that one first (the agent restarted after the free address
// was released, so its search starts where the pool's first address was
// handed out and it has no cooldown of its own for the free one). Once
// only the released address is free, the next pod gets it: a cooling
// address is never the reason for a "full".
func TestCooldownGivesANewPodADifferentAddress(t *testing.T) {
	ctx := testContext(t, 2*time.Minute)
	c := apiClient(t)
	const node = "ncool"
	agents := startAgents(t, ctx, node)
	first := agents[node]
	conf := netconf("cool29", first.Socket, `{"range":"10.31.0.0/29","network_name":"cool29"}`)

	var pods []pod
	var addrs []string
	for i := 0; i < 6; i++ {
		p := newPod(t, ctx, c, "e2e-cool", node, nil)
		r, err := add(ctx, p, conf)
		if err != nil {
			t.Fatalf("ADD %d: %v", i+1, err)
		}
		pods, addrs = append(pods, p), append(addrs, r.IPs[0].Address.IP.String())
	}
	p1, last := pods[0], pods[5]
	if err := del(ctx, last, conf); err != nil {
		t.Fatalf("DEL %s: %v", last.name, err)
	}

	// A restarted agent: the search starts at p1's address again, and
	// the last address was released before this agent's time.
	first.Stop()
	again, err := testbed.StartAgent(ctx, bins, t.TempDir(), first.Kubeconfig, node)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(again.Stop)
	conf = netconf("cool29", again.Socket, `{"range":"10.31.0.0/29","network_name":"cool29"}`)

	if err := del(ctx, p1, conf); err != nil {
		t.Fatalf("DEL %s: %v", p1.name, err)
	}
	p2 := newPod(t, ctx, c, "e2e-cool", node, nil)
	r, err := add(ctx, p2, conf)
	if err != nil {
		t.Fatalf("ADD %s at once after DEL %s: %v", p2.name, p1.name, err)
	}
	if got := r.IPs[0].Address.IP.String(); got != addrs[5] {
		t.Fatalf("%s got %s, want %s, the free address other than %s's %s, just released", p2.name, got, addrs[5], p1.name, addrs[0])
	}

	p3 := newPod(t, ctx, c, "e2e-cool", node, nil)
	r, err = add(ctx, p3, conf)
	if err != nil {
		t.Fatalf("ADD %s with only %s's cooling address free: %v, want that address", p3.name, p1.name, err)
	}
	if got := r.IPs[0].Address.IP.String(); got != addrs[0] {
		t.Fatalf("%s got %s, want %s, the only free address", p3.name, got, addrs[0])
	}
	want := map[string]string{addrs[0]: p3.uid, addrs[5]: p2.uid}
	for i := 1; i < 5; i++ {
		want[addrs[i]] = pods[i].uid
	}
	held := map[string]string{}
	for _, res := range reservationsOf(t, ctx, "cool29") {
		held[res.Spec.Address] = res.Spec.Owner.UID
	}
	if fmt.Sprint(held) != fmt.Sprint(want) {
		t.Fatalf("reservations (address -> owner UID) %v, want %v", held, want)
	}
}
