//go:build integration

package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tenure-ipam/tenure/dev/devnode"
	"github.com/tenure-ipam/tenure/dev/localnode"
	"github.com/tenure-ipam/tenure/internal/kube"
	"github.com/tenure-ipam/tenure/test/controlplane"
)

type result struct {
	code           int
	stdout, stderr string
}

func tenurectl(t *testing.T, args ...string) result {
	t.Helper()
	// Past dev up's own --timeout (5m), which gives up naming its wait:
	// the command, not this kill, ends a run that hangs.
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], args...)
	cmd.Env = append(os.Environ(), runMainEnv+"=1")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	begin := time.Now()
	err := cmd.Run()
	r := result{stdout: stdout.String(), stderr: stderr.String()}
	if ee, ok := err.(*exec.ExitError); ok {
		r.code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("tenurectl %s: %v", strings.Join(args, " "), err)
	}
	t.Logf("tenurectl %s (%v) -> %d\nstdout: %s\nstderr: %s", strings.Join(args, " "),
		time.Since(begin).Round(time.Millisecond), r.code, r.stdout, r.stderr)
	return r
}

func gone(pid int) bool {
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	s := string(raw)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	return len(f) > 0 && (f[0] == "Z" || f[0] == "X")
}

func TestDevUpDown(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "dev")
	t.Cleanup(func() { // never leak a control plane, whatever failed
		if cp, err := controlplane.Attach(dir); err == nil {
			_ = cp.Stop()
		}
	})

	up := tenurectl(t, "dev", "up", "--dir", dir)
	if up.code != 0 {
		t.Fatalf("dev up exited %d", up.code)
	}
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if want := "export KUBECONFIG=" + kubeconfig + "\n"; up.stdout != want {
		t.Errorf("dev up stdout = %q, want %q", up.stdout, want)
	}
	if !strings.Contains(up.stderr, "kubeconfig: "+kubeconfig) {
		t.Errorf("dev up stderr lacks the kubeconfig path")
	}

	// tenurectl has exited; the control plane runs on.
	cp, err := controlplane.Attach(dir)
	if err != nil {
		t.Fatal(err)
	}
	pids := cp.Pids()
	if err := cp.Healthy(context.Background()); err != nil {
		t.Fatalf("after dev up returned: %v", err)
	}

	again := tenurectl(t, "dev", "up", "--dir", dir)
	if again.code != 0 || !strings.Contains(again.stderr, "already up") {
		t.Errorf("second dev up: exit %d, stderr %q; want success saying it is already up", again.code, again.stderr)
	}
	if cp2, err := controlplane.Attach(dir); err != nil || !slices.Equal(cp2.Pids(), pids) {
		t.Errorf("second dev up changed the processes: %v (%v), want %v", cp2, err, pids)
	}

	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := apiextensionsclient.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	list, err := cs.ApiextensionsV1().CustomResourceDefinitions().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, crd := range list.Items {
		names = append(names, crd.Name)
	}
	slices.Sort(names)
	want := []string{"ipamclaims.k8s.cni.cncf.io", "ippools.ipam.tenure.dev", "ipprobes.ipam.tenure.dev", "ipreservations.ipam.tenure.dev"}
	if !slices.Equal(names, want) {
		t.Errorf("CRDs = %v, want %v", names, want)
	}

	devDownStops(t, dir, pids)
	if _, err := os.Stat(filepath.Join(dir, controlplane.StateFile)); !os.IsNotExist(err) {
		t.Errorf("state file left after dev down: %v", err)
	}

	if again := tenurectl(t, "dev", "down", "--dir", dir); again.code != 0 {
		t.Errorf("dev down with nothing running exited %d", again.code)
	}
	if none := tenurectl(t, "dev", "down", "--dir", filepath.Join(t.TempDir(), "never")); none.code != 0 {
		t.Errorf("dev down on a dir that never existed exited %d", none.code)
	}
}

// TestDevCommandsUsage: the developer commands refuse what they do not
// understand with exit 2 before they start anything.
func TestDevCommandsUsage(t *testing.T) {
	testUsage(t, []usageCase{
		{[]string{"help"}, 0, "dev"},
		{[]string{"dev"}, 2, "usage: tenurectl dev <subcommand>"},
		{[]string{"dev", "sideways"}, 2, `unknown subcommand "sideways"`},
		{[]string{"dev", "up", "--nope"}, 2, "flag provided but not defined"},
		{[]string{"dev", "up", "--timeout", "soon"}, 2, `invalid value "soon"`},
		{[]string{"dev", "down", "extra"}, 2, `unexpected argument "extra"`},
		{[]string{"dev", "up", "-h"}, 0, "-dir"},
		{[]string{"demo", "extra"}, 2, `unexpected argument "extra"`},
		{[]string{"demo", "--timeout", "soon"}, 2, `invalid value "soon"`},
		{[]string{"demo", "--timeout", "-1m"}, 2, `invalid value "-1m" for flag -timeout: must be positive`},
		{[]string{"dev", "up", "--timeout", "0s"}, 2, `invalid value "0s" for flag -timeout: must be positive`},
		{[]string{"demo", "-h"}, 0, "-cni-plugin-dir"},
		{[]string{"bench", "-o", "yaml"}, 2, "-o must be table or json"},
		{[]string{"bench", "--scale", "0"}, 2, "--scale must be positive"},
		{[]string{"bench", "--quick=often"}, 2, "invalid boolean value"},
		{[]string{"bench", "-h"}, 0, "-skip-scale"},
		{[]string{"bench", "-h"}, 0, "fanout, full-pool"},
		{[]string{"bench", "--scenario", "no-such"}, 2, `no scenario "no-such"`},
		{[]string{"bench", "--scenario", "fanout", "--quick"}, 2, "--quick and --scenario do not combine"},
		{[]string{"bench", "--agents", "10,x"}, 2, `"x" is not a positive count`},
		{[]string{"bench", "--full-pool-duration", "0s"}, 2, "--full-pool-duration must be positive"},
		{[]string{"bench", "--quick", "--compare-cbor"}, 2, "--compare-cbor no longer runs: the agent speaks no CBOR"},
		{[]string{"bench", "--pod-start-nodes", "0"}, 2, "--pod-start-nodes must be positive, got 30, 10, 6 and 0"},
		{[]string{"bench", "--pod-start-sets", "0"}, 2, "--pod-start-sets and --pod-start-nodes must be positive, got 30, 10, 0 and 1"},
		{[]string{"bench", "--pod-start-nodes", "4"}, 2, "pod-start nodes: 4: from 1 to 3"},
		{[]string{"bench", "--baseline-bin", "/nonexistent"}, 2, "--baseline-bin /nonexistent needs --quick or --scenario pod-start"},
		{[]string{"bench", "--scenario", "fanout", "--baseline-bin", "/nonexistent"}, 2, "--baseline-bin /nonexistent needs --quick or --scenario pod-start"},
		{[]string{"bench", "--scenario", "pod-start", "--baseline-bin", "/nonexistent"}, 2, "--baseline-bin /nonexistent: no tenure"},
	})
}

// dev up --node brings up the control plane with its controllers
// and a Ready node of this machine running tenure from deploy/ and its
// image; tenurectl exits and all of it runs on; dev down stops the node
// and the control plane and leaves nothing on the host.
func TestDevUpNodeAndDownLeaveNothing(t *testing.T) {
	image := builtImage(t)
	dir := filepath.Join(t.TempDir(), "dev")
	cp, pids := devUpNodes(t, dir, func() error { return devnode.Stop(filepath.Join(dir, "node")) }, "--image", image)
	if len(pids) != 4 {
		t.Errorf("control plane processes %v, want etcd, kube-apiserver, kube-controller-manager, kube-scheduler", pids)
	}
	cl, err := kube.NewClient(cp.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var n corev1.Node
	if err := cl.Get(ctx, client.ObjectKey{Name: "tenure-dev-node"}, &n); err != nil {
		t.Fatal(err)
	}
	ready := false
	for _, c := range n.Status.Conditions {
		ready = ready || (c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue)
	}
	if !ready {
		t.Errorf("node %s is not Ready after dev up returned: %v", n.Name, n.Status.Conditions)
	}
	// Rolled out before dev up returned, and still so after it exited.
	if err := localnode.WaitRollout(ctx, cl); err != nil {
		t.Error(err)
	}

	again := tenurectl(t, "dev", "up", "--node", "--dir", dir, "--image", image)
	if again.code != 0 || !strings.Contains(again.stderr, "already up") {
		t.Errorf("second dev up --node: exit %d; want success saying it is already up", again.code)
	}

	devDownStops(t, dir, pids)
	left, err := devnode.Leftovers(filepath.Join(dir, "node"))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range left {
		t.Errorf("left behind by dev down: %s", l)
	}
}

// devDownStops runs dev down on dir and checks that none of pids runs
// after it.
func devDownStops(t *testing.T, dir string, pids []int) {
	t.Helper()
	down := tenurectl(t, "dev", "down", "--dir", dir)
	if down.code != 0 {
		t.Fatalf("dev down exited %d", down.code)
	}
	for _, pid := range pids {
		if !gone(pid) {
			t.Errorf("pid %d still runs after dev down", pid)
		}
	}
}

// devUpNodes runs `tenurectl dev up --node --dir dir ARGS...`, which must
// succeed, and attaches to its control plane. Whatever fails, the test
// leaves no node (stop) and no control plane behind.
func devUpNodes(t *testing.T, dir string, stop func() error, args ...string) (*controlplane.ControlPlane, []int) {
	t.Helper()
	t.Cleanup(func() { // never leak a cluster, whatever failed
		_ = stop()
		if cp, err := controlplane.Attach(dir); err == nil {
			_ = cp.Stop()
		}
	})
	up := tenurectl(t, append([]string{"dev", "up", "--node", "--dir", dir}, args...)...)
	if up.code != 0 {
		t.Fatalf("dev up --node %s exited %d", strings.Join(args, " "), up.code)
	}
	cp, err := controlplane.Attach(dir)
	if err != nil {
		t.Fatal(err)
	}
	return cp, cp.Pids()
}

// builtImage is bin/tenure-image.tar, which make image builds.
func builtImage(t *testing.T) string {
	t.Helper()
	image, err := filepath.Abs(filepath.Join("..", "..", "..", "bin", "tenure-image.tar"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(image); err != nil {
		t.Fatalf("%v: run make image", err)
	}
	return image
}
