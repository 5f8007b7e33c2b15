package main

import (
	"slices"
	"testing"
)

// TestImportUsage: what import refuses before reaching a cluster, and its
// completion.
func TestImportUsage(t *testing.T) {
	testUsage(t, []usageCase{
		{[]string{"import"}, 2, "tenurectl import: want 1 argument(s) (whereabouts), got 0"},
		{[]string{"import", "calico"}, 2, `can import from whereabouts only, not "calico"`},
		{[]string{"import", "whereabouts", "--help"}, 0, "-apply"},
		{[]string{"import", "whereabouts", "--kubeconfig", t.TempDir() + "/nope"}, 1, "tenurectl import: stat "},
	})
	if got := complete(t, "import", ""); !slices.Contains(got, "whereabouts") {
		t.Errorf("import completes %q, want whereabouts", got)
	}
	if got := complete(t, "import", "--"); !slices.Contains(got, "--apply") {
		t.Errorf("import flags %q lack --apply", got)
	}
}
