//go:build integration

package nodes_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tenure-ipam/tenure/dev/devnode"
	"github.com/tenure-ipam/tenure/dev/localnode"
	"github.com/tenure-ipam/tenure/dev/nodetest"
)

// The agent DaemonSet is rolled to a second image across the three nodes
// (one node's agent away at a time: maxUnavailable 1) while pods are
// created on all of them. The kubelets retry while their node's agent is
// away; every pod gets an address, no address is held by two owners at
// any point, and none is left once the pods are gone.
func rollingTheAgentAcrossNodes(t *testing.T) {
	ctx := nodetest.Context(t, 8*time.Minute)
	ns := kc.Namespace(ctx, t, "roll3")
	kc.NAD(ctx, t, ns, "roll-san", `{
		"cniVersion": "1.0.0", "name": "roll-san", "type": "macvlan", "master": "`+devnode.SANLink+`", "mode": "bridge",
		"ipam": {"type": "tenure", "range": "10.102.0.0/24"}}`)
	held := watchHolders(ctx, t, ns)

	var ds appsv1.DaemonSet
	if err := cl.Get(ctx, client.ObjectKey{Namespace: localnode.Namespace, Name: localnode.AgentDaemonSet}, &ds); err != nil {
		t.Fatal(err)
	}
	if s := ds.Spec.UpdateStrategy; s.Type != appsv1.RollingUpdateDaemonSetStrategyType ||
		(s.RollingUpdate != nil && s.RollingUpdate.MaxUnavailable != nil && s.RollingUpdate.MaxUnavailable.IntValue() != 1) {
		t.Fatalf("agent DaemonSet update strategy %+v, want a rolling update with maxUnavailable 1", s)
	}
	oldImage := ds.Spec.Template.Spec.Containers[0].Image
	newImage := strings.SplitN(oldImage, ":", 2)[0] + ":rolled"
	for _, n := range cluster.Nodes {
		if err := n.TagImage(ctx, oldImage, newImage); err != nil {
			t.Fatal(err)
		}
	}
	oldAgents := agentsByNode(ctx, t)

	const pods = 12
	created := make(chan error, 1)
	go func() {
		// A stream of pods over the nodes, not a burst.
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for i := range pods {
			p := localnode.Pod(ns, fmt.Sprintf("roll-%d", i), "roll-san")
			p.Spec.NodeName = cluster.Nodes[i%3].Name
			if err := cl.Create(ctx, p); err != nil {
				created <- err
				return
			}
			<-tick.C
		}
		created <- nil
	}()
	kc.SetAgentImage(ctx, t, newImage)
	if err := <-created; err != nil {
		t.Fatal(err)
	}
	if err := localnode.WaitRollout(ctx, cl); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		kc.SetAgentImage(ctx, t, oldImage)
		if err := localnode.WaitRollout(ctx, cl); err != nil {
			t.Error(err)
		}
	})
	for node, a := range agentsByNode(ctx, t) {
		if a.UID == oldAgents[node].UID || a.Spec.Containers[0].Image != newImage {
			t.Errorf("node %s: agent %s with image %s, want a new pod with %s", node, a.Name, a.Spec.Containers[0].Image, newImage)
		}
	}

	seen := map[string]string{}
	retried := 0
	for i := range pods {
		name := fmt.Sprintf("roll-%d", i)
		p := kc.WaitRunning(ctx, t, ns, name)
		a := net1Of(ctx, t, p)
		if other, dup := seen[a]; dup {
			t.Errorf("%s and %s both hold %s", name, other, a)
		}
		seen[a] = name
		if strings.Contains(kc.Events(ctx, ns, name), "FailedCreatePodSandBox") {
			retried++
		}
	}
	t.Logf("%d of %d pods were retried by the kubelet while their node's agent was away", retried, pods)
	for i := range pods {
		if p, err := kc.Pod(ctx, ns, fmt.Sprintf("roll-%d", i)); err == nil {
			if err := cl.Delete(ctx, p); err != nil {
				t.Fatal(err)
			}
		}
	}
	kc.WaitReleased(ctx, t, ns)
	held.check(t)
}

func agentsByNode(ctx context.Context, t *testing.T) map[string]corev1.Pod {
	t.Helper()
	var pods corev1.PodList
	if err := cl.List(ctx, &pods, client.InNamespace(localnode.Namespace), client.MatchingLabels{"app.kubernetes.io/name": "tenure-agent"}); err != nil {
		t.Fatal(err)
	}
	out := map[string]corev1.Pod{}
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil {
			out[p.Spec.NodeName] = p
		}
	}
	if len(out) != 3 {
		t.Fatalf("agents on %d nodes, want 3", len(out))
	}
	return out
}
