//go:build integration

package deploy_test

import (
	"bytes"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/tenure-ipam/tenure/test/controlplane/cptest"
	"github.com/tenure-ipam/tenure/test/testbed"
)

var updateChartCRDs = flag.Bool("update-chart-crds", false, "write charts/tenure/crds from kustomize's build of deploy/")

// writeChartCRDs writes the CRDs of kustomize's build of deploy/ into the
// chart's crds/ (Helm installs that directory untemplated, so the chart
// carries them as kustomize gives them, common label included).
func writeChartCRDs(t *testing.T) {
	t.Helper()
	dir := filepath.Join(chartDir(), "crds")
	old, _ := filepath.Glob(filepath.Join(dir, "*.yaml"))
	for _, f := range old {
		if err := os.Remove(f); err != nil {
			t.Fatal(err)
		}
	}
	for _, o := range ofKind(kustomizeBuild(t), "CustomResourceDefinition") {
		b, err := yaml.Marshal(o.Object)
		if err != nil {
			t.Fatal(err)
		}
		head := "# Generated from deploy/crds as kustomize builds them (deploy/kustomization.yaml's\n" +
			"# common label): go test -tags integration ./test/deploy -run TestChartDefaultsAreDeploy -update-chart-crds\n"
		if err := os.WriteFile(filepath.Join(dir, o.GetName()+".yaml"), append([]byte(head), b...), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func chartDir() string { return filepath.Join(repoRoot(), "charts", "tenure") }

// helmBin is hack/build-helm.sh's helm in the tool cache (make helm).
func helmBin(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("TENURE_CACHE_DIR")
	if dir == "" {
		home, _ := os.UserHomeDir()
		dir = filepath.Join(home, ".cache", "tenure")
	}
	p := filepath.Join(dir, "bin", "helm")
	if _, err := os.Stat(p); err != nil {
		testbed.SkipUnlessEverything(t, "helm is not built (make helm): "+err.Error())
	}
	return p
}

// helm runs helm with args in the repository root; it returns stdout and
// stderr.
func helm(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	cmd := exec.Command(helmBin(t), args...)
	cmd.Dir = repoRoot()
	// Helm's own state (repositories, cache) stays in the test's
	// directories.
	home := t.TempDir()
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+filepath.Join(home, "cache"), "HELM_CONFIG_HOME="+filepath.Join(home, "config"),
		"HELM_DATA_HOME="+filepath.Join(home, "data"))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	return stdout.String(), stderr.String(), err
}

// helmTemplate renders the chart with its CRDs and args (--set ...).
func helmTemplate(t *testing.T, args ...string) []*unstructured.Unstructured {
	t.Helper()
	out, stderr, err := helm(t, append([]string{"template", "tenure", "charts/tenure", "--include-crds", "--kube-version", "1.37.2"}, args...)...)
	if err != nil {
		t.Fatalf("helm template %v: %v\n%s", args, err, stderr)
	}
	objs, err := decodeYAML([]byte(out))
	if err != nil {
		t.Fatalf("helm template's output: %v", err)
	}
	return objs
}

func byKey(objs []*unstructured.Unstructured) map[string]*unstructured.Unstructured {
	m := map[string]*unstructured.Unstructured{}
	for _, o := range objs {
		m[objKey(o)] = o
	}
	return m
}

// TestChartDefaultsAreDeploy: `helm template` of charts/tenure with its
// default values (and its CRDs) gives exactly the objects `kubectl
// kustomize deploy/` gives, compared object by object (not as text).
func TestChartDefaultsAreDeploy(t *testing.T) {
	if *updateChartCRDs {
		writeChartCRDs(t)
	}
	want := byKey(kustomizeBuild(t))
	got := byKey(helmTemplate(t))
	for k, w := range want {
		g, ok := got[k]
		if !ok {
			t.Errorf("the chart does not render %s", k)
			continue
		}
		if !reflect.DeepEqual(g.Object, w.Object) {
			t.Errorf("%s differs (kustomize, then helm):\n%s", k, objDiff(w, g))
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("the chart renders %s, which deploy/ does not have", k)
		}
	}
}

// TestChartLint: helm lint --strict finds nothing to warn of, with the defaults and with every
// switch flipped.
func TestChartLint(t *testing.T) {
	for _, args := range [][]string{nil, {"--set", "monitoring.enabled=true,nodeRestriction.enabled=false,createNamespace=false"},
		{"--set", "apiServer.host=10.0.0.1,controller.hostNetwork=true,controller.listenHost=127.0.0.1,nodeRestriction.webhookURL=https://127.0.0.1:9443/v,controller.extraArgs={--node-grace-period=1m}"}} {
		out, stderr, err := helm(t, append([]string{"lint", "--strict", "charts/tenure"}, args...)...)
		// [INFO] is advice (an icon), not a finding.
		if err != nil || strings.Contains(out, "[WARNING]") || strings.Contains(out, "[ERROR]") {
			t.Errorf("helm lint %v: %v\n%s%s", args, err, out, stderr)
		}
	}
}

// TestChartVersionIsTenures: the chart's version and appVersion are the
// release deploy/ pins its image at.
func TestChartVersionIsTenures(t *testing.T) {
	var chart struct {
		Version    string `json:"version"`
		AppVersion string `json:"appVersion"`
	}
	var kust struct {
		Images []struct {
			Name   string `json:"name"`
			NewTag string `json:"newTag"`
		} `json:"images"`
	}
	for path, into := range map[string]any{filepath.Join(chartDir(), "Chart.yaml"): &chart, filepath.Join(deployDir(), "kustomization.yaml"): &kust} {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := yaml.Unmarshal(b, into); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
	}
	if len(kust.Images) != 1 {
		t.Fatalf("deploy/kustomization.yaml pins %d images, want 1", len(kust.Images))
	}
	tag := kust.Images[0].NewTag
	if chart.AppVersion != tag || "v"+chart.Version != tag {
		t.Fatalf("Chart.yaml version %q, appVersion %q; deploy/ pins %s", chart.Version, chart.AppVersion, tag)
	}
}

// TestChartValues: each value changes what it names and nothing else.
func TestChartValues(t *testing.T) {
	defaults := byKey(helmTemplate(t))
	objs := helmTemplate(t, "--set", "namespace=ipam,image.repository=registry.example.com/tenure,image.digest=sha256:"+strings.Repeat("ab", 32)+
		",controller.replicas=3,metrics.enabled=false,nodeRestriction.enabled=false")
	got := byKey(objs)
	ds := got["apps/v1 DaemonSet ipam/tenure-agent"]
	dep := got["apps/v1 Deployment ipam/tenure-controller"]
	if ds == nil || dep == nil {
		t.Fatalf("with namespace=ipam: %v", slices.Sorted(mapKeys(got)))
	}
	if ns := got["v1 Namespace ipam"]; ns == nil {
		t.Errorf("no Namespace ipam")
	}
	for k, o := range got {
		if strings.Contains(k, "tenure-system") {
			t.Errorf("%s is still in tenure-system", k)
		}
		if o.GetKind() == "ValidatingAdmissionPolicy" || o.GetKind() == "ValidatingWebhookConfiguration" || k == "v1 Service ipam/tenure-controller-metrics" {
			t.Errorf("%s rendered with nodeRestriction and metrics off", k)
		}
		if o.GetKind() == "RoleBinding" || o.GetKind() == "ClusterRoleBinding" {
			subjects, _, _ := unstructured.NestedSlice(o.Object, "subjects")
			for _, s := range subjects {
				if ns := s.(map[string]any)["namespace"]; ns != "ipam" {
					t.Errorf("%s binds a subject in namespace %v", k, ns)
				}
			}
		}
	}
	if r, _, _ := unstructured.NestedInt64(dep.Object, "spec", "replicas"); r != 3 {
		t.Errorf("controller replicas %d, want 3", r)
	}
	for _, o := range []*unstructured.Unstructured{ds, dep} {
		for _, field := range [][]string{{"spec", "template", "spec", "initContainers"}, {"spec", "template", "spec", "containers"}} {
			cs, _, _ := unstructured.NestedSlice(o.Object, field...)
			for _, c := range cs {
				c := c.(map[string]any)
				if img := c["image"]; img != "registry.example.com/tenure@sha256:"+strings.Repeat("ab", 32) {
					t.Errorf("%s container %v image %v", o.GetName(), c["name"], img)
				}
				args, _ := c["args"].([]any)
				for _, a := range args {
					if s := a.(string); strings.HasPrefix(s, "--metrics-addr") && s != "--metrics-addr=0" {
						t.Errorf("%s container %v still serves metrics: %s", o.GetName(), c["name"], s)
					}
				}
				if ports, ok := c["ports"].([]any); ok {
					for _, p := range ports {
						if p.(map[string]any)["name"] == "metrics" {
							t.Errorf("%s container %v still declares the metrics port", o.GetName(), c["name"])
						}
					}
				}
			}
		}
	}

	// The agent's scheduling and resources, the monitoring objects, an
	// existing namespace.
	custom := `
createNamespace: false
agent:
  nodeSelector: {tenure.dev/secondary-networks: "true"}
  tolerations: [{key: dedicated, operator: Equal, value: storage, effect: NoSchedule}]
  resources: {requests: {cpu: 20m, memory: 32Mi}, limits: {memory: 128Mi}}
controller:
  resources: {requests: {cpu: 5m, memory: 16Mi}}
monitoring:
  enabled: true
`
	got = byKey(helmTemplateStdin(t, custom))
	ds = got["apps/v1 DaemonSet tenure-system/tenure-agent"]
	if sel, _, _ := unstructured.NestedStringMap(ds.Object, "spec", "template", "spec", "nodeSelector"); !reflect.DeepEqual(sel, map[string]string{"tenure.dev/secondary-networks": "true"}) {
		t.Errorf("agent nodeSelector %v", sel)
	}
	if tol, _, _ := unstructured.NestedSlice(ds.Object, "spec", "template", "spec", "tolerations"); len(tol) != 1 || tol[0].(map[string]any)["key"] != "dedicated" {
		t.Errorf("agent tolerations %v", tol)
	}
	cs, _, _ := unstructured.NestedSlice(ds.Object, "spec", "template", "spec", "containers")
	if mem, _, _ := unstructured.NestedString(cs[0].(map[string]any), "resources", "limits", "memory"); mem != "128Mi" {
		t.Errorf("agent memory limit %q", mem)
	}
	ics, _, _ := unstructured.NestedSlice(ds.Object, "spec", "template", "spec", "initContainers")
	if mem, _, _ := unstructured.NestedString(ics[0].(map[string]any), "resources", "limits", "memory"); mem != "64Mi" {
		t.Errorf("the init container's resources changed: memory limit %q", mem)
	}
	if _, ok := got["v1 Namespace tenure-system"]; ok {
		t.Errorf("createNamespace=false rendered the Namespace")
	}
	for _, k := range []string{"monitoring.coreos.com/v1 PodMonitor tenure-system/tenure-agent", "monitoring.coreos.com/v1 ServiceMonitor tenure-system/tenure-controller",
		"monitoring.coreos.com/v1 PrometheusRule tenure-system/tenure"} {
		if got[k] == nil {
			t.Errorf("monitoring.enabled did not render %s", k)
		}
	}
	for k, d := range defaults {
		if g := got[k]; g != nil && !strings.Contains(k, "DaemonSet") && !strings.Contains(k, "Deployment") && !reflect.DeepEqual(g.Object, d.Object) {
			t.Errorf("%s changed by values that do not name it:\n%s", k, objDiff(d, g))
		}
	}

	// The node restriction needs a Kubernetes that has the policy API.
	_, stderr, err := helm(t, "template", "tenure", "charts/tenure", "--kube-version", "1.29.4")
	if err == nil || !strings.Contains(stderr, "1.30.0") || !strings.Contains(stderr, "nodeRestriction.enabled") {
		t.Errorf("on Kubernetes 1.29 with the node restriction: %v\n%s", err, stderr)
	}
	if _, stderr, err := helm(t, "template", "tenure", "charts/tenure", "--kube-version", "1.29.4", "--set", "nodeRestriction.enabled=false"); err != nil {
		t.Errorf("on Kubernetes 1.29 without the node restriction: %v\n%s", err, stderr)
	}
}

func helmTemplateStdin(t *testing.T, values string) []*unstructured.Unstructured {
	t.Helper()
	f := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(f, []byte(values), 0o644); err != nil {
		t.Fatal(err)
	}
	return helmTemplate(t, "-f", f)
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// TestChartInstallServerDryRun: `helm install --dry-run=server` of the
// chart on the local control plane succeeds (helm reads the cluster's
// version and API resources), and the API server accepts every object it
// would install in a server-side apply dry run (schema, field validation,
// admission).
func TestChartInstallServerDryRun(t *testing.T) {
	ctx := testContext(t, 2*time.Minute)
	kubeconfig := cptest.Current().KubeconfigPath
	out, stderr, err := helm(t, "install", "tenure", "charts/tenure", "--dry-run=server", "--kubeconfig", kubeconfig, "--namespace", "default")
	if err != nil {
		t.Fatalf("helm install --dry-run=server: %v\n%s\n%s", err, out, stderr)
	}
	if !strings.Contains(out, "kubectl tenure pools") {
		t.Errorf("helm install printed no NOTES naming kubectl tenure pools:\n%s", out)
	}
	objs := helmTemplate(t)
	c := adminClient(t)
	dryRun := func(u *unstructured.Unstructured) {
		t.Helper()
		// A server-side apply, as helm applies: it also refuses what a
		// create lets through (a list entry given twice).
		err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(u.DeepCopy()), client.DryRunAll, client.FieldOwner(fieldManager), client.ForceOwnership)
		if err != nil {
			t.Errorf("server-side apply dry run of %s: %v", objKey(u), err)
		}
	}
	dryRun(find(t, objs, "Namespace", namespace))
	ensureNamespace(t, ctx, c, objs)
	for _, o := range objs {
		if o.GetKind() != "Namespace" {
			dryRun(o)
		}
	}
}

// objDiff shows two versions of an object, the lines that differ marked.
func objDiff(a, b *unstructured.Unstructured) string {
	ya, _ := yaml.Marshal(a.Object)
	yb, _ := yaml.Marshal(b.Object)
	la, lb := strings.Split(string(ya), "\n"), strings.Split(string(yb), "\n")
	var out []string
	for _, l := range la {
		if !slices.Contains(lb, l) {
			out = append(out, "- "+l)
		}
	}
	for _, l := range lb {
		if !slices.Contains(la, l) {
			out = append(out, "+ "+l)
		}
	}
	return strings.Join(out, "\n")
}
