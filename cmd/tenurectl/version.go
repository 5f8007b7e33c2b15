package main

import (
	"context"
	"fmt"
	"runtime/debug"
)

func init() {
	register(&command{
		name:    "version",
		summary: "print the version tenurectl was built from",
		run:     runVersion,
	})
}

// runVersion prints the module version and VCS revision the binary was
// built from, as `go version -m` reads them, so a bug report can name
// the build without access to the image.
func runVersion(_ context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "version", "")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	version, revision, dirty := "(devel)", "unknown", false
	if bi, ok := debug.ReadBuildInfo(); ok {
		version = bi.Main.Version
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				revision = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
	}
	if dirty {
		revision += "-dirty"
	}
	fmt.Fprintf(e.stdout, "tenurectl %s (revision %s)\n", version, revision)
	return nil
}
