// Package cptest gives an integration test binary one real control plane
// (kube-apiserver + etcd) with tenure's CRDs installed:
//
//	func TestMain(m *testing.M) {
//		os.Exit(cptest.Main(m, nil))
//	}
//
// Tests then use cptest.Current().Config. When the binaries are missing the
// test binary fails (CI builds them first with hack/build-control-plane.sh);
// it never skips.
package cptest

import (
	"context"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"testing"
	"time"

	"github.com/tenure-ipam/tenure/deploy"
	"github.com/tenure-ipam/tenure/internal/controlplane"
	"k8s.io/client-go/rest"
)

var current *controlplane.ControlPlane

// Main starts one control plane, installs the CRDs embedded in package
// deploy, runs setup (when not nil), runs the tests and stops the control
// plane. It returns the exit code for os.Exit.
func Main(m *testing.M, setup func(cp *controlplane.ControlPlane) error) int {
	flag.Parse() // so testing.Verbose works before m.Run
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	begin := time.Now()
	cp, err := controlplane.Start(ctx, controlplane.Options{})
	if err != nil {
		fmt.Fprintf(os.Stderr, "cptest: starting the control plane: %v\n", err)
		return 1
	}
	started := time.Since(begin)
	defer func() {
		current = nil
		if err := cp.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "cptest: stopping the control plane: %v\n", err)
		}
	}()

	crds, err := fs.Sub(deploy.CRDs, "crds")
	if err == nil {
		err = controlplane.InstallCRDs(ctx, cp.Config, crds)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "cptest: installing CRDs: %v\n", err)
		return 1
	}
	if testing.Verbose() {
		fmt.Fprintf(os.Stderr, "cptest: control plane at %s ready in %v, CRDs installed after %v (dir %s)\n",
			cp.URL, started.Round(time.Millisecond), time.Since(begin).Round(time.Millisecond), cp.Dir)
	}
	if setup != nil {
		if err := setup(cp); err != nil {
			fmt.Fprintf(os.Stderr, "cptest: setup: %v\n", err)
			return 1
		}
	}
	current = cp
	return m.Run()
}

// Current returns the control plane Main started. It panics outside Main.
func Current() *controlplane.ControlPlane {
	if current == nil {
		panic("cptest: no control plane: call cptest.Main from TestMain")
	}
	return current
}

// Config returns a copy of the current control plane's client config, free
// for the caller to change.
func Config() *rest.Config {
	return rest.CopyConfig(Current().Config)
}
