//go:build integration

package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tenure-ipam/tenure/test/controlplane"
)

// An unknown --multus mode, or a thick one without --node, is refused
// before anything starts: the message names the flag and the value, and
// the directory records no control plane.
func TestDevUpRefusesAnUnknownMultusMode(t *testing.T) {
	for _, args := range [][]string{
		{"--node", "--multus", "thicc"},
		{"--node", "--multus", ""},
		{"--multus", "thick"},
	} {
		dir := filepath.Join(t.TempDir(), "dev")
		r := tenurectl(t, append([]string{"dev", "up", "--dir", dir}, args...)...)
		value := args[len(args)-1]
		if r.code == 0 || !strings.Contains(r.stderr, "--multus "+value) {
			t.Errorf("dev up %q: exit %d, stderr %q; want a refusal naming --multus %s", args, r.code, r.stderr, value)
		}
		if _, err := os.Stat(filepath.Join(dir, controlplane.StateFile)); err == nil {
			t.Errorf("dev up %q started a control plane", args)
		}
	}
}
