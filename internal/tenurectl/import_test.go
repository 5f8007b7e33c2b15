package tenurectl

import (
	"bytes"
	"slices"
	"strings"
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

// TestImportProgressBars: a bar per phase from progressMin allocations on,
// none below it, nothing where stderr is not a terminal.
func TestImportProgressBars(t *testing.T) {
	var buf bytes.Buffer
	b := &bars{out: &buf}
	b.update("resolving", 1, progressMin-1)
	if buf.Len() != 0 {
		t.Errorf("a bar for %d allocations: %q", progressMin-1, buf.String())
	}
	for i := 1; i <= 500; i++ {
		b.update("resolving", i, 500)
	}
	b.update("writing", 1, 300)
	b.finish()
	out := buf.String()
	for _, want := range []string{"resolving allocations", "writing allocations", "/500"} {
		if !strings.Contains(out, want) {
			t.Errorf("the bars lack %q:\n%q", want, out)
		}
	}
	if b := progressBars(&buf); b.out != nil {
		t.Error("progress bars on a writer that is not a terminal")
	}
}
