package agent

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/tenure-ipam/tenure/internal/addrspace"
	"github.com/tenure-ipam/tenure/test/testbed"
)

// wireSegment is a namespace with a veth whose peer, in another
// namespace, holds 10.98.0.7; it returns the probing namespace's path and
// the holder's MAC.
func wireSegment(t *testing.T) (string, net.HardwareAddr) {
	t.Helper()
	testbed.NeedPlumb(t)
	sfx := fmt.Sprint(os.Getpid()%1000, "-", time.Now().UnixNano()%1e6)
	node, other := "tw-node-"+sfx, "tw-other-"+sfx
	var path string
	for _, n := range []string{node, other} {
		p, rm, err := testbed.AddNetns(n)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(rm)
		if n == node {
			path = p
		}
	}
	for _, st := range []struct {
		ns   string
		args []string
	}{
		{node, []string{"link", "add", "seg0", "type", "veth", "peer", "name", "eth0", "netns", other}},
		{node, []string{"link", "set", "seg0", "up"}},
		{other, []string{"link", "set", "eth0", "up"}},
		{other, []string{"addr", "add", "10.98.0.7/24", "dev", "eth0"}},
	} {
		if out, err := testbed.IPIn(st.ns, st.args...); err != nil {
			t.Fatalf("ip %v: %v: %s", st.args, err, out)
		}
	}
	out, _ := testbed.IPIn(other, "-br", "link", "show", "eth0")
	f := strings.Fields(out)
	if len(f) < 3 {
		t.Fatalf("ip -br link: %q", out)
	}
	mac, err := net.ParseMAC(f[2])
	if err != nil {
		t.Fatal(err)
	}
	return path, mac
}

func probesOf(w *wire, outcome string) int {
	var m dto.Metric
	if err := w.probes.WithLabelValues(outcome).Write(&m); err != nil {
		panic(err)
	}
	return int(m.GetCounter().GetValue())
}

func TestTheWireCheckHandsOutASilentResultOnceAndSkipsAnAnswer(t *testing.T) {
	path, mac := wireSegment(t)
	w := newWire(WireOptions{Netns: path, Interval: 50 * time.Millisecond, Fresh: time.Minute}, slog.Default(), nil, nil)
	ctx := context.Background()
	free, held := netip.MustParseAddr("10.98.0.8"), netip.MustParseAddr("10.98.0.7")

	ans, err := w.check(ctx, "seg0", held)
	if err != nil || ans == nil || ans.MAC.String() != mac.String() {
		t.Fatalf("check of the held address: %+v %v, want an answer from %s", ans, err, mac)
	}
	// The answer stands while fresh: skipped again without a probe.
	if ans, err := w.check(ctx, "seg0", held); err != nil || ans == nil || probesOf(w, "answered") != 1 {
		t.Fatalf("second check: %+v %v after %d answered probes, want the cached answer", ans, err, probesOf(w, "answered"))
	}
	if ans, err := w.check(ctx, "seg0", free); err != nil || ans != nil {
		t.Fatalf("check of the free address: %+v %v", ans, err)
	}
	// A silent result is used once: the next check of the address probes.
	if ans, err := w.check(ctx, "seg0", free); err != nil || ans != nil || probesOf(w, "silent") != 2 {
		t.Fatalf("second check of the free address: %+v %v after %d silent probes, want a new probe", ans, err, probesOf(w, "silent"))
	}
}

func TestTheWireCheckProbesTheNextCandidatesAhead(t *testing.T) {
	path, _ := wireSegment(t)
	next := []netip.Prefix{netip.MustParsePrefix("10.98.0.20/32"), netip.MustParsePrefix("10.98.0.21/32")}
	space := addrspace.AddressSpace{}
	w := newWire(WireOptions{Netns: path, Interval: 50 * time.Millisecond, Fresh: time.Minute, Ahead: 2}, slog.Default(), nil,
		func(context.Context, string, addrspace.Space, int) []netip.Prefix { return next })
	ctx := context.Background()
	w.use("seg0", "scope", space)
	w.refresh(ctx)
	for _, p := range next {
		w.mu.Lock()
		r := w.results[wireKey{"seg0", p.Addr()}]
		w.mu.Unlock()
		if r == nil {
			t.Fatalf("no probe ahead of %s", p.Addr())
		}
		<-r.done
	}
	start := time.Now()
	ans, err := w.check(ctx, "seg0", next[0].Addr())
	if err != nil || ans != nil {
		t.Fatalf("check: %+v %v", ans, err)
	}
	if took := time.Since(start); took > 50*time.Millisecond || probesOf(w, "silent") != 2 {
		t.Fatalf("the check of a candidate probed ahead took %v and %d probes, want the ahead result at once", took, probesOf(w, "silent"))
	}
	// A renewal in flight over a fresh result does not hold an ADD up.
	w.mu.Lock()
	old := w.results[wireKey{"seg0", next[1].Addr()}]
	old.end = time.Now().Add(-time.Minute * 2 / 3) // due for renewal, still fresh
	w.mu.Unlock()
	w.refresh(ctx)
	w.mu.Lock()
	renewing := w.results[wireKey{"seg0", next[1].Addr()}]
	w.mu.Unlock()
	if renewing == old || renewing.prev != old {
		t.Fatalf("no renewal started over the result due for it")
	}
	start = time.Now()
	if ans, err := w.check(ctx, "seg0", next[1].Addr()); err != nil || ans != nil {
		t.Fatalf("check during the renewal: %+v %v", ans, err)
	}
	if took := time.Since(start); took > 50*time.Millisecond {
		t.Fatalf("the check waited %v for the renewal", took)
	}
	<-renewing.done
	if probesOf(w, "cancelled") != 1 {
		t.Fatalf("the renewal was not stopped when the ADD took the address: %d cancelled", probesOf(w, "cancelled"))
	}
}

// A burst of ADDs widens how far ahead a network is probed: one candidate
// more per ADD of the last demandWindow, at most maxAhead; the largest
// burst's widening stands for burstMemory after it has passed, so the
// next burst's first ADDs find their candidates probed, and then it is
// back to Ahead.
func TestTheWireCheckProbesFurtherAheadOfABurst(t *testing.T) {
	var asked []int
	w := newWire(WireOptions{Fresh: time.Minute, Ahead: 8}, slog.Default(), nil,
		func(_ context.Context, _ string, _ addrspace.Space, n int) []netip.Prefix {
			asked = append(asked, n)
			return nil
		})
	ctx := context.Background()
	space := addrspace.AddressSpace{}
	for range 5 {
		w.use("seg0", "scope", space)
	}
	w.refresh(ctx)
	for range 100 {
		w.use("seg0", "scope", space)
	}
	w.refresh(ctx)
	w.mu.Lock()
	for _, n := range w.nets {
		for i := range n.recent {
			n.recent[i] = n.recent[i].Add(-demandWindow - time.Second)
		}
	}
	w.mu.Unlock()
	w.refresh(ctx)
	w.mu.Lock()
	for _, n := range w.nets {
		n.peakAt = n.peakAt.Add(-burstMemory - time.Second)
	}
	w.mu.Unlock()
	w.refresh(ctx)
	if want := []int{8 + 5, maxAhead, maxAhead, 8}; fmt.Sprint(asked) != fmt.Sprint(want) {
		t.Fatalf("candidates asked for ahead: %v, want %v (after 5 ADDs, after 105, after the burst, past burstMemory)", asked, want)
	}
}
