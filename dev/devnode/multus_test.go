package devnode

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseMultusModeReadsThinAndThickAndNamesAnyOther(t *testing.T) {
	for in, want := range map[string]MultusMode{"": MultusThin, "thin": MultusThin, "thick": MultusThick} {
		if got, err := ParseMultusMode(in); err != nil || got != want {
			t.Errorf("ParseMultusMode(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"Thick", "thin ", "shim"} {
		if _, err := ParseMultusMode(in); err == nil || !strings.Contains(err.Error(), `"`+in+`"`) {
			t.Errorf("ParseMultusMode(%q): %v; want an error naming %q", in, err, in)
		}
	}
}

// A node on the host's namespaces is refused thick Multus before anything
// is made: its directory records no node.
func TestStartRefusesThickMultusOnTheHostsNamespaces(t *testing.T) {
	dir := t.TempDir()
	bin := t.TempDir()
	_, err := prepare(context.Background(), &Options{Dir: dir, Kubeconfig: "k", BinDir: bin, CNIBinDir: bin, Runc: "/bin/true", Multus: MultusThick})
	if err == nil || !strings.Contains(err.Error(), "Multus thick") {
		t.Fatalf("prepare: %v; want a refusal naming Multus thick", err)
	}
	if _, err := os.Stat(filepath.Join(dir, StateFile)); err == nil {
		t.Errorf("%s records a node", dir)
	}
}
