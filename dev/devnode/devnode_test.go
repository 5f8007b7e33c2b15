//go:build integration

package devnode

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/tenure-ipam/tenure/test/controlplane"
)

// nodeTools is runtimeTools plus the kubelet and the control plane.
func nodeTools(t *testing.T) (binDir, cniBinDir string) {
	t.Helper()
	binDir, cniBinDir = runtimeTools(t)
	for _, b := range []string{"kubelet", "kube-apiserver", "etcd"} {
		if _, err := os.Stat(filepath.Join(binDir, b)); err != nil {
			t.Fatalf("%v: run make node-tools control-plane", err)
		}
	}
	return binDir, cniBinDir
}

// Containerd and a kubelet on this host register a
// Ready node with the local API server; a pod with an image imported from
// a tarball runs there, with an address from the bridge cluster network
// inside its own network namespace and none on the host; after Stop the
// host holds nothing of the node.
func TestNodeRunsAPodFromALocalImageAndLeavesNothing(t *testing.T) {
	binDir, cniBinDir := nodeTools(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()

	cp, err := controlplane.Start(ctx, controlplane.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cp.Stop() })

	dir := t.TempDir()
	start := time.Now()
	node, err := Start(ctx, Options{Dir: dir, Kubeconfig: cp.KubeconfigPath, BinDir: binDir, CNIBinDir: cniBinDir})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("node Ready %s after Start", time.Since(start).Round(time.Millisecond))
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			if err := node.Stop(); err != nil {
				t.Error(err)
			}
		}
	})

	// An image of our own, imported from a tarball like bin/tenure-image.tar.
	ref, _ := importTestImage(ctx, t, node, binDir, "localhost/tenure/devnode-test:1")

	cs := kubernetes.NewForConfigOrDie(cp.Config)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "spike", Namespace: "default"},
		Spec: corev1.PodSpec{
			// No scheduler runs: the pod is bound by hand.
			NodeName:                      node.Name,
			TerminationGracePeriodSeconds: ptr.To(int64(5)),
			Containers: []corev1.Container{{
				Name:            "wait",
				Image:           ref.Name(),
				ImagePullPolicy: corev1.PullNever,
			}},
		},
	}
	if _, err := cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	running := waitRunning(ctx, t, cs, "spike")
	_, podNet, _ := net.ParseCIDR("10.244.0.0/24")
	podIP := net.ParseIP(running.Status.PodIP)
	if !podNet.Contains(podIP) {
		t.Errorf("pod IP %q is not in the cluster network %s", running.Status.PodIP, podNet)
	}
	if addrs := podAddresses(t, node); !addrs[podIP.String()] {
		t.Errorf("the pod's network namespace holds %v, not its pod IP %s", addrs, podIP)
	}
	hostAddrs, err := netlink.AddrList(nil, netlink.FAMILY_V4)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range hostAddrs {
		if podNet.Contains(a.IP) {
			t.Errorf("the host has %s on link %d: the cluster network must give it none", a.IPNet, a.LinkIndex)
		}
	}

	if err := cs.CoreV1().Pods("default").Delete(ctx, "spike", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := poll(ctx, time.Minute, "the pod to be gone", func() error {
		_, err := cs.CoreV1().Pods("default").Get(ctx, "spike", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("still there (%v)", err)
	}); err != nil {
		t.Fatal(err)
	}

	// Stop with a pod running: the hard case, nothing torn down by the
	// kubelet first.
	pod.Name = "left-running"
	if _, err := cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitRunning(ctx, t, cs, pod.Name)
	stopped = true
	stopLeavingNothing(t, node)
}

func waitRunning(ctx context.Context, t *testing.T, cs kubernetes.Interface, name string) *corev1.Pod {
	t.Helper()
	var running *corev1.Pod
	err := poll(ctx, 2*time.Minute, "pod "+name+" to run", func() error {
		p, err := cs.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.Status.Phase != corev1.PodRunning {
			return fmt.Errorf("phase %s %v", p.Status.Phase, p.Status.ContainerStatuses)
		}
		running = p
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return running
}

// podAddresses reads the IPv4 addresses inside every network namespace the
// node's containerd holds.
func podAddresses(t *testing.T, node *Node) map[string]bool {
	t.Helper()
	paths := node.NetworkNamespaces()
	if len(paths) == 0 {
		t.Fatalf("the node has no network namespace in %s", HostNetnsDir)
	}
	addrs := map[string]bool{}
	for _, p := range paths {
		ns, err := netns.GetFromPath(p)
		if err != nil {
			t.Fatal(err)
		}
		h, err := netlink.NewHandleAt(ns)
		ns.Close()
		if err != nil {
			t.Fatal(err)
		}
		list, err := h.AddrList(nil, netlink.FAMILY_V4)
		h.Close()
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range list {
			addrs[a.IP.String()] = true
		}
	}
	return addrs
}

func cacheDir(t *testing.T) string {
	t.Helper()
	cache, err := controlplane.CacheDir()
	if err != nil {
		t.Fatal(err)
	}
	return cache
}
