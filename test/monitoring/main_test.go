//go:build integration

package monitoring_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
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
		if _, err := testbed.InstallAgentAccess(ctx, cp.Config); err != nil {
			return err
		}
		if err := controlplane.InstallCRDs(ctx, cp.Config, localnode.MultusCRDs()); err != nil {
			return err
		}
		f, err := os.Create(filepath.Join(cp.Dir, "webhook.log"))
		if err != nil {
			return err
		}
		agentWebhook, err = testbed.StartAgentWebhook(ctx, cp.Config, filepath.Join(cp.Dir, "webhook-probe"),
			slog.New(slog.NewTextHandler(f, &slog.HandlerOptions{Level: slog.LevelDebug})))
		return err
	})
	if agentWebhook != nil {
		agentWebhook.Stop()
	}
	os.Exit(code)
}
