//go:build integration

package nodes_test

import (
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/controller"
	"github.com/tenure-ipam/tenure/internal/dev/devnode"
	"github.com/tenure-ipam/tenure/internal/dev/localnode"
	"github.com/tenure-ipam/tenure/internal/dev/nodetest"
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

	ns := kc.Namespace(ctx, t, "grace3")
	kc.NAD(ctx, t, ns, "grace-san", `{
		"cniVersion": "1.0.0", "name": "grace-san", "type": "macvlan", "master": "`+devnode.SANLink+`", "mode": "bridge",
		"ipam": {"type": "tenure", "range": "`+graceRange+`", "network_name": "grace-san"}}`)
	held := watchHolders(ctx, t, ns)
	tmpl := localnode.Pod(ns, "", "grace-san")
	labels := map[string]string{"app": "grace3"}
	tmpl.Labels = labels
	tmpl.Spec.Tolerations = []corev1.Toleration{
		{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To(int64(partitionTolerationSeconds))},
		{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To(int64(partitionTolerationSeconds))},
	}
	tmpl.Spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{
		MaxSkew: 1, TopologyKey: corev1.LabelHostname, WhenUnsatisfiable: corev1.DoNotSchedule,
		NodeTaintsPolicy: ptr.To(corev1.NodeInclusionPolicyHonor),
		LabelSelector:    &metav1.LabelSelector{MatchLabels: labels},
	}}
	rs := &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "grace3"},
		Spec: appsv1.ReplicaSetSpec{Replicas: ptr.To(int32(6)), Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: tmpl.ObjectMeta, Spec: tmpl.Spec}},
	}
	if err := cl.Create(ctx, rs); err != nil {
		t.Fatal(err)
	}
	listPods := func() []corev1.Pod {
		var pods corev1.PodList
		if err := cl.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels(labels)); err != nil {
			t.Fatal(err)
		}
		return pods.Items
	}
	running := func(pods []corev1.Pod) []corev1.Pod {
		return slices.DeleteFunc(pods, func(p corev1.Pod) bool { return p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil })
	}
	var before []corev1.Pod
	kc.Poll(ctx, t, "six replicas running, two per node", func() error {
		before = running(listPods())
		perNode := map[string]int{}
		for _, p := range before {
			perNode[p.Spec.NodeName]++
		}
		for _, n := range cluster.Nodes {
			if perNode[n.Name] != 2 {
				return fmt.Errorf("%d running: %v per node", len(before), perNode)
			}
		}
		return nil
	})
	wasBefore := func(p corev1.Pod) bool {
		return slices.ContainsFunc(before, func(b corev1.Pod) bool { return b.UID == p.UID })
	}

	var ctrl corev1.PodList
	if err := cl.List(ctx, &ctrl, client.InNamespace(localnode.Namespace), client.MatchingLabels{"app.kubernetes.io/name": "tenure-controller"}); err != nil {
		t.Fatal(err)
	}
	if len(ctrl.Items) != 1 {
		t.Fatalf("%d controller pods, want 1", len(ctrl.Items))
	}
	var cut *devnode.Node
	for _, n := range cluster.Nodes {
		if n.Name != ctrl.Items[0].Spec.NodeName {
			cut = n
			break
		}
	}
	type partitioned struct {
		pod   corev1.Pod
		addr  netip.Addr
		mac   string
		netns string
		res   string // its reservation's name
	}
	var cutPods []partitioned
	kept := map[string]string{} // name: UID
	for _, p := range before {
		addr := net1Of(ctx, t, &p)
		if p.Spec.NodeName != cut.Name {
			continue
		}
		path := podNetns(t, &p)
		mac, err := nodetest.LinkMAC(path, "net1")
		if err != nil {
			t.Fatal(err)
		}
		c := partitioned{pod: p, addr: netip.MustParseAddr(addr), mac: mac, netns: path}
		for _, r := range kc.Reservations(ctx, t, ns) {
			if r.Spec.Owner.UID == string(p.UID) {
				kept[r.Name] = string(r.UID)
				c.res = r.Name
			}
		}
		cutPods = append(cutPods, c)
	}
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
			if p, err := kc.Pod(ctx, ns, r.Spec.Owner.Name); err == nil && !wasBefore(*p) && kept[r.Name] != "" {
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
		if n := len(slices.DeleteFunc(running(listPods()), func(p corev1.Pod) bool { return p.Spec.NodeName == cut.Name })); n != 6 {
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
	for _, c := range cutPods {
		kc.WaitGone(ctx, t, ns, c.pod.Name)
		kc.Poll(ctx, t, "the kubelet to remove "+c.pod.Name+"'s sandbox", func() error {
			if _, err := os.Stat(c.netns); !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("network namespace %s still there (%v)", c.netns, err)
			}
			return nil
		})
	}
	if err := cut.RestoreSAN(); err != nil {
		t.Fatal(err)
	}
	if err := cl.Delete(ctx, rs); err != nil {
		t.Fatal(err)
	}
	kc.WaitReleased(ctx, t, ns)
	held.check(t)
}
