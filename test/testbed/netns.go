package testbed

import (
	"fmt"
	"os"
	"os/exec"
	"strings"

	"github.com/containernetworking/plugins/pkg/ns"
)

// CanPlumb reports whether real network namespaces can be made here (root
// and iproute2), and why not.
func CanPlumb() (bool, string) {
	if os.Geteuid() != 0 {
		return false, "not root: network namespaces need CAP_SYS_ADMIN"
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return false, "iproute2's ip is not installed"
	}
	return true, ""
}

// AddNetns creates a named network namespace (/var/run/netns/NAME) with its
// loopback up, and returns its path and a function deleting it.
func AddNetns(name string) (path string, remove func(), err error) {
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		return "", nil, fmt.Errorf("ip netns add %s: %v: %s", name, err, out)
	}
	remove = func() { _ = exec.Command("ip", "netns", "delete", name).Run() }
	if out, err := exec.Command("ip", "-n", name, "link", "set", "lo", "up").CombinedOutput(); err != nil {
		remove()
		return "", nil, fmt.Errorf("lo up in %s: %v: %s", name, err, out)
	}
	return netnsPath(name), remove, nil
}

// InNetns runs fn in the named namespace on a locked thread of its own
// (ns.Do); processes fn starts (CNI plugins) inherit the namespace, so
// nothing fn plumbs touches the machine's own network namespace.
func InNetns(name string, fn func() error) error {
	return ns.WithNetNSPath(netnsPath(name), func(ns.NetNS) error { return fn() })
}

// netnsPath is the path of the named network namespace (ip netns add).
func netnsPath(name string) string { return "/var/run/netns/" + name }

// IPIn runs `ip ARGS` in a namespace and returns its output.
func IPIn(name string, args ...string) (string, error) {
	out, err := exec.Command("ip", append([]string{"-n", name}, args...)...).CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// NeedPlumb makes t skip when real network namespaces cannot be made here
// (CanPlumb); under `make test` it fails instead (SkipUnlessEverything).
func NeedPlumb(t SkipOrFail) {
	t.Helper()
	if ok, why := CanPlumb(); !ok {
		SkipUnlessEverything(t, why+" (make test runs every test: run it as root; hack/test-deps.sh installs iproute2)")
	}
}

// SkipOrFail is the part of testing.TB that SkipUnlessEverything needs.
type SkipOrFail interface {
	Helper()
	Skip(args ...any)
	Fatal(args ...any)
}

// SkipUnlessEverything skips t for why, except under `make test`, which
// runs as root with every tool installed and sets TENURE_TEST_EVERYTHING=1:
// there a test that cannot run fails, saying why, rather than passing
// without having run.
func SkipUnlessEverything(t SkipOrFail, why string) {
	t.Helper()
	if os.Getenv(EnvTestEverything) == "1" {
		t.Fatal(why)
		return
	}
	t.Skip(why)
}

// EnvTestEverything is set to 1 by `make test`.
const EnvTestEverything = "TENURE_TEST_EVERYTHING"
