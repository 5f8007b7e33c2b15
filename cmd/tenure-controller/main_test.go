package main

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"
)

// TestRun: help, stray arguments, unknown flags and bad values exit before
// anything connects: 0 for help, 2 with the usage or the reason on stderr
// otherwise. The kubeconfig does not exist, so a command line that got
// further would fail loading it instead (the last case shows that).
func TestRun(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "missing")
	for _, tc := range []struct {
		args []string
		code int
		want string // on stderr
	}{
		{[]string{"help"}, 0, "usage: tenure-controller"},
		{[]string{"-h"}, 0, "-sweep-interval"},
		{[]string{"--kubeconfig", missing, "sweep"}, 2, `tenure-controller: unexpected argument "sweep"`},
		{[]string{"--nope"}, 2, "flag provided but not defined: -nope"},
		{[]string{"--workers", "many"}, 2, `invalid value "many"`},
		{[]string{"--kubeconfig", missing, "--dry-run"}, 2, "--dry-run needs --once"},
		{[]string{"--kubeconfig", missing, "--sweep-interval", "0s"}, 2, "--sweep-interval must be positive"},
		{[]string{"--kubeconfig", missing, "--pool-status-interval", "-1s"}, 2, "--pool-status-interval must be positive"},
		{[]string{"--kubeconfig", missing, "--node-grace-period", "-1s"}, 2, "--node-grace-period must not be negative"},
		{[]string{"--kubeconfig", missing, "--once"}, 1, "loading API client config"},
	} {
		var stdout, stderr bytes.Buffer
		code := run(tc.args, &stdout, &stderr)
		if code != tc.code || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("tenure-controller %q: exit %d, stderr %q; want exit %d and %q", tc.args, code, stderr.String(), tc.code, tc.want)
		}
	}
}
