//go:build integration

package nodes_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/tenure-ipam/tenure/dev/devnode"
	"github.com/tenure-ipam/tenure/dev/localnode"
	"github.com/tenure-ipam/tenure/dev/nodetest"
)

// aFreedAddressCoolsDown: on a range with free addresses, a pod deleted
// and, once its address is released, another created on the same node:
// the new pod gets another address (the released one cools down), though
// the released one is the lowest free and would otherwise go first.
func aFreedAddressCoolsDown(t *testing.T) {
	ctx := nodetest.Context(t, 4*time.Minute)
	ns := kc.Namespace(ctx, t, "cool3")
	const network = "cool-san"
	kc.NAD(ctx, t, ns, network, `{
		"cniVersion": "1.0.0", "name": "`+network+`", "type": "macvlan", "master": "`+devnode.SANLink+`", "mode": "bridge",
		"ipam": {"type": "tenure", "range": "10.105.0.0/28"}}`)
	node := cluster.Nodes[1].Name
	first := localnode.Pod(ns, "cool-0", network)
	first.Spec.NodeName = node
	if err := cl.Create(ctx, first); err != nil {
		t.Fatal(err)
	}
	released := net1Of(ctx, t, kc.WaitRunning(ctx, t, ns, first.Name))
	if err := cl.Delete(ctx, first); err != nil {
		t.Fatal(err)
	}
	kc.WaitGone(ctx, t, ns, first.Name)
	kc.Poll(ctx, t, "cool-0's address released", func() error {
		for _, r := range kc.Reservations(ctx, t, ns) {
			if r.Spec.Owner.Name == first.Name {
				return fmt.Errorf("%s still held by %s", r.Spec.Address, r.Name)
			}
		}
		return nil
	})
	next := localnode.Pod(ns, "cool-1", network)
	next.Spec.NodeName = node
	if err := cl.Create(ctx, next); err != nil {
		t.Fatal(err)
	}
	got := net1Of(ctx, t, kc.WaitRunning(ctx, t, ns, next.Name))
	if got == released {
		t.Errorf("cool-1 got %s, which cool-0 gave back moments before, though the range has free addresses", got)
	}
	if err := cl.Delete(ctx, next); err != nil {
		t.Fatal(err)
	}
	kc.WaitReleased(ctx, t, ns)
}
