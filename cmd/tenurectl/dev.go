//go:build !tenure_release

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tenure-ipam/tenure/deploy"
	"github.com/tenure-ipam/tenure/internal/controlplane"
)

func init() {
	register(&command{
		name:    "dev",
		summary: "run a local kube-apiserver + etcd with tenure's CRDs (up, down)",
		run: func(ctx context.Context, e *env, args []string) error {
			return subcommands(ctx, e, "dev", []*command{
				{name: "up", summary: "start a detached control plane and install the CRDs", run: devUp},
				{name: "down", summary: "stop the control plane that up started", run: devDown},
			}, args)
		},
	})
}

// defaultDevDir is where dev up/down keep their state without --dir.
func defaultDevDir() string {
	cache, err := controlplane.CacheDir()
	if err != nil {
		return ""
	}
	return filepath.Join(cache, "dev")
}

func devFlags(e *env, name string, args []string) (dir string, timeout time.Duration, err error) {
	fs := newFlagSet(e, "dev "+name, "[--dir DIR]")
	fs.StringVar(&dir, "dir", defaultDevDir(), "state `directory`: certificates, etcd data, logs, kubeconfig, state.json")
	fs.DurationVar(&timeout, "timeout", 3*time.Minute, "give up after this long")
	if err := parseFlags(fs, args); err != nil {
		return "", 0, err
	}
	if dir == "" {
		fmt.Fprintln(e.stderr, "tenurectl dev "+name+": --dir is required (no home directory for the default)")
		return "", 0, errUsage
	}
	dir, err = filepath.Abs(dir)
	return dir, timeout, err
}

// devUp starts a detached control plane in --dir, installs every embedded
// CRD and prints an export line for KUBECONFIG. When one is already running
// there it only re-applies the CRDs.
func devUp(ctx context.Context, e *env, args []string) error {
	dir, timeout, err := devFlags(e, "up", args)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	unlock, err := lockDir(dir)
	if err != nil {
		return err
	}
	defer unlock()

	crds, err := fs.Sub(deploy.CRDs, "crds")
	if err != nil {
		return err
	}

	begin := time.Now()
	cp, err := controlplane.Attach(dir)
	switch {
	case err == nil:
		herr := cp.Healthy(ctx)
		if herr == nil {
			if err := controlplane.InstallCRDs(ctx, cp.Config, crds); err != nil {
				return err
			}
			fmt.Fprintf(e.stderr, "tenure dev control plane already up at %s (dir %s)\n", cp.URL, dir)
			printKubeconfig(e, cp.KubeconfigPath)
			return nil
		}
		fmt.Fprintf(e.stderr, "control plane recorded in %s is not healthy (%v); restarting it\n", dir, herr)
		if err := cp.Stop(); err != nil {
			return fmt.Errorf("stopping the unhealthy control plane: %w", err)
		}
	case errors.Is(err, os.ErrNotExist):
	default:
		return err
	}

	cp, err = controlplane.Start(ctx, controlplane.Options{Dir: dir, Detach: true})
	if err != nil {
		return err
	}
	ready := time.Since(begin)
	if err := controlplane.InstallCRDs(ctx, cp.Config, crds); err != nil {
		if serr := cp.Stop(); serr != nil {
			err = errors.Join(err, serr)
		}
		return err
	}
	pids := cp.Pids()
	fmt.Fprintf(e.stderr, "tenure dev control plane up at %s: ready in %v, CRDs installed in %v (etcd pid %d, kube-apiserver pid %d; logs in %s)\n",
		cp.URL, ready.Round(time.Millisecond), (time.Since(begin) - ready).Round(time.Millisecond), pids[0], pids[1], dir)
	printKubeconfig(e, cp.KubeconfigPath)
	return nil
}

// printKubeconfig writes the kubeconfig path to stderr and an export line
// to stdout, so `eval "$(tenurectl dev up)"` works.
func printKubeconfig(e *env, path string) {
	fmt.Fprintf(e.stderr, "kubeconfig: %s\n", path)
	fmt.Fprintf(e.stdout, "export KUBECONFIG=%s\n", shellQuote(path))
}

// devDown stops what dev up started in --dir; nothing running is fine.
func devDown(ctx context.Context, e *env, args []string) error {
	dir, _, err := devFlags(e, "down", args)
	if err != nil {
		return err
	}
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		fmt.Fprintf(e.stderr, "no tenure dev control plane in %s\n", dir)
		return nil
	}
	unlock, err := lockDir(dir)
	if err != nil {
		return err
	}
	defer unlock()
	cp, err := controlplane.Attach(dir)
	if errors.Is(err, os.ErrNotExist) {
		fmt.Fprintf(e.stderr, "no tenure dev control plane in %s\n", dir)
		return nil
	}
	if err != nil {
		return err
	}
	if err := cp.Stop(); err != nil {
		return err
	}
	fmt.Fprintf(e.stderr, "tenure dev control plane in %s stopped\n", dir)
	return nil
}

// lockDir serializes dev up and down on one directory.
func lockDir(dir string) (unlock func(), err error) {
	f, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("locking %s: %w", dir, err)
	}
	return func() { f.Close() }, nil
}

// shellQuote quotes s for a POSIX shell when it needs it.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-./:@%+=,") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// subcommands dispatches args[0] among subs, for commands that group others
// (tenurectl dev up). name is the full command path for messages.
func subcommands(ctx context.Context, e *env, name string, subs []*command, args []string) error {
	if len(args) > 0 {
		for _, s := range subs {
			if s.name == args[0] {
				return s.run(ctx, e, args[1:])
			}
		}
		if args[0] != "-h" && args[0] != "--help" && args[0] != "help" {
			fmt.Fprintf(e.stderr, "tenurectl %s: unknown subcommand %q\n\n", name, args[0])
		}
	}
	fmt.Fprintf(e.stderr, "usage: tenurectl %s <subcommand> [flags]\n\nsubcommands:\n", name)
	for _, s := range subs {
		fmt.Fprintf(e.stderr, "  %-10s %s\n", s.name, s.summary)
	}
	if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
		return flag.ErrHelp
	}
	return errUsage
}
