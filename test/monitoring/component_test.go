package monitoring_test

import (
	"os"
	"path/filepath"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// buildOverlay builds a kustomization of deploy/ with the monitoring
// component, as an operator's overlay lists them.
func buildOverlay(t *testing.T) []*unstructured.Unstructured {
	t.Helper()
	deploy, err := filepath.Abs(filepath.Join(monitoringDir(t), "..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	// The overlay sits in deploy/'s parent's tree so that kustomize's
	// load restrictions (nothing outside the kustomization's root) hold.
	dir, err := os.MkdirTemp(filepath.Dir(deploy), ".monitoring-overlay-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	k := "resources:\n- ../deploy\ncomponents:\n- ../deploy/components/monitoring\n"
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k), 0o644); err != nil {
		t.Fatal(err)
	}
	opts := krusty.MakeDefaultOptions()
	rm, err := krusty.MakeKustomizer(opts).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []*unstructured.Unstructured
	for _, r := range rm.Resources() {
		b, err := r.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(b); err != nil {
			t.Fatal(err)
		}
		out = append(out, u)
	}
	return out
}

func find(objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			return o
		}
	}
	return nil
}

func selector(t *testing.T, o *unstructured.Unstructured) labels.Selector {
	t.Helper()
	m, _, _ := unstructured.NestedStringMap(o.Object, "spec", "selector", "matchLabels")
	if len(m) == 0 {
		t.Fatalf("%s %s selects nothing", o.GetKind(), o.GetName())
	}
	return labels.SelectorFromSet(m)
}

// TestMonitoringComponentScrapesAgentsAndController: with the component,
// the PodMonitor selects exactly the agent DaemonSet's pods on a port they
// declare, the ServiceMonitor exactly the controller's metrics Service on
// its port, both name their job by a label whose value is the job the
// alerts read, and the PrometheusRule is installed beside them.
func TestMonitoringComponentScrapesAgentsAndController(t *testing.T) {
	objs := buildOverlay(t)
	pm := find(objs, "PodMonitor", "tenure-agent")
	sm := find(objs, "ServiceMonitor", "tenure-controller")
	pr := find(objs, "PrometheusRule", "tenure")
	if pm == nil || sm == nil || pr == nil {
		t.Fatalf("PodMonitor %v, ServiceMonitor %v, PrometheusRule %v", pm != nil, sm != nil, pr != nil)
	}
	for _, o := range []*unstructured.Unstructured{pm, sm, pr} {
		if o.GetNamespace() != "tenure-system" {
			t.Errorf("%s %s in namespace %q", o.GetKind(), o.GetName(), o.GetNamespace())
		}
	}

	jobOf := func(o *unstructured.Unstructured, podOrServiceLabels map[string]string) string {
		jl, _, _ := unstructured.NestedString(o.Object, "spec", "jobLabel")
		return podOrServiceLabels[jl]
	}
	var pods []string
	for _, o := range objs {
		tl, _, _ := unstructured.NestedStringMap(o.Object, "spec", "template", "metadata", "labels")
		if tl == nil || !selector(t, pm).Matches(labels.Set(tl)) {
			continue
		}
		pods = append(pods, o.GetKind()+"/"+o.GetName())
		if job := jobOf(pm, tl); job != "tenure-agent" {
			t.Errorf("PodMonitor names the job of %s %q, want tenure-agent", o.GetName(), job)
		}
		eps, _, _ := unstructured.NestedSlice(pm.Object, "spec", "podMetricsEndpoints")
		port := eps[0].(map[string]any)["port"]
		cs, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
		declared := false
		for _, c := range cs {
			ports, _, _ := unstructured.NestedSlice(c.(map[string]any), "ports")
			for _, p := range ports {
				declared = declared || p.(map[string]any)["name"] == port
			}
		}
		if !declared {
			t.Errorf("PodMonitor scrapes port %v, which %s does not declare", port, o.GetName())
		}
	}
	if len(pods) != 1 || pods[0] != "DaemonSet/tenure-agent" {
		t.Errorf("PodMonitor selects the pods of %v, want DaemonSet/tenure-agent", pods)
	}

	var services []string
	for _, o := range objs {
		if o.GetKind() != "Service" || !selector(t, sm).Matches(labels.Set(o.GetLabels())) {
			continue
		}
		services = append(services, o.GetName())
		if job := jobOf(sm, o.GetLabels()); job != "tenure-controller" {
			t.Errorf("ServiceMonitor names the job of %s %q, want tenure-controller", o.GetName(), job)
		}
		eps, _, _ := unstructured.NestedSlice(sm.Object, "spec", "endpoints")
		port := eps[0].(map[string]any)["port"]
		ports, _, _ := unstructured.NestedSlice(o.Object, "spec", "ports")
		declared := false
		for _, p := range ports {
			declared = declared || p.(map[string]any)["name"] == port
		}
		if !declared {
			t.Errorf("ServiceMonitor scrapes port %v, which Service %s does not have", port, o.GetName())
		}
	}
	if len(services) != 1 || services[0] != "tenure-controller-metrics" {
		t.Errorf("ServiceMonitor selects Services %v, want tenure-controller-metrics", services)
	}
}
