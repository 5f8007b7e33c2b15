package localnode

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tenure-ipam/tenure/dev/devnode"
	"github.com/tenure-ipam/tenure/test/controlplane"
	"github.com/tenure-ipam/tenure/test/localoverlay"
)

// ClusterOptions for StartCluster.
type ClusterOptions struct {
	// Dir holds the cluster (devnode.ClusterOptions.Dir).
	Dir string
	// Nodes is how many nodes, 1 to devnode.MaxNodes.
	Nodes int
	// Image is the tenure image tarball.
	Image string
	// ProxyCommand runs the fabric proxy (devnode.ClusterOptions).
	ProxyCommand []string
	// Mutate, Install and Values as in Options.
	Mutate  func(*unstructured.Unstructured)
	Install string
	Values  []map[string]any
	// Multus is how Multus runs on the nodes (devnode.MultusMode); thick:
	// UseMultusThick, before tenure is installed.
	Multus devnode.MultusMode
}

// NodeAccess is what cp must be started with (controlplane.Options.Nodes)
// for StartCluster with dir.
func NodeAccess(dir string) *controlplane.NodeAccess {
	return &controlplane.NodeAccess{
		SANs:         []net.IP{net.ParseIP(devnode.FabricAPIServer)},
		EgressSocket: devnode.EgressSocket(dir),
	}
}

// StartCluster is Start for a cluster of nodes in namespaces of their own
// (devnode.StartCluster): cp must have been started with NodeAccess(Dir)
// and the controllers. The pods reach the API server at its fabric
// address, and the webhook is reached through its Service's endpoint, the
// controller's node address, as on a real cluster.
func StartCluster(ctx context.Context, cp *controlplane.ControlPlane, opts ClusterOptions) (_ *devnode.Cluster, err error) {
	toolDir, cniDir, err := prepare(ctx, cp, opts.Install, opts.Mutate, opts.Image)
	if err != nil {
		return nil, err
	}
	cl, err := devnode.StartCluster(ctx, devnode.ClusterOptions{
		Dir: opts.Dir, Nodes: opts.Nodes, Kubeconfig: cp.KubeconfigPath,
		CAFile: filepath.Join(cp.Dir, "pki", "ca.crt"), IssueClientCert: cp.IssueClientCert,
		ProxyCommand: opts.ProxyCommand, BinDir: toolDir, CNIBinDir: cniDir, Multus: opts.Multus,
	})
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			if stopErr := cl.Stop(); stopErr != nil {
				err = fmt.Errorf("%w (and stopping the cluster: %v)", err, stopErr)
			}
		}
	}()
	for _, n := range cl.Nodes {
		if err := n.ImportImage(ctx, opts.Image); err != nil {
			return nil, err
		}
	}
	if opts.Multus == devnode.MultusThick {
		if err := UseMultusThick(ctx, cp, cl); err != nil {
			return nil, err
		}
	}
	mutate := func(o *unstructured.Unstructured) {
		localoverlay.ClusterMutation(o)
		if opts.Mutate != nil {
			opts.Mutate(o)
		}
	}
	switch opts.Install {
	case InstallNone:
		return cl, nil
	case InstallHelm:
		err = HelmInstall(ctx, cp.KubeconfigPath, devnode.FabricAPIServer, devnode.FabricAPIServerPort, true, opts.Values...)
	default:
		err = InstallFor(ctx, cp.Config, devnode.FabricAPIServer, devnode.FabricAPIServerPort, mutate)
	}
	if err != nil {
		return nil, err
	}
	c, err := client.New(cp.Config, client.Options{})
	if err != nil {
		return nil, err
	}
	if err := WaitRollout(ctx, c); err != nil {
		var tails []string
		for _, n := range cl.Nodes {
			tails = append(tails, n.LogTail("kubelet"))
		}
		return nil, fmt.Errorf("%w\n%s", err, strings.Join(tails, "\n"))
	}
	return cl, nil
}

// UseMultusThick runs Multus in thick mode on the cluster's nodes
// (InstallMultusThick), whichever mode they started in; the image is
// written to the cluster's directory.
func UseMultusThick(ctx context.Context, cp *controlplane.ControlPlane, cl *devnode.Cluster) error {
	return InstallMultusThick(ctx, cp.Config, cl.Nodes, devnode.FabricAPIServer, devnode.FabricAPIServerPort, filepath.Join(cl.Dir, "multus-thick.tar"))
}
