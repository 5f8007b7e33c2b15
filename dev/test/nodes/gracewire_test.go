//go:build integration

package nodes_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/dev/devnode"
	"github.com/tenure-ipam/tenure/dev/localnode"
	"github.com/tenure-ipam/tenure/dev/nodetest"
	"github.com/tenure-ipam/tenure/internal/controller"
)

const (
	graceRange = "10.104.0.0/29"
	// graceNodeGrace and graceProbeInterval: the controller's
	// --node-grace-period and --probe-interval in this part.
	graceNodeGrace     = 20 * time.Second
	graceProbeInterval = 5 * time.Second
)

// The controller runs with --release-unfenced and a 20 s grace period. A
// node is partitioned (its route to the API server cut, its SAN leg up)
// with two pods of a ReplicaSet (six on a /29 SAN, two a node, tolerating
// the node's taints for 10 s). Past the grace period the controller asks
// the other nodes' agents to probe the pods' addresses: they hear them
// answer from the pods' MACs, and the addresses stay the evicted pods'
// (their reservations by name and UID) through three requests, with a
// Warning Event AddressAnswers naming the MAC on each pod, while the
// replacements wait. Then the node's SAN leg is cut too: the next request
// finds the addresses silent, they are released as NodeNotReady, and the
// replacements run with them. The node comes back (its pods gone before
// its SAN leg is up), and no address ever had two holders.
func gracePeriodKeepsAPartitionedNodesAddressesWhileTheyAnswer(t *testing.T) {
	ctx := nodetest.Context(t, 15*time.Minute)
	if err := localnode.HelmInstall(ctx, cp.KubeconfigPath, devnode.FabricAPIServer, devnode.FabricAPIServerPort, true,
		map[string]any{"controller": map[string]any{"extraArgs": []string{"--release-unfenced",
			"--node-grace-period=" + graceNodeGrace.String(), "--probe-interval=" + graceProbeInterval.String()}}}); err != nil {
		t.Fatal(err)
	}
	if err := localnode.WaitRollout(ctx, cl); err != nil {
		t.Fatal(err)
	}
	defer func() {
		// The chart's defaults again, for the parts after this one.
		if err := upgradeToChart(nodetest.Context(t, 3*time.Minute)); err != nil {
			t.Error(err)
		}
	}()

	rs := startSANReplicaSet(ctx, t, sanReplicaSetSpec{name: "grace3", network: "grace-san",
		ipam: `"range": "` + graceRange + `", "network_name": "grace-san"`, failover: true})
	ns := rs.ns
	before := rs.waitTwoPerNode(ctx, t)

	cut := nodeOtherThan(t, controllerPod(ctx, t).Spec.NodeName)
	cutPods, kept := partitionedPods(ctx, t, ns, before, cut.Name)
	if len(kept) != 2 || len(cutPods) != 2 {
		t.Fatalf("the partitioned node's pods %v hold reservations %v, want one each", cutPods, kept)
	}

	start := time.Now()
	if err := cut.CutFabric(); err != nil {
		t.Fatal(err)
	}
	restored := false
	defer func() {
		if !restored {
			_ = cut.RestoreLinks()
		}
	}()
	kc.WaitNotReady(ctx, t, cut.Name)
	kc.Poll(ctx, t, "the partitioned node's pods to be evicted", func() error {
		for _, c := range cutPods {
			if p, err := kc.Pod(ctx, ns, c.pod.Name); err != nil || p.DeletionTimestamp == nil {
				return fmt.Errorf("%s not evicted (%v)", c.pod.Name, err)
			}
		}
		return nil
	})

	// Past the grace period: the other nodes' agents hear each address
	// answer from its pod's MAC, request after request.
	answered := func(c partitioned, gen int64) error {
		var p tenurev1alpha1.IPProbe
		if err := cl.Get(ctx, client.ObjectKey{Name: c.res}, &p); err != nil {
			return err
		}
		if p.Generation < gen {
			return fmt.Errorf("IPProbe %s at generation %d", c.res, p.Generation)
		}
		for _, a := range p.Status.Answers {
			if a.ObservedGeneration == p.Generation && a.Node != cut.Name && a.Result == tenurev1alpha1.ProbeAnswered && a.MAC == c.mac {
				return nil
			}
		}
		return fmt.Errorf("IPProbe %s generation %d: answers %+v, none of another node hearing %s", c.res, p.Generation, p.Status.Answers, c.mac)
	}
	checkKept := func() error {
		byName := map[string]string{}
		for _, r := range kc.Reservations(ctx, t, ns) {
			byName[r.Name] = string(r.UID)
			if p, err := kc.Pod(ctx, ns, r.Spec.Owner.Name); err == nil && !hasPod(before, *p) && kept[r.Name] != "" {
				return fmt.Errorf("replacement %s holds %s while it answers", p.Name, r.Spec.Address)
			}
		}
		for name, uid := range kept {
			if byName[name] != uid {
				return fmt.Errorf("reservation %s (UID %s) of an evicted pod is gone or replaced (UID %q) while it answers", name, uid, byName[name])
			}
		}
		return nil
	}
	for gen := int64(1); gen <= 3; gen++ {
		kc.Poll(ctx, t, fmt.Sprintf("request %d: the partitioned pods' addresses answer", gen), func() error {
			if err := checkKept(); err != nil {
				t.Fatal(err)
			}
			for _, c := range cutPods {
				if err := answered(c, gen); err != nil {
					return err
				}
			}
			return nil
		})
	}
	for _, c := range cutPods {
		if ev := kc.Events(ctx, ns, c.pod.Name); !strings.Contains(ev, controller.EventReasonAddressAnswers) || !strings.Contains(ev, c.mac) {
			t.Errorf("pod %s's Events lack %s naming %s:\n%s", c.pod.Name, controller.EventReasonAddressAnswers, c.mac, ev)
		}
	}
	t.Logf("partitioned %s: its pods' addresses %v kept through three requests, %v after the cut", cut.Name, kept, time.Since(start).Round(time.Second))

	// Its SAN leg is cut too: silence, then the release.
	if err := cut.CutSAN(); err != nil {
		t.Fatal(err)
	}
	silent := time.Now()
	kc.Poll(ctx, t, "the partitioned pods' reservations released once they are silent", func() error {
		for _, r := range kc.Reservations(ctx, t, ns) {
			if kept[r.Name] == string(r.UID) {
				return fmt.Errorf("%s still held by %s", r.Spec.Address, r.Spec.Owner.Name)
			}
		}
		return nil
	})
	t.Logf("released %v after the SAN leg was cut", time.Since(silent).Round(time.Second))
	for _, c := range cutPods {
		if ev := kc.Events(ctx, ns, c.pod.Name); !strings.Contains(ev, "NodeNotReady") || !strings.Contains(ev, "nothing answered for "+c.addr.String()) {
			t.Errorf("pod %s's Events lack the NodeNotReady release on silence:\n%s", c.pod.Name, ev)
		}
	}
	kc.Poll(ctx, t, "six replicas running off the partitioned node", func() error {
		if n := len(slices.DeleteFunc(rs.running(ctx, t), func(p corev1.Pod) bool { return p.Spec.NodeName == cut.Name })); n != 6 {
			return fmt.Errorf("%d running off it", n)
		}
		return nil
	})
	for _, c := range cutPods {
		var p tenurev1alpha1.IPProbe
		if err := cl.Get(ctx, client.ObjectKey{Name: c.res}, &p); err == nil && p.DeletionTimestamp == nil {
			t.Errorf("IPProbe %s remains after its reservation's release", c.res)
		}
	}

	// The node comes back: reachable, its pods gone, then its SAN leg.
	restored = true
	if err := cut.RestoreFabric(); err != nil {
		t.Fatal(err)
	}
	waitSandboxesGone(ctx, t, ns, cutPods)
	if err := cut.RestoreSAN(); err != nil {
		t.Fatal(err)
	}
	rs.deleteAndCheck(ctx, t)
}
