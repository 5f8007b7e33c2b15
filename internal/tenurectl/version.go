package tenurectl

import (
	"fmt"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// versionCommand prints the module version and VCS revision the binary was
// built from, as `go version -m` reads them, so a bug report can name
// the build without access to the image.
func versionCommand(e *env) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "print the version tenurectl was built from",
		Args:  noArgs(e),
		Run:   func(*cobra.Command, []string) { printVersion(e) },
	}
}

func printVersion(e *env) {
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
}
