package main

import (
	"context"
	"flag"
	"fmt"
	"slices"
	"sort"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// Shell completion is cobra's: its bash, zsh and fish scripts ask the
// program itself for candidates (`tenurectl __complete ARGS...`), the
// protocol kubectl also speaks to a plugin's kubectl_complete-tenure
// helper. tenurectl parses its own flags with the standard library, so a
// cobra tree mirroring the registered commands (their names, summaries,
// flags and argument candidates) is built only to answer completion.

func init() {
	register(&command{
		name:    "completion",
		summary: "print a shell completion script: bash, zsh or fish",
		run:     runCompletion,
		completion: func(*env) (*flag.FlagSet, completeFunc) {
			return nil, func(_ context.Context, args []string, _ string) []string {
				if len(args) > 0 {
					return nil
				}
				return shells
			}
		},
	})
	for _, name := range []string{cobra.ShellCompRequestCmd, cobra.ShellCompNoDescRequestCmd} {
		register(&command{
			name:   name,
			hidden: true,
			run: func(ctx context.Context, e *env, args []string) error {
				root := completionTree(e)
				root.SetArgs(append([]string{name}, args...))
				return root.ExecuteContext(ctx)
			},
		})
	}
}

var shells = []string{"bash", "zsh", "fish"}

func runCompletion(_ context.Context, e *env, args []string) error {
	if len(args) != 1 || !slices.Contains(shells, args[0]) {
		fmt.Fprintf(e.stderr, `usage: tenurectl completion bash|zsh|fish

  bash: source <(tenurectl completion bash)
  zsh:  source <(tenurectl completion zsh)
  fish: tenurectl completion fish | source

As a kubectl plugin (kubectl tenure), completion goes through an executable
named kubectl_complete-tenure on $PATH that runs: kubectl-tenure __complete "$@"
`)
		if len(args) == 1 && (args[0] == "-h" || args[0] == "--help") {
			return flag.ErrHelp
		}
		return errUsage
	}
	root := completionTree(e)
	switch args[0] {
	case "bash":
		return root.GenBashCompletionV2(e.stdout, true)
	case "zsh":
		return root.GenZshCompletion(e.stdout)
	default:
		return root.GenFishCompletion(e.stdout, true)
	}
}

// shorthands are the one-letter flags that stand for a long one, as
// kubectl has them; completion offers them as pflag shorthands.
var shorthands = map[string]string{"n": "namespace", "o": "output"}

// completionTree mirrors the registered commands as cobra commands.
func completionTree(e *env) *cobra.Command {
	root := &cobra.Command{
		Use:               "tenurectl",
		SilenceErrors:     true,
		SilenceUsage:      true,
		CompletionOptions: cobra.CompletionOptions{DisableDefaultCmd: true},
	}
	root.SetOut(e.stdout)
	root.SetErr(e.stderr)
	for _, n := range visibleCommands() {
		c := commands[n]
		sub := &cobra.Command{Use: c.name, Short: c.summary, Run: func(*cobra.Command, []string) {}}
		root.AddCommand(sub)
		if c.completion == nil {
			sub.DisableFlagParsing = true // its own parser; nothing to offer
			continue
		}
		fs, complete := c.completion(e)
		if fs != nil {
			mirrorFlags(sub, fs)
		}
		sub.ValidArgsFunction = func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
			return complete(cmd.Context(), args, toComplete), cobra.ShellCompDirectiveNoFileComp
		}
	}
	return root
}

// mirrorFlags adds fs's flags to cmd, the one-letter aliases as shorthands
// of their long flag, with candidates for the flags that have a known set
// of values. The pflag values wrap fs's own, so the completion functions
// of the command see the flags typed so far (--kubeconfig, --context, -n).
func mirrorFlags(cmd *cobra.Command, fs *flag.FlagSet) {
	fs.VisitAll(func(gf *flag.Flag) {
		if _, alias := shorthands[gf.Name]; alias {
			return
		}
		pf := pflag.PFlagFromGoFlag(gf)
		for short, long := range shorthands {
			if long == gf.Name {
				pf.Shorthand = short
			}
		}
		cmd.Flags().AddFlag(pf)
	})
	fixed := func(values ...string) cobra.CompletionFunc {
		return func(*cobra.Command, []string, string) ([]cobra.Completion, cobra.ShellCompDirective) {
			return values, cobra.ShellCompDirectiveNoFileComp
		}
	}
	if fs.Lookup("output") != nil {
		_ = cmd.RegisterFlagCompletionFunc("output", fixed(outputs...))
	}
	if fs.Lookup("context") != nil {
		_ = cmd.RegisterFlagCompletionFunc("context", func(cmd *cobra.Command, _ []string, _ string) ([]cobra.Completion, cobra.ShellCompDirective) {
			return kubeContexts(cmd), cobra.ShellCompDirectiveNoFileComp
		})
	}
	if fs.Lookup("namespace") != nil {
		_ = cmd.RegisterFlagCompletionFunc("namespace", func(cmd *cobra.Command, _ []string, _ string) ([]cobra.Completion, cobra.ShellCompDirective) {
			return namespaces(cmd), cobra.ShellCompDirectiveNoFileComp
		})
	}
}

// kubeContexts lists the contexts of the kubeconfig the command line names.
func kubeContexts(cmd *cobra.Command) []string {
	k := kubeFlags{}
	k.kubeconfig, _ = cmd.Flags().GetString("kubeconfig")
	raw, err := k.clientConfig().RawConfig()
	if err != nil {
		return nil
	}
	return sortedKeys(raw.Contexts)
}

// namespaces lists the cluster's namespaces.
func namespaces(cmd *cobra.Command) []string {
	k := kubeFlags{}
	k.kubeconfig, _ = cmd.Flags().GetString("kubeconfig")
	k.context, _ = cmd.Flags().GetString("context")
	c, err := k.client()
	if err != nil {
		return nil
	}
	out, _ := c.Namespaces(cmd.Context())
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
