// Package localoverlay is the kustomize overlay that runs deploy/ on the
// local nodes of `tenurectl dev up --node` (the developer module's
// localnode applies it), built in memory from the embedded manifests so the
// binaries apply exactly what ships, and the chart values to the same
// effect. It sits in the test tree because the product's suites check it
// against deploy/ and the chart (test/deploy).
package localoverlay

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/tenure-ipam/tenure/deploy"
)

//go:embed kustomization.yaml agent.yaml controller.yaml
var overlay embed.FS

// Names in deploy/.
const (
	Namespace            = "tenure-system"
	AgentDaemonSet       = "tenure-agent"
	ControllerDeployment = "tenure-controller"
)

// Build returns the overlay as YAML documents, for an API server at
// 127.0.0.1:port.
func Build(port int) ([]byte, error) { return BuildFor("127.0.0.1", port) }

// BuildFor returns the overlay as YAML documents, for an API server at
// host:port.
func BuildFor(host string, port int) ([]byte, error) {
	mem := filesys.MakeFsInMemory()
	if err := writeTree(mem, deploy.Manifests, "/deploy"); err != nil {
		return nil, err
	}
	if err := writeOverlay(mem, host, port); err != nil {
		return nil, err
	}
	rm, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(mem, "/test/localoverlay")
	if err != nil {
		return nil, fmt.Errorf("kustomize build test/localoverlay: %w", err)
	}
	return rm.AsYaml()
}

// writeTree writes files into mem under root.
func writeTree(mem filesys.FileSystem, files fs.FS, root string) error {
	return fs.WalkDir(files, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := fs.ReadFile(files, p)
		if err != nil {
			return err
		}
		return mem.WriteFile(path.Join(root, p), data)
	})
}

// writeOverlay writes the overlay into mem at /test/localoverlay, over
// whatever /deploy holds, with apiserver.env for host:port.
func writeOverlay(mem filesys.FileSystem, host string, port int) error {
	if err := writeTree(mem, overlay, "/test/localoverlay"); err != nil {
		return err
	}
	env := fmt.Sprintf("KUBERNETES_SERVICE_HOST=%s\nKUBERNETES_SERVICE_PORT=%d\n", host, port)
	return mem.WriteFile("/test/localoverlay/apiserver.env", []byte(env))
}

// Decode splits YAML documents into objects.
func Decode(docs []byte) ([]*unstructured.Unstructured, error) {
	var objs []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(docs), 4096)
	for {
		var obj map[string]any
		if err := dec.Decode(&obj); errors.Is(err, io.EOF) {
			return objs, nil
		} else if err != nil {
			return nil, err
		}
		if obj != nil {
			objs = append(objs, &unstructured.Unstructured{Object: obj})
		}
	}
}

// ChartValues are the chart's values that make it install what the
// overlay makes of deploy/ (kustomization.yaml, agent.yaml,
// controller.yaml say why each): the image imported into the nodes, the
// API server at host:port, the controller on the host network serving on
// loopback, on any node (the dev nodes are workers). cluster is StartCluster's case (ClusterMutation): the webhook
// is called through its Service; else the API server calls it on
// loopback.
func ChartValues(host string, port int, cluster bool) map[string]any {
	v := map[string]any{
		"image":     map[string]any{"pullPolicy": "Never"},
		"apiServer": map[string]any{"host": host, "port": port},
		"controller": map[string]any{
			"replicas":         1,
			"hostNetwork":      true,
			"listenHost":       "127.0.0.1",
			"controlPlaneOnly": false,
		},
	}
	if !cluster {
		v["nodeRestriction"] = map[string]any{"webhookURL": "https://127.0.0.1:9443/validate-agent"}
	}
	return v
}

// OverlayRelease builds the overlay over release (the YAML documents of
// another release's deploy/, built) instead of deploy/, for pods that
// reach the API server at host:port, changed for StartCluster's nodes
// when cluster is set (ClusterMutation), and returns its objects: a
// release before the chart, run on the local nodes as the overlay runs
// this one.
func OverlayRelease(release []byte, host string, port int, cluster bool) ([]*unstructured.Unstructured, error) {
	mem := filesys.MakeFsInMemory()
	kustomization := "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n- release.yaml\n"
	if err := mem.WriteFile("/deploy/kustomization.yaml", []byte(kustomization)); err != nil {
		return nil, err
	}
	if err := mem.WriteFile("/deploy/release.yaml", release); err != nil {
		return nil, err
	}
	if err := writeOverlay(mem, host, port); err != nil {
		return nil, err
	}
	if err := fitWebhookPatch(mem, release); err != nil {
		return nil, err
	}
	rm, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(mem, "/test/localoverlay")
	if err != nil {
		return nil, fmt.Errorf("kustomize build test/localoverlay over a release: %w", err)
	}
	docs, err := rm.AsYaml()
	if err != nil {
		return nil, err
	}
	objs, err := Decode(docs)
	if err != nil {
		return nil, err
	}
	if cluster {
		for _, o := range objs {
			ClusterMutation(o)
		}
	}
	return objs, nil
}

// fitWebhookPatch drops the overlay's op for the second webhook when the
// release predates it: a JSON patch of a path that is not there fails the
// whole build.
func fitWebhookPatch(mem filesys.FileSystem, release []byte) error {
	if bytes.Contains(release, []byte("reservation-shape.ipam.tenure.dev")) {
		return nil
	}
	const file = "/test/localoverlay/kustomization.yaml"
	k, err := mem.ReadFile(file)
	if err != nil {
		return err
	}
	if !bytes.Contains(k, []byte(shapeWebhookPatch)) {
		return fmt.Errorf("%s: the op for /webhooks/1 is not where fitWebhookPatch expects it", file)
	}
	return mem.WriteFile(file, bytes.Replace(k, []byte(shapeWebhookPatch), nil, 1))
}

// shapeWebhookPatch is the overlay's op that points the configuration's
// second webhook (reservation-shape) at the loopback.
const shapeWebhookPatch = `
    - op: replace
      path: /webhooks/1/clientConfig
      value:
        url: https://127.0.0.1:9443/validate-agent`

// ClusterMutation undoes what the overlay does for a node on the host's
// loopback: the webhook is called through its Service again (the API
// server dials the endpoint, over the fabric), and the controller serves
// it on its node's addresses with the certificate for the Service's name.
func ClusterMutation(o *unstructured.Unstructured) {
	switch {
	case o.GetKind() == "ValidatingWebhookConfiguration" && o.GetName() == "tenure-agent-node-restriction":
		hooks, _, _ := unstructured.NestedSlice(o.Object, "webhooks")
		for _, h := range hooks {
			if h, ok := h.(map[string]any); ok {
				h["clientConfig"] = map[string]any{"service": map[string]any{
					"namespace": Namespace, "name": "tenure-controller-webhook", "path": "/validate-agent", "port": int64(443),
				}}
			}
		}
		_ = unstructured.SetNestedSlice(o.Object, hooks, "webhooks")
	case o.GetKind() == "Deployment" && o.GetName() == ControllerDeployment:
		containers, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
		for _, c := range containers {
			c, ok := c.(map[string]any)
			if !ok || c["name"] != "controller" {
				continue
			}
			args, _ := c["args"].([]any)
			args = slices.DeleteFunc(args, func(a any) bool {
				s, _ := a.(string)
				return strings.HasPrefix(s, "--webhook-ip=") || strings.HasPrefix(s, "--webhook-addr=")
			})
			c["args"] = append(args, "--webhook-addr=:9443")
		}
		_ = unstructured.SetNestedSlice(o.Object, containers, "spec", "template", "spec", "containers")
	}
}
