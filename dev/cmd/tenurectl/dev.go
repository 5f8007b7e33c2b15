package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"golang.org/x/sys/unix"

	"github.com/tenure-ipam/tenure/deploy"
	"github.com/tenure-ipam/tenure/dev/devnode"
	"github.com/tenure-ipam/tenure/dev/localnode"
	"github.com/tenure-ipam/tenure/test/controlplane"
	"github.com/tenure-ipam/tenure/test/progress"
)

// developerCommands are the commands the shipped tenurectl leaves out.
func developerCommands(e *env) []*cobra.Command {
	return []*cobra.Command{devCommand(e), demoCommand(e), benchCommand(e)}
}

func devCommand(e *env) *cobra.Command {
	var d devFlags
	up := &cobra.Command{
		Use:   "up [--dir DIR] [--node [--nodes N] [--multus thin|thick] [--image FILE] [--install kustomize|helm]]",
		Short: "start a detached control plane and install the CRDs (--node: and a real node running tenure)",
		Args:  noArgs(e),
		RunE:  func(cmd *cobra.Command, _ []string) error { return devUp(cmd.Context(), e, &d) },
	}
	d.register(up.Flags())
	up.Flags().BoolVar(&d.withNode, "node", false, "also run a real node on this machine (containerd, kubelet, Multus; root) with tenure installed (--install) and its image")
	up.Flags().StringVar(&d.image, "image", defaultImage(), "with --node: the tenure image `tarball` (make image)")
	up.Flags().StringVar(&d.install, "install", localnode.InstallKustomize, "with --node: install tenure with kustomize (deploy/ through test/localoverlay's overlay) or helm (charts/tenure, with values to the same effect; make helm)")
	up.Flags().IntVar(&d.nodes, "nodes", 1, fmt.Sprintf("with --node: how many nodes, 1 to %d; more than one run each in namespaces of its own, joined by a bridge", devnode.MaxNodes))
	up.Flags().StringVar(&d.multus, "multus", string(devnode.MultusThin), "with --node: how Multus runs on the nodes, `thin` (its CNI plugin) or thick (multus-daemon as a DaemonSet, multus-shim as the plugin)")
	down := &cobra.Command{
		Use:   "down [--dir DIR]",
		Short: "stop the control plane (and node) that up started",
		Args:  noArgs(e),
		RunE:  func(cmd *cobra.Command, _ []string) error { return devDown(e, &d) },
	}
	d.register(down.Flags())
	proxy := &cobra.Command{
		Use:    "fabric-proxy CONFIG",
		Short:  "(run by up --nodes N) carry the nodes' traffic to and from the API server",
		Hidden: true,
		RunE:   func(cmd *cobra.Command, args []string) error { return devFabricProxy(cmd.Context(), e, args) },
	}
	return group(e, "dev", "run a local kube-apiserver + etcd with tenure's CRDs (up, down)", up, down, proxy)
}

// defaultDevDir is where dev up/down keep their state without --dir.
func defaultDevDir() string {
	cache, err := controlplane.CacheDir()
	if err != nil {
		return ""
	}
	return filepath.Join(cache, "dev")
}

// devFlags are the flags of dev up and dev down.
type devFlags struct {
	dir      string
	timeout  time.Duration
	withNode bool
	image    string
	nodes    int
	multus   string
	install  string
}

func (d *devFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&d.dir, "dir", defaultDevDir(), "state `directory`: certificates, etcd data, logs, kubeconfig, state.json")
	positiveDuration(fs, &d.timeout, "timeout", 5*time.Minute, "give up after this long, naming what it waited for and what it last saw (up reports each wait on stderr every 5s)")
}

// absDir is --dir, absolute; a missing default is a usage error.
func (d *devFlags) absDir(e *env, name string) (string, error) {
	if d.dir == "" {
		fmt.Fprintln(e.stderr, "tenurectl dev "+name+": --dir is required (no home directory for the default)")
		return "", errUsage
	}
	return filepath.Abs(d.dir)
}

// devUp starts a detached control plane in --dir, installs every embedded
// CRD and prints an export line for KUBECONFIG. When one is already running
// there it only re-applies the CRDs.
func devUp(ctx context.Context, e *env, d *devFlags) (err error) {
	dir, err := d.absDir(e, "up")
	if err != nil {
		return err
	}
	if d.nodes < 1 || d.nodes > devnode.MaxNodes {
		fmt.Fprintf(e.stderr, "tenurectl dev up: --nodes %d: from 1 to %d\n", d.nodes, devnode.MaxNodes)
		return errUsage
	}
	if d.nodes > 1 && !d.withNode {
		fmt.Fprintf(e.stderr, "tenurectl dev up: --nodes %d needs --node\n", d.nodes)
		return errUsage
	}
	multus := devnode.MultusMode(d.multus)
	if multus != devnode.MultusThin && multus != devnode.MultusThick {
		fmt.Fprintf(e.stderr, "tenurectl dev up: --multus %s: %q or %q\n", d.multus, devnode.MultusThin, devnode.MultusThick)
		return errUsage
	}
	if multus != devnode.MultusThin && !d.withNode {
		fmt.Fprintf(e.stderr, "tenurectl dev up: --multus %s needs --node\n", d.multus)
		return errUsage
	}
	if d.install != localnode.InstallKustomize && d.install != localnode.InstallHelm {
		fmt.Fprintf(e.stderr, "tenurectl dev up: --install %q: want %s or %s\n", d.install, localnode.InstallKustomize, localnode.InstallHelm)
		return errUsage
	}
	if d.install != localnode.InstallKustomize && !d.withNode {
		fmt.Fprintf(e.stderr, "tenurectl dev up: --install %s needs --node\n", d.install)
		return errUsage
	}
	if d.withNode && os.Geteuid() != 0 {
		return errors.New("tenurectl dev up --node: a node runs containerd and a kubelet: run as root")
	}
	ctx, cancel := context.WithTimeout(ctx, d.timeout)
	defer cancel()
	ctx, e, stop := reportWaits(ctx, e, "tenurectl dev up: ")
	defer func() { err = stop(d.timeout, err) }()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	unlock, err := lockDir(dir)
	if err != nil {
		return err
	}
	defer unlock()
	if d.withNode {
		return devUpNode(ctx, e, dir, d.image, d.nodes, multus, d.install)
	}

	crds, err := fs.Sub(deploy.CRDs, "crds")
	if err != nil {
		return err
	}

	begin := time.Now()
	cp, err := controlplane.Attach(dir)
	switch {
	case err == nil:
		herr := cp.Healthy(ctx)
		if herr == nil && nodeRecorded(dir) {
			fmt.Fprintf(e.stderr, "tenure dev control plane already up at %s with a node (dir %s)\n", cp.URL, dir)
			printKubeconfig(e, cp.KubeconfigPath)
			return nil
		}
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

// progressEvery is how often a command reports the wait it is in.
const progressEvery = 5 * time.Second

// reportWaits prints, every progressEvery until stop, what the waits under
// the returned context wait for and how long they have (progress.Waiting),
// to the returned env's stderr, which is e's made safe for two writers.
// stop ends the reports and, when ctx's deadline (of after) has passed,
// turns err into one naming the wait and its last observed state.
func reportWaits(ctx context.Context, e *env, prefix string) (context.Context, *env, func(after time.Duration, err error) error) {
	tr := progress.New(nil)
	le := *e
	le.stderr = &lockedWriter{w: e.stderr}
	rctx, cancel := context.WithCancel(ctx)
	tick := time.NewTicker(progressEvery)
	done := make(chan struct{})
	go func() {
		defer close(done)
		tr.Report(rctx, le.stderr, prefix, tick.C)
	}()
	stop := func(after time.Duration, err error) error {
		cancel()
		tick.Stop()
		<-done
		if err != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return tr.GaveUp(after, err)
		}
		return err
	}
	return progress.With(ctx, tr), &le, stop
}

// lockedWriter serializes writes to w.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// printKubeconfig writes the kubeconfig path to stderr and an export line
// to stdout, so `eval "$(tenurectl dev up)"` works.
func printKubeconfig(e *env, path string) {
	fmt.Fprintf(e.stderr, "kubeconfig: %s\n", path)
	fmt.Fprintf(e.stdout, "export KUBECONFIG=%s\n", shellQuote(path))
}

// devDown stops what dev up started in --dir; nothing running is fine.
func devDown(e *env, d *devFlags) error {
	dir, err := d.absDir(e, "down")
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
	if err := devDownNode(e, dir); err != nil {
		return err
	}
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

// nodeDir is where dev up --node keeps the node, inside the dev directory.
func nodeDir(dir string) string { return filepath.Join(dir, "node") }

// clusterDir is where dev up --node --nodes N (N > 1) keeps the nodes.
func clusterDir(dir string) string { return filepath.Join(dir, "cluster") }

func nodeRecorded(dir string) bool {
	_, err := os.Stat(filepath.Join(nodeDir(dir), devnode.StateFile))
	return err == nil || devnode.ClusterRecorded(clusterDir(dir))
}

// defaultImage is make image's output beside this executable (bin/).
func defaultImage() string {
	exe, err := os.Executable()
	if err != nil {
		return "bin/tenure-image.tar"
	}
	return filepath.Join(filepath.Dir(exe), "tenure-image.tar")
}

// devUpNode is dev up --node: a detached control plane with the
// controllers, then a node of this machine with tenure rolled out on it
// from deploy/ through test/localoverlay (install: kustomize, or helm
// with charts/tenure). Up already (with a node), it only says so. Called
// with dir made and locked.
func devUpNode(ctx context.Context, e *env, dir, image string, nodes int, multus devnode.MultusMode, install string) error {
	if cp, err := controlplane.Attach(dir); err == nil {
		if cp.Healthy(ctx) == nil && nodeRecorded(dir) {
			fmt.Fprintf(e.stderr, "tenure dev control plane already up at %s with a node (dir %s)\n", cp.URL, dir)
			printKubeconfig(e, cp.KubeconfigPath)
			return nil
		}
		return fmt.Errorf("a control plane without a node is recorded in %s: tenurectl dev down --dir %s first", dir, dir)
	}

	// Thick Multus runs only on a Cluster's nodes (devnode.Options.Multus),
	// one node too.
	if nodes > 1 || multus == devnode.MultusThick {
		return devUpCluster(ctx, e, dir, image, nodes, multus, install)
	}
	begin := time.Now()
	cp, err := controlplane.Start(ctx, controlplane.Options{Dir: dir, Detach: true, Controllers: true})
	if err != nil {
		return err
	}
	cpReady := time.Since(begin)
	node, err := localnode.Start(ctx, cp, localnode.Options{Dir: nodeDir(dir), Image: image, Install: install})
	if err != nil {
		if serr := cp.Stop(); serr != nil {
			err = errors.Join(err, serr)
		}
		return err
	}
	fmt.Fprintf(e.stderr, "tenure dev cluster up at %s: control plane with controller-manager and scheduler ready in %v; node %s Ready and tenure rolled out on it in %v (logs in %s and %s)\n",
		cp.URL, cpReady.Round(time.Millisecond), node.Name, (time.Since(begin) - cpReady).Round(time.Millisecond), dir, filepath.Join(node.Dir, "logs"))
	printKubeconfig(e, cp.KubeconfigPath)
	return nil
}

// devUpCluster is devUpNode for nodes > 1: a control plane the nodes'
// namespaces reach through the fabric, and the nodes.
func devUpCluster(ctx context.Context, e *env, dir, image string, nodes int, multus devnode.MultusMode, install string) error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	begin := time.Now()
	cp, err := controlplane.Start(ctx, controlplane.Options{Dir: dir, Detach: true, Controllers: true, Nodes: localnode.NodeAccess(clusterDir(dir))})
	if err != nil {
		return err
	}
	cpReady := time.Since(begin)
	cl, err := localnode.StartCluster(ctx, cp, localnode.ClusterOptions{
		Dir: clusterDir(dir), Nodes: nodes, Image: image, ProxyCommand: []string{exe, "dev", "fabric-proxy"}, Multus: multus,
		Install: install,
	})
	if err != nil {
		if serr := cp.Stop(); serr != nil {
			err = errors.Join(err, serr)
		}
		return err
	}
	var names []string
	for _, n := range cl.Nodes {
		names = append(names, n.Name+" ("+n.IP()+")")
	}
	fmt.Fprintf(e.stderr, "tenure dev cluster up at %s: control plane with controller-manager and scheduler ready in %v; nodes %s Ready (Multus %s) and tenure rolled out on them in %v (logs in %s and %s)\n",
		cp.URL, cpReady.Round(time.Millisecond), strings.Join(names, ", "), multus, (time.Since(begin) - cpReady).Round(time.Millisecond), dir, filepath.Join(cl.Dir, "node-*", "logs"))
	printKubeconfig(e, cp.KubeconfigPath)
	return nil
}

// devFabricProxy runs the fabric proxy of a cluster (devnode.ServeProxy)
// until it is killed: dev up --nodes N starts it, dev down stops it.
func devFabricProxy(ctx context.Context, e *env, args []string) error {
	if len(args) != 1 {
		fmt.Fprintln(e.stderr, "usage: tenurectl dev fabric-proxy CONFIG")
		return errUsage
	}
	return devnode.ServeProxy(ctx, args[0])
}

// devDownNode stops the node dev up --node started in dir, if any, and
// fails if it left anything on the host.
func devDownNode(e *env, dir string) error {
	if devnode.ClusterRecorded(clusterDir(dir)) {
		if err := devnode.StopCluster(clusterDir(dir)); err != nil {
			return err
		}
		left, err := devnode.ClusterLeftovers(clusterDir(dir))
		if err != nil {
			return err
		}
		if len(left) > 0 {
			return fmt.Errorf("the cluster in %s left behind: %s", clusterDir(dir), strings.Join(left, "; "))
		}
		fmt.Fprintf(e.stderr, "tenure dev nodes in %s stopped; nothing left on the host\n", clusterDir(dir))
		return nil
	}
	if !nodeRecorded(dir) {
		return nil
	}
	if err := devnode.Stop(nodeDir(dir)); err != nil {
		return err
	}
	left, err := devnode.Leftovers(nodeDir(dir))
	if err != nil {
		return err
	}
	if len(left) > 0 {
		return fmt.Errorf("the node in %s left behind: %s", nodeDir(dir), strings.Join(left, "; "))
	}
	fmt.Fprintf(e.stderr, "tenure dev node in %s stopped; nothing left on the host\n", nodeDir(dir))
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
