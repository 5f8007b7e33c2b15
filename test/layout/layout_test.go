// Package layout holds the repository's shape to what docs/design.md says:
// what ships never links what builds, runs or measures it.
package layout

import (
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

const module = "github.com/tenure-ipam/tenure"

// devTree is the developer module (dev/): the developer environment, bench
// and demo, their suites and the full tenurectl. The product module cannot
// import it (it does not require it); only the developer tree does.
const devTree = module + "/dev/"

// testTree holds the unit-test fakes, the integration harness and the
// suites. Only _test.go files of other packages may import it.
const testTree = module + "/test/"

type pkg struct {
	ImportPath string
	Imports    []string
	Deps       []string
}

// goList runs go list in the product module.
func goList(t *testing.T, args ...string) []pkg { return goListIn(t, "../..", args...) }

// goListIn runs go list in the module at dir.
func goListIn(t *testing.T, dir string, args ...string) []pkg {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list", "-json"}, args...)...)
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list %v in %s: %v", args, dir, err)
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

// TestNoProductPackageImportsTheTestTree: a package outside test/ and the
// build helpers under hack/ is product; its non-test files import nothing
// under test/ (its _test.go files may use the fakes and the harness).
func TestNoProductPackageImportsTheTestTree(t *testing.T) {
	for _, p := range goList(t, "-tags", "integration", "./...") {
		if under(p.ImportPath, testTree) || strings.HasPrefix(p.ImportPath, module+"/hack/") {
			continue
		}
		for _, imp := range p.Imports {
			if under(imp, testTree) {
				t.Errorf("product package %s imports %s", p.ImportPath, imp)
			}
		}
	}
}

// TestNothingImportsTheDeveloperTree: no package of the product module, its
// tests and the harness included, depends on the developer module, and the
// product's go.mod does not require it (so none of its dependencies enter
// the product's).
func TestNothingImportsTheDeveloperTree(t *testing.T) {
	for _, p := range goList(t, "-deps", "-test", "-tags", "integration", "./...") {
		if under(p.ImportPath, devTree) {
			t.Errorf("the product module builds the developer tree's %s", p.ImportPath)
		}
	}
	gomod, err := os.ReadFile(filepath.Join("..", "..", "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(gomod), strings.TrimSuffix(devTree, "/")) {
		t.Errorf("the product's go.mod names the developer module %s", strings.TrimSuffix(devTree, "/"))
	}
}

// TestShippedBinariesLinkNoTooling: the binaries the image carries (the
// product module's ./cmd/..., as the Dockerfile builds them) link nothing
// from test/ or the developer tree.
func TestShippedBinariesLinkNoTooling(t *testing.T) {
	pkgs := goList(t, "./cmd/tenure", "./cmd/tenure-agent", "./cmd/tenure-controller", "./cmd/tenurectl")
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
// passing vacuously: the developer module's tenurectl does link the
// developer tree and the harness under test/.
func TestTheDeveloperBuildLinksTheDevCommands(t *testing.T) {
	var dev, harness bool
	for _, p := range goListIn(t, "../../dev", "./cmd/tenurectl") {
		for _, d := range p.Deps {
			dev = dev || under(d, devTree)
			harness = harness || under(d, testTree)
		}
	}
	if !dev {
		t.Error("the developer build of tenurectl links nothing under dev/: the developer tree's prefix is wrong")
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
