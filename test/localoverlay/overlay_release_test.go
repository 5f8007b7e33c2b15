package localoverlay

import (
	"os"
	"path/filepath"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// TestTheOverlayBuildsOverTheReleaseBeforeTheShapeWebhook: the release the
// chart upgrades (test/chartupgrade's) has one webhook in its
// configuration; the overlay, which points both of this tree's at the
// loopback (on one node) or at the Service (on a cluster of nodes), still
// builds over it and points that one there.
func TestTheOverlayBuildsOverTheReleaseBeforeTheShapeWebhook(t *testing.T) {
	release, err := os.ReadFile(filepath.Join("..", "chartupgrade", "testdata", "previous-release", "templates", "deploy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, cluster := range []bool{false, true} {
		objs, err := OverlayRelease(release, "10.99.0.1", 6443, cluster)
		if err != nil {
			t.Fatal(err)
		}
		webhookOf(t, objs, cluster)
	}
}

func webhookOf(t *testing.T, objs []*unstructured.Unstructured, cluster bool) {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() != "ValidatingWebhookConfiguration" || o.GetName() != "tenure-agent-node-restriction" {
			continue
		}
		webhooks, _ := o.Object["webhooks"].([]any)
		if len(webhooks) != 1 {
			t.Fatalf("webhooks %v, want the release's one", webhooks)
		}
		cc, _ := webhooks[0].(map[string]any)["clientConfig"].(map[string]any)
		if cluster {
			if svc, _ := cc["service"].(map[string]any); svc["name"] != "tenure-controller-webhook" || cc["url"] != nil {
				t.Fatalf("cluster: clientConfig %v, want the Service tenure-controller-webhook", cc)
			}
		} else if cc["url"] != "https://127.0.0.1:9443/validate-agent" || cc["service"] != nil {
			t.Fatalf("one node: clientConfig %v, want the loopback URL alone", cc)
		}
		return
	}
	t.Fatal("no ValidatingWebhookConfiguration tenure-agent-node-restriction in the overlay's objects")
}
