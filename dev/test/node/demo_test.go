//go:build integration

package node_test

import (
	"bytes"
	"slices"
	"testing"
	"time"

	"github.com/tenure-ipam/tenure/dev/demo"
	"github.com/tenure-ipam/tenure/dev/nodetest"
)

// `tenurectl demo --node` plays the demo's story on
// the real node, and what it prints is true.
func TestDemoOnTheRealNodeTellsTheTruth(t *testing.T) {
	ctx := nodetest.Context(t, 6*time.Minute)
	var out bytes.Buffer
	rep, err := demo.RunOnNode(ctx, demo.NodeOptions{Out: &out, Client: cl, Node: node})
	t.Log("\n" + out.String())
	if err != nil {
		t.Fatal(err)
	}
	text := out.String()

	for _, p := range rep.SANProblems(text) {
		t.Error(p)
	}
	if len(rep.SAN) > 0 && rep.RetriedAddress != rep.SAN[0].Address {
		t.Errorf("the waiting pod got %s, want %s, the one given back", rep.RetriedAddress, rep.SAN[0].Address)
	}
	if len(rep.MigrationSource) != 3 || !slices.Equal(rep.MigrationSource, rep.MigrationTarget) {
		t.Errorf("migration source %v, target %v: want the same IPv4, IPv6 and prefix", rep.MigrationSource, rep.MigrationTarget)
	}
	if len(rep.ClaimAfterSrcDel) != 3 {
		t.Errorf("after the source's DEL the claim holds %v", rep.ClaimAfterSrcDel)
	}
	if len(rep.LostAddresses) != 6 || rep.ReleasedAfter <= 0 {
		t.Errorf("lost node: addresses %v released after %v", rep.LostAddresses, rep.ReleasedAfter)
	}
	// The demo deleted its namespace: the controller releases the claim's.
	kc.Poll(ctx, t, "the demo's reservations to be released", func() error {
		if left := kc.Reservations(ctx, t, "demo"); len(left) > 0 {
			return errorf("%d left", len(left))
		}
		return nil
	})
}
