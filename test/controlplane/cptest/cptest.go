// Package cptest gives an integration test binary one real control plane
// (kube-apiserver + etcd) with tenure's CRDs installed:
//
//	func TestMain(m *testing.M) {
//		os.Exit(cptest.Main(m, nil))
//	}
//
// Tests then use cptest.Current().Config, or Current().KubeconfigPath for a
// process of their own. When the binaries are missing the test binary fails
// (CI builds them first with hack/build-control-plane.sh); it never skips.
//
// The control plane is controller-runtime's envtest, on the binaries
// controlplane.BinDir holds and with controlplane.APIServerFlags, so a test
// sees the same API server as one started by controlplane.Start. Two things
// are added to envtest:
//
//   - The processes die with the test binary, even on a panic or a test
//     timeout, when nothing gets to call Stop: envtest starts them in a
//     process group of their own without a parent-death signal, and a
//     kube-apiserver left behind holds half a gigabyte. Each binary is run
//     through `setpriv --pdeathsig KILL` (util-linux), from a thread that
//     lives until the control plane is stopped (the kernel sends the signal
//     when the forking thread ends, and the Go runtime ends threads).
//   - The CRDs are installed with controlplane.InstallCRDs, which, unlike
//     envtest's discovery check, also waits until a first custom object is
//     accepted without the API server's just-created delay.
//
// envtest authenticates the admin user (group system:masters) with a client
// certificate where controlplane.Start uses a token; Config and the
// kubeconfig file carry it. UserConfig and KubeletConfig of the control
// plane sign a certificate with envtest's client CA.
package cptest

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/tenure-ipam/tenure/deploy"
	"github.com/tenure-ipam/tenure/test/controlplane"
)

const (
	startTimeout = 90 * time.Second // per process, on a busy machine
	stopTimeout  = 20 * time.Second
)

var (
	current   *controlplane.ControlPlane
	addUserMu sync.Mutex
)

// Main starts one control plane, installs the CRDs embedded in package
// deploy, runs setup (when not nil), runs the tests and stops the control
// plane. It returns the exit code for os.Exit.
func Main(m *testing.M, setup func(cp *controlplane.ControlPlane) error) int {
	flag.Parse() // so testing.Verbose works before m.Run
	// Tests reach the API server with controller-runtime's client, which
	// otherwise prints a stack trace the first time it would log.
	ctrllog.SetLogger(logr.Discard())
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	begin := time.Now()
	cp, stop, err := start()
	if err != nil {
		fmt.Fprintf(os.Stderr, "cptest: starting the control plane: %v\n", err)
		return 1
	}
	started := time.Since(begin)
	defer func() {
		current = nil
		if err := stop(); err != nil {
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
// Main owns it: its Stop does not stop it, and Pids is empty.
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

// start runs envtest's control plane with a state directory for its logs,
// the wrappers and the kubeconfig, and returns the function that stops it
// and removes the directory.
func start() (*controlplane.ControlPlane, func() error, error) {
	binDir, err := controlplane.BinDir()
	if err != nil {
		return nil, nil, err
	}
	dir, err := os.MkdirTemp("", "tenure-cptest-")
	if err != nil {
		return nil, nil, err
	}
	apiserverLog, etcdLog := filepath.Join(dir, "kube-apiserver.log"), filepath.Join(dir, "etcd.log")
	logs, err := openLogs(apiserverLog, etcdLog)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, nil, err
	}
	cleanup := func() error {
		for _, f := range logs {
			_ = f.Close()
		}
		return os.RemoveAll(dir)
	}
	apiserverBin, etcdBin, err := dieWithParent(filepath.Join(dir, "bin"), binDir)
	if err != nil {
		return nil, nil, errors.Join(err, cleanup())
	}

	noExisting := false
	env := &envtest.Environment{
		ControlPlane: envtest.ControlPlane{
			APIServer: &envtest.APIServer{Path: apiserverBin, Out: logs[0], Err: logs[0]},
			Etcd:      &envtest.Etcd{Path: etcdBin, Out: logs[1], Err: logs[1]},
		},
		UseExistingCluster:       &noExisting,
		ControlPlaneStartTimeout: startTimeout,
		ControlPlaneStopTimeout:  stopTimeout,
	}
	args := env.ControlPlane.APIServer.Configure()
	for _, f := range controlplane.APIServerFlags() {
		name, value, _ := strings.Cut(f, "=")
		args.Set(name, value)
	}

	stopEnv, err := startOnLivingThread(env)
	if err != nil {
		err = fmt.Errorf("%w\n%s\n%s", err, tail(etcdLog), tail(apiserverLog))
		return nil, nil, errors.Join(err, stopEnv(), cleanup())
	}
	stop := func() error { return errors.Join(stopEnv(), cleanup()) }

	cfg := env.Config
	cfg.QPS, cfg.Burst = -1, 1000 // client-side rate limiting off, as controlplane.Start's Config
	cp := &controlplane.ControlPlane{
		Dir:            dir,
		KubeconfigPath: filepath.Join(dir, controlplane.KubeconfigFile),
		URL:            strings.TrimSuffix(cfg.Host, "/"),
		Config:         cfg,
		// Client certificates of envtest's client CA, whose key stays
		// inside envtest; its CA counts serials without a lock.
		AddUser: func(user string, groups ...string) (*rest.Config, error) {
			addUserMu.Lock()
			u, err := env.AddUser(envtest.User{Name: user, Groups: groups}, nil)
			addUserMu.Unlock()
			if err != nil {
				return nil, fmt.Errorf("cptest: client certificate for %s: %w", user, err)
			}
			c := u.Config()
			c.QPS, c.Burst = -1, 1000
			return c, nil
		},
	}
	if err := os.WriteFile(cp.KubeconfigPath, env.KubeConfig, 0o600); err != nil {
		return nil, nil, errors.Join(err, stop())
	}
	return cp, stop, nil
}

func openLogs(paths ...string) ([]*os.File, error) {
	var files []*os.File
	for _, p := range paths {
		f, err := os.Create(p)
		if err != nil {
			for _, f := range files {
				_ = f.Close()
			}
			return nil, err
		}
		files = append(files, f)
	}
	return files, nil
}

// dieWithParent writes, into dir, scripts that run kube-apiserver and etcd
// from binDir with a parent-death signal, and returns their paths. Without
// setpriv it returns the binaries themselves.
func dieWithParent(dir, binDir string) (apiserver, etcd string, err error) {
	apiserver, etcd = filepath.Join(binDir, "kube-apiserver"), filepath.Join(binDir, "etcd")
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		fmt.Fprintln(os.Stderr, "cptest: no setpriv (util-linux) on PATH: the control plane will outlive this test binary if it crashes")
		return apiserver, etcd, nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", "", err
	}
	wrap := func(bin string) (string, error) {
		script := fmt.Sprintf("#!/bin/sh\nexec %s --pdeathsig KILL -- %s \"$@\"\n", shellQuote(setpriv), shellQuote(bin))
		p := filepath.Join(dir, filepath.Base(bin))
		return p, os.WriteFile(p, []byte(script), 0o700)
	}
	if apiserver, err = wrap(apiserver); err != nil {
		return "", "", err
	}
	if etcd, err = wrap(etcd); err != nil {
		return "", "", err
	}
	return apiserver, etcd, nil
}

func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// startOnLivingThread starts env from a goroutine locked to its OS thread
// and keeps that thread until the returned stop is called, so the
// parent-death signal fires only when the test binary ends. stop is
// returned on error too: envtest may leave processes running when a step
// after their start fails.
func startOnLivingThread(env *envtest.Environment) (stop func() error, err error) {
	started := make(chan error)
	stopping := make(chan struct{})
	stopped := make(chan error)
	go func() {
		// Never unlocked: when this goroutine returns, its thread ends, and
		// any process still running gets SIGKILL.
		runtime.LockOSThread()
		_, err := env.Start()
		started <- err
		<-stopping
		stopped <- env.Stop()
	}()
	done := false
	stop = func() error {
		if done {
			return nil
		}
		done = true
		close(stopping)
		return <-stopped
	}
	return stop, <-started
}

// tail returns the last lines of a log file, for an error message.
func tail(path string) string {
	const maxBytes = 4 << 10
	f, err := os.Open(path)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.Size() > maxBytes {
		_, _ = f.Seek(fi.Size()-maxBytes, io.SeekStart)
	}
	b, _ := io.ReadAll(f)
	return fmt.Sprintf("--- tail of %s ---\n%s", path, strings.TrimRight(string(b), "\n"))
}
