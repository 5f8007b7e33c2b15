package tenurectl

import (
	"fmt"
	"slices"

	"github.com/spf13/cobra"
)

// Shell completion is cobra's: its bash, zsh and fish scripts ask the
// program itself for candidates (`tenurectl __complete ARGS...`), the
// protocol kubectl also speaks to a plugin's kubectl_complete-tenure
// helper.

var shells = []string{"bash", "zsh", "fish"}

const completionUsage = `usage: tenurectl completion bash|zsh|fish

  bash: source <(tenurectl completion bash)
  zsh:  source <(tenurectl completion zsh)
  fish: tenurectl completion fish | source

As a kubectl plugin (kubectl tenure), completion goes through an executable
named kubectl_complete-tenure on $PATH that runs: kubectl-tenure __complete "$@"
`

func completionCommand(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use:       "completion bash|zsh|fish",
		Short:     "print a shell completion script: bash, zsh or fish",
		ValidArgs: shells,
		Args:      cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 || !slices.Contains(shells, args[0]) {
				fmt.Fprint(e.stderr, completionUsage)
				return errUsage
			}
			root := cmd.Root()
			switch args[0] {
			case "bash":
				return root.GenBashCompletionV2(e.stdout, true)
			case "zsh":
				return root.GenZshCompletion(e.stdout)
			default:
				return root.GenFishCompletion(e.stdout, true)
			}
		},
	}
	cmd.SetHelpFunc(func(*cobra.Command, []string) { fmt.Fprint(e.stderr, completionUsage) })
	return cmd
}
