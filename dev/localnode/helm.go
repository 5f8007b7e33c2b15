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

	"github.com/tenure-ipam/tenure/charts"
	"github.com/tenure-ipam/tenure/deploy"
	"github.com/tenure-ipam/tenure/test/controlplane"
	"github.com/tenure-ipam/tenure/test/localoverlay"
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
	for i, v := range append([]map[string]any{localoverlay.ChartValues(host, port, cluster)}, values...) {
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
