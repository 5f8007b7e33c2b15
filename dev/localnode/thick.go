package localnode

import (
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tenure-ipam/tenure/dev/devnode"
	"github.com/tenure-ipam/tenure/dev/image"
	"github.com/tenure-ipam/tenure/test/controlplane"
	"github.com/tenure-ipam/tenure/test/localoverlay"
	"github.com/tenure-ipam/tenure/test/progress"
)

//go:embed multusthick/multus-thick.yaml
var multusThickManifest []byte

// MultusThickImage is the image of Multus' thick plugin the nodes import
// (image.MultusThick, from the cached binaries).
const MultusThickImage = "localhost/tenure/multus-thick:dev"

// Names in multusthick/.
const (
	MultusNamespace = "kube-system"
	MultusDaemonSet = "kube-multus-ds"
	// MultusDaemonContainer is the DaemonSet's multus-daemon container.
	MultusDaemonContainer = "kube-multus"
)

// InstallMultusThick runs Multus in thick mode on nodes, whichever mode
// they started in: it writes Multus' thick image (image.MultusThick) to
// imageFile, imports it into each node, applies multusthick/ with the
// daemon pointed at the API server at host:port, and waits until the
// daemon is Ready on every node and each node's CNI configuration is the
// shim's (the daemon writes it over the thin one).
func InstallMultusThick(ctx context.Context, cfg *rest.Config, nodes []*devnode.Node, host string, port int, imageFile string) error {
	bin, err := controlplane.BinDir()
	if err != nil {
		return err
	}
	for b := range image.MultusThickBinaries {
		if _, err := os.Stat(filepath.Join(bin, b)); err != nil {
			return fmt.Errorf("%w (make node-tools builds it)", err)
		}
	}
	img, err := image.Build(image.MultusThick(bin))
	if err != nil {
		return err
	}
	ref, err := name.NewTag(MultusThickImage, name.StrictValidation)
	if err != nil {
		return err
	}
	if err := image.WriteFile(imageFile, ref, img); err != nil {
		return err
	}
	for _, n := range nodes {
		if err := n.ImportImage(ctx, imageFile); err != nil {
			return err
		}
	}
	objs, err := localoverlay.Decode(multusThickManifest)
	if err != nil {
		return err
	}
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		return err
	}
	for _, o := range objs {
		if o.GetKind() == "DaemonSet" {
			if err := pointMultusDaemon(o, host, port); err != nil {
				return err
			}
		}
		if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(o), client.FieldOwner(FieldManager), client.ForceOwnership); err != nil {
			return fmt.Errorf("applying %s %s/%s: %w", o.GetKind(), o.GetNamespace(), o.GetName(), err)
		}
	}
	var last error
	progress.Waiting(ctx, "Multus' thick daemon to be ready")
	err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		last = multusThickReady(ctx, c, nodes)
		if last != nil {
			progress.Observe(ctx, last.Error())
		}
		return last == nil, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for Multus' thick daemon: %w (last: %v)", err, last)
	}
	progress.Done(ctx)
	return nil
}

// pointMultusDaemon sets the DaemonSet's image and, as the overlay does
// for tenure's pods, the API server's address for client-go's in-cluster
// configuration (no kube-proxy serves the kubernetes Service here).
func pointMultusDaemon(o *unstructured.Unstructured, host string, port int) error {
	for _, field := range []string{"initContainers", "containers"} {
		path := []string{"spec", "template", "spec", field}
		containers, _, err := unstructured.NestedSlice(o.Object, path...)
		if err != nil {
			return err
		}
		for _, c := range containers {
			c, ok := c.(map[string]any)
			if !ok {
				continue
			}
			c["image"] = MultusThickImage
			if c["name"] == MultusDaemonContainer {
				env, _ := c["env"].([]any)
				c["env"] = append(env,
					map[string]any{"name": "KUBERNETES_SERVICE_HOST", "value": host},
					map[string]any{"name": "KUBERNETES_SERVICE_PORT", "value": strconv.Itoa(port)})
			}
		}
		if err := unstructured.SetNestedSlice(o.Object, containers, path...); err != nil {
			return err
		}
	}
	return nil
}

func multusThickReady(ctx context.Context, c client.Client, nodes []*devnode.Node) error {
	var ds appsv1.DaemonSet
	if err := c.Get(ctx, client.ObjectKey{Namespace: MultusNamespace, Name: MultusDaemonSet}, &ds); err != nil {
		return err
	}
	s, want := ds.Status, int32(len(nodes))
	if s.ObservedGeneration != ds.Generation || s.DesiredNumberScheduled != want || s.UpdatedNumberScheduled != want || s.NumberReady != want {
		return fmt.Errorf("daemonset %s: generation %d observed %d, desired %d, updated %d, ready %d, want %d",
			ds.Name, ds.Generation, s.ObservedGeneration, s.DesiredNumberScheduled, s.UpdatedNumberScheduled, s.NumberReady, want)
	}
	for _, n := range nodes {
		typ, err := MultusConfType(n)
		if err != nil {
			return err
		}
		if typ != "multus-shim" {
			return fmt.Errorf("node %s: 00-multus.conf is of type %q", n.Name, typ)
		}
	}
	return nil
}

// MultusConfType is the plugin type of node's Multus configuration
// (00-multus.conf in its CNI configuration directory): "multus" for the
// thin plugin, "multus-shim" for the thick one.
func MultusConfType(node *devnode.Node) (string, error) {
	data, err := os.ReadFile(node.Path(filepath.Join(devnode.HostCNIConfDir, "00-multus.conf")))
	if err != nil {
		return "", err
	}
	var conf struct {
		Type string `json:"type"`
	}
	if err := json.Unmarshal(data, &conf); err != nil {
		return "", fmt.Errorf("node %s: 00-multus.conf: %w", node.Name, err)
	}
	return conf.Type, nil
}
