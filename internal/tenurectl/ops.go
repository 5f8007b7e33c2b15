package tenurectl

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"golang.org/x/term"

	"github.com/tenure-ipam/tenure/internal/controller/repair"
	"github.com/tenure-ipam/tenure/internal/ops"
)

// opsCommand is an operator command: kubectl's connection and output
// flags, flags of its own, a fixed number of positional arguments, and a
// call into internal/ops whose report is printed.
type opsCommand struct {
	// use is the command's name and its positional arguments: "get NETWORK".
	use, summary string
	nargs        int
	// flags adds the command's own flags; the values it returns are read
	// by run.
	flags func(fs *pflag.FlagSet) any
	// complete returns the candidates for the positional argument.
	complete func(ctx context.Context, st *opsState, toComplete string) []string
	run      func(ctx context.Context, st *opsState, args []string) (report, error)
}

// opsState is one invocation's parsed flags.
type opsState struct {
	e      *env
	kube   kubeFlags
	output string
	own    any // what opsCommand.flags returned
}

func (st *opsState) client() (*ops.Client, error) { return st.kube.client() }

func (oc *opsCommand) command(e *env) *cobra.Command {
	st := &opsState{e: e}
	name, argsUsage, _ := strings.Cut(oc.use, " ")
	cmd := &cobra.Command{
		Use:   oc.use + " [flags]",
		Short: oc.summary,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != oc.nargs {
				fmt.Fprintf(e.stderr, "tenurectl %s: want %d argument(s) (%s), got %d\n", name, oc.nargs, argsUsage, len(args))
				return refuse(e, cmd)
			}
			return nil
		},
		ValidArgsFunction: func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
			if oc.complete == nil || len(args) >= oc.nargs {
				return nil, cobra.ShellCompDirectiveNoFileComp
			}
			return oc.complete(cmd.Context(), st, toComplete), cobra.ShellCompDirectiveNoFileComp
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(e, cmd, st.output); err != nil {
				return err
			}
			rep, err := oc.run(cmd.Context(), st, args)
			if rep != nil {
				if perr := printReport(e.stdout, rep, st.output); perr != nil {
					return errors.Join(err, perr)
				}
			}
			return err
		},
	}
	fs := cmd.Flags()
	st.kube.register(fs)
	registerOutput(fs, &st.output)
	if oc.flags != nil {
		st.own = oc.flags(fs)
	}
	candidates := func(list func(context.Context) []string) cobra.CompletionFunc {
		return func(cmd *cobra.Command, _ []string, _ string) ([]cobra.Completion, cobra.ShellCompDirective) {
			return list(cmd.Context()), cobra.ShellCompDirectiveNoFileComp
		}
	}
	_ = cmd.RegisterFlagCompletionFunc("output", candidates(func(context.Context) []string { return outputs }))
	_ = cmd.RegisterFlagCompletionFunc("context", candidates(func(context.Context) []string { return st.kube.contexts() }))
	_ = cmd.RegisterFlagCompletionFunc("namespace", candidates(func(ctx context.Context) []string {
		return completeWith(st, func(c *ops.Client) ([]string, error) { return c.Namespaces(ctx) })
	}))
	return cmd
}

// The flags of release and check.
type releaseFlags struct {
	network string
	force   bool
	policyFlags
}

// The flags of reserve.
type reserveFlags struct {
	reason string
	dryRun bool
}

// policyFlags are the controller's flags that decide when an owner is
// gone.
type policyFlags struct {
	releaseUnfenced bool
	gracePeriod     time.Duration
}

// policy is the controller's policy these flags describe.
func (p *policyFlags) policy() repair.Policy {
	return repair.Policy{ReleaseUnfenced: p.releaseUnfenced, NodeGracePeriod: p.gracePeriod}
}

func (p *policyFlags) add(fs *pflag.FlagSet) {
	fs.BoolVar(&p.releaseUnfenced, "release-unfenced", false, "tenure-controller's --release-unfenced: the terminating pods of a node NotReady for --node-grace-period count as gone though the node is not fenced")
	nonNegativeDuration(fs, &p.gracePeriod, "node-grace-period", ops.DefaultNodeGracePeriod, "tenure-controller's --node-grace-period: with --release-unfenced, how long a node is NotReady before its terminating pods count as gone")
}

// opsCommands are the operator commands but import.
func opsCommands(e *env) []*cobra.Command {
	var cmds []*cobra.Command
	for _, oc := range []*opsCommand{
		{
			use: "pools", summary: "every network and range: capacity, allocated, free, usage",
			run: func(ctx context.Context, st *opsState, _ []string) (report, error) {
				return call(st, func(c *ops.Client) (report, error) { return c.Pools(ctx) })
			},
		},
		{
			use: "get NETWORK", summary: "a network's reservations (NETWORK: an allocation scope, a CNI network name or a NetworkAttachmentDefinition NS/NAME): owner pod or claim, node, age", nargs: 1,
			complete: func(ctx context.Context, st *opsState, _ string) []string {
				return completeWith(st, func(c *ops.Client) ([]string, error) { return c.Networks(ctx) })
			},
			run: func(ctx context.Context, st *opsState, args []string) (report, error) {
				return call(st, func(c *ops.Client) (report, error) { return c.Get(ctx, args[0]) })
			},
		},
		{
			use: "who IP|PREFIX", summary: "who holds an address or prefix, and since when", nargs: 1,
			run: func(ctx context.Context, st *opsState, args []string) (report, error) {
				return call(st, func(c *ops.Client) (report, error) { return c.Who(ctx, args[0]) })
			},
		},
		{
			use: "why POD", summary: "a pod's attachments and their last allocation outcome", nargs: 1,
			flags: func(fs *pflag.FlagSet) any {
				f := &policyFlags{}
				f.add(fs)
				return f
			},
			complete: func(ctx context.Context, st *opsState, _ string) []string {
				return completeWith(st, func(c *ops.Client) ([]string, error) {
					ns, err := st.kube.namespaceOrDefault()
					if err != nil {
						return nil, err
					}
					return c.PodNames(ctx, ns)
				})
			},
			run: func(ctx context.Context, st *opsState, args []string) (report, error) {
				ns, err := st.kube.namespaceOrDefault()
				if err != nil {
					return nil, err
				}
				f := st.own.(*policyFlags)
				return call(st, func(c *ops.Client) (report, error) { return c.Why(ctx, ns, args[0], f.policy()) })
			},
		},
		{
			use: "reserve NETWORK ADDR|RANGE", summary: "set addresses aside in a network, with a reason: nothing hands them out until tenurectl release gives them back (ADDR|RANGE: an IP, a CIDR or FIRST-LAST)", nargs: 2,
			flags: func(fs *pflag.FlagSet) any {
				f := &reserveFlags{}
				fs.StringVar(&f.reason, "reason", "", "why the addresses are set aside (required); get, who and pools show it")
				fs.BoolVar(&f.dryRun, "dry-run", false, "check and print the IPReservations (-o yaml: a List for kubectl apply) without creating them")
				return f
			},
			complete: func(ctx context.Context, st *opsState, _ string) []string {
				return completeWith(st, func(c *ops.Client) ([]string, error) { return c.Networks(ctx) })
			},
			run: func(ctx context.Context, st *opsState, args []string) (report, error) {
				f := st.own.(*reserveFlags)
				return call(st, func(c *ops.Client) (report, error) {
					return c.Reserve(ctx, args[0], args[1], ops.SetAsideOptions{Reason: f.reason, DryRun: f.dryRun})
				})
			},
		},
		{
			use: "release IP|PREFIX|RANGE", summary: "release one address or prefix (refuses while its owner is alive), or give back addresses set aside (RANGE: FIRST-LAST, with --network)", nargs: 1,
			flags: func(fs *pflag.FlagSet) any {
				f := &releaseFlags{}
				fs.StringVar(&f.network, "network", "", "the network (allocation scope) holding it, when several do")
				fs.BoolVar(&f.force, "force", false, "release it even though its owner is alive")
				f.add(fs)
				return f
			},
			run: func(ctx context.Context, st *opsState, args []string) (report, error) {
				f := st.own.(*releaseFlags)
				if strings.Contains(args[0], "-") {
					if f.network == "" {
						return nil, fmt.Errorf("RANGE %q: --network is required to give back a range set aside", args[0])
					}
					return call(st, func(c *ops.Client) (report, error) { return c.ReleaseSetAside(ctx, f.network, args[0]) })
				}
				return call(st, func(c *ops.Client) (report, error) {
					return c.Release(ctx, args[0], ops.ReleaseOptions{Network: f.network, Force: f.force, ReleaseUnfenced: f.releaseUnfenced, NodeGracePeriod: f.gracePeriod})
				})
			},
		},
		{
			use: "check", summary: "check every reservation, claim, pod and node; exit 1 on problems",
			flags: func(fs *pflag.FlagSet) any {
				f := &policyFlags{}
				f.add(fs)
				return f
			},
			run: runCheck,
		},
	} {
		cmds = append(cmds, oc.command(e))
	}
	return cmds
}

func call(st *opsState, fn func(*ops.Client) (report, error)) (report, error) {
	c, err := st.client()
	if err != nil {
		return nil, err
	}
	rep, err := fn(c)
	if err != nil {
		return nil, err // a nil report in a non-nil interface would be printed
	}
	return rep, nil
}

// completeWith returns what fn lists; a completion that cannot reach the
// cluster offers nothing rather than an error.
func completeWith(st *opsState, fn func(*ops.Client) ([]string, error)) []string {
	c, err := st.client()
	if err != nil {
		return nil
	}
	out, _ := fn(c)
	return out
}

// Exit codes of check beyond 0 (clean) and 2 (usage), as kubectl diff
// has them: 1 when it found problems, more when it could not check.
const (
	checkProblems    exitCode = 1
	checkCouldNotRun exitCode = 3
)

// runCheck prints the report and exits 1 when it holds findings; a
// progress line goes to a terminal on stderr while the lists are read.
func runCheck(ctx context.Context, st *opsState, _ []string) (report, error) {
	c, err := st.client()
	if err != nil {
		fmt.Fprintf(st.e.stderr, "tenurectl check: %v\n", err)
		return nil, checkCouldNotRun
	}
	clear := func() {}
	if f, ok := st.e.stderr.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		c.Progress = func(what string, n int) { fmt.Fprintf(f, "\r\033[Kreading %s: %d", what, n) }
		clear = func() { fmt.Fprint(f, "\r\033[K") }
	}
	f := st.own.(*policyFlags)
	rep, err := c.Check(ctx, ops.CheckOptions{ReleaseUnfenced: f.releaseUnfenced, NodeGracePeriod: f.gracePeriod})
	clear()
	if err != nil {
		fmt.Fprintf(st.e.stderr, "tenurectl check: %v\n", err)
		return nil, checkCouldNotRun
	}
	if !rep.OK() {
		return rep, checkProblems
	}
	return rep, nil
}
