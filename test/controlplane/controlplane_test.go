//go:build integration

package controlplane_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/deploy"
	"github.com/tenure-ipam/tenure/test/controlplane"
)

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func start(t *testing.T, ctx context.Context, opts controlplane.Options) *controlplane.ControlPlane {
	t.Helper()
	begin := time.Now()
	cp, err := controlplane.Start(ctx, opts)
	if err != nil {
		t.Fatal(err) // missing binaries fail: CI builds them first
	}
	t.Logf("control plane at %s ready in %v", cp.URL, time.Since(begin).Round(time.Millisecond))
	t.Cleanup(func() {
		if err := cp.Stop(); err != nil {
			t.Errorf("cleanup Stop: %v", err)
		}
	})
	return cp
}

// gone reports whether pid no longer runs (absent or a zombie).
func gone(pid int) bool {
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	s := string(raw)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	return len(f) > 0 && (f[0] == "Z" || f[0] == "X")
}

func checkGone(t *testing.T, pids []int) {
	t.Helper()
	for _, pid := range pids {
		if !gone(pid) {
			t.Errorf("pid %d still runs after Stop", pid)
		}
	}
}

func crdFS(t *testing.T) fs.FS {
	sub, err := fs.Sub(deploy.CRDs, "crds")
	if err != nil {
		t.Fatal(err)
	}
	return sub
}

func newClient(t *testing.T, cp *controlplane.ControlPlane) client.Client {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := tenurev1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cp.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func reservation(name, address string) *tenurev1alpha1.IPReservation {
	return &tenurev1alpha1.IPReservation{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: tenurev1alpha1.IPReservationSpec{
			Network: "default",
			Kind:    tenurev1alpha1.KindAddress,
			Address: address,
			Range:   "10.10.0.0/24",
			Owner: tenurev1alpha1.ReservationOwner{
				Kind: tenurev1alpha1.OwnerPod, Namespace: "default", Name: "pod-a", UID: "uid-a",
				PodName: "pod-a", PodUID: "uid-a", ContainerID: "c1", Interface: "eth0", Node: "node-1",
			},
		},
	}
}

func TestStartCreateStop(t *testing.T) {
	ctx := testContext(t)
	cp := start(t, ctx, controlplane.Options{})
	pids, dir := cp.Pids(), cp.Dir
	if len(pids) != 2 {
		t.Fatalf("Pids() = %v, want etcd and kube-apiserver", pids)
	}
	if err := cp.Healthy(ctx); err != nil {
		t.Fatal(err)
	}
	if cp.Config.QPS >= 0 {
		t.Errorf("Config.QPS = %v, want client-side rate limiting off", cp.Config.QPS)
	}

	// The kubeconfig file works on its own.
	kc, err := clientcmd.BuildConfigFromFlags("", cp.KubeconfigPath)
	if err != nil {
		t.Fatal(err)
	}
	kcs, err := kubernetes.NewForConfig(kc)
	if err != nil {
		t.Fatal(err)
	}
	v, err := kcs.Discovery().ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("server version %s", v.GitVersion)

	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cp-test", Namespace: "default"}, Data: map[string]string{"k": "v"}}
	if _, err := kcs.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	begin := time.Now()
	if err := controlplane.InstallCRDs(ctx, cp.Config, crdFS(t)); err != nil {
		t.Fatal(err)
	}
	t.Logf("CRDs installed in %v", time.Since(begin).Round(time.Millisecond))
	// Idempotent: a second install updates in place.
	begin = time.Now()
	if err := controlplane.InstallCRDs(ctx, cp.Config, crdFS(t)); err != nil {
		t.Fatalf("second InstallCRDs: %v", err)
	}
	t.Logf("CRDs re-applied in %v", time.Since(begin).Round(time.Millisecond))

	c := newClient(t, cp)
	r := reservation("default.10.10.0.5", "10.10.0.5")
	begin = time.Now()
	if err := c.Create(ctx, r); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(begin); d > time.Second {
		t.Errorf("first IPReservation create took %v: InstallCRDs should have waited out the just-created delay", d)
	}
	var got tenurev1alpha1.IPReservation
	if err := c.Get(ctx, client.ObjectKey{Name: r.Name}, &got); err != nil {
		t.Fatal(err)
	}
	if got.Spec.Address != "10.10.0.5" || got.Spec.Owner.PodUID != "uid-a" {
		t.Errorf("read back %+v", got.Spec)
	}
	if err := c.Create(ctx, reservation("default.10.10.0.5", "10.10.0.5")); !apierrors.IsAlreadyExists(err) {
		t.Errorf("second create of the same name: %v, want AlreadyExists", err)
	}

	t.Run("schema validation", func(t *testing.T) {
		invalid := func(name string, r *tenurev1alpha1.IPReservation, want string) {
			t.Helper()
			err := c.Create(ctx, r)
			if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), want) {
				t.Errorf("%s: create error %v, want Invalid with %q", name, err, want)
			}
		}
		invalid("not an IP", reservation("bad-1", "not-an-ip"), "address must be an IP or a CIDR")
		pfx := reservation("bad-2", "10.10.0.0/28")
		invalid("CIDR for kind Address", pfx, "an Address reservation holds a single IP")
		noPod := reservation("bad-3", "10.10.0.6")
		noPod.Spec.Owner.PodName, noPod.Spec.Owner.PodUID = "", ""
		invalid("Pod owner without pod", noPod, "a Pod owner needs podName and podUID")
		badKind := reservation("bad-4", "10.10.0.7")
		badKind.Spec.Kind = "Bogus"
		invalid("unknown kind", badKind, "spec.kind")

		moved := got.DeepCopy()
		moved.Spec.Address = "10.10.0.9"
		if err := c.Update(ctx, moved); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "immutable") {
			t.Errorf("changing spec.address: %v, want Invalid (immutable)", err)
		}
	})

	metrics, err := cp.MetricsText(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(metrics, "apiserver_request_total") {
		t.Errorf("/metrics lacks apiserver_request_total (%d bytes)", len(metrics))
	}

	begin = time.Now()
	if err := cp.Stop(); err != nil {
		t.Fatal(err)
	}
	t.Logf("stopped in %v", time.Since(begin).Round(time.Millisecond))
	checkGone(t, pids)
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("temp dir %s left behind (%v)", dir, err)
	}
	if err := cp.Stop(); err != nil {
		t.Errorf("second Stop: %v", err)
	}
}

func TestDetachAttachStop(t *testing.T) {
	ctx := testContext(t)
	dir := t.TempDir()
	cp := start(t, ctx, controlplane.Options{Dir: dir, Detach: true})
	pids := cp.Pids()
	for _, pid := range pids {
		if sid, err := unix.Getsid(pid); err != nil || sid != pid {
			t.Errorf("pid %d: session %d (%v), want its own session", pid, sid, err)
		}
	}
	for _, f := range []string{controlplane.StateFile, controlplane.KubeconfigFile, "etcd.log", "kube-apiserver.log"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Error(err)
		}
	}

	if _, err := controlplane.Start(ctx, controlplane.Options{Dir: dir, Detach: true}); err == nil || !strings.Contains(err.Error(), "already running") {
		t.Errorf("second Start in the same dir: %v, want 'already running'", err)
	}

	a, err := controlplane.Attach(dir)
	if err != nil {
		t.Fatal(err)
	}
	if a.URL != cp.URL || a.KubeconfigPath != cp.KubeconfigPath || !slices.Equal(a.Pids(), pids) {
		t.Errorf("Attach: %s %s %v, want %s %s %v", a.URL, a.KubeconfigPath, a.Pids(), cp.URL, cp.KubeconfigPath, pids)
	}
	if err := a.Healthy(ctx); err != nil {
		t.Fatal(err)
	}
	kcs, err := kubernetes.NewForConfig(a.Config)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kcs.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}

	if err := a.Stop(); err != nil {
		t.Fatal(err)
	}
	checkGone(t, pids)
	if _, err := os.Stat(dir); err != nil {
		t.Errorf("Stop of an attached control plane removed its dir: %v", err)
	}
	for _, f := range []string{controlplane.StateFile, "etcd"} {
		if _, err := os.Stat(filepath.Join(dir, f)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s left behind after Stop (%v)", f, err)
		}
	}
	if _, err := controlplane.Attach(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Attach after Stop: %v, want ErrNotExist", err)
	}
	if err := cp.Stop(); err != nil {
		t.Errorf("Stop of the original handle after Attach+Stop: %v", err)
	}
}

func TestBinDirMissing(t *testing.T) {
	cache := t.TempDir()
	t.Setenv("TENURE_CACHE_DIR", cache)
	_, err := controlplane.BinDir()
	if err == nil || !strings.Contains(err.Error(), "hack/build-control-plane.sh") || !strings.Contains(err.Error(), filepath.Join(cache, "bin", "kube-apiserver")) {
		t.Fatalf("BinDir() error = %v, want one naming the missing path and the build script", err)
	}
	if _, err := controlplane.Start(context.Background(), controlplane.Options{}); err == nil || !strings.Contains(err.Error(), "hack/build-control-plane.sh") {
		t.Errorf("Start error = %v, want the BinDir error", err)
	}
}

// A kube-apiserver that dies at once: Start fails with its output and stops
// the etcd it had started.
func TestStartFailureReportsLogAndCleansUp(t *testing.T) {
	real, err := controlplane.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	bin := t.TempDir()
	if err := os.Symlink(filepath.Join(real, "etcd"), filepath.Join(bin, "etcd")); err != nil {
		t.Fatal(err)
	}
	script := "#!/bin/sh\necho 'fake apiserver: boom-marker' >&2\nexit 3\n"
	if err := os.WriteFile(filepath.Join(bin, "kube-apiserver"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	_, err = controlplane.Start(testContext(t), controlplane.Options{BinDir: bin, Dir: dir})
	if err == nil || !strings.Contains(err.Error(), "boom-marker") {
		t.Fatalf("Start error = %v, want the apiserver's output", err)
	}
	t.Logf("error as reported:\n%v", err)
	if pids := processesMentioning(t, dir); len(pids) > 0 {
		t.Errorf("processes left running: %v", pids)
	}
}

func processesMentioning(t *testing.T, s string) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		cmdline, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err == nil && strings.Contains(string(cmdline), s) && !gone(pid) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// TestKubeletsAreHeldToTheirNodes: a kubelet's credentials (KubeletConfig)
// authenticate as its node, and the Node authorizer and NodeRestriction hold
// it to that node, as on a real cluster: it registers and updates its own
// Node and its own pods' status, never another node's.
func TestKubeletsAreHeldToTheirNodes(t *testing.T) {
	ctx := testContext(t)
	cp := start(t, ctx, controlplane.Options{})
	admin, err := kubernetes.NewForConfig(cp.Config)
	if err != nil {
		t.Fatal(err)
	}
	kcfg, err := cp.KubeletConfig("node-a")
	if err != nil {
		t.Fatal(err)
	}
	kubelet, err := kubernetes.NewForConfig(kcfg)
	if err != nil {
		t.Fatal(err)
	}

	review, err := kubelet.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if u := review.Status.UserInfo; u.Username != "system:node:node-a" || !slices.Contains(u.Groups, "system:nodes") {
		t.Fatalf("kubelet credentials authenticate as %q in %v, want system:node:node-a in system:nodes", u.Username, u.Groups)
	}

	node := func(name string) *corev1.Node { return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}} }
	if _, err := kubelet.CoreV1().Nodes().Create(ctx, node("node-a"), metav1.CreateOptions{}); err != nil {
		t.Fatalf("kubelet of node-a registering node-a: %v", err)
	}
	if _, err := kubelet.CoreV1().Nodes().Create(ctx, node("node-b"), metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("kubelet of node-a registering node-b: %v, want Forbidden (NodeRestriction)", err)
	}
	if _, err := admin.CoreV1().Nodes().Create(ctx, node("node-b"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	pods := map[string]*corev1.Pod{}
	for _, n := range []string{"node-a", "node-b"} {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "on-" + n, Namespace: "default"},
			Spec: corev1.PodSpec{NodeName: n, AutomountServiceAccountToken: new(bool),
				Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}},
		}
		if pods[n], err = admin.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	running := func(p *corev1.Pod) *corev1.Pod {
		p = p.DeepCopy()
		p.Status.Phase = corev1.PodRunning
		return p
	}
	got, err := kubelet.CoreV1().Pods("default").UpdateStatus(ctx, running(pods["node-a"]), metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("kubelet of node-a updating the status of its pod %s: %v", pods["node-a"].Name, err)
	}
	if got.Status.Phase != corev1.PodRunning {
		t.Errorf("pod %s has phase %q after its kubelet's update, want Running", got.Name, got.Status.Phase)
	}
	if _, err := kubelet.CoreV1().Pods("default").UpdateStatus(ctx, running(pods["node-b"]), metav1.UpdateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("kubelet of node-a updating the status of %s on node-b: %v, want Forbidden", pods["node-b"].Name, err)
	}
	stored, err := admin.CoreV1().Pods("default").Get(ctx, pods["node-b"].Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if stored.UID != pods["node-b"].UID || stored.Status.Phase == corev1.PodRunning {
		t.Errorf("pod %s (uid %s) after the refused update: uid %s phase %q", pods["node-b"].Name, pods["node-b"].UID, stored.UID, stored.Status.Phase)
	}
}
