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
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/tenure-ipam/tenure/dev/devnode"
	"github.com/tenure-ipam/tenure/dev/localnode"
	"github.com/tenure-ipam/tenure/dev/nodetest"
	"github.com/tenure-ipam/tenure/test/controlplane"
)

var (
	cp      *controlplane.ControlPlane
	cluster *devnode.Cluster
	cl      client.WithWatch
	cs      kubernetes.Interface
	kc      = &nodetest.Kube{}
)

func TestMain(m *testing.M) {
	ctrllog.SetLogger(logr.Discard())
	os.Exit(nodetest.Suite{Name: "test/nodes", SetUp: setUp}.Run(m))
}

func setUp(ctx context.Context, undo *nodetest.Undo) (err error) {
	binDir, err := nodetest.BinDir()
	if err != nil {
		return err
	}
	// Short: containerd's sockets live under it.
	dir, err := os.MkdirTemp("", "tns-")
	if err != nil {
		return err
	}
	undo.Push(func() error { return os.RemoveAll(dir) })
	clusterDir := filepath.Join(dir, "cluster")

	begin := time.Now()
	cp, err = controlplane.Start(ctx, controlplane.Options{Controllers: true, Nodes: localnode.NodeAccess(clusterDir)})
	if err != nil {
		return err
	}
	undo.Push(cp.Stop)
	cpReady := time.Since(begin)
	cluster, err = localnode.StartCluster(ctx, cp, localnode.ClusterOptions{
		Dir: clusterDir, Nodes: 3, Image: filepath.Join(binDir, "tenure-image.tar"),
		ProxyCommand: []string{filepath.Join(binDir, "tenurectl"), "dev", "fabric-proxy"},
		Install:      localnode.InstallNone, // installPreviousRelease, below
	})
	if err != nil {
		return err
	}
	undo.Push(nodetest.Checked("cluster", cluster.Stop, func() ([]string, error) { return devnode.ClusterLeftovers(clusterDir) }))
	if err := kc.Connect(cp.Config); err != nil {
		return err
	}
	cl, cs = kc.Client, kc.Clientset
	if err := installPreviousRelease(ctx, dir); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "test/nodes: control plane ready in %v, 3 nodes Ready and tenure rolled out at %v\n",
		cpReady.Round(time.Millisecond), time.Since(begin).Round(time.Millisecond))
	return nil
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
		{"AFreedAddressCoolsDownAndTheNextPodGetsAnother", aFreedAddressCoolsDown},
		{"ASquatterOnTheSANIsNeverHandedOutAndTheEventsMetricsAndCheckNameIt", squatterOnTheSAN},
		{"NodeOnesAgentIsRefusedNodeTwosReservationsAndClaims", nodeOnesAgentIsRefusedNodeTwosObjects},
		{"RollingTheAgentAcrossNodesWhilePodsStart", rollingTheAgentAcrossNodes},
		{"VMMigratesBetweenTwoNodesWithItsAddressesPrefixAndDHCPv6", vmMigratesBetweenTwoNodes},
		{"MirrorPodAndKubeletRewriteOnNodeOneChangeNothingOfNodeTwosVM", mirrorPodAndKubeletRewriteOnNodeOne},
		{"RackPoolsGiveEachNodeItsRacksSubnetAndAVMKeepsItsAddressesAcrossRacks", rackPoolsGiveEachNodeItsRacksSubnet},
		{"PartitionedNodeKeepsItsAddressesUntilFencedAndNoAddressAnswersTwice", partitionedNodeKeepsItsAddresses},
		{"GracePeriodKeepsAPartitionedNodesAddressesWhileTheyAnswer", gracePeriodKeepsAPartitionedNodesAddressesWhileTheyAnswer},
		{"RealVMMigratesBetweenTwoNodesWithItsAddressPrefixAndRoute", realVMMigratesBetweenTwoNodes},
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
