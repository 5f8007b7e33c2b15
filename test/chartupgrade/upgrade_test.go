//go:build integration

// Package chartupgrade_test upgrades a cluster installed from the release
// before the chart (testdata/previous-release: that release's deploy/,
// built by kustomize, as a chart) to charts/tenure with `helm upgrade`, on a
// local control plane.
package chartupgrade_test

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/kube"
	"github.com/tenure-ipam/tenure/internal/reservation"
	"github.com/tenure-ipam/tenure/test/controlplane"
	"github.com/tenure-ipam/tenure/test/controlplane/cptest"
	"github.com/tenure-ipam/tenure/test/testbed"
)

func TestMain(m *testing.M) {
	os.Exit(cptest.Main(m, func(*controlplane.ControlPlane) error { return nil }))
}

func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

func helm(t *testing.T, args ...string) string {
	t.Helper()
	dir := os.Getenv("TENURE_CACHE_DIR")
	if dir == "" {
		home, _ := os.UserHomeDir()
		dir = filepath.Join(home, ".cache", "tenure")
	}
	bin := filepath.Join(dir, "bin", "helm")
	if _, err := os.Stat(bin); err != nil {
		testbed.SkipUnlessEverything(t, "helm is not built (make helm): "+err.Error())
	}
	home := t.TempDir()
	cmd := exec.Command(bin, append(args, "--kubeconfig", cptest.Current().KubeconfigPath)...)
	cmd.Dir = repoRoot()
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+filepath.Join(home, "cache"), "HELM_CONFIG_HOME="+filepath.Join(home, "config"),
		"HELM_DATA_HOME="+filepath.Join(home, "data"))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("helm %v: %v\n%s\n%s", args, err, stdout.String(), stderr.String())
	}
	return stdout.String()
}

// TestHelmUpgradeFromPreviousRelease: a cluster installed with the
// previous release's manifests, holding reservations, is upgraded to
// charts/tenure: helm takes over every object (none is left behind or
// refused), the upgrade changes what the new release changes (the
// controller's permission to watch NetworkAttachmentDefinitions), and
// every reservation is still there, the same object (UID and
// resourceVersion), none added.
//
// The local control plane runs no kubelet: the agents' and controller's
// pods are not running across this upgrade (the real node is where that
// is shown).
func TestHelmUpgradeFromPreviousRelease(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, err := kube.NewClient(cptest.Current().Config)
	if err != nil {
		t.Fatal(err)
	}
	// Client-side, as `kubectl apply -k deploy/` installed it: its
	// controller Deployment lists one env var twice, which a server-side
	// apply refuses.
	helm(t, "install", "tenure", "test/chartupgrade/testdata/previous-release", "--namespace", "default", "--server-side=false")

	// Reservations as agents on two nodes made them.
	for i, node := range []string{"node-a", "node-b", "node-a"} {
		a := netip.MustParseAddr(fmt.Sprintf("10.70.0.%d", i+1))
		r := reservation.New(reservation.Spec{Network: "upgrade-net", Kind: tenurev1alpha1.KindAddress, Item: netip.PrefixFrom(a, 32),
			Range: "10.70.0.0/24", Owner: tenurev1alpha1.ReservationOwner{Kind: tenurev1alpha1.OwnerPod, Namespace: "default",
				Name: fmt.Sprintf("p%d", i), UID: fmt.Sprintf("uid-%d", i), PodName: fmt.Sprintf("p%d", i), PodUID: fmt.Sprintf("uid-%d", i),
				ContainerID: fmt.Sprintf("c%d", i), Interface: "net1", Node: node}})
		if err := c.Create(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	snapshot := func() []string {
		t.Helper()
		l := &tenurev1alpha1.IPReservationList{}
		if err := c.List(ctx, l); err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, r := range l.Items {
			out = append(out, r.Name+" uid="+string(r.UID)+" rv="+r.ResourceVersion+" owner="+r.Spec.Owner.UID)
		}
		slices.Sort(out)
		return out
	}
	before := snapshot()
	if len(before) != 3 {
		t.Fatalf("reservations before the upgrade: %v", before)
	}

	helm(t, "upgrade", "tenure", "charts/tenure", "--namespace", "default", "--server-side=true")

	if after := snapshot(); !slices.Equal(after, before) {
		t.Fatalf("reservations after the upgrade:\n%v\nbefore:\n%v", after, before)
	}
	role := &rbacv1.ClusterRole{}
	if err := c.Get(ctx, types.NamespacedName{Name: "tenure-controller"}, role); err != nil {
		t.Fatal(err)
	}
	watchesNADs := slices.ContainsFunc(role.Rules, func(r rbacv1.PolicyRule) bool {
		return slices.Contains(r.Resources, "network-attachment-definitions") && slices.Contains(r.Verbs, "watch")
	})
	if !watchesNADs {
		t.Errorf("the upgraded ClusterRole tenure-controller cannot watch NetworkAttachmentDefinitions: %+v", role.Rules)
	}
	for _, o := range []client.Object{&appsv1.DaemonSet{}, &appsv1.Deployment{}} {
		name := map[bool]string{true: "tenure-agent", false: "tenure-controller"}[fmt.Sprintf("%T", o) == "*v1.DaemonSet"]
		if err := c.Get(ctx, types.NamespacedName{Namespace: "tenure-system", Name: name}, o); err != nil {
			t.Fatalf("%s after the upgrade: %v", name, err)
		}
		if o.GetAnnotations()["meta.helm.sh/release-name"] != "tenure" {
			t.Errorf("%s is not the release's after the upgrade: annotations %v", name, o.GetAnnotations())
		}
	}
	status := helm(t, "status", "tenure", "--namespace", "default")
	if !bytes.Contains([]byte(status), []byte("deployed")) {
		t.Errorf("helm status after the upgrade:\n%s", status)
	}
}
