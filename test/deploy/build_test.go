//go:build integration

package deploy_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"os/exec"
	"reflect"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/tenure-ipam/tenure/deploy"
)

// TestKustomizeBuild: deploy/ builds, with the kustomize library and with
// `kubectl kustomize` (what users run), to the same objects, and holds what
// a cluster needs.
func TestKustomizeBuild(t *testing.T) {
	objs := kustomizeBuild(t)
	keys := map[string]bool{}
	for _, o := range objs {
		k := objKey(o)
		if keys[k] {
			t.Errorf("%s appears twice", k)
		}
		keys[k] = true
		t.Logf("built %s", k)
	}
	for _, want := range []struct{ kind, name string }{
		{"Namespace", namespace},
		{"CustomResourceDefinition", "ipreservations.ipam.tenure.dev"},
		{"CustomResourceDefinition", "ippools.ipam.tenure.dev"},
		{"CustomResourceDefinition", "ipprobes.ipam.tenure.dev"},
		{"CustomResourceDefinition", "ipamclaims.k8s.cni.cncf.io"},
		{"ServiceAccount", agentSA},
		{"ClusterRole", agentSA},
		{"ClusterRoleBinding", agentSA},
		{"ServiceAccount", controllerSA},
		{"ClusterRole", controllerSA},
		{"ClusterRoleBinding", controllerSA},
		{"Role", "tenure-controller-leader-election"},
		{"RoleBinding", "tenure-controller-leader-election"},
		{"Role", "tenure-controller-webhook-tls"},
		{"RoleBinding", "tenure-controller-webhook-tls"},
		{"DaemonSet", "tenure-agent"},
		{"Deployment", "tenure-controller"},
		{"ValidatingAdmissionPolicy", "tenure-agent-node-restriction"},
		{"ValidatingAdmissionPolicyBinding", "tenure-agent-node-restriction"},
		{"ValidatingAdmissionPolicy", "tenure-controller-confinement"},
		{"ValidatingAdmissionPolicyBinding", "tenure-controller-confinement"},
		{"ValidatingAdmissionPolicy", "tenure-claim-writers"},
		{"ValidatingAdmissionPolicyBinding", "tenure-claim-writers"},
		{"ValidatingAdmissionPolicy", "tenure-node-pod-networks"},
		{"ValidatingAdmissionPolicyBinding", "tenure-node-pod-networks"},
		{"ValidatingWebhookConfiguration", "tenure-agent-node-restriction"},
		{"Service", "tenure-controller-webhook"},
	} {
		find(t, objs, want.kind, want.name)
	}

	// Every namespaced object lands in tenure-system.
	for _, o := range objs {
		switch o.GetKind() {
		case "Namespace", "CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding",
			"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding", "ValidatingWebhookConfiguration":
			if o.GetNamespace() != "" {
				t.Errorf("cluster-scoped %s has namespace %q", objKey(o), o.GetNamespace())
			}
		default:
			if o.GetNamespace() != namespace {
				t.Errorf("%s is not in %s", objKey(o), namespace)
			}
		}
	}

	// The CRDs shipped are exactly the generated ones (what deploy.CRDs
	// embeds and the tests install).
	generated := map[string]map[string]any{}
	err := fs.WalkDir(deploy.CRDs, "crds", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := deploy.CRDs.ReadFile(p)
		if err != nil {
			return err
		}
		docs, err := decodeYAML(data)
		for _, d := range docs {
			generated[d.GetName()] = d.Object
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	crds := ofKind(objs, "CustomResourceDefinition")
	if len(crds) != len(generated) {
		t.Errorf("build has %d CRDs, deploy/crds %d", len(crds), len(generated))
	}
	for _, c := range crds {
		g, ok := generated[c.GetName()]
		if !ok {
			t.Errorf("CRD %s is not one of deploy/crds", c.GetName())
			continue
		}
		// The build adds tenure's part-of label; the rest is untouched.
		built := c.DeepCopy()
		unstructured.RemoveNestedField(built.Object, "metadata", "labels")
		if !reflect.DeepEqual(normalize(t, built.Object), normalize(t, g)) {
			t.Errorf("CRD %s in the build differs from deploy/crds", c.GetName())
		}
	}

	t.Run("kubectl kustomize", func(t *testing.T) {
		kubectl, err := exec.LookPath("kubectl")
		if err != nil {
			t.Log("kubectl is not on PATH: `kubectl kustomize deploy/` not checked")
			return
		}
		if v, err := exec.Command(kubectl, "version", "--client").CombinedOutput(); err == nil {
			t.Logf("%s", bytes.TrimSpace(v))
		}
		cmd := exec.Command(kubectl, "kustomize", deployDir())
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("kubectl kustomize deploy/: %v\n%s", err, stderr.Bytes())
		}
		kobjs, err := decodeYAML(out)
		if err != nil {
			t.Fatal(err)
		}
		byKey := func(list []*unstructured.Unstructured) map[string]any {
			m := map[string]any{}
			for _, o := range list {
				m[objKey(o)] = normalize(t, o.Object)
			}
			return m
		}
		lib, kc := byKey(objs), byKey(kobjs)
		for k, v := range lib {
			kv, ok := kc[k]
			switch {
			case !ok:
				t.Errorf("kubectl kustomize lacks %s", k)
			case !reflect.DeepEqual(v, kv):
				a, _ := json.MarshalIndent(v, "", "  ")
				b, _ := json.MarshalIndent(kv, "", "  ")
				t.Errorf("%s differs between the kustomize library and kubectl kustomize:\nlibrary: %s\nkubectl: %s", k, a, b)
			}
		}
		for k := range kc {
			if _, ok := lib[k]; !ok {
				t.Errorf("kubectl kustomize has %s, the library does not", k)
			}
		}
	})
}

// decodeYAML splits a multi-document YAML stream into objects, with the
// number types the API machinery expects (int64, float64).
func decodeYAML(data []byte) ([]*unstructured.Unstructured, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var out []*unstructured.Unstructured
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		j, err := yaml.YAMLToJSON(doc)
		if err != nil {
			return nil, err
		}
		if t := bytes.TrimSpace(j); len(t) == 0 || string(t) == "null" {
			continue
		}
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(j); err != nil {
			return nil, err
		}
		out = append(out, u)
	}
}

// normalize round-trips v through JSON so numbers and nil collections
// compare alike whichever decoder produced them.
func normalize(t *testing.T, v any) any {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}
