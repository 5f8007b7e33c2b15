package image

import (
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The thick Multus image holds the four binaries where Multus' own thick
// image has them (install_multus copies multus-shim and passthru from
// there), starts multus-daemon, and tells os/user it is root.
func TestMultusThickHasTheBinariesAtMultusPathsAndRunsTheDaemon(t *testing.T) {
	bin := t.TempDir()
	for b := range MultusThickBinaries {
		if err := os.WriteFile(filepath.Join(bin, b), []byte(b), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	img, err := Build(MultusThick(bin))
	if err != nil {
		t.Fatal(err)
	}
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	if len(layers) != 1 {
		t.Fatalf("%d layers, want 1", len(layers))
	}
	want := map[string]int64{
		"/usr/src/multus-cni/bin/multus-daemon":  0o755,
		"/usr/src/multus-cni/bin/multus-shim":    0o755,
		"/usr/src/multus-cni/bin/install_multus": 0o755,
		"/usr/src/multus-cni/bin/passthru":       0o755,
	}
	if got := layerFiles(t, layers[0]); !maps.Equal(got, want) {
		t.Errorf("files %v, want %v", got, want)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Config.Entrypoint; !slices.Equal(got, []string{"/usr/src/multus-cni/bin/multus-daemon"}) {
		t.Errorf("entrypoint %v", got)
	}
	for _, e := range []string{"USER=root", "HOME=/root"} {
		if !slices.Contains(cfg.Config.Env, e) {
			t.Errorf("env %v lacks %s", cfg.Config.Env, e)
		}
	}
}

// A missing binary fails the build, naming its path.
func TestMultusThickNeedsEveryBinary(t *testing.T) {
	bin := t.TempDir()
	if _, err := Build(MultusThick(bin)); err == nil || !strings.Contains(err.Error(), bin+"/") {
		t.Fatalf("built without the binaries: %v", err)
	}
}
