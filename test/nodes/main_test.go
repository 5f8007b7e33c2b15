//go:build integration

// Package nodes_test runs tenure as its users do on three real nodes of
// this machine (devnode.Cluster): each node's kubelet and containerd in
// namespaces of their own, joined by a fabric and a SAN bridge. The
// promises that span nodes are checked here on real kubelets: addresses
// across nodes, a VM migrating between two nodes with its DHCPv6 service
// and prefix route, and a node lost hard.
//
// tenure is installed with Helm: the release before the chart first
// (helm_test.go), which TestThreeNodes' first part upgrades to
// charts/tenure while pods run; every other part runs on the chart.
// (test/node installs deploy/ with kustomize through the local overlay, so
// each CI run runs both installs on real nodes.)
//
// One cluster serves the suite, and TestThreeNodes runs its parts in a
// fixed order (the node loss last: it takes a node away for a while).
package nodes_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/tenure-ipam/tenure/internal/dev/controlplane"
	"github.com/tenure-ipam/tenure/internal/dev/devnode"
	"github.com/tenure-ipam/tenure/internal/dev/localnode"
	"github.com/tenure-ipam/tenure/internal/kube"
)

var (
	cp      *controlplane.ControlPlane
	cluster *devnode.Cluster
	cl      client.WithWatch
	cs      kubernetes.Interface
)

// controllerNodeGrace is the tenure controller's --node-grace-period here.
const controllerNodeGrace = 5 * time.Second

func TestMain(m *testing.M) {
	ctrllog.SetLogger(logr.Discard())
	os.Exit(run(m))
}

func run(m *testing.M) int {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	teardown, err := setUp(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, "test/nodes: setting up the cluster:", err)
		if teardown != nil {
			_ = teardown()
		}
		return 1
	}
	code := m.Run()
	if err := teardown(); err != nil {
		fmt.Fprintln(os.Stderr, "test/nodes: tearing down:", err)
		return 1
	}
	return code
}

func setUp(ctx context.Context) (teardown func() error, err error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("needs root (containerd, the kubelet, namespaces)")
	}
	binDir := os.Getenv("TENURE_BIN_DIR")
	if binDir == "" {
		binDir = filepath.Join("..", "..", "bin")
	}
	if binDir, err = filepath.Abs(binDir); err != nil {
		return nil, err
	}
	var undo []func() error
	teardown = func() error {
		var errs []error
		for i := len(undo) - 1; i >= 0; i-- {
			errs = append(errs, undo[i]())
		}
		return errors.Join(errs...)
	}
	defer func() {
		if err != nil {
			_ = teardown()
			teardown = nil
		}
	}()
	// Short: containerd's sockets live under it.
	dir, err := os.MkdirTemp("", "tns-")
	if err != nil {
		return teardown, err
	}
	undo = append(undo, func() error { return os.RemoveAll(dir) })
	clusterDir := filepath.Join(dir, "cluster")

	begin := time.Now()
	cp, err = controlplane.Start(ctx, controlplane.Options{Controllers: true, Nodes: localnode.NodeAccess(clusterDir)})
	if err != nil {
		return teardown, err
	}
	undo = append(undo, cp.Stop)
	cpReady := time.Since(begin)
	cluster, err = localnode.StartCluster(ctx, cp, localnode.ClusterOptions{
		Dir: clusterDir, Nodes: 3, Image: filepath.Join(binDir, "tenure-image.tar"),
		ProxyCommand: []string{filepath.Join(binDir, "tenurectl"), "dev", "fabric-proxy"},
		Install:      localnode.InstallNone, // installPreviousRelease, below
	})
	if err != nil {
		return teardown, err
	}
	undo = append(undo, func() error {
		if err := cluster.Stop(); err != nil {
			return err
		}
		left, err := devnode.ClusterLeftovers(clusterDir)
		if err == nil && len(left) > 0 {
			err = fmt.Errorf("the cluster left behind: %s", strings.Join(left, "; "))
		}
		return err
	})
	if cl, err = kube.NewClient(cp.Config); err != nil {
		return teardown, err
	}
	cs = kubernetes.NewForConfigOrDie(cp.Config)
	if err := installPreviousRelease(ctx, dir); err != nil {
		return teardown, err
	}
	fmt.Fprintf(os.Stderr, "test/nodes: control plane ready in %v, 3 nodes Ready and tenure rolled out at %v\n",
		cpReady.Round(time.Millisecond), time.Since(begin).Round(time.Millisecond))
	return teardown, nil
}

// TestThreeNodes runs the suite's parts in this order, each on the
// cluster as the one before left it.
func TestThreeNodes(t *testing.T) {
	for _, part := range []struct {
		name string
		run  func(*testing.T)
	}{
		{helmUpgradePart, helmUpgradeWhilePodsRun},
		{"DaemonSetReadyOnEveryNodeAndControllerHoldsLease", daemonSetReadyOnEveryNode},
		{"Slash29SANAcrossNodesFillsUpAndTheWaitingPodStartsWhenOneLeaves", slash29SANAcrossNodes},
		{"NodeOnesAgentIsRefusedNodeTwosReservationsAndClaims", nodeOnesAgentIsRefusedNodeTwosObjects},
		{"RollingTheAgentAcrossNodesWhilePodsStart", rollingTheAgentAcrossNodes},
		{"VMMigratesBetweenTwoNodesWithItsAddressesPrefixAndDHCPv6", vmMigratesBetweenTwoNodes},
		// Last: it takes a node away.
		{"LostNodeOfThreeIsEvictedReleasedAndRescheduled", lostNodeOfThree},
	} {
		t.Run(part.name, func(t *testing.T) {
			if part.name != helmUpgradePart {
				chartInstalled(t)
			}
			part.run(t)
		})
	}
}
