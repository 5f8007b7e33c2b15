// Package layout holds the repository's shape to what docs/design.md says:
// what ships never links what builds, runs or measures it.
package layout

import (
	"encoding/json"
	"io"
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/tenure-ipam/tenure"

// devTree is the developer environment, bench and demo: the packages that
// exist to run or measure tenure on this machine. Nothing but the developer
// tree and its commands may import it.
const devTree = module + "/internal/dev/"

// testTree holds the unit-test fakes, the integration harness and the
// suites. Only _test.go files of other packages may import it.
const testTree = module + "/test/"

// devCommands are the developer tree's commands outside internal/dev:
// tenurectl's developer build (dev, demo, bench) and make image's command.
var devCommands = []string{module + "/cmd/tenurectl", module + "/hack/image"}

type pkg struct {
	ImportPath string
	Imports    []string
	Deps       []string
}

func goList(t *testing.T, args ...string) []pkg {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list", "-json"}, args...)...)
	cmd.Dir = "../.."
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list %v: %v", args, err)
	}
	var pkgs []pkg
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for {
		var p pkg
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, p)
	}
	return pkgs
}

func under(path, tree string) bool { return strings.HasPrefix(path+"/", tree) }

func isDevCommand(path string) bool {
	for _, c := range devCommands {
		if path == c {
			return true
		}
	}
	return false
}

// TestNoProductPackageImportsTheTestTree: a package outside test/,
// internal/dev and the build helpers under hack/ is product; its non-test
// files import nothing under test/ (its _test.go files may use the fakes
// and the harness).
func TestNoProductPackageImportsTheTestTree(t *testing.T) {
	for _, p := range goList(t, "-tags", "integration", "./...") {
		if under(p.ImportPath, testTree) || under(p.ImportPath, devTree) || strings.HasPrefix(p.ImportPath, module+"/hack/") {
			continue
		}
		if p.ImportPath == module+"/cmd/tenurectl" {
			continue // its developer build links the dev commands; the release build is checked below
		}
		for _, imp := range p.Imports {
			if under(imp, testTree) {
				t.Errorf("product package %s imports %s", p.ImportPath, imp)
			}
		}
	}
}

// TestNothingImportsTheDeveloperTree: only the developer tree and its
// commands import internal/dev; the harness under test/ and every product
// package do not.
func TestNothingImportsTheDeveloperTree(t *testing.T) {
	for _, p := range goList(t, "-tags", "integration", "./...") {
		if under(p.ImportPath, devTree) || isDevCommand(p.ImportPath) {
			continue
		}
		for _, imp := range p.Imports {
			if under(imp, devTree) {
				t.Errorf("%s imports the developer tree's %s", p.ImportPath, imp)
			}
		}
	}
}

// TestShippedBinariesLinkNoTooling: the binaries the image carries, built as
// the image builds them (tenurectl with tenure_release), link nothing from
// test/ or internal/dev.
func TestShippedBinariesLinkNoTooling(t *testing.T) {
	pkgs := goList(t, "-tags", "tenure_release", "./cmd/tenure", "./cmd/tenure-agent", "./cmd/tenure-controller", "./cmd/tenurectl")
	if len(pkgs) != 4 {
		t.Fatalf("go list returned %d packages, want the 4 binaries", len(pkgs))
	}
	for _, p := range pkgs {
		for _, d := range p.Deps {
			if under(d, devTree) || under(d, testTree) {
				t.Errorf("%s links tooling package %s", p.ImportPath, d)
			}
		}
	}
}

// TestTheDeveloperBuildLinksTheDevCommands keeps the checks above from
// passing vacuously: the developer build of tenurectl does link internal/dev
// and the harness under test/.
func TestTheDeveloperBuildLinksTheDevCommands(t *testing.T) {
	var dev, harness bool
	for _, p := range goList(t, "./cmd/tenurectl") {
		for _, d := range p.Deps {
			dev = dev || under(d, devTree)
			harness = harness || under(d, testTree)
		}
	}
	if !dev {
		t.Error("the developer build of tenurectl links nothing under internal/dev: the developer tree's prefix is wrong")
	}
	if !harness {
		t.Error("the developer build of tenurectl links nothing under test/: the test tree's prefix is wrong")
	}
}

// TestDependenciesPointDownhill: a package does not depend on one that sits
// above it (docs/design.md, "Packages"): the controller reads the inventory,
// not the operator commands' package; config builds spaces without the
// allocator that walks them. Each row also names a dependency the package
// does have, so a wrong pattern cannot pass vacuously.
func TestDependenciesPointDownhill(t *testing.T) {
	for _, tc := range []struct {
		pkg      string
		notUnder string // no dependency at or under this path
		has      string // a dependency it has
	}{
		{"./internal/controller/...", module + "/internal/ops", module + "/internal/inventory"},
		{"./internal/config", module + "/internal/allocator", module + "/internal/addrspace"},
		{"./internal/inventory", module + "/internal/allocator", module + "/internal/config"},
	} {
		t.Run(tc.pkg, func(t *testing.T) {
			has := false
			for _, p := range goList(t, tc.pkg) {
				for _, d := range p.Deps {
					if d == tc.notUnder || strings.HasPrefix(d, tc.notUnder+"/") {
						t.Errorf("%s depends on %s", p.ImportPath, d)
					}
					has = has || d == tc.has
				}
			}
			if !has {
				t.Errorf("no package of %s depends on %s", tc.pkg, tc.has)
			}
		})
	}
}
