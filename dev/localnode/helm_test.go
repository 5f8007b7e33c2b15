package localnode

import (
	"context"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// Start and StartCluster refuse an install they do not know, and Mutate
// with any install but the overlay's, naming the value, before they touch
// the control plane or the host.
func TestStartRefusesUnknownInstallAndMutateWithoutTheOverlay(t *testing.T) {
	mutate := func(*unstructured.Unstructured) {}
	for _, c := range []struct {
		install string
		mutate  func(*unstructured.Unstructured)
		want    string
	}{
		{"apply", nil, `install "apply": want one of kustomize, helm, none`},
		{InstallHelm, mutate, `install "helm": Mutate changes the overlay's objects only`},
		{InstallNone, mutate, `install "none": Mutate changes the overlay's objects only`},
	} {
		_, err := Start(context.Background(), nil, Options{Install: c.install, Mutate: c.mutate, Image: "/nonexistent"})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Start with install %q: %v, want %q", c.install, err, c.want)
		}
		_, err = StartCluster(context.Background(), nil, ClusterOptions{Install: c.install, Mutate: c.mutate, Image: "/nonexistent"})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("StartCluster with install %q: %v, want %q", c.install, err, c.want)
		}
	}
	for _, ok := range []string{"", InstallKustomize} {
		if err := checkInstallOptions(ok, mutate); err != nil {
			t.Errorf("install %q with Mutate: %v", ok, err)
		}
	}
}
