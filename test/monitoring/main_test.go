//go:build integration

package monitoring_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/tenure-ipam/tenure/internal/dev/controlplane"
	"github.com/tenure-ipam/tenure/internal/dev/controlplane/cptest"
	"github.com/tenure-ipam/tenure/internal/dev/localnode"
	"github.com/tenure-ipam/tenure/internal/dev/testbed"
)

var bins testbed.Binaries

var agentWebhook *testbed.AgentWebhook

// TestMain starts the local control plane as test/e2e does: agents under
// deploy/rbac with pod-bound tokens and the node restriction in force, and
// Multus' NetworkAttachmentDefinition CRD, whose configurations the
// controller's range metrics read.
func TestMain(m *testing.M) {
	var err error
	if bins, err = testbed.Build(""); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := cptest.Main(m, func(cp *controlplane.ControlPlane) error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := controlplane.InstallCRDs(ctx, cp.Config, localnode.MultusCRDs()); err != nil {
			return err
		}
		var err error
		agentWebhook, err = testbed.StartNodeRestriction(ctx, cp.Config, cp.Dir)
		return err
	})
	if agentWebhook != nil {
		agentWebhook.Stop()
	}
	os.Exit(code)
}
