package main

import (
	"bytes"
	"os"
	"strings"
	"testing"
)

// The test binary doubles as tenurectl: with this variable set it runs main,
// so the tests exercise the real process boundary (dev up must leave the
// control plane running after tenurectl exits) without a separate build.
const runMainEnv = "TENURECTL_TEST_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(runMainEnv) == "1" {
		main()
		return
	}
	os.Exit(m.Run())
}

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
