package tenurectl

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"golang.org/x/term"

	"github.com/tenure-ipam/tenure/internal/ops/importwa"
)

// importRefused is import's exit code when it refused an address that
// another tenure owner holds: the report lists them, and a script that
// switches configurations after the import must not go on.
const importRefused exitCode = 1

// progressMin is the number of allocations from which import draws a
// progress bar: below it the import is over before a bar would say much.
const progressMin = 200

func importCommand(e *env) *cobra.Command {
	return (&opsCommand{
		use: "import whereabouts", summary: "import whereabouts' allocations as tenure reservations (dry run unless --apply)", nargs: 1,
		flags: func(fs *pflag.FlagSet) any {
			return fs.Bool("apply", false, "write the reservations (default: only show what would be written)")
		},
		complete: func(context.Context, *opsState, string) []string { return []string{"whereabouts"} },
		run:      runImport,
	}).command(e)
}

func runImport(ctx context.Context, st *opsState, args []string) (report, error) {
	if args[0] != "whereabouts" {
		fmt.Fprintf(st.e.stderr, "tenurectl import: can import from whereabouts only, not %q\n", args[0])
		return nil, errUsage
	}
	c, err := st.kube.kubeClient()
	if err != nil {
		return nil, err
	}
	opts := importwa.Options{Apply: *st.own.(*bool)}
	bars := progressBars(st.e.stderr)
	opts.Progress = bars.update
	rep, err := importwa.Run(ctx, c, opts)
	bars.finish()
	if err != nil {
		if rep != nil {
			return rep, err
		}
		return nil, err
	}
	if rep.Count(importwa.Conflict) > 0 {
		return rep, importRefused
	}
	return rep, nil
}

// bars draws one progress bar per phase on a terminal; elsewhere it draws
// nothing.
type bars struct {
	out   io.Writer // nil: not a terminal
	phase string
	bar   *progressbar.ProgressBar
}

func progressBars(stderr io.Writer) *bars {
	if f, ok := stderr.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		return &bars{out: f}
	}
	return &bars{}
}

func (b *bars) update(phase string, done, total int) {
	if b.out == nil || total < progressMin {
		return
	}
	if phase != b.phase {
		b.finish()
		b.phase = phase
		b.bar = progressbar.NewOptions(total,
			progressbar.OptionSetWriter(b.out),
			progressbar.OptionSetDescription(phase+" allocations"),
			progressbar.OptionShowCount(),
			progressbar.OptionClearOnFinish(),
			progressbar.OptionThrottle(100_000_000), // 100ms: a redraw per allocation would flood a slow terminal
		)
	}
	_ = b.bar.Set(done)
}

func (b *bars) finish() {
	if b.bar != nil {
		_ = b.bar.Finish()
		b.bar = nil
	}
}
