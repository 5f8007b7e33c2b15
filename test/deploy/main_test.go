//go:build integration

// Package deploy_test checks what `kubectl apply -k deploy/` installs: the
// kustomize build, a server-side dry run of every object against a real
// kube-apiserver, the security properties of the workloads and their RBAC
// (asked of the API server's own authorizer), the agent's init container
// and probes run as written in the DaemonSet with the agent holding only its
// ClusterRole, and the examples in deploy/examples.
package deploy_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/tenure-ipam/tenure/internal/kube"
	"github.com/tenure-ipam/tenure/test/controlplane"
	"github.com/tenure-ipam/tenure/test/controlplane/cptest"
)

const (
	namespace      = "tenure-system"
	agentSA        = "tenure-agent"
	controllerSA   = "tenure-controller"
	fieldManager   = "tenure-deploy-test"
	flatConfigName = "tenure-flat-config" // before kustomize's hash suffix
	flatConfigKey  = "tenure.conf"
)

func TestMain(m *testing.M) {
	ctrllog.SetLogger(logr.Discard())
	os.Exit(cptest.Main(m, func(cp *controlplane.ControlPlane) error {
		// Multus' CRD, for the dry run of the example attachments.
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		return controlplane.InstallCRDs(ctx, cp.Config, controlplane.MultusCRDs())
	}))
}

// repoRoot is the module root, from this file's location.
func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

func deployDir() string { return filepath.Join(repoRoot(), "deploy") }

var (
	buildOnce sync.Once
	buildObjs []*unstructured.Unstructured
	buildErr  error
)

// kustomizeBuild builds deploy/ with the kustomize library (krusty), once.
// Every test gets its own deep copies.
func kustomizeBuild(t *testing.T) []*unstructured.Unstructured {
	t.Helper()
	buildOnce.Do(func() {
		k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
		rm, err := k.Run(filesys.MakeFsOnDisk(), deployDir())
		if err != nil {
			buildErr = fmt.Errorf("kustomize build deploy/: %w", err)
			return
		}
		out, err := rm.AsYaml()
		if err != nil {
			buildErr = err
			return
		}
		buildObjs, buildErr = decodeYAML(out)
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	out := make([]*unstructured.Unstructured, len(buildObjs))
	for i, o := range buildObjs {
		out[i] = o.DeepCopy()
	}
	return out
}

func objKey(u *unstructured.Unstructured) string {
	s := u.GetAPIVersion() + " " + u.GetKind() + " "
	if ns := u.GetNamespace(); ns != "" {
		s += ns + "/"
	}
	return s + u.GetName()
}

// find returns the one object of kind named name ("" for any name), or
// fails the test.
func find(t *testing.T, objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	t.Helper()
	var found []*unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() == kind && (name == "" || o.GetName() == name) {
			found = append(found, o)
		}
	}
	if len(found) != 1 {
		t.Fatalf("want exactly one %s %q in the build, found %d", kind, name, len(found))
	}
	return found[0]
}

func ofKind(objs []*unstructured.Unstructured, kinds ...string) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, o := range objs {
		for _, k := range kinds {
			if o.GetKind() == k {
				out = append(out, o)
			}
		}
	}
	return out
}

// typed converts u into T, refusing fields T does not have.
func typed[T any](t *testing.T, u *unstructured.Unstructured) *T {
	t.Helper()
	v := new(T)
	if err := k8sruntime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(u.Object, v, true); err != nil {
		t.Fatalf("%s: %v", objKey(u), err)
	}
	return v
}

// flatConfig returns the ConfigMap the init container installs as the flat
// configuration file, and its content.
func flatConfig(t *testing.T, objs []*unstructured.Unstructured) (*unstructured.Unstructured, []byte) {
	t.Helper()
	var cm *unstructured.Unstructured
	for _, o := range ofKind(objs, "ConfigMap") {
		if strings.HasPrefix(o.GetName(), flatConfigName+"-") || o.GetName() == flatConfigName {
			if cm != nil {
				t.Fatalf("two flat config ConfigMaps: %s, %s", cm.GetName(), o.GetName())
			}
			cm = o
		}
	}
	if cm == nil {
		t.Fatalf("no ConfigMap %s in the build", flatConfigName)
	}
	data, ok, _ := unstructured.NestedString(cm.Object, "data", flatConfigKey)
	if !ok {
		t.Fatalf("ConfigMap %s has no key %s", cm.GetName(), flatConfigKey)
	}
	return cm, []byte(data)
}

func testContext(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func adminClient(t *testing.T) client.WithWatch {
	t.Helper()
	c, err := kube.NewClient(cptest.Config())
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// ensureNamespace really creates the build's tenure-system namespace:
// namespaced objects cannot be dry-run into a namespace that does not exist.
func ensureNamespace(t *testing.T, ctx context.Context, c client.Client, objs []*unstructured.Unstructured) {
	t.Helper()
	ns := find(t, objs, "Namespace", namespace).DeepCopy()
	if err := c.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("creating namespace %s: %v", namespace, err)
	}
}

// applyRBAC really applies the build's service accounts, roles and bindings
// (server-side apply), so the API server's authorizer can be asked about
// them and processes can run with them.
func applyRBAC(t *testing.T, ctx context.Context, c client.Client, objs []*unstructured.Unstructured) {
	t.Helper()
	ensureNamespace(t, ctx, c, objs)
	for _, o := range ofKind(objs, "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding") {
		if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(o.DeepCopy()), client.FieldOwner(fieldManager), client.ForceOwnership); err != nil {
			t.Fatalf("applying %s: %v", objKey(o), err)
		}
	}
}

// serviceAccountUser is the user name and groups a pod running as the
// service account authenticates as.
func serviceAccountUser(name string) (string, []string) {
	return "system:serviceaccount:" + namespace + ":" + name,
		[]string{"system:serviceaccounts", "system:serviceaccounts:" + namespace, "system:authenticated"}
}
