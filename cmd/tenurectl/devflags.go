//go:build !tenure_release

package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// What only the developer commands (dev, demo, bench) use.

// positiveDuration defines a duration flag that refuses zero and negative
// values (timeouts and periods).
func positiveDuration(fs *pflag.FlagSet, p *time.Duration, name string, value time.Duration, usage string) {
	*p = value
	fs.Var(boundedDuration{d: p, floor: positive}, name, usage+"; a positive `duration`")
}

// durationFlag defines a duration flag whose parse errors read as the flag
// package's.
func durationFlag(fs *pflag.FlagSet, p *time.Duration, name string, value time.Duration, usage string) {
	*p = value
	fs.Var(boundedDuration{d: p}, name, usage)
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
