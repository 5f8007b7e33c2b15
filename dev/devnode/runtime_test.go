//go:build integration

package devnode

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/tenure-ipam/tenure/dev/image"
)

// runtimeTools finds containerd, ctr, pause and the CNI plugins, or skips.
func runtimeTools(t *testing.T) (binDir, cniBinDir string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("containerd needs root: run the integration tests as root")
	}
	cache := cacheDir(t)
	binDir = filepath.Join(cache, "bin")
	for _, b := range []string{"containerd", "containerd-shim-runc-v2", "ctr", "pause"} {
		if _, err := os.Stat(filepath.Join(binDir, b)); err != nil {
			t.Fatalf("%v: run make node-tools", err)
		}
	}
	dirs, _ := filepath.Glob(filepath.Join(cache, "cni-plugins-*", "host-local"))
	if len(dirs) == 0 {
		t.Fatal("no host-local plugin: run make cni-plugins")
	}
	return binDir, filepath.Dir(dirs[len(dirs)-1])
}

// An image tarball dev/image writes imports into the node's
// containerd under the name it was written with (what `make image` and the
// node's sandbox image rely on); the sandbox image is pinned; Stop leaves
// nothing.
func TestRuntimeImportsImageTarballsByNameAndStopsClean(t *testing.T) {
	binDir, cniBinDir := runtimeTools(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir := t.TempDir()
	// Multus' copy of the credential; nothing reads it without a kubelet.
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte("apiVersion: v1\nkind: Config\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	opts := Options{Dir: dir, Kubeconfig: kubeconfig, BinDir: binDir, CNIBinDir: cniBinDir}
	node, err := prepare(ctx, &opts)
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = node.Stop()
		}
	})
	if err := node.startRuntime(ctx, opts); err != nil {
		t.Fatal(err)
	}

	ref, img := importTestImage(ctx, t, node, binDir, "localhost/tenure/runtime-test:1")
	list, err := node.ctr(ctx, "images", "ls")
	if err != nil {
		t.Fatal(err)
	}
	digest, _ := img.Digest()
	if !hasImageLine(list, ref.Name(), digest.String()) {
		t.Errorf("containerd lists no %s at %s:\n%s", ref.Name(), digest, list)
	}
	if !hasImageLine(list, PauseImage, "io.cri-containerd.pinned=pinned") {
		t.Errorf("the sandbox image %s is not pinned:\n%s", PauseImage, list)
	}

	stopped = true
	stopLeavingNothing(t, node)
}

// stopLeavingNothing stops the node and fails for each thing Leftovers
// finds.
func stopLeavingNothing(t *testing.T, node *Node) {
	t.Helper()
	if err := node.Stop(); err != nil {
		t.Fatal(err)
	}
	left, err := Leftovers(node.Dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range left {
		t.Errorf("left behind: %s", l)
	}
}

// importTestImage packs the pause program as an image named ref, writes it
// as dev/image writes bin/tenure-image.tar and imports it.
func importTestImage(ctx context.Context, t *testing.T, node *Node, binDir, ref string) (name.Tag, v1.Image) {
	t.Helper()
	tag, err := name.NewTag(ref, name.StrictValidation)
	if err != nil {
		t.Fatal(err)
	}
	img, err := image.Build(image.Spec{
		Layers:     []image.Layer{{{Path: "/bin/wait", Source: filepath.Join(binDir, "pause"), Mode: 0o755}}},
		Entrypoint: []string{"/bin/wait"},
		User:       "65532:65532",
	})
	if err != nil {
		t.Fatal(err)
	}
	tarball := filepath.Join(t.TempDir(), "image.tar")
	if err := image.WriteFile(tarball, tag, img); err != nil {
		t.Fatal(err)
	}
	if err := node.ImportImage(ctx, tarball); err != nil {
		t.Fatal(err)
	}
	return tag, img
}

func hasImageLine(list, ref, want string) bool {
	for _, line := range strings.Split(list, "\n") {
		if fields := strings.Fields(line); len(fields) > 0 && fields[0] == ref && strings.Contains(line, want) {
			return true
		}
	}
	return false
}
