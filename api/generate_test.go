//go:build integration

package api_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
)

// TestGeneratedFilesAreCurrent regenerates the deepcopy functions and CRD
// manifests in a copy of the tree and fails when the checked-in ones differ:
// run `make generate` after changing api/.
func TestGeneratedFilesAreCurrent(t *testing.T) {
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Dir(filepath.Dir(file))
	tmp := t.TempDir()
	for _, p := range []string{"go.mod", "go.sum", "api", "deploy/crds"} {
		copyTree(t, filepath.Join(root, p), filepath.Join(tmp, p))
	}
	// Regenerate from scratch: stale extra files must show too.
	for _, g := range globAll(t, tmp, "api/*/zz_generated.deepcopy.go", "api/*/*/zz_generated.deepcopy.go", "deploy/crds/*.yaml") {
		if err := os.Remove(g); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command("go", "generate", "./api/...")
	cmd.Dir = tmp
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go generate: %v\n%s", err, out)
	}
	want := globAll(t, tmp, "api/*/zz_generated.deepcopy.go", "api/*/*/zz_generated.deepcopy.go", "deploy/crds/*.yaml")
	if len(want) == 0 {
		t.Fatal("go generate produced nothing")
	}
	have := globAll(t, root, "api/*/zz_generated.deepcopy.go", "api/*/*/zz_generated.deepcopy.go", "deploy/crds/*.yaml")
	if len(have) != len(want) {
		t.Errorf("checked in %d generated files, generation gives %d: run make generate", len(have), len(want))
	}
	for _, g := range want {
		rel, _ := filepath.Rel(tmp, g)
		fresh, _ := os.ReadFile(g)
		checked, err := os.ReadFile(filepath.Join(root, rel))
		if err != nil || !bytes.Equal(fresh, checked) {
			t.Errorf("%s is stale: run make generate", rel)
		}
	}
}

func globAll(t *testing.T, dir string, patterns ...string) []string {
	var out []string
	for _, p := range patterns {
		m, err := filepath.Glob(filepath.Join(dir, p))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, m...)
	}
	return out
}

func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.Walk(src, func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		target := filepath.Join(dst, rel)
		if info.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(target, data, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}
