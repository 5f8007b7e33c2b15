//go:build integration

package deploy_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/test/testbed"
)

// TestControllerRunsAsDeployed runs tenure-controller with the Deployment's
// arguments (the listen addresses moved to free loopback ports) and nothing
// but its own RBAC (impersonating its service account): its health and
// readiness endpoints answer on the port the probes use, it wins the
// leader-election Lease in tenure-system, writes an IPPool's usage to its
// status, and nothing it does is refused.
func TestControllerRunsAsDeployed(t *testing.T) {
	bins, err := testbed.Build("")
	if err != nil {
		t.Fatal(err)
	}
	if bins.Controller == "" {
		t.Fatal("no tenure-controller binary: the Deployment's command cannot be exercised")
	}
	ctx := testContext(t, 3*time.Minute)
	objs := kustomizeBuild(t)
	d := typed[appsv1.Deployment](t, find(t, objs, "Deployment", "tenure-controller"))
	c := adminClient(t)
	applyRBAC(t, ctx, c, objs)
	dir := t.TempDir()
	kubeconfig := impersonatingKubeconfig(t, d.Spec.Template.Spec.ServiceAccountName, dir, nil)

	// A pool for it to report on: the status write needs its RBAC too.
	pool := &tenurev1alpha1.IPPool{
		ObjectMeta: metav1.ObjectMeta{Name: "deploy-test-pool"},
		Spec:       tenurev1alpha1.IPPoolSpec{Ranges: []tenurev1alpha1.PoolRange{{Range: "10.250.0.0/29"}}},
	}
	if err := c.Create(ctx, pool); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Delete(context.Background(), pool) })

	ctr := &d.Spec.Template.Spec.Containers[0]
	var args []string
	var healthAddr string
	for _, a := range ctr.Args {
		switch k, _, _ := strings.Cut(a, "="); k {
		case "--metrics-addr", "--webhook-addr":
			a = k + "=" + testbed.FreeLoopbackAddr(t)
		case "--health-addr":
			healthAddr = testbed.FreeLoopbackAddr(t)
			a = k + "=" + healthAddr
		}
		// The kubelet's expansion of the downward API's namespace.
		a = strings.ReplaceAll(a, "$(POD_NAMESPACE)", d.Namespace)
		args = append(args, a)
	}
	if healthAddr == "" {
		t.Fatal("the Deployment passes no --health-addr")
	}
	args = append(args, "--kubeconfig="+kubeconfig) // stands in for the in-cluster config
	logPath := filepath.Join(dir, "controller.log")
	proc, err := testbed.StartProcess("controller", bins.Controller, logPath, args...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		proc.Stop()
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("controller log:\n%s", b)
		}
	})

	get := func(path string) error {
		resp, err := http.Get("http://" + healthAddr + path)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET %s: %s", path, resp.Status)
		}
		return nil
	}
	waitFor := func(what string, cond func() error) {
		t.Helper()
		var last error
		_ = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 90*time.Second, true, func(context.Context) (bool, error) {
			last = cond()
			return last == nil || !proc.Running(), nil
		})
		if last != nil {
			t.Fatalf("%s: %v (controller running: %v)", what, last, proc.Running())
		}
	}
	for _, p := range []string{ctr.LivenessProbe.HTTPGet.Path, ctr.ReadinessProbe.HTTPGet.Path} {
		waitFor("probe "+p, func() error { return get(p) })
	}
	waitFor("a leader-election Lease held in "+namespace, func() error {
		list := &coordinationv1.LeaseList{}
		if err := c.List(ctx, list, client.InNamespace(namespace)); err != nil {
			return err
		}
		for _, l := range list.Items {
			if l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != "" {
				t.Logf("lease %s held by %s", l.Name, *l.Spec.HolderIdentity)
				return nil
			}
		}
		return fmt.Errorf("%d leases, none held", len(list.Items))
	})
	waitFor("IPPool status written", func() error {
		got := &tenurev1alpha1.IPPool{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(pool), got); err != nil {
			return err
		}
		if got.Status.Capacity == 0 {
			return fmt.Errorf("status %+v", got.Status)
		}
		t.Logf("pool status: capacity %d, allocated %d, free %d", got.Status.Capacity, got.Status.Allocated, got.Status.Free)
		return nil
	})
	logData, _ := os.ReadFile(logPath)
	if bytes.Contains(bytes.ToLower(logData), []byte("forbidden")) {
		t.Errorf("the controller was refused something its work needs:\n%s", logData)
	}
	if !proc.Running() {
		t.Error("the controller exited")
	}
}
