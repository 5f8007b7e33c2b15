package tenurectl

import (
	"bytes"
	"io"
	"os"
	"strings"
	"testing"
)

// The test binary doubles as tenurectl: with this variable set it runs main,
// so the tests exercise the real process boundary (dev up must leave the
// control plane running after tenurectl exits) without a separate build.
const runMainEnv = "TENURECTL_TEST_RUN_MAIN"

// runTests runs the tests; the integration build runs them inside a
// control plane (ops_integration_test.go).
var runTests = func(m *testing.M) int { return m.Run() }

func TestMain(m *testing.M) {
	if os.Getenv(runMainEnv) == "1" {
		os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(runTests(m))
}

// run is the tenurectl that ships: the operator commands alone.
func run(args []string, stdout, stderr io.Writer) int { return Run(args, stdout, stderr, nil) }

type usageCase struct {
	args []string
	code int
	want string // on stderr
}

func testUsage(t *testing.T, cases []usageCase) {
	t.Helper()
	for _, tc := range cases {
		var stdout, stderr bytes.Buffer
		code := run(tc.args, &stdout, &stderr)
		if code != tc.code || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("tenurectl %q: exit %d, stderr %q; want exit %d and %q", tc.args, code, stderr.String(), tc.code, tc.want)
		}
	}
}

// TestUsage: what every build of tenurectl answers.
func TestUsage(t *testing.T) {
	testUsage(t, []usageCase{
		{nil, 2, "usage: tenurectl <command>"},
		{[]string{"help"}, 0, "usage: tenurectl <command>"},
		{[]string{"--help"}, 0, "usage: tenurectl <command>"},
		{[]string{"bogus"}, 2, `unknown command "bogus"`},
		{[]string{"--bogus"}, 2, `unknown command "--bogus"`},
	})
}

// TestVersion: every build, the release one included, names its build.
func TestVersion(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run([]string{"version"}, &stdout, &stderr); code != 0 || !strings.HasPrefix(stdout.String(), "tenurectl ") || !strings.Contains(stdout.String(), "revision") {
		t.Fatalf("tenurectl version: exit %d, stdout %q, stderr %q", code, stdout.String(), stderr.String())
	}
	testUsage(t, []usageCase{{[]string{"version", "extra"}, 2, "usage: tenurectl version"}})
}
