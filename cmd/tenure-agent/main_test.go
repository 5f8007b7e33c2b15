package main

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"
)

// TestRun: help, misspelt subcommands, unknown flags and bad values exit
// before anything starts: 0 for help, 2 with the usage or the reason on
// stderr otherwise. $NODE_NAME is set and the kubeconfig does not exist,
// so a command line that got as far as starting an agent would fail
// loading it instead (the last case shows that).
func TestRun(t *testing.T) {
	t.Setenv("NODE_NAME", "node-a")
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing")
	for _, tc := range []struct {
		args []string
		code int
		want string // on stderr
	}{
		{[]string{"help"}, 0, "usage: tenure-agent [flags]"},
		{[]string{"-h"}, 0, "tenure-agent health"},
		{[]string{"helth"}, 2, `tenure-agent: unknown command "helth"`},
		{[]string{"--kubeconfig", missing, "helth"}, 2, "usage: tenure-agent [flags]"},
		{[]string{"--nope"}, 2, "flag provided but not defined: -nope"},
		{[]string{"--node-name="}, 2, "--node-name (or $NODE_NAME) is required"},
		{[]string{"--api-encoding", "cbor", "--kubeconfig", missing}, 2, `api encoding \"cbor\": want \"auto\" or \"json\"`},
		{[]string{"--release-cooldown", "-5s", "--kubeconfig", missing}, 2, `--release-cooldown must not be negative" value=-5s`},
		{[]string{"--release-cooldown", "soon", "--kubeconfig", missing}, 2, `invalid value "soon" for flag -release-cooldown`},
		{[]string{"health", "--ready=maybe"}, 2, `invalid boolean value "maybe"`},
		{[]string{"health", "extra"}, 2, `tenure-agent health: unknown argument "extra"`},
		{[]string{"health", "-h"}, 0, "-ready"},
		{[]string{"health", "--socket", filepath.Join(dir, "agent.sock")}, 1, "agent.sock"},
		{[]string{"install", "--bogus"}, 2, "flag provided but not defined: -bogus"},
		{[]string{"install", "extra"}, 2, `tenure-agent install: unknown argument "extra"`},
		{[]string{"install", "--source", missing, "--cni-bin-dir", dir, "--cni-conf-dir", dir}, 1, "install failed"},
		{[]string{"--kubeconfig", missing}, 1, "loading API client config"},
	} {
		var stdout, stderr bytes.Buffer
		code := run(tc.args, &stdout, &stderr)
		if code != tc.code || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("tenure-agent %q: exit %d, stderr %q; want exit %d and %q", tc.args, code, stderr.String(), tc.code, tc.want)
		}
		if tc.code == 2 && strings.Contains(stderr.String(), "loading API client config") {
			t.Errorf("tenure-agent %q went on to load the API config", tc.args)
		}
	}
}
