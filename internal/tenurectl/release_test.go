//go:build integration

package tenurectl

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// developerPackages are what the developer commands link and the image
// must not ship.
var developerPackages = []string{
	"github.com/tenure-ipam/tenure/dev/bench",
	"github.com/tenure-ipam/tenure/test/controlplane",
	"github.com/tenure-ipam/tenure/dev/demo",
	"github.com/tenure-ipam/tenure/test/testbed",
}

// TestReleaseBuild: the image builds the product module's commands as they
// are, and none of them links the developer packages, and its tenurectl has
// no dev, demo or bench command; the developer module's tenurectl (make
// build's) links them all.
func TestReleaseBuild(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	dockerfile, err := os.ReadFile(filepath.Join(root, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	build := regexp.MustCompile(`go build [^\n]* \./cmd/\.\.\.`).Find(dockerfile)
	if build == nil || regexp.MustCompile(`-tags\b`).Match(build) {
		t.Fatalf("the Dockerfile's `go build ... ./cmd/...` is missing or builds with tags: %q", build)
	}

	deps := func(dir, pkgs string) []string {
		return strings.Fields(goCmd(t, dir, "list", "-deps", pkgs))
	}
	release := deps(root, "./cmd/...")
	developer := deps(filepath.Join(root, "dev"), "./cmd/tenurectl")
	for _, p := range developerPackages {
		if slices.Contains(release, p) {
			t.Errorf("the release build of ./cmd/... links %s", p)
		}
		if !slices.Contains(developer, p) {
			t.Errorf("the developer module's ./cmd/tenurectl does not link %s: is the list above stale?", p)
		}
	}

	if t.Failed() {
		return // building what links the whole developer tree takes minutes
	}

	bin := filepath.Join(t.TempDir(), "tenurectl")
	goCmd(t, root, "build", "-o", bin, "./cmd/tenurectl")
	cmd := exec.Command(bin, "help")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("release tenurectl help: %v\n%s", err, stderr.Bytes())
	}
	for _, c := range []string{"dev", "demo", "bench"} {
		if regexp.MustCompile(`(?m)^  ` + c + ` `).Match(stderr.Bytes()) {
			t.Errorf("the release tenurectl lists %s:\n%s", c, stderr.Bytes())
		}
	}
	var exitErr *exec.ExitError
	if err := exec.Command(bin, "dev", "up").Run(); !errors.As(err, &exitErr) || exitErr.ExitCode() != 2 {
		t.Errorf("release tenurectl dev up: %v, want exit 2 (unknown command)", err)
	}
}

func goCmd(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, stderr.Bytes())
	}
	return stdout.String()
}
