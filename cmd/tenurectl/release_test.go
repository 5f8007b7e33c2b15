//go:build integration

package main

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

// releaseTag leaves the developer commands out of tenurectl.
const releaseTag = "tenure_release"

// developerPackages are what the developer commands link and the image
// must not ship.
var developerPackages = []string{
	"github.com/tenure-ipam/tenure/internal/dev/bench",
	"github.com/tenure-ipam/tenure/test/controlplane",
	"github.com/tenure-ipam/tenure/internal/dev/demo",
	"github.com/tenure-ipam/tenure/test/testbed",
}

// TestReleaseBuild: the image builds every command with the release tag,
// and with it no command links the developer packages and tenurectl has no
// dev, demo or bench command; without it tenurectl has them all.
func TestReleaseBuild(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	dockerfile, err := os.ReadFile(filepath.Join(root, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	build := regexp.MustCompile(`go build [^\n]*-tags[ =]"?([\w,]+)"?[^\n]* \./cmd/\.\.\.`).FindSubmatch(dockerfile)
	if build == nil || string(build[1]) != releaseTag {
		t.Fatalf("the Dockerfile's `go build ... ./cmd/...` does not build with -tags %s", releaseTag)
	}

	deps := func(tags ...string) []string {
		args := append([]string{"list", "-deps"}, tags...)
		out := goCmd(t, root, append(args, "./cmd/...")...)
		return strings.Fields(out)
	}
	release := deps("-tags", releaseTag)
	developer := deps()
	for _, p := range developerPackages {
		if slices.Contains(release, p) {
			t.Errorf("the release build of ./cmd/... links %s", p)
		}
		if !slices.Contains(developer, p) {
			t.Errorf("the developer build of ./cmd/... does not link %s: is the list above stale?", p)
		}
	}

	if t.Failed() {
		return // building what links the whole developer tree takes minutes
	}

	bin := filepath.Join(t.TempDir(), "tenurectl")
	goCmd(t, root, "build", "-tags", releaseTag, "-o", bin, "./cmd/tenurectl")
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
