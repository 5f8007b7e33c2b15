package tenurectl

import (
	"bytes"
	"context"
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

func complete(t *testing.T, args ...string) []string {
	t.Helper()
	var stdout, stderr bytes.Buffer
	if code := run(append([]string{"__complete"}, args...), &stdout, &stderr); code != 0 {
		t.Fatalf("__complete %q: exit %d: %s", args, code, stderr.String())
	}
	var out []string
	for _, l := range strings.Split(strings.TrimSpace(stdout.String()), "\n") {
		name, _, _ := strings.Cut(l, "\t")
		out = append(out, name)
	}
	return out
}

func TestParseInterspersed(t *testing.T) {
	for _, tc := range []struct {
		args            []string
		pos             []string
		output, ns, ctx string
		force           bool
	}{
		{[]string{"san"}, []string{"san"}, "", "", "", false},
		{[]string{"san", "-o", "json"}, []string{"san"}, "json", "", "", false},
		{[]string{"-ojson", "san", "-nkube-system"}, []string{"san"}, "json", "kube-system", "", false},
		{[]string{"--output=yaml", "san", "--namespace", "x", "--context=c"}, []string{"san"}, "yaml", "x", "c", false},
		{[]string{"10.0.0.5", "--force", "-o", "wide"}, []string{"10.0.0.5"}, "wide", "", "", true},
		{[]string{"a", "--", "-o", "b"}, []string{"a", "-o", "b"}, "", "", "", false},
		{[]string{"-o=json", "a", "b"}, []string{"a", "b"}, "json", "", "", false},
	} {
		var k kubeFlags
		var output string
		var pos []string
		force := new(bool)
		cmd := (&opsCommand{
			use: "t", nargs: len(tc.pos),
			flags: func(fs *pflag.FlagSet) any { force = fs.Bool("force", false, ""); return force },
			run: func(_ context.Context, st *opsState, args []string) (report, error) {
				k, output, pos = st.kube, st.output, args
				return nil, nil
			},
		}).command(&env{stdout: io.Discard, stderr: io.Discard})
		cmd.SetArgs(tc.args)
		err := cmd.Execute()
		if err != nil || !slices.Equal(pos, tc.pos) || output != tc.output || k.namespace != tc.ns || k.context != tc.ctx || *force != tc.force {
			t.Errorf("%q: pos %q output %q ns %q context %q force %v err %v; want %q %q %q %q %v",
				tc.args, pos, output, k.namespace, k.context, *force, err, tc.pos, tc.output, tc.ns, tc.ctx, tc.force)
		}
	}
}

// TestOpsUsage: what the operator commands refuse before reaching a
// cluster.
func TestOpsUsage(t *testing.T) {
	testUsage(t, []usageCase{
		{[]string{"get"}, 2, "tenurectl get: want 1 argument(s) (NETWORK), got 0"},
		{[]string{"get", "a", "b"}, 2, "got 2"},
		{[]string{"pools", "extra"}, 2, "usage: tenurectl pools"},
		{[]string{"who", "10.0.0.5", "-o", "xml"}, 2, "-o must be one of json, yaml, wide, got \"xml\""},
		{[]string{"release", "--bogus", "10.0.0.5"}, 2, "flag provided but not defined: -bogus"},
		{[]string{"check", "--help"}, 0, "-node-grace-period"},
		{[]string{"check", "--node-grace-period=-5m"}, 2, `invalid value "-5m" for flag -node-grace-period: must not be negative`},
		{[]string{"check", "--node-grace-period", "soon"}, 2, `invalid value "soon" for flag -node-grace-period: parse error`},
		{[]string{"release", "10.0.0.5", "--node-grace-period", "-1s"}, 2, `invalid value "-1s" for flag -node-grace-period: must not be negative`},
		{[]string{"completion"}, 2, "usage: tenurectl completion bash|zsh|fish"},
		{[]string{"completion", "tcsh"}, 2, "kubectl_complete-tenure"},
	})
}

// TestOpsKubeconfigErrors: a kubeconfig that does not exist is an error of
// the command (exit 1), and check's "could not check" is exit 3.
func TestOpsKubeconfigErrors(t *testing.T) {
	missing := t.TempDir() + "/nope"
	testUsage(t, []usageCase{
		{[]string{"pools", "--kubeconfig", missing}, 1, "tenurectl pools: stat " + missing},
		{[]string{"check", "--kubeconfig", missing}, 3, "tenurectl check: stat " + missing},
	})
}

// TestCompletion: the scripts for each shell call back into tenurectl, and
// the candidates it answers: commands (not the hidden ones), flags with
// their shorthands, -o's values, completion's shells.
func TestCompletion(t *testing.T) {
	for _, sh := range shells {
		var stdout, stderr bytes.Buffer
		if code := run([]string{"completion", sh}, &stdout, &stderr); code != 0 || !strings.Contains(stdout.String(), "__complete") {
			t.Errorf("completion %s: exit %d, script %.200q, stderr %q", sh, code, stdout.String(), stderr.String())
		}
	}
	cmds := complete(t, "")
	for _, want := range []string{"check", "completion", "get", "pools", "release", "version", "who", "why"} {
		if !slices.Contains(cmds, want) {
			t.Errorf("commands %q lack %s", cmds, want)
		}
	}
	if slices.ContainsFunc(cmds, func(c string) bool { return strings.HasPrefix(c, "__") }) {
		t.Errorf("commands %q include a hidden one", cmds)
	}
	flags := complete(t, "release", "--")
	for _, want := range []string{"--force", "--network", "--kubeconfig", "--context", "--namespace", "--output", "--node-grace-period"} {
		if !slices.Contains(flags, want) {
			t.Errorf("release flags %q lack %s", flags, want)
		}
	}
	if slices.Contains(flags, "--n") || slices.Contains(flags, "--o") {
		t.Errorf("release flags %q offer the one-letter aliases as long flags", flags)
	}
	if got := complete(t, "get", "-o", ""); !slices.Equal(got, []string{"json", "yaml", "wide", ":4"}) {
		t.Errorf("get -o: %q", got)
	}
	if got := complete(t, "completion", ""); !slices.Equal(got, []string{"bash", "zsh", "fish", ":4"}) {
		t.Errorf("completion: %q", got)
	}
}

// TestFlagPackageDialect: flags written as the standard library's flag
// package reads them (one dash for a long flag, two for a one-letter one)
// mean what they mean there, and flag errors are worded as it words them.
func TestFlagPackageDialect(t *testing.T) {
	missing := t.TempDir() + "/nope"
	testUsage(t, []usageCase{
		{[]string{"check", "-node-grace-period=-5m"}, 2, `invalid value "-5m" for flag -node-grace-period: must not be negative`},
		{[]string{"check", "-node-grace-period", "1m", "-kubeconfig", missing}, 3, "tenurectl check: stat " + missing},
		{[]string{"pools", "-kubeconfig=" + missing}, 1, "tenurectl pools: stat " + missing},
		{[]string{"who", "10.0.0.5", "--o", "xml"}, 2, `-o must be one of json, yaml, wide, got "xml"`},
		{[]string{"who", "10.0.0.5", "--o=xml"}, 2, `got "xml"`},
		{[]string{"check", "-help"}, 0, "--node-grace-period duration"},
		{[]string{"release", "10.0.0.5", "-network"}, 2, "flag needs an argument: -network"},
		{[]string{"release", "10.0.0.5", "-force=maybe"}, 2, `invalid boolean value "maybe" for -force: parse error`},
		{[]string{"release", "10.0.0.5", "-x"}, 2, "flag provided but not defined: -x"},
		{[]string{"who", "10.0.0.5", "--", "-o"}, 2, "want 1 argument(s) (IP|PREFIX), got 2"},
		{[]string{"-n", "x", "get"}, 2, `unknown command "-n"`},
	})
}
