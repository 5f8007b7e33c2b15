//go:build integration

package nodes_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/deploy"
	"github.com/tenure-ipam/tenure/dev/devnode"
	"github.com/tenure-ipam/tenure/dev/localnode"
	"github.com/tenure-ipam/tenure/dev/nodetest"
	"github.com/tenure-ipam/tenure/test/localoverlay"
	"github.com/tenure-ipam/tenure/test/testbed"
)

// previousRelease is the release before the chart, as a chart
// (test/chartupgrade's): its deploy/ built by kustomize.
const previousRelease = "../../../test/chartupgrade/testdata/previous-release"

// installPreviousRelease installs the previous release with helm as the
// release the chart upgrades (localnode.HelmRelease), run on the nodes as
// the local overlay runs deploy/ (localoverlay.OverlayRelease) with the
// suite's node grace period, and waits until it has rolled out. Its image
// reference is the one deploy/ pins, so the nodes run the image of this
// tree under it: what the upgrade changes is the manifests.
func installPreviousRelease(ctx context.Context, dir string) error {
	release, err := os.ReadFile(filepath.Join(previousRelease, "templates", "deploy.yaml"))
	if err != nil {
		return err
	}
	objs, err := localoverlay.OverlayRelease(release, devnode.FabricAPIServer, devnode.FabricAPIServerPort, true)
	if err != nil {
		return err
	}
	var docs bytes.Buffer
	docs.WriteString("# " + previousRelease + " through test/localoverlay's overlay, for the suite's nodes.\n")
	for _, o := range objs {
		data, err := yaml.Marshal(o.Object)
		if err != nil {
			return err
		}
		docs.WriteString("---\n")
		docs.Write(data)
	}
	if bytes.Contains(docs.Bytes(), []byte("{{")) {
		return fmt.Errorf("the previous release holds {{, which helm would read as a template")
	}
	chart := filepath.Join(dir, "previous-release")
	files := map[string][]byte{filepath.Join("templates", "deploy.yaml"): docs.Bytes()}
	for _, f := range []string{"Chart.yaml", filepath.Join("crds", "crds.yaml")} {
		if files[f], err = os.ReadFile(filepath.Join(previousRelease, f)); err != nil {
			return err
		}
	}
	for f, data := range files {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(chart, f)), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(chart, f), data, 0o644); err != nil {
			return err
		}
	}
	// Client-side, as `kubectl apply -k` installed it: its controller
	// Deployment lists one environment variable twice, which a server-side
	// apply refuses.
	if _, err := localnode.Helm(ctx, cp.KubeconfigPath, "install", localnode.HelmRelease, chart,
		"--namespace", localnode.HelmReleaseNamespace, "--server-side=false"); err != nil {
		return err
	}
	c, err := client.New(cp.Config, client.Options{})
	if err != nil {
		return err
	}
	return localnode.WaitRollout(ctx, c)
}

// onChart is set once the cluster runs charts/tenure.
var onChart bool

// helmUpgradePart is the part of TestThreeNodes that upgrades the previous
// release to the chart; chartInstalled does it for the others when it was
// left out.
const helmUpgradePart = "HelmUpgradeFromPreviousReleaseWhilePodsRunKeepsEveryAddress"

// upgradeToChart upgrades the release to charts/tenure as the binaries
// carry it, with the values that run it on these nodes and the suite's
// node grace period, and waits until it has rolled out.
func upgradeToChart(ctx context.Context) error {
	// helm upgrade neither installs a CRD the release before lacked nor
	// changes one it installed: the operator applies deploy/crds first
	// (README), which gives the release's CRDs their new fields (an
	// IPPool's selectors).
	if _, err := testbed.ServerSideApplyManifests(ctx, cl, deploy.CRDs, "tenure-test"); err != nil {
		return err
	}
	err := localnode.HelmInstall(ctx, cp.KubeconfigPath, devnode.FabricAPIServer, devnode.FabricAPIServerPort, true)
	if err != nil {
		return err
	}
	if err := localnode.WaitRollout(ctx, cl); err != nil {
		return err
	}
	onChart = true
	return nil
}

// chartInstalled makes sure a part runs on charts/tenure, upgrading to it
// when the upgrade part did not run (a -run that leaves it out).
func chartInstalled(t *testing.T) {
	t.Helper()
	if onChart {
		return
	}
	if err := upgradeToChart(nodetest.Context(t, 3*time.Minute)); err != nil {
		t.Fatal(err)
	}
}

// helmRevision is the release's revision and status.
func helmRevision(ctx context.Context, t *testing.T) (int, string) {
	t.Helper()
	out, err := localnode.Helm(ctx, cp.KubeconfigPath, "status", localnode.HelmRelease, "--namespace", localnode.HelmReleaseNamespace, "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var st struct {
		Version int `json:"version"`
		Info    struct {
			Status string `json:"status"`
		} `json:"info"`
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("helm status: %v\n%s", err, out)
	}
	return st.Version, st.Info.Status
}

// podAddrs is what a pod held: its UID, what Multus recorded for net1, and
// its reservations (name and UID of each, with the address).
type podAddrs struct {
	uid          string
	node         string
	annotation   []string
	reservations []string
}

func addrsOfPod(ctx context.Context, t *testing.T, p *corev1.Pod) podAddrs {
	t.Helper()
	recorded, err := localnode.AttachmentIPs(p, "net1")
	if err != nil {
		t.Fatal(err)
	}
	a := podAddrs{uid: string(p.UID), node: p.Spec.NodeName, annotation: slices.Sorted(slices.Values(recorded))}
	for _, r := range kc.Reservations(ctx, t, p.Namespace) {
		if r.Spec.Owner.UID == string(p.UID) {
			a.reservations = append(a.reservations, r.Name+"/"+string(r.UID)+"="+r.Spec.Address)
		}
	}
	slices.Sort(a.reservations)
	return a
}

// The previous release (installed by helm before the chart existed, as
// `kubectl apply -k deploy/` did) runs; pods hold addresses of a SAN on
// all three nodes. `helm upgrade` to charts/tenure rolls the agent on
// every node and the controller while those pods run and new ones are
// created. After it: every pod that ran holds the same addresses (Multus'
// record, the address in its netns, the same reservation objects); every
// reservation's holder is a live pod; no address has two holders, at any
// time or at the end; the pods created during and after the upgrade have
// addresses; the agent DaemonSet and the controller are the release's
// second revision, rolled out.
func helmUpgradeWhilePodsRun(t *testing.T) {
	ctx := nodetest.Context(t, 8*time.Minute)
	if rev, status := helmRevision(ctx, t); rev != 1 || status != "deployed" {
		t.Fatalf("release %s before the upgrade: revision %d %s, want the previous release, revision 1 deployed", localnode.HelmRelease, rev, status)
	}
	ns := kc.Namespace(ctx, t, "helmup")
	kc.NAD(ctx, t, ns, "helm-san", `{
		"cniVersion": "1.0.0", "name": "helm-san", "type": "macvlan", "master": "`+devnode.SANLink+`", "mode": "bridge",
		"ipam": {"type": "tenure", "range": "10.101.0.0/24"}}`)
	h := watchHolders(ctx, t, ns)
	create := func(name string, node int) error {
		p := localnode.Pod(ns, name, "helm-san")
		p.Spec.NodeName = cluster.Nodes[node].Name
		return cl.Create(ctx, p)
	}

	var before []string
	for i := range 6 {
		name := fmt.Sprintf("before-%d", i)
		before = append(before, name)
		if err := create(name, i%3); err != nil {
			t.Fatal(err)
		}
	}
	held := map[string]podAddrs{}
	for _, name := range before {
		p := kc.WaitRunning(ctx, t, ns, name)
		net1Of(ctx, t, p) // its netns, Multus and its reservation agree
		held[name] = addrsOfPod(ctx, t, p)
	}

	// Pods created while the upgrade runs, one every second on the next
	// node, until it has rolled out.
	stop := make(chan struct{})
	var (
		wg         sync.WaitGroup
		during     []string
		createErrs []error
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			name := fmt.Sprintf("during-%d", i)
			if err := create(name, i%3); err != nil {
				createErrs = append(createErrs, err)
				continue
			}
			during = append(during, name)
		}
	}()
	begin := time.Now()
	err := upgradeToChart(ctx)
	close(stop)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("helm upgrade and its roll-out took %v; %d pods created meanwhile", time.Since(begin).Round(time.Millisecond), len(during))
	for _, err := range createErrs {
		t.Errorf("creating a pod during the upgrade: %v", err)
	}
	if len(during) == 0 {
		t.Error("no pod was created during the upgrade")
	}

	var after []string
	for i := range 3 {
		name := fmt.Sprintf("after-%d", i)
		after = append(after, name)
		if err := create(name, i); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range append(slices.Clone(during), after...) {
		net1Of(ctx, t, kc.WaitRunning(ctx, t, ns, name))
	}
	for _, name := range before {
		p, err := kc.Pod(ctx, ns, name)
		if err != nil {
			t.Fatalf("pod %s that ran before the upgrade: %v", name, err)
		}
		if p.Status.Phase != corev1.PodRunning {
			t.Errorf("pod %s: phase %s after the upgrade", name, p.Status.Phase)
			continue
		}
		net1Of(ctx, t, p)
		if now := addrsOfPod(ctx, t, p); !equalAddrs(now, held[name]) {
			t.Errorf("pod %s after the upgrade: %+v; before it: %+v", name, now, held[name])
		}
	}

	// Every reservation's holder is a live pod, and no address has two
	// holders: keyed by holder, then inverted.
	var list tenurev1alpha1.IPReservationList
	if err := cl.List(ctx, &list); err != nil {
		t.Fatal(err)
	}
	byHolder := map[string][]string{} // owner UID -> network/address
	for _, r := range list.Items {
		o := r.Spec.Owner
		var p corev1.Pod
		err := cl.Get(ctx, client.ObjectKey{Namespace: o.Namespace, Name: o.PodName}, &p)
		switch {
		case apierrors.IsNotFound(err) || (err == nil && string(p.UID) != o.PodUID):
			t.Errorf("reservation %s (%s) leaked: its pod %s/%s (%s) is gone", r.Name, r.Spec.Address, o.Namespace, o.PodName, o.PodUID)
		case err != nil:
			t.Fatal(err)
		case p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning:
			t.Errorf("reservation %s (%s): its pod %s/%s is %s (deleting: %v)", r.Name, r.Spec.Address, o.Namespace, o.PodName, p.Status.Phase, p.DeletionTimestamp != nil)
		}
		byHolder[o.UID] = append(byHolder[o.UID], r.Spec.Network+"/"+r.Spec.Address)
	}
	holderOf := map[string]string{}
	for holder, addrs := range byHolder {
		for _, a := range addrs {
			if other, dup := holderOf[a]; dup {
				t.Errorf("%s is held by %s and %s", a, other, holder)
			}
			holderOf[a] = holder
		}
	}
	if want := len(before) + len(during) + len(after); len(holderOf) != want {
		t.Errorf("%d addresses reserved, want one for each of the %d pods: %v", len(holderOf), want, byHolder)
	}
	h.check(t)

	if rev, status := helmRevision(ctx, t); rev != 2 || status != "deployed" {
		t.Errorf("release %s after the upgrade: revision %d %s, want 2 deployed", localnode.HelmRelease, rev, status)
	}
	var ds appsv1.DaemonSet
	if err := cl.Get(ctx, client.ObjectKey{Namespace: localnode.Namespace, Name: localnode.AgentDaemonSet}, &ds); err != nil {
		t.Fatal(err)
	}
	var dep appsv1.Deployment
	if err := cl.Get(ctx, client.ObjectKey{Namespace: localnode.Namespace, Name: localnode.ControllerDeployment}, &dep); err != nil {
		t.Fatal(err)
	}
	// The chart's: the API server from its values (apiServer), not from
	// the overlay's ConfigMap the previous release reads it from.
	for _, o := range []struct {
		name string
		obj  client.Object
		pod  corev1.PodSpec
	}{{ds.Name, &ds, ds.Spec.Template.Spec}, {dep.Name, &dep, dep.Spec.Template.Spec}} {
		if r := o.obj.GetAnnotations()["meta.helm.sh/release-name"]; r != localnode.HelmRelease {
			t.Errorf("%s: release %q, want %s", o.name, r, localnode.HelmRelease)
		}
		c := o.pod.Containers[0]
		if len(c.EnvFrom) != 0 || !slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool {
			return e.Name == "KUBERNETES_SERVICE_HOST" && e.Value == devnode.FabricAPIServer
		}) {
			t.Errorf("%s's %s is not the chart's: env %v, envFrom %v", o.name, c.Name, c.Env, c.EnvFrom)
		}
	}
	if s := ds.Status; s.DesiredNumberScheduled != 3 || s.UpdatedNumberScheduled != 3 || s.NumberReady != 3 {
		t.Errorf("agent DaemonSet after the upgrade: desired %d, updated %d, ready %d; want 3 of each", s.DesiredNumberScheduled, s.UpdatedNumberScheduled, s.NumberReady)
	}
	if s := dep.Status; s.UpdatedReplicas != 1 || s.AvailableReplicas != 1 {
		t.Errorf("controller after the upgrade: updated %d, available %d; want 1 and 1", s.UpdatedReplicas, s.AvailableReplicas)
	}

	// Leave the cluster as the part found it: the pods gone and their
	// addresses released.
	for _, name := range append(append(before, during...), after...) {
		if err := cl.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}); err != nil && !apierrors.IsNotFound(err) {
			t.Error(err)
		}
	}
	kc.Poll(ctx, t, "the upgrade's pods' reservations to be released", func() error {
		if left := kc.Reservations(ctx, t, ns); len(left) > 0 {
			return fmt.Errorf("%d left", len(left))
		}
		return nil
	})
}

func equalAddrs(a, b podAddrs) bool {
	return a.uid == b.uid && a.node == b.node && slices.Equal(a.annotation, b.annotation) && slices.Equal(a.reservations, b.reservations) &&
		len(a.reservations) == 1 && len(a.annotation) == 1 && strings.HasSuffix(a.reservations[0], "="+a.annotation[0])
}
