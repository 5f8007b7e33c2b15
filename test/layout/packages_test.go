package layout

import (
	"bufio"
	"os"
	"slices"
	"strings"
	"testing"
)

// packageTable reads the package column of docs/design.md's "Packages"
// section: the first cell of each table row, a path relative to the module
// in backquotes.
func packageTable(t *testing.T) []string {
	t.Helper()
	f, err := os.Open("../../docs/design.md")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var pkgs []string
	inSection := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "## ") {
			inSection = line == "## Packages"
			continue
		}
		if !inSection || !strings.HasPrefix(line, "| `") {
			continue
		}
		cell, _, _ := strings.Cut(strings.TrimPrefix(line, "| `"), "`")
		pkgs = append(pkgs, cell)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(pkgs) == 0 {
		t.Fatal(`docs/design.md has no "## Packages" table rows`)
	}
	return pkgs
}

// modulePackages is every package of the product module and of the
// developer module (dev/), with the integration tag's packages (test/e2e
// and the other suites) included.
func modulePackages(t *testing.T) []string {
	t.Helper()
	var out []string
	for _, dir := range []string{"../..", "../../dev"} {
		for _, args := range [][]string{{"./..."}, {"-tags", "integration", "./..."}} {
			for _, p := range goListIn(t, dir, args...) {
				rel := strings.TrimPrefix(strings.TrimPrefix(p.ImportPath, module), "/")
				if !slices.Contains(out, rel) {
					out = append(out, rel)
				}
			}
		}
	}
	return out
}

// TestPackageTableListsEveryPackage: docs/design.md's package table and
// `go list ./...` in both modules (with and without the integration tag)
// name the same packages, each once.
func TestPackageTableListsEveryPackage(t *testing.T) {
	listed := packageTable(t)
	exist := modulePackages(t)
	seen := map[string]bool{}
	for _, p := range listed {
		if seen[p] {
			t.Errorf("docs/design.md lists package %s twice", p)
		}
		seen[p] = true
		if !slices.Contains(exist, p) {
			t.Errorf("docs/design.md lists package %s, which go list does not know", p)
		}
	}
	for _, p := range exist {
		if !seen[p] {
			t.Errorf("package %s is missing from docs/design.md's package table", p)
		}
	}
}
