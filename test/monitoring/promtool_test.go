//go:build integration

package monitoring_test

import (
	"os/exec"
	"testing"

	"github.com/tenure-ipam/tenure/test/testbed"
)

// promtool is Debian's (the prometheus package; hack/test-deps.sh
// installs it).
func promtool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		testbed.SkipUnlessEverything(t, "promtool not found (apt-get install prometheus)")
	}
	return p
}

// TestPromtoolRules: promtool accepts the rules file and its unit tests
// (tenure.rules.test.yml) pass; TestEveryAlertHasAPromtoolTest holds them
// to cover every alert.
func TestPromtoolRules(t *testing.T) {
	p := promtool(t)
	dir := monitoringDir(t)
	for _, args := range [][]string{{"check", "rules", "tenure.rules.yml"}, {"test", "rules", "tenure.rules.test.yml"}} {
		cmd := exec.Command(p, args...)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("promtool %v: %v\n%s", args, err, out)
		}
		t.Logf("promtool %v:\n%s", args, out)
	}
}
