// Package localnode runs tenure on the local nodes of `tenurectl dev up
// --node`: deploy/ through the overlay test/localoverlay builds in memory
// from the embedded manifests (the binaries apply exactly what ships), or
// the chart installed by helm with values to the same effect.
package localnode

import (
	"cmp"
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/tenure-ipam/tenure/deploy"
	"github.com/tenure-ipam/tenure/dev/devnode"
	"github.com/tenure-ipam/tenure/test/controlplane"
	"github.com/tenure-ipam/tenure/test/localoverlay"
	"github.com/tenure-ipam/tenure/test/progress"
)

// Options for Start.
type Options struct {
	// Dir holds the node (devnode.Options.Dir).
	Dir string
	// Image is the tenure image tarball (make image's bin/tenure-image.tar).
	Image string
	// Mutate, when set, may change each object of the overlay before it is
	// applied (InstallKustomize only).
	Mutate func(*unstructured.Unstructured)
	// Install is how tenure is installed: InstallKustomize (or empty),
	// InstallHelm or InstallNone.
	Install string
	// Values, with InstallHelm, are chart values over ChartValues.
	Values []map[string]any
}

// Start makes cp's cluster what a user's is once tenure is installed:
// Multus' CRD, a node of this machine running containerd and a kubelet with
// Multus as its CNI (devnode), tenure's image imported there, and the
// overlay applied and rolled out. cp must run the controllers
// (controlplane.Options.Controllers). On failure the node is stopped.
func Start(ctx context.Context, cp *controlplane.ControlPlane, opts Options) (_ *devnode.Node, err error) {
	toolDir, cniDir, err := prepare(ctx, cp, opts.Install, opts.Mutate, opts.Image)
	if err != nil {
		return nil, err
	}
	kubelet, err := kubeletKubeconfig(cp, opts.Dir, devnode.DefaultNodeName)
	if err != nil {
		return nil, err
	}
	node, err := devnode.Start(ctx, devnode.Options{Dir: opts.Dir, Kubeconfig: cp.KubeconfigPath, KubeletKubeconfig: kubelet,
		NodeName: devnode.DefaultNodeName, BinDir: toolDir, CNIBinDir: cniDir})
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			if stopErr := node.Stop(); stopErr != nil {
				err = fmt.Errorf("%w (and stopping the node: %v)", err, stopErr)
			}
		}
	}()
	if err := node.ImportImage(ctx, opts.Image); err != nil {
		return nil, err
	}
	port, err := strconv.Atoi(cp.URL[strings.LastIndex(cp.URL, ":")+1:])
	if err != nil {
		return nil, fmt.Errorf("control plane URL %s: %w", cp.URL, err)
	}
	switch opts.Install {
	case InstallNone:
		return node, nil
	case InstallHelm:
		err = HelmInstall(ctx, cp.KubeconfigPath, "127.0.0.1", port, false, opts.Values...)
	default:
		err = Install(ctx, cp.Config, port, opts.Mutate)
	}
	if err != nil {
		return nil, err
	}
	c, err := client.New(cp.Config, client.Options{})
	if err != nil {
		return nil, err
	}
	if err := WaitRollout(ctx, c); err != nil {
		return nil, fmt.Errorf("%w\n%s", err, node.LogTail("kubelet"))
	}
	return node, nil
}

// FieldManager is the server-side apply field manager of Install.
const FieldManager = "tenure-local-node"

// Install builds the overlay for the API server at 127.0.0.1:port and
// applies it server-side: the CRDs first (installed and served before
// anything uses them, as controlplane.InstallCRDs does), then the rest,
// namespaces first. mutate, when set, may change each object before it is
// applied (tests shorten a timeout). It does not wait for the workloads;
// see WaitRollout.
func Install(ctx context.Context, cfg *rest.Config, port int, mutate func(*unstructured.Unstructured)) error {
	return InstallFor(ctx, cfg, "127.0.0.1", port, mutate)
}

// InstallFor is Install for pods that reach the API server at host:port.
func InstallFor(ctx context.Context, cfg *rest.Config, host string, port int, mutate func(*unstructured.Unstructured)) error {
	progress.Waiting(ctx, "tenure's manifests to be applied")
	docs, err := localoverlay.BuildFor(host, port)
	if err != nil {
		return err
	}
	objs, err := localoverlay.Decode(docs)
	if err != nil {
		return err
	}
	// The CRDs first, waited for until served, so nothing applied after
	// them is refused; the apply below then only adds the overlay's
	// labels to them.
	crds, err := fs.Sub(deploy.CRDs, "crds")
	if err != nil {
		return err
	}
	if err := controlplane.InstallCRDs(ctx, cfg, crds); err != nil {
		return err
	}
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		return err
	}
	slices.SortStableFunc(objs, func(a, b *unstructured.Unstructured) int {
		return cmp.Compare(applyRank(a), applyRank(b))
	})
	for _, o := range objs {
		if mutate != nil {
			mutate(o)
		}
		if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(o), client.FieldOwner(FieldManager), client.ForceOwnership); err != nil {
			return fmt.Errorf("applying %s %s/%s: %w", o.GetKind(), o.GetNamespace(), o.GetName(), err)
		}
	}
	return nil
}

func applyRank(o *unstructured.Unstructured) int {
	switch o.GetKind() {
	case "CustomResourceDefinition":
		return 0
	case "Namespace":
		return 1
	}
	return 2
}

// WaitRollout waits until the agent DaemonSet and the controller
// Deployment run their current template everywhere, Ready.
func WaitRollout(ctx context.Context, c client.Client) error {
	var last error
	progress.Waiting(ctx, "tenure to roll out (DaemonSet "+Namespace+"/"+AgentDaemonSet+", Deployment "+Namespace+"/"+ControllerDeployment+")")
	err := wait.PollUntilContextCancel(ctx, 500*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		last = rolledOut(ctx, c)
		if last != nil {
			progress.Observe(ctx, last.Error())
		}
		return last == nil, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for tenure to roll out: %w (last: %v)", err, last)
	}
	progress.Done(ctx)
	return nil
}

func rolledOut(ctx context.Context, c client.Client) error {
	var ds appsv1.DaemonSet
	if err := c.Get(ctx, client.ObjectKey{Namespace: Namespace, Name: AgentDaemonSet}, &ds); err != nil {
		return err
	}
	s := ds.Status
	if s.ObservedGeneration != ds.Generation || s.DesiredNumberScheduled == 0 ||
		s.UpdatedNumberScheduled != s.DesiredNumberScheduled || s.NumberReady != s.DesiredNumberScheduled || s.NumberUnavailable != 0 {
		return fmt.Errorf("daemonset %s: generation %d observed %d, desired %d, updated %d, ready %d",
			ds.Name, ds.Generation, s.ObservedGeneration, s.DesiredNumberScheduled, s.UpdatedNumberScheduled, s.NumberReady)
	}
	var dep appsv1.Deployment
	if err := c.Get(ctx, client.ObjectKey{Namespace: Namespace, Name: ControllerDeployment}, &dep); err != nil {
		return err
	}
	want := int32(1)
	if dep.Spec.Replicas != nil {
		want = *dep.Spec.Replicas
	}
	d := dep.Status
	if d.ObservedGeneration != dep.Generation || d.UpdatedReplicas != want || d.AvailableReplicas != want || d.Replicas != want {
		return fmt.Errorf("deployment %s: generation %d observed %d, want %d, updated %d, available %d, total %d",
			dep.Name, dep.Generation, d.ObservedGeneration, want, d.UpdatedReplicas, d.AvailableReplicas, d.Replicas)
	}
	return nil
}

// Names in deploy/.
const (
	Namespace            = localoverlay.Namespace
	AgentDaemonSet       = localoverlay.AgentDaemonSet
	ControllerDeployment = localoverlay.ControllerDeployment
)

// prepare is what Start and StartCluster do before any node: check the
// install options and the image, find the node tools and the reference
// plugins, and install Multus' CRD.
func prepare(ctx context.Context, cp *controlplane.ControlPlane, install string, mutate func(*unstructured.Unstructured), image string) (toolDir, cniDir string, err error) {
	if err := checkInstallOptions(install, mutate); err != nil {
		return "", "", err
	}
	if _, err := os.Stat(image); err != nil {
		return "", "", fmt.Errorf("%w: make image builds it", err)
	}
	if toolDir, err = controlplane.BinDir(); err != nil {
		return "", "", err
	}
	if cniDir, err = devnode.CNIPluginsDir(); err != nil {
		return "", "", err
	}
	return toolDir, cniDir, controlplane.InstallCRDs(ctx, cp.Config, controlplane.MultusCRDs())
}

// kubeletKubeconfig writes dir/kubelet.kubeconfig: node's kubelet
// credentials (a client certificate system:node:NODE of the control plane's
// client CA), so the local node's kubelet is held to its node as on a real
// cluster.
func kubeletKubeconfig(cp *controlplane.ControlPlane, dir, node string) (string, error) {
	cfg, err := cp.KubeletConfig(node)
	if err != nil {
		return "", err
	}
	kc := clientcmdapi.Config{
		Clusters:       map[string]*clientcmdapi.Cluster{"local": {Server: cfg.Host, CertificateAuthorityData: cfg.CAData}},
		AuthInfos:      map[string]*clientcmdapi.AuthInfo{node: {ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData}},
		Contexts:       map[string]*clientcmdapi.Context{"local": {Cluster: "local", AuthInfo: node}},
		CurrentContext: "local",
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	path := filepath.Join(dir, "kubelet.kubeconfig")
	return path, clientcmd.WriteToFile(kc, path)
}
