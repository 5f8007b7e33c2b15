// Package tenurectl is tenure's command-line tool: cmd/tenurectl runs it
// as it ships, and the developer module's dev/cmd/tenurectl runs it with the
// developer commands (dev, demo, bench) added (Run's extra).
//
// Its commands are one cobra tree, which also answers shell completion
// (completion.go). The operator commands (ops.go: pools, get, who, why,
// release, check; import.go) are a thin layer over internal/ops and take
// kubectl's connection and output flags (kube.go).
//
// tenurectl speaks the standard library flag package's dialect on top of
// pflag's: a long flag may be written with one dash (-node-grace-period),
// a one-letter flag with two (--o), and a flag error reads as the flag
// package words it, followed by the command's usage.
package tenurectl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/go-logr/logr"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
)

// env is what a command writes to, and the command line it was given.
type env struct {
	stdout, stderr io.Writer
	args           []string
}

// errUsage makes run exit 2 without printing the error again: the command
// printed its usage already.
var errUsage = errors.New("usage")

// exitCode makes run exit with its code without printing anything: the
// command said what there was to say (check exits 1 when it found
// problems).
type exitCode int

func (c exitCode) Error() string { return fmt.Sprintf("exit status %d", int(c)) }

// Env is what a command writes to, and the command line it was given.
type Env = env

// Stdout is where the command writes its output.
func (e *env) Stdout() io.Writer { return e.stdout }

// Stderr is where the command writes its usage, errors and progress.
func (e *env) Stderr() io.Writer { return e.stderr }

// Args is the command line (without the program name).
func (e *env) Args() []string { return e.args }

// Commands makes commands for the root, writing to e.
type Commands func(e *Env) []*cobra.Command

// ErrUsage makes Run exit 2 without printing the error again: the command
// printed its usage already.
var ErrUsage = errUsage

// Run executes the command line args (without the program name) with the
// operator commands and extra's (nil: none), and returns the exit code.
// SIGINT and SIGTERM cancel the command's context.
func Run(args []string, stdout, stderr io.Writer, extra Commands) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// controller-runtime's client has nothing to log for tenurectl's users
	// (and would warn, with a stack, that no logger was set).
	ctrllog.SetLogger(logr.Discard())
	e := &env{stdout: stdout, stderr: stderr, args: args}
	root := newRoot(e, extra)
	if len(args) > 0 && strings.HasPrefix(args[0], "-") && !isHelp(args[0]) {
		// cobra would look past a leading flag for a command name.
		unknownCommand(e, root, args[0])
		return 2
	}
	// A nil slice would make cobra read os.Args.
	root.SetArgs(append([]string{}, goFlagArgs(root, args)...))
	cmd, err := root.ExecuteContextC(ctx)
	var code exitCode
	switch {
	case err == nil:
		return 0
	case errors.As(err, &code):
		return int(code)
	case errors.Is(err, errUsage):
		return 2
	default:
		for cmd.HasParent() && cmd.Parent() != root {
			cmd = cmd.Parent()
		}
		fmt.Fprintf(e.stderr, "tenurectl %s: %v\n", cmd.Name(), err)
		return 1
	}
}

// newRoot builds the command tree: the operator commands and extra's.
func newRoot(e *env, extra Commands) *cobra.Command {
	root := &cobra.Command{
		Use:           "tenurectl",
		SilenceErrors: true,
		SilenceUsage:  true,
		// Its arguments are a command name, or help.
		DisableFlagParsing: true,
		Args:               cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			switch {
			case len(args) == 0:
				printUsage(e.stderr, cmd)
				return errUsage
			case isHelp(args[0]):
				printUsage(e.stderr, cmd)
				return nil
			}
			unknownCommand(e, cmd, args[0])
			return errUsage
		},
		CompletionOptions: cobra.CompletionOptions{DisableDefaultCmd: true},
	}
	root.SetOut(e.stdout)
	root.SetErr(e.stderr)
	root.SetHelpFunc(func(cmd *cobra.Command, _ []string) { printUsage(e.stderr, cmd) })
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error {
		fmt.Fprintln(e.stderr, goFlagError(err))
		printUsage(e.stderr, cmd)
		return errUsage
	})
	root.SetHelpCommand(&cobra.Command{
		Use:   "help",
		Short: "print this list of commands",
		Args:  cobra.ArbitraryArgs,
		Run:   func(*cobra.Command, []string) { printUsage(e.stderr, root) },
	})
	// Commands list in the order they are added: a group's in its own
	// order, the root's by name.
	cobra.EnableCommandSorting = false
	cmds := append(opsCommands(e), importCommand(e), completionCommand(e), versionCommand(e))
	if extra != nil {
		cmds = append(cmds, extra(e)...)
	}
	slices.SortFunc(cmds, func(a, b *cobra.Command) int { return strings.Compare(a.Name(), b.Name()) })
	root.AddCommand(cmds...)
	return root
}

func isHelp(arg string) bool { return arg == "-h" || arg == "--help" || arg == "help" }

// IsHelp says whether arg asks for help (-h, --help, help).
func IsHelp(arg string) bool { return isHelp(arg) }

// PrintUsage writes cmd's usage: the commands under it, or its argument
// line and flags.
func PrintUsage(w io.Writer, cmd *cobra.Command) { printUsage(w, cmd) }

// NoArgs refuses positional arguments, saying so on stderr.
func NoArgs(stderr io.Writer) cobra.PositionalArgs { return noArgs(&env{stderr: stderr}) }

// Refuse prints cmd's usage on stderr and makes Run exit 2.
func Refuse(stderr io.Writer, cmd *cobra.Command) error { return refuse(&env{stderr: stderr}, cmd) }

func unknownCommand(e *env, root *cobra.Command, name string) {
	fmt.Fprintf(e.stderr, "tenurectl: unknown command %q\n\n", name)
	printUsage(e.stderr, root)
}

// printUsage writes cmd's usage: the commands under it, or its argument
// line and flags.
func printUsage(w io.Writer, cmd *cobra.Command) {
	if !cmd.HasParent() {
		fmt.Fprintln(w, "usage: tenurectl <command> [arguments]\n\ncommands:")
		listCommands(w, cmd)
		if !hasCommand(cmd, "dev") {
			fmt.Fprintln(w, "\ndev, demo and bench are in the developer build (make build's bin/tenurectl)")
		}
		return
	}
	if cmd.HasAvailableSubCommands() {
		fmt.Fprintf(w, "usage: %s <subcommand> [flags]\n\nsubcommands:\n", cmd.CommandPath())
		listCommands(w, cmd)
		return
	}
	fmt.Fprintf(w, "usage: %s %s\n", cmd.Parent().CommandPath(), cmd.Use)
	fmt.Fprint(w, cmd.LocalFlags().FlagUsages())
}

func listCommands(w io.Writer, cmd *cobra.Command) {
	for _, c := range cmd.Commands() {
		if c.IsAvailableCommand() && c.Name() != "help" {
			fmt.Fprintf(w, "  %-10s %s\n", c.Name(), c.Short)
		}
	}
}

func hasCommand(cmd *cobra.Command, name string) bool {
	for _, c := range cmd.Commands() {
		if c.Name() == name {
			return true
		}
	}
	return false
}

// noArgs refuses positional arguments.
func noArgs(e *env) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) > 0 {
			fmt.Fprintf(e.stderr, "%s: unexpected argument %q\n", cmd.CommandPath(), args[0])
			return refuse(e, cmd)
		}
		return nil
	}
}

// refuse prints cmd's usage and makes run exit 2.
func refuse(e *env, cmd *cobra.Command) error {
	printUsage(e.stderr, cmd)
	return errUsage
}

// goFlagArgs rewrites the flags of args in the flag package's dialect for
// pflag, for the command args name: "-name" of a long flag as "--name",
// "--n" of a one-letter flag as "-n". Flag values and the arguments after
// "--" are left as they are.
func goFlagArgs(root *cobra.Command, args []string) []string {
	cmd, _, err := root.Find(args)
	if err != nil || cmd.DisableFlagParsing {
		return args
	}
	cmd.InitDefaultHelpFlag()
	fs := cmd.Flags()
	out := make([]string, 0, len(args))
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			return append(out, args[i:]...)
		}
		if len(a) < 2 || a[0] != '-' {
			out = append(out, a)
			continue
		}
		dashes := 1
		if a[1] == '-' {
			dashes = 2
		}
		name, _, hasValue := strings.Cut(a[dashes:], "=")
		var f *pflag.Flag
		switch {
		case len(name) > 1:
			f = fs.Lookup(name)
			if f != nil && dashes == 1 {
				a = "-" + a
			}
		case len(name) == 1:
			f = fs.ShorthandLookup(name)
			if f != nil && dashes == 2 {
				a = a[1:]
			}
		}
		out = append(out, a)
		if f != nil && !hasValue && f.NoOptDefVal == "" && i+1 < len(args) {
			i++
			out = append(out, args[i])
		}
	}
	return out
}

// goFlagError words a pflag error as the flag package does, which names
// the flag and the value.
func goFlagError(err error) string {
	var notDefined *pflag.NotExistError
	var noValue *pflag.ValueRequiredError
	var invalid *pflag.InvalidValueError
	switch {
	case errors.As(err, &notDefined):
		return "flag provided but not defined: -" + notDefined.GetSpecifiedName()
	case errors.As(err, &noValue):
		return "flag needs an argument: -" + noValue.GetSpecifiedName()
	case errors.As(err, &invalid):
		f, cause := invalid.GetFlag(), invalid.Unwrap()
		var num *strconv.NumError
		if errors.As(cause, &num) {
			cause = errors.New("parse error")
			if errors.Is(num.Err, strconv.ErrRange) {
				cause = errors.New("value out of range")
			}
		}
		if f.Value.Type() == "bool" {
			return fmt.Sprintf("invalid boolean value %q for -%s: %v", invalid.GetValue(), f.Name, cause)
		}
		return fmt.Sprintf("invalid value %q for flag -%s: %v", invalid.GetValue(), f.Name, cause)
	}
	return err.Error()
}
