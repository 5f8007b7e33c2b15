//go:build integration

package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tenure-ipam/tenure/dev/devnode"
	"github.com/tenure-ipam/tenure/dev/localnode"
	"github.com/tenure-ipam/tenure/internal/kube"
	"github.com/tenure-ipam/tenure/test/controlplane"
)

// dev up --install with anything but kustomize or helm, or helm without
// --node, is refused with the flag and its value, and starts nothing.
func TestDevUpRefusesBadInstall(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--node", "--install", "apply"}, `--install "apply"`},
		{[]string{"--node", "--install", "none"}, `--install "none"`},
		{[]string{"--install", "helm"}, "--install helm needs --node"},
	} {
		dir := filepath.Join(t.TempDir(), "dev")
		r := tenurectl(t, append([]string{"dev", "up", "--dir", dir}, c.args...)...)
		if r.code != 2 || !strings.Contains(r.stderr, c.want) {
			t.Errorf("dev up %v: exit %d, stderr %q; want exit 2 and %q", c.args, r.code, r.stderr, c.want)
		}
		if _, err := os.Stat(filepath.Join(dir, controlplane.StateFile)); err == nil {
			t.Errorf("dev up %v started a control plane", c.args)
		}
	}
}

// dev up --node --install helm installs tenure from charts/tenure as the
// release tenure: the agent DaemonSet and the controller are the release's
// and roll out on the node; dev down leaves nothing on the host.
func TestDevUpNodeWithHelmAndDownLeaveNothing(t *testing.T) {
	image := builtImage(t)
	if _, err := localnode.HelmBinary(); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "dev")
	cp, pids := devUpNodes(t, dir, func() error { return devnode.Stop(filepath.Join(dir, "node")) }, "--install", "helm", "--image", image)
	cl, err := kube.NewClient(cp.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := localnode.WaitRollout(ctx, cl); err != nil {
		t.Error(err)
	}
	for _, o := range []client.Object{&appsv1.DaemonSet{}, &appsv1.Deployment{}} {
		name := localnode.AgentDaemonSet
		if _, ok := o.(*appsv1.Deployment); ok {
			name = localnode.ControllerDeployment
		}
		if err := cl.Get(ctx, client.ObjectKey{Namespace: localnode.Namespace, Name: name}, o); err != nil {
			t.Fatal(err)
		}
		if a := o.GetAnnotations(); a["meta.helm.sh/release-name"] != localnode.HelmRelease || a["meta.helm.sh/release-namespace"] != localnode.HelmReleaseNamespace {
			t.Errorf("%s is not the helm release %s/%s's: annotations %v", name, localnode.HelmReleaseNamespace, localnode.HelmRelease, a)
		}
	}
	status, err := localnode.Helm(ctx, cp.KubeconfigPath, "status", localnode.HelmRelease, "--namespace", localnode.HelmReleaseNamespace)
	if err != nil || !strings.Contains(status, "STATUS: deployed") {
		t.Errorf("helm status: %v\n%s", err, status)
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
