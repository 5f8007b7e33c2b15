//go:build integration

package nodes_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/tenure-ipam/tenure/internal/dev/devnode"
	"github.com/tenure-ipam/tenure/internal/dev/localnode"
	"github.com/tenure-ipam/tenure/internal/dev/nodetest"
)

// nodeNamed is the cluster's node of that name.
func nodeNamed(t *testing.T, name string) *devnode.Node {
	t.Helper()
	for _, n := range cluster.Nodes {
		if n.Name == name {
			return n
		}
	}
	t.Fatalf("no node %q in the cluster", name)
	return nil
}

// podNetns is the path of the pod's network namespace: the one of its
// node's whose eth0 holds the pod IP.
func podNetns(t *testing.T, p *corev1.Pod) string {
	t.Helper()
	return nodetest.PodNetns(t, p, nodeNamed(t, p.Spec.NodeName).NetworkNamespaces())
}

// net1Of reads net1's one address inside the pod, checks it against
// Multus' network-status and the pod's reservation, and returns it.
func net1Of(ctx context.Context, t *testing.T, p *corev1.Pod) string {
	t.Helper()
	inside, _ := nodetest.AddrsIn(t, podNetns(t, p), "net1")
	recorded, err := localnode.AttachmentIPs(p, "net1")
	if err != nil {
		t.Fatal(err)
	}
	if len(inside) != 1 || strings.SplitN(inside[0], "/", 2)[0] != strings.Join(recorded, ",") {
		t.Fatalf("pod %s on %s: net1 holds %v, Multus recorded %v", p.Name, p.Spec.NodeName, inside, recorded)
	}
	addr := strings.SplitN(inside[0], "/", 2)[0]
	var mine []string
	for _, r := range kc.Reservations(ctx, t, p.Namespace) {
		if r.Spec.Owner.UID == string(p.UID) {
			mine = append(mine, r.Spec.Address)
		}
	}
	if !slices.Equal(mine, []string{addr}) {
		t.Errorf("pod %s: reservations %v, want [%s]", p.Name, mine, addr)
	}
	return addr
}
