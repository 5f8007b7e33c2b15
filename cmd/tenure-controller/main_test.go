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
	kc := "--kubeconfig " + filepath.Join(t.TempDir(), "missing") + " "
	// command line -> exit code and what stderr says
	want := map[string]struct {
		code   int
		stderr string
	}{
		"help":                            {0, "usage: tenure-controller"},
		"-h":                              {0, "-sweep-interval"},
		kc + "sweep":                      {2, `tenure-controller: unexpected argument "sweep"`},
		"--nope":                          {2, "flag provided but not defined: -nope"},
		"--workers many":                  {2, `invalid value "many"`},
		kc + "--dry-run":                  {2, "--dry-run needs --once"},
		kc + "--sweep-interval 0s":        {2, "--sweep-interval must be positive"},
		kc + "--pool-status-interval -1s": {2, "--pool-status-interval must be positive, got -1s"},
		kc + "--node-grace-period -5m":    {2, "--node-grace-period must not be negative, got -5m0s"},
		kc + "--workers 0":                {2, "--workers must be at least 1, got 0"},
		kc + "--leader-election-lease-duration -15s":            {2, "--leader-election-lease-duration must be positive, got -15s"},
		kc + "--leader-election-renew-deadline 0s":              {2, "--leader-election-renew-deadline must be positive, got 0s"},
		kc + "--leader-election-retry-period -2s":               {2, "--leader-election-retry-period must be positive, got -2s"},
		kc + "--sticky-release-after 0s":                        {2, "--sticky-release-after must be positive"},
		kc + "--once":                                           {1, "loading API client config"},
		kc + "--node-grace-period 1m --once":                    {1, "--node-grace-period has no effect without --release-unfenced"},
		kc + "--release-unfenced --node-grace-period 1m --once": {1, "loading API client config"},
	}
	for line, w := range want {
		var stdout, stderr bytes.Buffer
		code := run(strings.Fields(line), &stdout, &stderr)
		if code != w.code || !strings.Contains(stderr.String(), w.stderr) {
			t.Errorf("tenure-controller %s: exit %d, stderr %q; want exit %d and %q", line, code, stderr.String(), w.code, w.stderr)
		}
	}
}
