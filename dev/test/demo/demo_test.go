//go:build integration

// Package demo_test runs `make demo`'s story end to end and checks that
// what it prints is true.
package demo_test

import (
	"bytes"
	"context"
	"net/netip"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tenure-ipam/tenure/dev/demo"
	"github.com/tenure-ipam/tenure/test/testbed"
)

func TestDemoTellsTheTruth(t *testing.T) {
	bins, err := testbed.Build("")
	if err != nil {
		t.Fatal(err)
	}
	pluginDir := ""
	if out, err := exec.Command("bash", testbed.RepoRoot()+"/hack/build-cni-plugins.sh").Output(); err == nil {
		pluginDir = strings.TrimSpace(string(out))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var out bytes.Buffer
	rep, err := demo.Run(ctx, demo.Options{Out: &out, Bins: bins, PluginDir: pluginDir})
	t.Log("\n" + out.String())
	if err != nil {
		t.Fatal(err)
	}
	text := out.String()

	for _, p := range rep.SANProblems(text) {
		t.Error(p)
	}

	if bins.Controller != "" {
		if len(rep.LostAddresses) != 2 || rep.ReleasedAfter <= 0 {
			t.Errorf("node loss: released %v after %v, want node-c's 2 addresses", rep.LostAddresses, rep.ReleasedAfter)
		}
		retried := strings.Split(rep.RetriedAddress, "/")[0]
		if !slices.Contains(rep.LostAddresses, retried) {
			t.Errorf("the retry got %s, which was not one of the released %v", retried, rep.LostAddresses)
		}
	} else {
		t.Error("tenure-controller was not built: the node-loss act did not run")
	}

	if len(rep.MigrationSource) != 3 || !slices.Equal(rep.MigrationSource, rep.MigrationTarget) {
		t.Errorf("migration: source %v, target %v, want the same IPv4, IPv6 and prefix", rep.MigrationSource, rep.MigrationTarget)
	} else {
		pd := netip.MustParsePrefix(rep.MigrationSource[2])
		if pd.Bits() != 56 || !netip.MustParsePrefix("2001:db8:100::/40").Overlaps(pd) {
			t.Errorf("delegated prefix %s is not a /56 of 2001:db8:100::/40", pd)
		}
		if !slices.Equal(rep.ClaimAfterSrcDel, rep.MigrationSource) {
			t.Errorf("after the source's DEL the claim holds %v, want %v", rep.ClaimAfterSrcDel, rep.MigrationSource)
		}
	}
	if strings.Count(text, "same") != 3 || strings.Contains(text, "different!") {
		t.Errorf("the migration table must say \"same\" three times")
	}

	if ok, _ := testbed.CanPlumb(); ok && pluginDir != "" {
		if rep.BridgeAddress == "" || !strings.Contains(rep.BridgeIfAddresses, rep.BridgeAddress) {
			t.Errorf("bridge act: tenure returned %q, eth0 shows %q", rep.BridgeAddress, rep.BridgeIfAddresses)
		}
	} else if rep.BridgeSkipped == "" || !strings.Contains(text, "skipped the network-namespace part") {
		t.Error("without root the demo must say it skips the namespace part")
	}
	if len(rep.PolicyRefusals) > 0 {
		t.Errorf("the node-restriction policy refused the agents:\n%s", strings.Join(rep.PolicyRefusals, "\n"))
	}
	if !strings.Contains(text, "storage-san.192.168.100.") || !strings.Contains(text, "Stopped") {
		t.Error("the demo must show the reservations and say it stopped everything")
	}
}
