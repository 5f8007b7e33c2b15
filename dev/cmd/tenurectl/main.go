// Command tenurectl is the developer build of tenurectl (make build's
// bin/tenurectl): the operator commands of internal/tenurectl, as the
// image ships them, and the developer commands dev, demo and bench, whose
// packages (the developer environment, the bench, the demo) and
// dependencies stay in this module, out of the product's go.mod.
package main

import (
	"io"
	"os"

	"github.com/spf13/cobra"

	ctl "github.com/tenure-ipam/tenure/internal/tenurectl"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

// run executes the command line args (without the program name) and returns
// the exit code.
func run(args []string, stdout, stderr io.Writer) int {
	return ctl.Run(args, stdout, stderr, func(e *ctl.Env) []*cobra.Command {
		return developerCommands(envOf(e))
	})
}
