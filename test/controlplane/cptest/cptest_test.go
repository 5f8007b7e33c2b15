//go:build integration

package cptest_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/tenure-ipam/tenure/test/controlplane/cptest"
)

func TestMain(m *testing.M) {
	os.Exit(cptest.Main(m, nil))
}

// The CRDs are installed and their resources answer right away.
func TestCRDsInstalled(t *testing.T) {
	dyn, err := dynamic.NewForConfig(cptest.Config())
	if err != nil {
		t.Fatal(err)
	}
	for _, gvr := range []schema.GroupVersionResource{
		{Group: "ipam.tenure.dev", Version: "v1alpha1", Resource: "ipreservations"},
		{Group: "ipam.tenure.dev", Version: "v1alpha1", Resource: "ippools"},
		{Group: "k8s.cni.cncf.io", Version: "v1alpha1", Resource: "ipamclaims"},
	} {
		if _, err := dyn.Resource(gvr).List(context.Background(), metav1.ListOptions{}); err != nil {
			t.Errorf("list %s: %v", gvr, err)
		}
	}
	if cptest.Current().Config.QPS >= 0 {
		t.Error("rate limiting is on")
	}
}

// The kubeconfig file is enough for a process of its own: it reaches the
// API server as an administrator.
func TestKubeconfigFileIsAdmin(t *testing.T) {
	cfg, err := clientcmd.BuildConfigFromFlags("", cptest.Current().KubeconfigPath)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	review, err := cs.AuthenticationV1().SelfSubjectReviews().Create(context.Background(), &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if groups := review.Status.UserInfo.Groups; !strings.Contains(strings.Join(groups, ","), "system:masters") {
		t.Errorf("the kubeconfig's user is in %v, want system:masters", groups)
	}
}

const holdEnv = "TENURE_CPTEST_HOLD"

// TestHoldControlPlane is the child of TestControlPlaneDiesWithTestBinary:
// it prints the control plane's pids and waits to be killed.
func TestHoldControlPlane(t *testing.T) {
	if os.Getenv(holdEnv) == "" {
		t.Skip("run by TestControlPlaneDiesWithTestBinary only")
	}
	fmt.Printf("pids %s\n", strings.Join(childrenNamed("kube-apiserver", "etcd"), " "))
	select {}
}

// A test binary killed outright (as a test timeout or a panic ends it,
// with no Stop) takes its kube-apiserver and etcd with it.
func TestControlPlaneDiesWithTestBinary(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	child := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestHoldControlPlane$")
	// The child's temporary directories (ours and envtest's) land here,
	// removed after the test: the killed child cannot.
	child.Env = append(os.Environ(), holdEnv+"=1", "TMPDIR="+t.TempDir())
	child.Stderr = os.Stderr
	out, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = child.Process.Kill(); _ = child.Wait() }()
	var pids []string
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "pids "); ok {
			pids = strings.Fields(rest)
			break
		}
	}
	if len(pids) != 2 {
		t.Fatalf("the child test binary reported control plane pids %v, want two", pids)
	}
	if err := child.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = child.Wait()
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		for _, pid := range pids {
			if running(pid) {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("control plane processes %v still run after their test binary was killed", pids)
	}
}

// childrenNamed returns the pids of this process's children running one of
// the named commands.
func childrenNamed(names ...string) []string {
	entries, _ := os.ReadDir("/proc")
	var pids []string
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		comm, ppid, ok := stat(e.Name())
		if ok && ppid == strconv.Itoa(os.Getpid()) && slices.Contains(names, comm) {
			pids = append(pids, e.Name())
		}
	}
	return pids
}

// stat returns the command name and parent pid of /proc/PID/stat.
func stat(pid string) (comm, ppid string, ok bool) {
	raw, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return "", "", false
	}
	s := string(raw)
	open, closing := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	f := strings.Fields(s[closing+1:])
	if open < 0 || len(f) < 2 {
		return "", "", false
	}
	return s[open+1 : closing], f[1], f[0] != "Z" && f[0] != "X"
}

func running(pid string) bool {
	_, _, ok := stat(pid)
	return ok
}

// TestKubeletCredentials: the control plane authorizes kubelets as a real
// cluster does (Node authorizer, NodeRestriction), and KubeletConfig
// authenticates as one: it registers its own Node, never another.
func TestKubeletCredentials(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfg, err := cptest.Current().KubeletConfig("cptest-node-a")
	if err != nil {
		t.Fatal(err)
	}
	kubelet, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	review, err := kubelet.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if u := review.Status.UserInfo; u.Username != "system:node:cptest-node-a" || !slices.Contains(u.Groups, "system:nodes") {
		t.Fatalf("kubelet credentials authenticate as %q in %v", u.Username, u.Groups)
	}
	for name, want := range map[string]bool{"cptest-node-a": true, "cptest-node-b": false} {
		_, err := kubelet.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
		switch {
		case want && err != nil:
			t.Errorf("kubelet of cptest-node-a registering %s: %v", name, err)
		case !want && !apierrors.IsForbidden(err):
			t.Errorf("kubelet of cptest-node-a registering %s: %v, want Forbidden (NodeRestriction)", name, err)
		}
	}
}
