//go:build integration

package node_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tenure-ipam/tenure/dev/devnode"
	"github.com/tenure-ipam/tenure/dev/localnode"
	"github.com/tenure-ipam/tenure/dev/nodetest"
)

// The DaemonSet's pod runs on the node, its init
// container has installed the shim (the image's binary, not a link) into the
// node's CNI bin dir and the flat configuration beside the CNI configs; the
// agent is Ready through its own probes; the controller runs, Ready, and
// holds the leader Lease.
func TestDeployedTenureRunsOnTheNode(t *testing.T) {
	ctx := nodetest.Context(t, 2*time.Minute)

	agent := podOf(t, "app.kubernetes.io/name=tenure-agent")
	if agent.Spec.NodeName != node.Name {
		t.Errorf("agent pod %s runs on %q, want %q", agent.Name, agent.Spec.NodeName, node.Name)
	}
	checkReady(t, agent)
	if len(agent.Status.InitContainerStatuses) != 1 || agent.Status.InitContainerStatuses[0].State.Terminated == nil ||
		agent.Status.InitContainerStatuses[0].State.Terminated.ExitCode != 0 {
		t.Errorf("agent pod %s: init container did not complete: %+v", agent.Name, agent.Status.InitContainerStatuses)
	}

	shim := filepath.Join(devnode.HostCNIBinDir, "tenure")
	fi, err := os.Lstat(shim)
	if err != nil {
		t.Fatal(err)
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
		t.Errorf("%s is %v, want an executable file", shim, fi.Mode())
	}
	installed, err := os.ReadFile(shim)
	if err != nil {
		t.Fatal(err)
	}
	// make image builds the image's binaries into bin/image.
	want, err := os.ReadFile(filepath.Join(binDir, "image", "tenure"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(installed, want) {
		t.Errorf("%s (%d bytes) is not the image's shim (%d bytes)", shim, len(installed), len(want))
	}
	flat, err := os.ReadFile(filepath.Join(devnode.HostCNIConfDir, "tenure.d", "tenure.conf"))
	if err != nil {
		t.Fatal(err)
	}
	shipped, err := os.ReadFile(filepath.Join("..", "..", "..", "deploy", "agent", "tenure.conf"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(flat, shipped) {
		t.Errorf("flat config on the node:\n%s\nwant deploy/agent/tenure.conf:\n%s", flat, shipped)
	}

	controller := podOf(t, "app.kubernetes.io/name=tenure-controller")
	checkReady(t, controller)
	var lease coordinationv1.Lease
	kc.Poll(ctx, t, "the controller to hold its Lease", func() error {
		if err := cl.Get(ctx, client.ObjectKey{Namespace: localnode.Namespace, Name: "tenure-controller"}, &lease); err != nil {
			return err
		}
		if h := lease.Spec.HolderIdentity; h == nil || !strings.HasPrefix(*h, controller.Name) {
			return errorf("holder %s, want pod %s", ptr.Deref(lease.Spec.HolderIdentity, "<none>"), controller.Name)
		}
		return nil
	})
}

// podOf is the one pod in tenure-system with the label selector sel.
func podOf(t *testing.T, sel string) *corev1.Pod {
	t.Helper()
	var pods corev1.PodList
	selector, err := labelSelector(sel)
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.List(nodetest.Context(t, 30*time.Second), &pods, client.InNamespace(localnode.Namespace), client.MatchingLabelsSelector{Selector: selector}); err != nil {
		t.Fatal(err)
	}
	var live []corev1.Pod
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil {
			live = append(live, p)
		}
	}
	if len(live) != 1 {
		t.Fatalf("%d pods match %s, want 1", len(live), sel)
	}
	return &live[0]
}

func checkReady(t *testing.T, p *corev1.Pod) {
	t.Helper()
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			if c.Status != corev1.ConditionTrue {
				t.Errorf("pod %s: Ready %s: %s", p.Name, c.Status, c.Message)
			}
			return
		}
	}
	t.Errorf("pod %s has no Ready condition", p.Name)
}
