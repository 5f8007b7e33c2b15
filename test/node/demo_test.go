//go:build integration

package node_test

import (
	"bytes"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tenure-ipam/tenure/internal/demo"
)

// Point 6 of issue 12: `tenurectl demo --node` plays the demo's story on
// the real node, and what it prints is true.
func TestDemoOnTheRealNodeTellsTheTruth(t *testing.T) {
	ctx := testContext(t, 6*time.Minute)
	var out bytes.Buffer
	rep, err := demo.RunOnNode(ctx, demo.NodeOptions{Out: &out, Client: cl, Node: node})
	t.Log("\n" + out.String())
	if err != nil {
		t.Fatal(err)
	}
	text := out.String()

	san := netip.MustParsePrefix("192.168.100.0/29")
	seen := map[string]bool{}
	for _, a := range rep.SAN {
		p := netip.MustParsePrefix(a.Address)
		if !san.Contains(p.Addr()) || p.Addr() == san.Addr() || p.Addr().String() == "192.168.100.7" || seen[a.Address] {
			t.Errorf("SAN allocation %+v is outside the usable /29 or a duplicate", a)
		}
		seen[a.Address] = true
		if !strings.Contains(text, a.Pod) || !strings.Contains(text, p.Addr().String()) {
			t.Errorf("output does not show %+v", a)
		}
	}
	if len(rep.SAN) != 6 {
		t.Errorf("%d pods got SAN addresses, want 6", len(rep.SAN))
	}
	if !strings.Contains(rep.ExhaustionError, "192.168.100.0/29 is full") || !strings.Contains(text, rep.ExhaustionError) {
		t.Errorf("exhaustion error %q not shown or not naming the range", rep.ExhaustionError)
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
	poll(ctx, t, "the demo's reservations to be released", func() error {
		if left := reservationsOf(ctx, t, "demo"); len(left) > 0 {
			return errorf("%d left", len(left))
		}
		return nil
	})
}
