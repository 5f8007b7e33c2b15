package localnode

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/tenure-ipam/tenure/charts"
	"github.com/tenure-ipam/tenure/deploy"
	"github.com/tenure-ipam/tenure/test/controlplane"
	"github.com/tenure-ipam/tenure/test/progress"
)

// How Start and StartCluster install tenure (Options.Install).
const (
	// InstallKustomize applies the overlay (the default).
	InstallKustomize = "kustomize"
	// InstallHelm installs charts/tenure with ChartValues as the release
	// HelmRelease.
	InstallHelm = "helm"
	// InstallNone installs nothing and waits for nothing: the caller
	// installs tenure itself.
	InstallNone = "none"
)

// Installs are the values Options.Install takes ("" is InstallKustomize).
var Installs = []string{InstallKustomize, InstallHelm, InstallNone}

// The release InstallHelm makes: `helm install tenure ./charts/tenure`, as
// README.md's Install with Helm has it.
const (
	HelmRelease          = "tenure"
	HelmReleaseNamespace = "default"
)

func checkInstall(install string) error {
	if install == "" {
		return nil
	}
	for _, i := range Installs {
		if i == install {
			return nil
		}
	}
	return fmt.Errorf("install %q: want one of %s", install, strings.Join(Installs, ", "))
}

// checkInstallOptions refuses an Install Start does not know, and Mutate
// with a chart (values say there what Mutate says to the overlay).
func checkInstallOptions(install string, mutate func(*unstructured.Unstructured)) error {
	if err := checkInstall(install); err != nil {
		return err
	}
	if mutate != nil && install != "" && install != InstallKustomize {
		return fmt.Errorf("install %q: Mutate changes the overlay's objects only (with helm, give Values)", install)
	}
	return nil
}

// HelmBinary is hack/build-helm.sh's helm in the tool cache (make helm).
func HelmBinary() (string, error) {
	cache, err := controlplane.CacheDir()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(cache, "bin", "helm")
	if _, err := os.Stat(bin); err != nil {
		return "", fmt.Errorf("%w: make helm builds it", err)
	}
	return bin, nil
}

// Helm runs helm with args against the cluster of kubeconfig, its own
// state (repositories, cache, plugins) in a directory it removes after, and
// returns its standard output.
func Helm(ctx context.Context, kubeconfig string, args ...string) (string, error) {
	bin, err := HelmBinary()
	if err != nil {
		return "", err
	}
	home, err := os.MkdirTemp("", "tenure-helm-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(home)
	cmd := exec.CommandContext(ctx, bin, append(args, "--kubeconfig", kubeconfig)...)
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+filepath.Join(home, "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(home, "config"), "HELM_DATA_HOME="+filepath.Join(home, "data"))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("helm %s: %w\n%s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// WriteChart writes charts/tenure, as the binary carries it (its deploy/
// from deploy.Manifests), into dir/tenure and returns that directory.
func WriteChart(dir string) (string, error) {
	root := filepath.Join(dir, "tenure")
	for _, tree := range []struct {
		files fs.FS
		root  string
	}{{charts.Tenure, dir}, {deploy.Manifests, filepath.Join(root, "deploy")}} {
		err := fs.WalkDir(tree.files, ".", func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			data, err := fs.ReadFile(tree.files, p)
			if err != nil {
				return err
			}
			out := filepath.Join(tree.root, filepath.FromSlash(p))
			if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
				return err
			}
			return os.WriteFile(out, data, 0o644)
		})
		if err != nil {
			return "", err
		}
	}
	return root, nil
}

// ChartValues are the chart's values that make it install what the
// overlay makes of deploy/ (kustomization.yaml, agent.yaml,
// controller.yaml say why each): the image imported into the nodes, the
// API server at host:port, the controller on the host network serving on
// loopback, on any node (the dev nodes are workers). cluster is StartCluster's case (clusterMutation): the webhook
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

// HelmInstall installs (or upgrades to) the chart as the binary carries it
// as HelmRelease, for pods that reach the API server at host:port, with
// ChartValues and then values (each a values file, Helm merging them in
// order). Helm installs the chart's CRDs first and waits until they are
// established. It does not wait for the workloads; see WaitRollout.
func HelmInstall(ctx context.Context, kubeconfig, host string, port int, cluster bool, values ...map[string]any) error {
	progress.Waiting(ctx, "helm to install tenure's chart")
	dir, err := os.MkdirTemp("", "tenure-chart-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	chart, err := WriteChart(dir)
	if err != nil {
		return err
	}
	args := []string{"upgrade", "--install", HelmRelease, chart, "--namespace", HelmReleaseNamespace}
	for i, v := range append([]map[string]any{ChartValues(host, port, cluster)}, values...) {
		data, err := json.Marshal(v) // JSON is YAML
		if err != nil {
			return err
		}
		file := filepath.Join(dir, fmt.Sprintf("values-%d.yaml", i))
		if err := os.WriteFile(file, data, 0o644); err != nil {
			return err
		}
		args = append(args, "--values", file)
	}
	_, err = Helm(ctx, kubeconfig, args...)
	return err
}

// OverlayRelease builds the overlay over release (the YAML documents of
// another release's deploy/, built) instead of deploy/, for pods that
// reach the API server at host:port, changed for StartCluster's nodes
// when cluster is set (clusterMutation), and returns its objects: a
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
	rm, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(mem, "/internal/dev/localnode")
	if err != nil {
		return nil, fmt.Errorf("kustomize build internal/dev/localnode over a release: %w", err)
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
			clusterMutation(o)
		}
	}
	return objs, nil
}

// shapeWebhookPatch is the overlay's op that points the configuration's
// second webhook (reservation-shape) at the loopback.
const shapeWebhookPatch = `
    - op: replace
      path: /webhooks/1/clientConfig
      value:
        url: https://127.0.0.1:9443/validate-agent`

// fitWebhookPatch drops the overlay's op for the second webhook when the
// release predates it: a JSON patch of a path that is not there fails the
// whole build.
func fitWebhookPatch(mem filesys.FileSystem, release []byte) error {
	if bytes.Contains(release, []byte("reservation-shape.ipam.tenure.dev")) {
		return nil
	}
	const file = "/internal/dev/localnode/kustomization.yaml"
	k, err := mem.ReadFile(file)
	if err != nil {
		return err
	}
	if !bytes.Contains(k, []byte(shapeWebhookPatch)) {
		return fmt.Errorf("%s: the op for /webhooks/1 is not where fitWebhookPatch expects it", file)
	}
	return mem.WriteFile(file, bytes.Replace(k, []byte(shapeWebhookPatch), nil, 1))
}
