package nodetest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"testing"
	"time"
)

// Suite is a real-node test package's life, run from its TestMain.
type Suite struct {
	// Name prefixes what the suite prints, e.g. "test/node".
	Name string
	// SetUp makes the cluster within ctx, pushing on undo what takes each
	// step back; undo runs on a failed set-up too, as far as it got.
	SetUp func(ctx context.Context, undo *Undo) error
	// Last are run after every other test, in this order, as -test.run
	// selects them: tests that take a node away.
	Last []testing.InternalTest
	// After, when set, runs once the tests ran, on the cluster still up;
	// its error fails the package.
	After func() error
}

// Run sets the cluster up, runs the tests, and takes the cluster down. A
// set-up that fails is not a skip: a missing tool on a fresh machine is a
// failure (`make test` builds and installs everything). A teardown that
// fails fails the package: the nodes must leave nothing on the host,
// whatever the tests did.
func (s Suite) Run(m *testing.M) int {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var undo Undo
	err := errors.New("needs root (containerd, the kubelet, namespaces)")
	if os.Geteuid() == 0 {
		err = s.SetUp(ctx, &undo)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: setting up the cluster: %v\n", s.Name, err)
		_ = undo.Run()
		return 1
	}
	code := m.Run()
	if len(s.Last) > 0 && !testing.RunTests(func(pat, name string) (bool, error) { return regexp.MatchString(pat, name) }, s.Last) {
		code = 1
	}
	if s.After != nil {
		if err := s.After(); err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", s.Name, err)
			code = 1
		}
	}
	if err := undo.Run(); err != nil {
		fmt.Fprintf(os.Stderr, "%s: tearing down: %v\n", s.Name, err)
		return 1
	}
	return code
}
