//go:build integration

package deploy_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/tenure-ipam/tenure/test/localoverlay"
)

// TestChartLocalNodeValuesAreTheOverlay: the chart with
// localoverlay.ChartValues renders, object by object, what the overlay
// test/localoverlay makes of deploy/, on one node and on a cluster of
// nodes: every change the overlay makes is one of the chart's values. The
// one difference allowed is the form of the API server's address: the
// overlay's generated ConfigMap read through envFrom, the chart's env.
func TestChartLocalNodeValuesAreTheOverlay(t *testing.T) {
	const host, port = "10.99.0.1", 6443
	var built []byte
	for _, o := range kustomizeBuild(t) {
		b, err := yaml.Marshal(o.Object)
		if err != nil {
			t.Fatal(err)
		}
		built = append(append(built, "---\n"...), b...)
	}
	for _, cluster := range []bool{false, true} {
		t.Run(map[bool]string{false: "OneNode", true: "Cluster"}[cluster], func(t *testing.T) {
			overlay, err := localoverlay.OverlayRelease(built, host, port, cluster)
			if err != nil {
				t.Fatal(err)
			}
			values, err := json.Marshal(localoverlay.ChartValues(host, port, cluster))
			if err != nil {
				t.Fatal(err)
			}
			file := filepath.Join(t.TempDir(), "values.yaml")
			if err := os.WriteFile(file, values, 0o644); err != nil {
				t.Fatal(err)
			}
			want := map[string]*unstructured.Unstructured{}
			for _, o := range overlay {
				if o.GetKind() == "ConfigMap" && strings.HasPrefix(o.GetName(), "tenure-local-apiserver-") {
					continue
				}
				apiServerAsEnv(t, o, host, port)
				want[objKey(o)] = o
			}
			got := byKey(helmTemplate(t, "--values", file))
			for k, w := range want {
				g, ok := got[k]
				if !ok {
					t.Errorf("the chart does not render %s", k)
					continue
				}
				if !reflect.DeepEqual(asJSON(t, g), asJSON(t, w)) {
					t.Errorf("%s differs (the overlay, then the chart):\n%s", k, objDiff(w, g))
				}
			}
			for k := range got {
				if _, ok := want[k]; !ok {
					t.Errorf("the chart renders %s, which the overlay does not", k)
				}
			}
		})
	}
}

// apiServerAsEnv replaces the overlay's envFrom of its API server
// ConfigMap with the variables it holds, as the chart sets them.
func apiServerAsEnv(t *testing.T, o *unstructured.Unstructured, host string, port int) {
	t.Helper()
	if o.GetKind() != "DaemonSet" && o.GetKind() != "Deployment" {
		return
	}
	containers, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
	for _, c := range containers {
		c := c.(map[string]any)
		from, _ := c["envFrom"].([]any)
		if len(from) != 1 {
			t.Fatalf("%s's container %s: envFrom %v, want the overlay's ConfigMap", o.GetName(), c["name"], from)
		}
		delete(c, "envFrom")
		env, _ := c["env"].([]any)
		c["env"] = append(env,
			map[string]any{"name": "KUBERNETES_SERVICE_HOST", "value": host},
			map[string]any{"name": "KUBERNETES_SERVICE_PORT", "value": strconv.Itoa(port)})
	}
	if err := unstructured.SetNestedSlice(o.Object, containers, "spec", "template", "spec", "containers"); err != nil {
		t.Fatal(err)
	}
}

// asJSON is o's content as encoding/json decodes it, so that numbers
// compare whichever decoder read them.
func asJSON(t *testing.T, o *unstructured.Unstructured) any {
	t.Helper()
	b, err := json.Marshal(o.Object)
	if err != nil {
		t.Fatal(err)
	}
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	return v
}

// TestChartRefusesBadWebhookURL: a nodeRestriction.webhookURL the
// controller cannot serve (not https, no port, a host that is no IP
// address) or with the restriction off is refused, naming the value.
func TestChartRefusesBadWebhookURL(t *testing.T) {
	for _, set := range []string{
		"nodeRestriction.webhookURL=http://127.0.0.1:9443/v",
		"nodeRestriction.webhookURL=https://127.0.0.1/v",
		"nodeRestriction.webhookURL=https://webhook.example:9443/v",
		"nodeRestriction.webhookURL=https://127.0.0.1:9443/v,nodeRestriction.enabled=false",
	} {
		url := strings.SplitN(strings.TrimPrefix(set, "nodeRestriction.webhookURL="), ",", 2)[0]
		_, stderr, err := helm(t, "template", "tenure", "charts/tenure", "--kube-version", "1.37.2", "--set", set)
		if err == nil || !strings.Contains(stderr, "nodeRestriction.webhookURL \""+url+"\"") {
			t.Errorf("helm template --set %s: %v, want a refusal naming the value\n%s", set, err, stderr)
		}
	}
}
