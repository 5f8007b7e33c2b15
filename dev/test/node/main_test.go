//go:build integration

// Package node_test runs tenure as its users do: deploy/ applied
// through the local overlay (test/localoverlay; with
// TENURE_NODE_INSTALL=helm, charts/tenure installed by helm) to a real
// node of this machine, where a kubelet and containerd run the DaemonSet
// and the Deployment from the image `make image` builds, and wire real pods
// through Multus and the reference plugins calling tenure's shim.
//
// One cluster serves every test: a control plane with kube-controller-
// manager and kube-scheduler, one node (devnode), tenure installed and
// rolled out. Each test works in a namespace of its own, on a network of its
// own, and leaves the node as it found it.
package node_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tenure-ipam/tenure/dev/devnode"
	"github.com/tenure-ipam/tenure/dev/localnode"
	"github.com/tenure-ipam/tenure/dev/nodetest"
	"github.com/tenure-ipam/tenure/test/controlplane"
	"github.com/tenure-ipam/tenure/test/testbed"
)

// The cluster every test uses, made by TestMain.
var (
	cp   *controlplane.ControlPlane
	node *devnode.Node
	cl   client.WithWatch
	cs   kubernetes.Interface
	kc   = &nodetest.Kube{Diagnose: func() string { return node.LogTail("kubelet") }}
	// binDir holds tenure's binaries and bin/tenure-image.tar.
	binDir string
)

// lastTests run after m.Run's, in this order (and as -test.run selects).
var lastTests = []testing.InternalTest{
	{Name: "TestLostNodeReleasesItsPodsAddresses", F: lostNodeReleasesItsPodsAddresses},
}

func TestMain(m *testing.M) {
	os.Exit(nodetest.Suite{Name: "test/node", SetUp: setUp, Last: lastTests, After: noPolicyRefusals}.Run(m))
}

// noPolicyRefusals: deploy/'s node-restriction policy is in force here
// (the DaemonSet's pod-bound token names the node), and must never have
// refused the agent.
func noPolicyRefusals() error {
	if refusals := agentPolicyRefusals(); len(refusals) > 0 {
		return fmt.Errorf("the node-restriction policy refused the agent:\n%s", strings.Join(refusals, "\n"))
	}
	return nil
}

func setUp(ctx context.Context, undo *nodetest.Undo) (err error) {
	binDir, err = nodetest.BinDir()
	if err != nil {
		return err
	}

	begin := time.Now()
	cp, err = controlplane.Start(ctx, controlplane.Options{Controllers: true})
	if err != nil {
		return err
	}
	undo.Push(cp.Stop)
	cpReady := time.Since(begin)

	dir, err := os.MkdirTemp("", "tenure-node-")
	if err != nil {
		return err
	}
	undo.Push(func() error { return os.RemoveAll(dir) })
	opts := localnode.Options{
		Dir: dir, Image: filepath.Join(binDir, "tenure-image.tar"),
	}
	// TENURE_NODE_INSTALL=helm runs the suite on charts/tenure instead
	// (test/nodes does on every run).
	if install := os.Getenv("TENURE_NODE_INSTALL"); install != "" && install != localnode.InstallKustomize {
		opts.Install = install
	}
	node, err = localnode.Start(ctx, cp, opts)
	if err != nil {
		return err
	}
	undo.Push(nodetest.Checked("node", node.Stop, func() ([]string, error) { return devnode.Leftovers(node.Dir) }))
	if err := kc.Connect(cp.Config); err != nil {
		return err
	}
	cl, cs = kc.Client, kc.Clientset
	fmt.Fprintf(os.Stderr, "test/node: control plane ready in %v, tenure rolled out on the node at %v\n",
		cpReady.Round(time.Millisecond), time.Since(begin).Round(time.Millisecond))
	return nil
}

// agentPolicyRefusals reads every agent container's log the kubelet kept.
func agentPolicyRefusals() []string {
	logs, _ := filepath.Glob(filepath.Join(node.Dir, "pod-logs", "tenure-system_tenure-agent-*", "agent", "*.log"))
	var out []string
	for _, l := range logs {
		out = append(out, testbed.PolicyRefusals(l)...)
	}
	return out
}

// podSpecOn is localnode.Pod: a pause pod attached to nets, evicted at
// once from a lost node.
func podSpecOn(ns, name, nets string) *corev1.Pod { return localnode.Pod(ns, name, nets) }
