package devnode

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

func pauseTag() (name.Tag, error) {
	return name.NewTag(PauseImage, name.StrictValidation)
}

// killTimeout bounds how long Stop waits for the node's processes to die
// after SIGKILL (a process in uninterruptible sleep takes a moment).
const killTimeout = 30 * time.Second

func stop(dir string) error {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	n, err := loadLayout(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	hs, err := hierarchies()
	if err != nil {
		return err
	}
	var errs []error
	// 1. Every process: kubelet, containerd, shims, containers.
	if err := killCgroup(n.cgroupDirs(hs)); err != nil {
		errs = append(errs, err)
	}
	// The shims' sockets live in /run/containerd/s whatever the state dir;
	// each shim's bundle records its own. Read after the kill, so that a
	// shim started meanwhile is counted; a shim killed before containerd
	// wrote its bundle is found as a socket nobody listens on.
	shimSockets := append(n.shimSockets(), deadShimSockets()...)
	// 2. Mounts under the directory (overlay rootfs, sandbox shm, the
	// kubelet's volumes) and the pods' network namespaces. Their veths go
	// with the netns.
	errs = append(errs, unmountUnder(dir)...)
	for _, ns := range n.netns() {
		if err := unix.Unmount(ns, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("unmount %s: %w", ns, err))
		}
		if err := os.Remove(ns); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	if err := n.unshareNetnsDir(); err != nil {
		errs = append(errs, err)
	}
	// 3. The node's cgroups, then the parents made to reach them.
	for _, d := range n.cgroupDirs(hs) {
		if err := removeCgroupTree(d); err != nil {
			errs = append(errs, err)
		}
	}
	for i := len(n.CreatedCgroups) - 1; i >= 0; i-- {
		// EBUSY: a parent this node made is in use by a node started
		// after it; that one's Stop takes it away.
		if err := unix.Rmdir(n.CreatedCgroups[i]); err != nil && !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.EBUSY) {
			errs = append(errs, fmt.Errorf("rmdir %s: %w", n.CreatedCgroups[i], err))
		}
	}
	// 4. The cluster network's bridge (the bridge plugin never deletes it).
	if link, err := netlink.LinkByName(n.Bridge); err == nil {
		if err := netlink.LinkDel(link); err != nil {
			errs = append(errs, fmt.Errorf("deleting bridge %s: %w", n.Bridge, err))
		}
	}
	// 5. Host files: directories the node made, or inside ones that were
	// there, exactly the node's entries.
	for _, s := range shimSockets {
		if err := os.Remove(s); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	errs = append(errs, n.removeHostFiles()...)
	// 6. The kernel settings the kubelet changed.
	if err := finishStop(dir, stateFile, stoppedFile, n.Sysctls, errs); err != nil {
		return fmt.Errorf("devnode: stopping %s: %w", dir, err)
	}
	return nil
}

// finishStop ends a Stop of what the state file in dir records: the
// sysctls put back and, when nothing failed, the state file kept as
// stopped (Leftovers reads it, Start starts afresh) and the host lock
// released.
func finishStop(dir, state, stopped string, sysctls map[string]string, errs []error) error {
	for s, v := range sysctls {
		if err := os.WriteFile("/proc/sys/"+s, []byte(v), 0o644); err != nil {
			errs = append(errs, fmt.Errorf("restoring %s: %w", s, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if err := os.Rename(filepath.Join(dir, state), filepath.Join(dir, stopped)); err != nil {
		return err
	}
	unlockHost(dir)
	return nil
}

// cgroupDirs is the node's cgroup in every hierarchy.
func (n *layout) cgroupDirs(hs []hierarchy) []string {
	dirs := make([]string, len(hs))
	for i, h := range hs {
		dirs[i] = filepath.Join(h.Mount, n.CgroupPath)
	}
	return dirs
}

// killCgroup SIGKILLs every process in the trees until none is left; a
// process forked meanwhile is found on the next round.
func killCgroup(dirs []string) error {
	deadline := time.Now().Add(killTimeout)
	for {
		pids := cgroupProcs(dirs)
		if len(pids) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("processes %v survive SIGKILL", pids)
		}
		for _, pid := range pids {
			_ = unix.Kill(pid, unix.SIGKILL)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func unmountUnder(dir string) []error {
	mounts, err := mountsUnder(dir)
	if err != nil {
		return []error{err}
	}
	var errs []error
	for _, mp := range mounts {
		if err := unix.Unmount(mp, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("unmount %s: %w", mp, err))
		}
	}
	return errs
}

// shimSockets are the socket files the node's runc shims listen on, as
// each shim's bundle records it (bootstrap.json; address before
// containerd 2).
func (n *layout) shimSockets() []string {
	bundles, _ := filepath.Glob(filepath.Join(n.containerdState(), "io.containerd.runtime.v2.task", "*", "*"))
	var sockets []string
	for _, b := range bundles {
		var addr string
		if data, err := os.ReadFile(filepath.Join(b, "bootstrap.json")); err == nil {
			var bootstrap struct {
				Address string `json:"address"`
			}
			if json.Unmarshal(data, &bootstrap) == nil {
				addr = bootstrap.Address
			}
		} else if data, err := os.ReadFile(filepath.Join(b, "address")); err == nil {
			addr = strings.TrimSpace(string(data))
		}
		if addr = strings.TrimPrefix(addr, "unix://"); addr != "" && !slices.Contains(sockets, addr) {
			sockets = append(sockets, addr)
		}
	}
	return sockets
}

// deadShimSockets lists the sockets in the shared shim directory that no
// process listens on any more. Once the node's processes are gone, those
// are its own or another dead runtime's leftovers: removing them takes
// nothing from a live containerd.
func deadShimSockets() []string {
	dir := filepath.Join(sharedShimSocketDir, "s")
	entries, _ := os.ReadDir(dir)
	var dead []string
	for _, e := range entries {
		p := filepath.Join(dir, e.Name())
		c, err := net.DialTimeout("unix", p, time.Second)
		if err == nil {
			c.Close()
			continue
		}
		if errors.Is(err, unix.ECONNREFUSED) {
			dead = append(dead, p)
		}
	}
	return dead
}

// hostFilesOf lists the node's files in the hard-coded host directories
// that existed before it: links to its pod logs, libcni's cached results
// for its network.
func (n *layout) hostFilesOf() []string {
	var files []string
	links, _ := filepath.Glob("/var/log/containers/*")
	for _, l := range links {
		if target, err := os.Readlink(l); err == nil && strings.HasPrefix(target, n.Dir+"/") {
			files = append(files, l)
		}
	}
	// libcni names a result NETWORK-SANDBOX-IFNAME: the cluster network's,
	// the loopback containerd sets up, and what Multus delegates.
	bundles, _ := filepath.Glob(filepath.Join(n.containerdState(), "io.containerd.runtime.v2.task", "*", "*"))
	for _, b := range bundles {
		results, _ := filepath.Glob(filepath.Join(libcniResults, "*-"+filepath.Base(b)+"-*"))
		files = append(files, results...)
	}
	return files
}

// netns lists the node's network namespaces: the entries containerd made
// (cni-UUID) in the shared HostNetnsDir since the node started.
func (n *layout) netns() []string {
	dir := n.hostPath(HostNetnsDir)
	entries, _ := os.ReadDir(dir)
	var mine []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "cni-") && !slices.Contains(n.PreexistingNetns, e.Name()) {
			mine = append(mine, filepath.Join(dir, e.Name()))
		}
	}
	return mine
}

// libcniResults is where libcni caches ADD results, whatever the runtime's
// configuration.
const libcniResults = "/var/lib/cni/results"

// removeEmptyDirs removes dir and the directories below it, deepest first,
// leaving any that still hold a file.
func removeEmptyDirs(dir string) error {
	dirs, err := dirsUnder(dir)
	for i := len(dirs) - 1; i >= 0; i-- {
		_ = unix.Rmdir(dirs[i])
	}
	return err
}

func (n *layout) removeHostFiles() []error {
	var errs []error
	for _, f := range n.hostFilesOf() {
		if err := os.Remove(f); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	for _, d := range n.EmptiedHostDirs {
		entries, _ := os.ReadDir(d)
		for _, e := range entries {
			if err := os.RemoveAll(filepath.Join(d, e.Name())); err != nil {
				errs = append(errs, err)
			}
		}
	}
	for _, d := range n.CreatedHostDirs {
		remove := os.RemoveAll
		if d == sharedShimSocketDir {
			remove = removeEmptyDirs // another containerd may come to use it
		}
		if err := remove(d); err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

// Leftovers lists what the node recorded in dir left on the host: live
// processes, mounts under dir (overlays, network namespaces), cgroups, its
// bridge and the veths on it, host files, changed sysctls. Empty after a
// clean Stop; it reads the record Stop keeps as devnode.stopped.json.
func Leftovers(dir string) ([]string, error) {
	n, err := loadLayout(dir)
	if errors.Is(err, fs.ErrNotExist) {
		n, err = loadLayoutFile(filepath.Join(dir, stoppedFile))
	}
	if err != nil {
		return nil, err
	}
	return n.leftovers()
}

func (n *layout) leftovers() ([]string, error) {
	var found []string
	hs, err := hierarchies()
	if err != nil {
		return nil, err
	}
	if pids := cgroupProcs(n.cgroupDirs(hs)); len(pids) > 0 {
		found = append(found, fmt.Sprintf("processes in the node's cgroup: %v", pids))
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		data, err := os.ReadFile(p)
		if err == nil && strings.Contains(string(data), n.Dir+"/") {
			found = append(found, fmt.Sprintf("process %s: %s", filepath.Base(filepath.Dir(p)), strings.ReplaceAll(string(data), "\x00", " ")))
		}
	}
	mounts, err := mountsUnder(n.Dir)
	if err != nil {
		return nil, err
	}
	for _, m := range mounts {
		found = append(found, "mount "+m)
	}
	for _, d := range append(n.cgroupDirs(hs), n.CreatedCgroups...) {
		if _, err := os.Stat(d); err == nil {
			found = append(found, "cgroup "+d)
		}
	}
	links, err := netlink.LinkList()
	if err != nil {
		return nil, err
	}
	// A pod's veth dies with its network namespace (a mount, above); one
	// left would still hang on the bridge.
	for _, l := range links {
		if l.Attrs().Name == n.Bridge {
			found = append(found, "bridge "+n.Bridge)
			for _, v := range links {
				if v.Type() == "veth" && v.Attrs().MasterIndex == l.Attrs().Index {
					found = append(found, "veth "+v.Attrs().Name)
				}
			}
		}
	}
	for _, f := range n.hostFilesOf() {
		found = append(found, "host file "+f)
	}
	for _, sock := range n.shimSockets() {
		if _, err := os.Lstat(sock); err == nil {
			found = append(found, "shim socket "+sock)
		}
	}
	for _, d := range n.CreatedHostDirs {
		if _, err := os.Lstat(d); err == nil {
			found = append(found, "host directory "+d)
		}
	}
	for _, d := range n.EmptiedHostDirs {
		if entries, _ := os.ReadDir(d); len(entries) > 0 {
			found = append(found, fmt.Sprintf("host directory %s holds %s", d, entries[0].Name()))
		}
	}
	for _, ns := range n.netns() {
		found = append(found, "network namespace "+ns)
	}
	if owner, _ := os.ReadFile(hostLock); string(owner) == n.Dir {
		found = append(found, "host lock "+hostLock)
	}
	for s, v := range n.Sysctls {
		if cur, err := os.ReadFile("/proc/sys/" + s); err == nil && strings.TrimSpace(string(cur)) != v {
			found = append(found, fmt.Sprintf("sysctl %s = %s, was %s", s, strings.TrimSpace(string(cur)), v))
		}
	}
	return found, nil
}
