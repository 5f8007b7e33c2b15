//go:build integration

package deploy_test

import (
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TestServerSideDryRun: the API server accepts every object of the build
// (schema, strict field validation, defaulting, admission), as `kubectl
// apply --dry-run=server -k deploy/` would. Objects that already exist (the
// CRDs this test binary installed, the namespace once created) are dry-run
// as a server-side apply over the live object instead.
func TestServerSideDryRun(t *testing.T) {
	ctx := testContext(t, 2*time.Minute)
	c := adminClient(t)
	objs := kustomizeBuild(t)

	dryRun := func(u *unstructured.Unstructured) {
		t.Helper()
		err := c.Create(ctx, u.DeepCopy(), client.DryRunAll, client.FieldValidation("Strict"), client.FieldOwner(fieldManager))
		how := "create"
		if apierrors.IsAlreadyExists(err) {
			how = "apply over the live object"
			err = c.Apply(ctx, client.ApplyConfigurationFromUnstructured(u.DeepCopy()), client.DryRunAll, client.FieldOwner(fieldManager), client.ForceOwnership)
		}
		if err != nil {
			t.Errorf("server-side dry run (%s) of %s: %v", how, objKey(u), err)
		} else {
			t.Logf("dry run (%s) ok: %s", how, objKey(u))
		}
	}

	// The namespace first, dry-run, then for real: dry runs of namespaced
	// objects need it to exist.
	dryRun(find(t, objs, "Namespace", namespace))
	ensureNamespace(t, ctx, c, objs)
	for _, o := range objs {
		if o.GetKind() != "Namespace" {
			dryRun(o)
		}
	}
}
