//go:build integration

// Package node_test runs tenure as its users do: deploy/ applied
// through the local overlay (internal/dev/localnode; with
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
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipamclaimsv1alpha1 "github.com/tenure-ipam/tenure/api/ipamclaims/v1alpha1"
	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/dev/controlplane"
	"github.com/tenure-ipam/tenure/internal/dev/devnode"
	"github.com/tenure-ipam/tenure/internal/dev/localnode"
	"github.com/tenure-ipam/tenure/internal/dev/testbed"
	"github.com/tenure-ipam/tenure/internal/kube"
)

// The cluster every test uses, made by TestMain.
var (
	cp   *controlplane.ControlPlane
	node *devnode.Node
	cl   client.WithWatch
	cs   kubernetes.Interface
	// binDir holds tenure's binaries and bin/tenure-image.tar.
	binDir string
)

// controllerNodeGrace is the tenure controller's --node-grace-period here:
// the lost-node test waits for it, after the controller-manager's own
// controlplane.NodeMonitorGracePeriod.
const controllerNodeGrace = 5 * time.Second

// lastTests run after m.Run's, in this order (and as -test.run selects).
var lastTests = []testing.InternalTest{
	{Name: "TestLostNodeReleasesItsPodsAddresses", F: lostNodeReleasesItsPodsAddresses},
}

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	teardown, err := setUp(ctx)
	if err != nil {
		// Not a skip: a missing tool on a fresh machine is a failure of
		// the set-up (`make test` builds and installs everything).
		fmt.Fprintln(os.Stderr, "test/node: setting up the cluster:", err)
		if teardown != nil {
			_ = teardown()
		}
		return 1
	}
	code := m.Run()
	// Last, whatever the files are called: these take the node away.
	if !testing.RunTests(func(pat, name string) (bool, error) { return regexp.MatchString(pat, name) }, lastTests) {
		code = 1
	}
	// deploy/'s node-restriction policy is in force here (the DaemonSet's
	// pod-bound token names the node): the agents must never have been
	// refused by it.
	if refusals := agentPolicyRefusals(); len(refusals) > 0 {
		fmt.Fprintln(os.Stderr, "test/node: the node-restriction policy refused the agent:\n"+strings.Join(refusals, "\n"))
		code = 1
	}
	if err := teardown(); err != nil {
		// The node must leave nothing on the host, whatever the tests did.
		fmt.Fprintln(os.Stderr, "test/node: tearing down:", err)
		return 1
	}
	return code
}

func setUp(ctx context.Context) (teardown func() error, err error) {
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("needs root (containerd, the kubelet, network namespaces)")
	}
	binDir = os.Getenv("TENURE_BIN_DIR")
	if binDir == "" {
		binDir = filepath.Join("..", "..", "bin")
	}
	if binDir, err = filepath.Abs(binDir); err != nil {
		return nil, err
	}
	var undo []func() error
	teardown = func() error {
		var errs []error
		for i := len(undo) - 1; i >= 0; i-- {
			errs = append(errs, undo[i]())
		}
		return errors.Join(errs...)
	}
	defer func() {
		if err != nil {
			_ = teardown()
			teardown = nil
		}
	}()

	begin := time.Now()
	cp, err = controlplane.Start(ctx, controlplane.Options{Controllers: true})
	if err != nil {
		return teardown, err
	}
	undo = append(undo, cp.Stop)
	cpReady := time.Since(begin)

	dir, err := os.MkdirTemp("", "tenure-node-")
	if err != nil {
		return teardown, err
	}
	undo = append(undo, func() error { return os.RemoveAll(dir) })
	opts := localnode.Options{
		Dir: dir, Image: filepath.Join(binDir, "tenure-image.tar"), Mutate: localnode.ControllerNodeGrace(controllerNodeGrace),
	}
	// TENURE_NODE_INSTALL=helm runs the suite on charts/tenure instead
	// (test/nodes does on every run).
	if install := os.Getenv("TENURE_NODE_INSTALL"); install != "" && install != localnode.InstallKustomize {
		opts.Install, opts.Mutate = install, nil
		opts.Values = []map[string]any{localnode.ControllerNodeGraceValues(controllerNodeGrace)}
	}
	node, err = localnode.Start(ctx, cp, opts)
	if err != nil {
		return teardown, err
	}
	undo = append(undo, func() error {
		if err := node.Stop(); err != nil {
			return err
		}
		left, err := devnode.Leftovers(node.Dir)
		if err == nil && len(left) > 0 {
			err = fmt.Errorf("the node left behind: %s", strings.Join(left, "; "))
		}
		return err
	})
	if cl, err = kube.NewClient(cp.Config); err != nil {
		return teardown, err
	}
	cs = kubernetes.NewForConfigOrDie(cp.Config)
	fmt.Fprintf(os.Stderr, "test/node: control plane ready in %v, tenure rolled out on the node at %v\n",
		cpReady.Round(time.Millisecond), time.Since(begin).Round(time.Millisecond))
	return teardown, nil
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

func testContext(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// reservationsOf lists the reservations owned by pods in namespace ns, or
// by the claims there.
func reservationsOf(ctx context.Context, t *testing.T, ns string) []tenurev1alpha1.IPReservation {
	t.Helper()
	var list tenurev1alpha1.IPReservationList
	if err := cl.List(ctx, &list); err != nil {
		t.Fatal(err)
	}
	var out []tenurev1alpha1.IPReservation
	for _, r := range list.Items {
		if r.Spec.Owner.Namespace == ns {
			out = append(out, r)
		}
	}
	slices.SortFunc(out, func(a, b tenurev1alpha1.IPReservation) int { return strings.Compare(a.Spec.Address, b.Spec.Address) })
	return out
}

func getClaim(ctx context.Context, t *testing.T, ns, name string) *ipamclaimsv1alpha1.IPAMClaim {
	t.Helper()
	var c ipamclaimsv1alpha1.IPAMClaim
	if err := cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &c); err != nil {
		t.Fatal(err)
	}
	return &c
}

// podSpecOn is localnode.Pod: a pause pod attached to nets, evicted at
// once from a lost node.
func podSpecOn(ns, name, nets string) *corev1.Pod { return localnode.Pod(ns, name, nets) }
