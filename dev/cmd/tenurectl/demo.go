package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/tenure-ipam/tenure/dev/demo"
	"github.com/tenure-ipam/tenure/dev/localnode"
	"github.com/tenure-ipam/tenure/internal/kube"
	"github.com/tenure-ipam/tenure/test/controlplane"
	"github.com/tenure-ipam/tenure/test/testbed"
)

func demoCommand(e *env) *cobra.Command {
	var f demoFlags
	cmd := &cobra.Command{
		Use:   "demo [--bin-dir DIR] [--cni-plugin-dir DIR] [--timeout DURATION] [--node [--image FILE]]",
		Short: "start a local control plane, show tenure at work, stop everything",
		Args:  noArgs(e),
		RunE:  func(cmd *cobra.Command, _ []string) error { return runDemo(cmd.Context(), e, &f) },
	}
	fs := cmd.Flags()
	fs.BoolVar(&f.onNode, "node", false, "play the story on a real node of this machine (containerd, kubelet, Multus; root) running tenure from deploy/ and its image")
	fs.StringVar(&f.image, "image", defaultImage(), "with --node: the tenure image `tarball` (make image)")
	fs.StringVar(&f.binDir, "bin-dir", "", "directory with tenure's binaries (default: this program's directory)")
	fs.StringVar(&f.pluginDir, "cni-plugin-dir", "", "reference CNI plugins (default: built by hack/build-cni-plugins.sh when run from the repository)")
	positiveDuration(fs, &f.timeout, "timeout", 5*time.Minute, "give up after this long")
	return cmd
}

type demoFlags struct {
	onNode                   bool
	image, binDir, pluginDir string
	timeout                  time.Duration
}

func runDemo(ctx context.Context, e *env, f *demoFlags) error {
	if f.onNode {
		ctx, cancel := context.WithTimeout(ctx, f.timeout)
		defer cancel()
		return demoOnNode(ctx, e, f.image)
	}
	if f.binDir == "" {
		exe, err := os.Executable()
		if err != nil {
			return err
		}
		f.binDir = filepath.Dir(exe)
	}
	os.Setenv("TENURE_BIN_DIR", f.binDir)
	bins, err := testbed.Build("")
	if err != nil {
		return err
	}
	if f.pluginDir == "" {
		script := filepath.Join(filepath.Dir(f.binDir), "hack", "build-cni-plugins.sh")
		if out, err := exec.CommandContext(ctx, "bash", script).Output(); err == nil {
			f.pluginDir = strings.TrimSpace(string(out))
		}
	}
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	_, err = demo.Run(ctx, demo.Options{Out: e.stdout, Bins: bins, PluginDir: f.pluginDir})
	return err
}

// demoOnNode starts a control plane with its controllers and a real node
// running tenure (as dev up --node does, but attached and in a temp dir),
// plays the story there and stops everything.
func demoOnNode(ctx context.Context, e *env, image string) (err error) {
	if os.Geteuid() != 0 {
		return errors.New("tenurectl demo --node: a node runs containerd and a kubelet: run as root")
	}
	dir, err := os.MkdirTemp("", "tenure-demo-node-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	begin := time.Now()
	cp, err := controlplane.Start(ctx, controlplane.Options{Dir: filepath.Join(dir, "control-plane"), Controllers: true})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, cp.Stop()) }()
	node, err := localnode.Start(ctx, cp, localnode.Options{Dir: filepath.Join(dir, "node"), Image: image})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, node.Stop()) }()
	fmt.Fprintf(e.stdout, "(a control plane with controller-manager and scheduler, and node %s with tenure rolled out, in %.0fs)\n\n",
		node.Name, time.Since(begin).Seconds())
	c, err := kube.NewClient(cp.Config)
	if err != nil {
		return err
	}
	_, err = demo.RunOnNode(ctx, demo.NodeOptions{Out: e.stdout, Client: c, Node: node})
	fmt.Fprintln(e.stdout, "\nStopped the node (kubelet, containerd, every container), the controllers, kube-apiserver and etcd.")
	return err
}
