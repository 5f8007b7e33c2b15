//go:build integration

package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/tenure-ipam/tenure/dev/devnode"
	"github.com/tenure-ipam/tenure/dev/localnode"
	"github.com/tenure-ipam/tenure/internal/kube"
	"github.com/tenure-ipam/tenure/test/controlplane"
)

// Three nodes, each in namespaces of its own: every node registers its
// InternalIP on the fabric, and kubectl logs, exec and port-forward reach
// the agent pod of every node through the API server, which dials the
// kubelets at those addresses (a name it would look up is refused by the
// fabric proxy, which takes only addresses). dev down leaves nothing: no
// process, namespace, mount, bridge or host directory.
func TestDevUpThreeNodesKubectlReachesEveryNodeAndDownLeavesNothing(t *testing.T) {
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		t.Fatalf("%v: kubectl is the client this test drives", err)
	}
	image := builtImage(t)
	// Short: containerd's sockets live under it (104 bytes at most).
	tmp, err := os.MkdirTemp("", "tnd-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(tmp) })
	dir := filepath.Join(tmp, "dev")
	cluster := filepath.Join(dir, "cluster")
	cp, pids := devUpNodes(t, dir, func() error { return devnode.StopCluster(cluster) }, "--nodes", "3", "--image", image)
	cl, err := kube.NewClient(cp.Config)
	if err != nil {
		t.Fatal(err)
	}
	cs := kubernetes.NewForConfigOrDie(cp.Config)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := localnode.WaitRollout(ctx, cl); err != nil {
		t.Fatal(err)
	}

	agents, err := cs.CoreV1().Pods(localnode.Namespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=tenure-agent"})
	if err != nil {
		t.Fatal(err)
	}
	agentOn := map[string]corev1.Pod{}
	for _, p := range agents.Items {
		agentOn[p.Spec.NodeName] = p
	}
	for i := 1; i <= 3; i++ {
		name, ip := fmt.Sprintf("tenure-dev-node-%d", i), devnode.NodeIP(i)
		t.Run(name, func(t *testing.T) {
			n, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			var internal []string
			for _, a := range n.Status.Addresses {
				if a.Type == corev1.NodeInternalIP {
					internal = append(internal, a.Address)
				}
			}
			if !slices.Equal(internal, []string{ip}) {
				t.Errorf("InternalIP %v, want [%s]: %v", internal, ip, n.Status.Addresses)
			}
			pod, ok := agentOn[name]
			if !ok {
				t.Fatalf("no agent pod on %s", name)
			}
			// The agent, on its node's host network, has the node's
			// address.
			if pod.Status.PodIP != ip {
				t.Errorf("agent %s: pod IP %s, want the node's %s", pod.Name, pod.Status.PodIP, ip)
			}
			kc := func(args ...string) (string, error) {
				cmd := exec.CommandContext(ctx, kubectl, append([]string{"--kubeconfig", cp.KubeconfigPath, "-n", localnode.Namespace}, args...)...)
				out, err := cmd.CombinedOutput()
				return string(out), err
			}
			// logs: the agent says which node it serves.
			out, err := kc("logs", pod.Name, "-c", "agent")
			if err != nil {
				t.Errorf("kubectl logs %s: %v: %s", pod.Name, err, out)
			} else if !strings.Contains(out, "node="+name) {
				t.Errorf("kubectl logs %s: no line naming node=%s:\n%s", pod.Name, name, out)
			}
			// exec: the agent's own health check answers through its
			// socket, and a failing command's status comes back.
			if out, err := kc("exec", pod.Name, "-c", "agent", "--", "/usr/local/bin/tenure-agent", "health", "--socket=/run/tenure/agent.sock", "--ready"); err != nil {
				t.Errorf("kubectl exec health: %v: %s", err, out)
			}
			out, err = kc("exec", pod.Name, "-c", "agent", "--", "/usr/local/bin/tenure-agent", "health", "--socket=/run/tenure/no-such.sock")
			if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() == 0 {
				t.Errorf("kubectl exec health on a missing socket: %v, want a non-zero exit: %s", err, out)
			}
			// port-forward: the agent's metrics, on its node's loopback.
			metrics := portForwardGet(ctx, t, kubectl, cp.KubeconfigPath, pod.Name, 9467, "/metrics")
			if !strings.Contains(metrics, "# TYPE") {
				t.Errorf("metrics through port-forward: %.300q", metrics)
			}
		})
	}
	proxyLog, _ := os.ReadFile(filepath.Join(cluster, "fabric", "logs", "proxy.log"))
	if len(proxyLog) > 0 {
		t.Logf("fabric proxy log:\n%s", proxyLog)
	}

	devDownStops(t, dir, pids)
	left, err := devnode.ClusterLeftovers(cluster)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range left {
		t.Errorf("left behind by dev down: %s", l)
	}
	entries, _ := os.ReadDir(devnode.HostNetnsDir)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "tenure-") {
			t.Errorf("network namespace %s left in %s", e.Name(), devnode.HostNetnsDir)
		}
	}
	for _, l := range []string{"fabric0", "san0", "fab-n1", "san-n1"} {
		if _, err := netlink.LinkByName(l); err == nil {
			t.Errorf("link %s on the host", l)
		}
	}
}

// portForwardGet runs kubectl port-forward to pod's port and GETs path
// through it.
func portForwardGet(ctx context.Context, t *testing.T, kubectl, kubeconfig, pod string, port int, path string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, kubectl, "--kubeconfig", kubeconfig, "-n", localnode.Namespace,
		"port-forward", "--address", "127.0.0.1", "pod/"+pod, fmt.Sprintf(":%d", port))
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}()
	// "Forwarding from 127.0.0.1:LOCAL -> PORT"
	sc := bufio.NewScanner(stdout)
	local := ""
	for local == "" && sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, "Forwarding from 127.0.0.1:"); ok {
			local = strings.Fields(rest)[0]
		} else {
			t.Logf("port-forward: %s", line)
		}
	}
	if local == "" {
		t.Errorf("kubectl port-forward %s: no local port (%v)", pod, sc.Err())
		return ""
	}
	go func() { _, _ = io.Copy(io.Discard, stdout) }()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://127.0.0.1:"+local+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Errorf("GET %s through port-forward: %v", path, err)
		return ""
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return string(body)
}

// --nodes out of range, or without --node, is refused before anything
// starts: the message names the flag and the value, and the directory
// records no control plane.
func TestDevUpRefusesNodesOutOfRange(t *testing.T) {
	for _, args := range [][]string{
		{"--node", "--nodes", "4"},
		{"--node", "--nodes", "0"},
		{"--nodes", "2"},
	} {
		dir := filepath.Join(t.TempDir(), "dev")
		r := tenurectl(t, append([]string{"dev", "up", "--dir", dir}, args...)...)
		value := args[len(args)-1]
		if r.code == 0 || !strings.Contains(r.stderr, "--nodes "+value) {
			t.Errorf("dev up %v: exit %d, stderr %q; want a refusal naming --nodes %s", args, r.code, r.stderr, value)
		}
		if _, err := os.Stat(filepath.Join(dir, controlplane.StateFile)); err == nil {
			t.Errorf("dev up %v started a control plane", args)
		}
	}
}
