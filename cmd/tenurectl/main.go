// Command tenurectl is tenure's command-line tool as it ships: the operator
// commands of internal/tenurectl. The developer build, with dev, demo and
// bench, is the developer module's dev/cmd/tenurectl (make build's
// bin/tenurectl).
package main

import (
	"os"

	"github.com/tenure-ipam/tenure/internal/tenurectl"
)

func main() { os.Exit(tenurectl.Run(os.Args[1:], os.Stdout, os.Stderr, nil)) }
