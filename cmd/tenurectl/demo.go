//go:build !tenure_release

package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/tenure-ipam/tenure/internal/demo"
	"github.com/tenure-ipam/tenure/internal/testbed"
)

func init() {
	register(&command{
		name:    "demo",
		summary: "start a local control plane, show tenure at work, stop everything",
		run:     runDemo,
	})
}

func runDemo(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "demo", "[--bin-dir DIR] [--cni-plugin-dir DIR] [--timeout DURATION]")
	binDir := fs.String("bin-dir", "", "directory with tenure's binaries (default: this program's directory)")
	pluginDir := fs.String("cni-plugin-dir", "", "reference CNI plugins (default: built by hack/build-cni-plugins.sh when run from the repository)")
	timeout := fs.Duration("timeout", 5*time.Minute, "give up after this long")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *binDir == "" {
		exe, err := os.Executable()
		if err != nil {
			return err
		}
		*binDir = filepath.Dir(exe)
	}
	os.Setenv("TENURE_BIN_DIR", *binDir)
	bins, err := testbed.Build("")
	if err != nil {
		return err
	}
	if *pluginDir == "" {
		script := filepath.Join(filepath.Dir(*binDir), "hack", "build-cni-plugins.sh")
		if out, err := exec.CommandContext(ctx, "bash", script).Output(); err == nil {
			*pluginDir = strings.TrimSpace(string(out))
		}
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	_, err = demo.Run(ctx, demo.Options{Out: e.stdout, Bins: bins, PluginDir: *pluginDir})
	return err
}
