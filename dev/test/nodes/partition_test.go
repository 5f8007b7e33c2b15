//go:build integration

package nodes_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/tenure-ipam/tenure/dev/nodetest"
)

const (
	// partitionWatch is how long the wire is sampled while a node is
	// partitioned and its pods are evicted: long past the pods'
	// tolerations and past the default --node-grace-period (5 min).
	partitionWatch = 10 * time.Minute
	// partitionTolerationSeconds is the pods' toleration of the
	// unreachable and not-ready taints: fast failover, as many clusters
	// set it.
	partitionTolerationSeconds = 10
	// fencedReleaseDeadline is how soon after the out-of-service taint a
	// fenced node's evicted pods' addresses must be released.
	fencedReleaseDeadline = 10 * time.Second
	partitionRange        = "10.103.0.0/29"
)

// A node is partitioned: it loses its route to the API server while its
// SAN leg stays up, so its kubelet and its two pods of a ReplicaSet (six
// on a /29 SAN, two per node) keep running and answering there. The node
// goes NotReady, its pods are evicted after their 10 s tolerations and
// the ReplicaSet's replacements wait for an address on the full /29. For
// ten minutes a host outside the nodes, plugged into the SAN bridge,
// ARP-probes every address of the /29 every second: no address is ever
// answered by two MACs, the partitioned pods' addresses are answered by
// their MACs, and the evicted pods' reservations remain, by name and UID.
// The node is then fenced as a fencing agent does (shut down, tainted
// out-of-service): the evicted pods' reservations are released within
// 10 s of the taint and the replacements run with addresses. The node
// comes back (its pods gone before its SAN leg returns, as after a
// reboot), and still no address is answered by two MACs.
func partitionedNodeKeepsItsAddresses(t *testing.T) {
	ctx := nodetest.Context(t, partitionWatch+15*time.Minute)
	rs := startSANReplicaSet(ctx, t, sanReplicaSetSpec{name: "part3", network: "part-san",
		ipam: `"range": "` + partitionRange + `"`, failover: true})
	ns := rs.ns
	before := rs.waitTwoPerNode(ctx, t)

	// The node to partition: not the tenure controller's.
	cut := nodeOtherThan(t, controllerPod(ctx, t).Spec.NodeName)
	cutPods, kept := partitionedPods(ctx, t, ns, before, cut.Name) // kept: the partitioned pods' reservations
	if len(kept) != 2 {
		t.Fatalf("the partitioned node's pods %v hold reservations %v, want one each", cutPods, kept)
	}

	guest, err := cluster.PlugSAN("part-probe")
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := guest.Unplug(); err != nil {
			t.Error(err)
		}
	}()
	sampler, err := nodetest.StartWireSampler(guest.Netns, guest.Link, netip.MustParsePrefix(partitionRange), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	sampling := true
	stopSampling := func() {
		if sampling {
			sampling = false
			if err := sampler.Stop(); err != nil {
				t.Errorf("the wire sampler: %v", err)
			}
		}
	}
	defer stopSampling()

	start := time.Now()
	if err := cut.CutFabric(); err != nil {
		t.Fatal(err)
	}
	fenced, returned := false, false
	defer func() {
		if !returned {
			_ = cut.RestoreLinks()
			if fenced {
				_ = cut.Return(context.Background())
				kc.Unfence(context.Background(), t, cut.Name)
			}
		}
	}()
	kc.WaitNotReady(ctx, t, cut.Name)
	notReady := time.Since(start)
	kc.Poll(ctx, t, "the partitioned node's pods to be evicted", func() error {
		for _, c := range cutPods {
			if p, err := kc.Pod(ctx, ns, c.pod.Name); err != nil || p.DeletionTimestamp == nil {
				return fmt.Errorf("%s not evicted (%v)", c.pod.Name, err)
			}
		}
		return nil
	})
	evicted := time.Since(start)
	kc.Poll(ctx, t, "two replacements waiting for an address of the full /29", func() error {
		var waiting []string
		for _, p := range rs.pods(ctx, t) {
			if hasPod(before, p) {
				continue
			}
			if p.Spec.NodeName == cut.Name || p.Status.Phase == corev1.PodRunning {
				return fmt.Errorf("replacement %s on %s is %s", p.Name, p.Spec.NodeName, p.Status.Phase)
			}
			if strings.Contains(kc.Events(ctx, ns, p.Name), "is full") {
				waiting = append(waiting, p.Name)
			}
		}
		if len(waiting) != 2 {
			return fmt.Errorf("waiting with the exhaustion event: %v", waiting)
		}
		return nil
	})
	for _, c := range cutPods {
		kc.WaitFenceWait(ctx, t, ns, c.pod.Name)
	}

	// The watch: every reservation of the evicted pods stays, by name
	// and UID, and no replacement gets one.
	t.Logf("partitioned %s at %s: NotReady after %v, its pods evicted after %v; watching the wire for %v",
		cut.Name, start.Format(time.RFC3339), notReady.Round(time.Second), evicted.Round(time.Second), partitionWatch)
	watchEnd := start.Add(evicted + partitionWatch)
	tick := time.NewTicker(2 * time.Second)
	lastLog := time.Now()
	for time.Now().Before(watchEnd) {
		select {
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		case <-tick.C:
		}
		byName := map[string]string{}
		for _, r := range kc.Reservations(ctx, t, ns) {
			byName[r.Name] = string(r.UID)
			if p, err := kc.Pod(ctx, ns, r.Spec.Owner.Name); err == nil && !hasPod(before, *p) {
				t.Fatalf("replacement %s holds %s while the partitioned node is not fenced", p.Name, r.Spec.Address)
			}
		}
		for name, uid := range kept {
			if byName[name] != uid {
				t.Fatalf("%v after the cut, reservation %s (UID %s) of an evicted pod is gone or replaced (UID %q)",
					time.Since(start).Round(time.Second), name, uid, byName[name])
			}
		}
		if c := nodetest.Conflicts(sampler.Rounds(start)); len(c) > 0 {
			t.Fatalf("answered by two MACs on the SAN: %s", strings.Join(c, "; "))
		}
		if time.Since(lastLog) > time.Minute {
			lastLog = time.Now()
			t.Logf("%v after the cut: the evicted pods' reservations %v remain", time.Since(start).Round(time.Second), slices.Sorted(maps.Keys(kept)))
		}
	}
	tick.Stop()
	rounds := sampler.Rounds(start)
	for _, c := range cutPods {
		n := nodetest.AnsweredBy(rounds, c.addr, c.mac)
		t.Logf("%s (%s, MAC %s) answered in %d of %d rounds of the partition", c.pod.Name, c.addr, c.mac, n, len(rounds))
		// A round may lose a reply on a loaded host; most may not.
		if n < len(rounds)/2 {
			t.Errorf("%s's address %s was answered by its MAC %s in %d of %d rounds: the sampler does not see the partitioned pods",
				c.pod.Name, c.addr, c.mac, n, len(rounds))
		}
	}
	if t.Failed() {
		t.FailNow()
	}

	// Fencing, as a fencing agent does: the node is shut down (its
	// kubelet and runtime stop, its SAN leg goes dark), then tainted
	// out-of-service.
	if err := cut.Lose(); err != nil {
		t.Fatal(err)
	}
	if err := cut.CutSAN(); err != nil {
		t.Fatal(err)
	}
	fenced = true
	kc.Fence(ctx, t, cut.Name, corev1.TaintEffectNoExecute)
	taint := time.Now()
	releaseCtx, cancel := context.WithDeadline(ctx, taint.Add(fencedReleaseDeadline))
	kc.Poll(releaseCtx, t, fmt.Sprintf("the evicted pods' reservations released within %v of the out-of-service taint", fencedReleaseDeadline), func() error {
		for _, r := range kc.Reservations(ctx, t, ns) {
			if _, ok := kept[r.Name]; ok && string(r.UID) == kept[r.Name] {
				return fmt.Errorf("%s still held by %s", r.Spec.Address, r.Spec.Owner.Name)
			}
		}
		return nil
	})
	cancel()
	released := time.Since(taint)
	var after []corev1.Pod
	kc.Poll(ctx, t, "six replicas running on the two other nodes", func() error {
		after = slices.DeleteFunc(rs.running(ctx, t), func(p corev1.Pod) bool { return p.Spec.NodeName == cut.Name })
		if len(after) != 6 {
			return fmt.Errorf("%d running off the fenced node", len(after))
		}
		return nil
	})
	type onWire struct {
		name string
		addr netip.Addr
		mac  string
	}
	var replacements []onWire
	seen := map[string]string{}
	for _, p := range after {
		a := net1Of(ctx, t, &p)
		if other, dup := seen[a]; dup {
			t.Errorf("%s and %s both hold %s", p.Name, other, a)
		}
		seen[a] = p.Name
		if !hasPod(before, p) {
			mac, err := nodetest.LinkMAC(podNetns(t, &p), "net1")
			if err != nil {
				t.Fatal(err)
			}
			replacements = append(replacements, onWire{p.Name, netip.MustParseAddr(a), mac})
		}
	}
	if len(replacements) != 2 {
		t.Fatalf("replacements %v, want two", replacements)
	}
	kc.Poll(ctx, t, "the replacements' addresses answered by their MACs alone", func() error {
		rounds := sampler.Rounds(time.Now().Add(-3 * time.Second))
		if len(rounds) == 0 {
			return errors.New("no round yet")
		}
		last := rounds[len(rounds)-1]
		for _, r := range replacements {
			if got := last.Answers[r.addr]; !slices.Equal(got, []string{r.mac}) {
				return fmt.Errorf("%s answered by %v, want %s's %s", r.addr, got, r.name, r.mac)
			}
		}
		return nil
	})
	var running2 []string
	for _, r := range replacements {
		running2 = append(running2, fmt.Sprintf("%s (%s, MAC %s)", r.name, r.addr, r.mac))
	}
	t.Logf("fenced %v after the cut; the evicted pods' reservations released %v after the taint; replacements running: %s",
		taint.Sub(start).Round(time.Second), released.Round(time.Millisecond), strings.Join(running2, ", "))

	// The node comes back as after a reboot: reachable, its pods gone
	// (its kubelet finds them deleted) before its SAN leg is up.
	returned = true
	if err := cut.RestoreFabric(); err != nil {
		t.Fatal(err)
	}
	if err := cut.Return(ctx); err != nil {
		t.Fatal(err)
	}
	kc.Unfence(ctx, t, cut.Name)
	waitSandboxesGone(ctx, t, ns, cutPods)
	if err := cut.RestoreSAN(); err != nil {
		t.Fatal(err)
	}
	back := time.Now()
	kc.Poll(ctx, t, "three rounds of the wire after the node's SAN leg is back", func() error {
		if n := len(sampler.Rounds(back)); n < 3 {
			return fmt.Errorf("%d rounds", n)
		}
		return nil
	})
	stopSampling()
	all := sampler.Rounds(start)
	if c := nodetest.Conflicts(all); len(c) > 0 {
		t.Errorf("answered by two MACs on the SAN: %s", strings.Join(c, "; "))
	}
	t.Logf("%d rounds of the wire from the cut to the node's return, no address answered by two MACs", len(all))

	rs.deleteAndCheck(ctx, t)
}
