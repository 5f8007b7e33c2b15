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

// tooling is the tree of packages that exist to build, run, test or measure
// tenure; nothing the image's binaries link may import it.
const tooling = module + "/internal/dev/"

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

func isTooling(path string) bool { return strings.HasPrefix(path+"/", tooling) }

// TestNoProductPackageImportsTooling: a package outside internal/dev, test/
// and the build helpers under hack/ is product; its non-test imports stay
// out of internal/dev.
func TestNoProductPackageImportsTooling(t *testing.T) {
	for _, p := range goList(t, "./...") {
		if isTooling(p.ImportPath) || strings.HasPrefix(p.ImportPath, module+"/test/") || strings.HasPrefix(p.ImportPath, module+"/hack/") {
			continue
		}
		if p.ImportPath == module+"/cmd/tenurectl" {
			continue // its developer build links the dev commands; the release build is checked below
		}
		for _, imp := range p.Imports {
			if isTooling(imp) {
				t.Errorf("product package %s imports tooling package %s", p.ImportPath, imp)
			}
		}
	}
}

// TestShippedBinariesLinkNoTooling: the binaries the image carries, built as
// the image builds them (tenurectl with tenure_release), link nothing from
// internal/dev.
func TestShippedBinariesLinkNoTooling(t *testing.T) {
	pkgs := goList(t, "-tags", "tenure_release", "./cmd/tenure", "./cmd/tenure-agent", "./cmd/tenure-controller", "./cmd/tenurectl")
	if len(pkgs) != 4 {
		t.Fatalf("go list returned %d packages, want the 4 binaries", len(pkgs))
	}
	for _, p := range pkgs {
		for _, d := range p.Deps {
			if isTooling(d) {
				t.Errorf("%s links tooling package %s", p.ImportPath, d)
			}
		}
	}
}

// TestTheDeveloperBuildLinksTheDevCommands keeps the check above from
// passing vacuously: the developer build of tenurectl does link internal/dev.
func TestTheDeveloperBuildLinksTheDevCommands(t *testing.T) {
	for _, p := range goList(t, "./cmd/tenurectl") {
		for _, d := range p.Deps {
			if isTooling(d) {
				return
			}
		}
	}
	t.Fatal("the developer build of tenurectl links nothing under internal/dev: the tooling prefix is wrong")
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
