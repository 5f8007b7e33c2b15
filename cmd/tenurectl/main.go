// Command tenurectl is tenure's command-line tool.
//
// Subcommands register themselves in a file of their own (see dev.go): a
// command has a name, a one-line summary and a run function that gets the
// arguments after its name. The operator commands (ops.go: pools, get,
// who, why, release, check) are a thin layer over internal/ops and take
// kubectl's connection and output flags (kube.go); completion.go gives
// every command shell completion.
//
// The developer commands (dev, demo, bench) carry the build constraint
// !tenure_release: the image builds with -tags tenure_release, so the
// tenurectl it ships links neither the benchmark, the demo, the test bed
// nor the control-plane launcher (release_test.go checks it).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"github.com/go-logr/logr"
	"io"
	"os"
	"os/signal"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sort"
	"syscall"
)

// command is one subcommand of tenurectl.
type command struct {
	name    string
	summary string
	run     func(ctx context.Context, env *env, args []string) error
	// hidden commands are left out of the usage (__complete).
	hidden bool
	// completion describes the command to shell completion: its flags and
	// the candidates for its arguments. nil completes its name only.
	completion func(e *env) (*flag.FlagSet, completeFunc)
}

// completeFunc returns the candidates for the next positional argument,
// given those before it; it runs after the flags are parsed.
type completeFunc func(ctx context.Context, args []string, toComplete string) []string

// env is what a command writes to.
type env struct {
	stdout, stderr io.Writer
}

// errUsage makes run exit 2 without printing the error again: the command
// printed its usage already.
var errUsage = errors.New("usage")

// exitCode makes run exit with its code without printing anything: the
// command said what there was to say (check exits 1 when it found
// problems).
type exitCode int

func (c exitCode) Error() string { return fmt.Sprintf("exit status %d", int(c)) }

var commands = map[string]*command{}

func register(c *command) {
	if _, dup := commands[c.name]; dup {
		panic("tenurectl: command registered twice: " + c.name)
	}
	commands[c.name] = c
}

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

// run executes the command line args (without the program name) and returns
// the exit code. SIGINT and SIGTERM cancel the command's context.
func run(args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// controller-runtime's client has nothing to log for tenurectl's users
	// (and would warn, with a stack, that no logger was set).
	ctrllog.SetLogger(logr.Discard())
	e := &env{stdout: stdout, stderr: stderr}
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(e.stderr)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	c, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(e.stderr, "tenurectl: unknown command %q\n\n", args[0])
		usage(e.stderr)
		return 2
	}
	err := c.run(ctx, e, args[1:])
	var code exitCode
	switch {
	case err == nil:
		return 0
	case errors.As(err, &code):
		return int(code)
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		return 2
	default:
		fmt.Fprintf(e.stderr, "tenurectl %s: %v\n", c.name, err)
		return 1
	}
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: tenurectl <command> [arguments]\n\ncommands:")
	for _, n := range visibleCommands() {
		fmt.Fprintf(w, "  %-10s %s\n", n, commands[n].summary)
	}
	if _, dev := commands["dev"]; !dev {
		fmt.Fprintln(w, "\ndev, demo and bench are left out of this build (-tags tenure_release)")
	}
}

// visibleCommands are the names of the commands usage lists, sorted.
func visibleCommands() []string {
	names := make([]string, 0, len(commands))
	for n, c := range commands {
		if !c.hidden {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	return names
}

// newFlagSet returns a flag set for "tenurectl <name>" that reports errors
// to e.stderr and leaves exiting to run.
func newFlagSet(e *env, name, argsUsage string) *flag.FlagSet {
	fs := flag.NewFlagSet("tenurectl "+name, flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	fs.Usage = func() {
		fmt.Fprintf(e.stderr, "usage: tenurectl %s %s\n", name, argsUsage)
		fs.PrintDefaults()
	}
	return fs
}

// parseFlags parses args and refuses positional arguments.
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return errUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(fs.Output(), "%s: unexpected argument %q\n", fs.Name(), fs.Arg(0))
		fs.Usage()
		return errUsage
	}
	return nil
}
