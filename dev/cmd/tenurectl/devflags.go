package main

import (
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	ctl "github.com/tenure-ipam/tenure/internal/tenurectl"
)

// env is what a developer command writes to, and the command line it was
// given (ctl.Env's).
type env struct {
	stdout, stderr io.Writer
	args           []string
}

func envOf(e *ctl.Env) *env {
	return &env{stdout: e.Stdout(), stderr: e.Stderr(), args: e.Args()}
}

// errUsage makes run exit 2 without printing the error again: the command
// printed its usage already.
var errUsage = ctl.ErrUsage

func isHelp(arg string) bool { return ctl.IsHelp(arg) }

func printUsage(w io.Writer, cmd *cobra.Command) { ctl.PrintUsage(w, cmd) }

// noArgs refuses positional arguments.
func noArgs(e *env) cobra.PositionalArgs { return ctl.NoArgs(e.stderr) }

// refuse prints cmd's usage and makes run exit 2.
func refuse(e *env, cmd *cobra.Command) error { return ctl.Refuse(e.stderr, cmd) }

// positiveDuration defines a duration flag that refuses zero and negative
// values (timeouts and periods).
func positiveDuration(fs *pflag.FlagSet, p *time.Duration, name string, value time.Duration, usage string) {
	ctl.PositiveDuration(fs, p, name, value, usage)
}

// durationFlag defines a duration flag whose parse errors read as the flag
// package's.
func durationFlag(fs *pflag.FlagSet, p *time.Duration, name string, value time.Duration, usage string) {
	ctl.DurationFlag(fs, p, name, value, usage)
}

// group returns a command that only groups subs: without a known
// subcommand it prints their list.
func group(e *env, name, summary string, subs ...*cobra.Command) *cobra.Command {
	cmd := &cobra.Command{
		Use:                name,
		Short:              summary,
		DisableFlagParsing: true,
		Args:               cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 && isHelp(args[0]) {
				return pflag.ErrHelp
			}
			if len(args) > 0 {
				fmt.Fprintf(e.stderr, "%s: unknown subcommand %q\n\n", cmd.CommandPath(), args[0])
			}
			printUsage(e.stderr, cmd)
			return errUsage
		},
	}
	cmd.AddCommand(subs...)
	return cmd
}
