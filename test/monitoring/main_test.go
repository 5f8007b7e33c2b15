//go:build integration

package monitoring_test

import (
	"context"
	"os"
	"testing"

	"github.com/tenure-ipam/tenure/test/controlplane"
	"github.com/tenure-ipam/tenure/test/testbed"
)

var bins testbed.Binaries

var agentWebhook *testbed.AgentWebhook

// TestMain starts the local control plane as test/e2e does: agents under
// deploy/rbac with pod-bound tokens and the node restriction in force, and
// Multus' NetworkAttachmentDefinition CRD, whose configurations the
// controller's range metrics read.
func TestMain(m *testing.M) {
	os.Exit(testbed.Main(m, &bins, &agentWebhook, func(ctx context.Context, cp *controlplane.ControlPlane) error {
		return controlplane.InstallCRDs(ctx, cp.Config, controlplane.MultusCRDs())
	}))
}
