package devnode

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// startHolder starts the process that holds an isolated node's mount
// namespace: in the node's network namespace, it unshares its mounts
// (slave of the host's: the host's later mounts show, the node's never
// leave), binds each of privateHostPaths to the node's directory for it,
// shared so the DaemonSet's HostToContainer mounts see what the node
// mounts later (pod network namespaces), and then waits as pause. The
// node's programs join its namespaces (spawn); they die with the cgroup,
// and the mount namespace with the last of them.
func (node *Node) startHolder(ctx context.Context, hs []hierarchy) error {
	n := node.layout
	q := func(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
	var script strings.Builder
	// The node's / shared (a peer group of the node's own: nothing
	// propagates to the host): Multus' thick daemon mounts it into its
	// container with HostToContainer propagation, which the runtime
	// refuses unless / is shared or a slave, and on a host whose / is
	// private unshare's slave leaves it private.
	script.WriteString("set -e\nmount --make-shared /\n")
	for _, p := range privateHostPaths {
		src := n.hostPath(p)
		if err := os.MkdirAll(src, 0o755); err != nil {
			return err
		}
		fmt.Fprintf(&script, "mount --bind %s %s\nmount --make-rshared %s\n", q(src), q(p), q(p))
	}
	fmt.Fprintf(&script, "exec %s\n", q(filepath.Join(node.binDir, "pause")))
	pid, err := n.spawnPid(hs, "runtime", "holder", "nsenter", "--net="+n.Netns, "--",
		"unshare", "--mount", "--propagation", "slave", "--", "/bin/sh", "-c", script.String())
	if err != nil {
		return err
	}
	n.Holder = pid
	if err := n.save(); err != nil {
		return err
	}
	// The same pid execs nsenter, unshare, sh and pause: pause is there
	// once every bind is.
	return poll(ctx, 30*time.Second, "the node's mount namespace", func() error {
		comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		if err != nil {
			return fmt.Errorf("holder exited: %s", tailFile(n.path("logs", "holder.log")))
		}
		if c := strings.TrimSpace(string(comm)); c != "pause" {
			return fmt.Errorf("holder is %s", c)
		}
		return nil
	})
}

// CutLinks takes a Cluster node's links to the fabric and the SAN down,
// as pulled cables would: nothing of the node reaches the API server or
// the other nodes. RestoreLinks puts them back.
func (node *Node) CutLinks() error { return node.setLinks(false, "eth0", SANLink) }

// RestoreLinks undoes CutLinks.
func (node *Node) RestoreLinks() error { return node.setLinks(true, "eth0", SANLink) }

// CutFabric takes only a Cluster node's fabric link (eth0) down, as a
// partition does: the node loses its route to the API server (its
// kubelet stops reporting, the API server cannot reach it) while its SAN
// leg stays up, and its kubelet and pods keep running and answering on
// the SAN. RestoreFabric puts it back.
func (node *Node) CutFabric() error { return node.setLinks(false, "eth0") }

// RestoreFabric undoes CutFabric.
func (node *Node) RestoreFabric() error { return node.setLinks(true, "eth0") }

// CutSAN takes only a Cluster node's SAN leg down: its pods stop
// answering on the SAN. RestoreSAN puts it back.
func (node *Node) CutSAN() error { return node.setLinks(false, SANLink) }

// RestoreSAN undoes CutSAN.
func (node *Node) RestoreSAN() error { return node.setLinks(true, SANLink) }

func (node *Node) setLinks(up bool, names ...string) error {
	if !node.layout.Isolated {
		return fmt.Errorf("devnode: node %s runs on the host's network: no links of its own to cut", node.Name)
	}
	h, err := netnsHandle(node.layout.Netns)
	if err != nil {
		return err
	}
	defer h.Close()
	for _, name := range names {
		l, err := h.LinkByName(name)
		if err != nil {
			return err
		}
		set := h.LinkSetDown
		if up {
			set = h.LinkSetUp
		}
		if err := set(l); err != nil {
			return fmt.Errorf("devnode: node %s: %s: %w", node.Name, name, err)
		}
	}
	return nil
}

// Path is where the host opens p as the node's programs see it: p itself,
// or for a Cluster's node p in its mount namespace, through the root of
// the process that holds it (the kubelet's tmpfs volumes are there only).
func (node *Node) Path(p string) string {
	if !node.layout.Isolated {
		return p
	}
	return filepath.Join(fmt.Sprintf("/proc/%d/root", node.layout.Holder), p)
}
