package devnode

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// propagates reports whether the mount holding dir, read from a
// /proc/PID/mountinfo, is shared or a slave: the runtime mounts a hostPath
// with HostToContainer propagation (deploy/'s DaemonSet's /run/netns) only
// then. A host whose / is private (no systemd to make it shared) has
// neither.
func propagates(mountinfo io.Reader, dir string) (bool, error) {
	best, ok := "", false
	err := readMounts(mountinfo, func(f []string) {
		if len(f) < 7 {
			return
		}
		mp := unescapeMountinfo(f[4])
		if !(mp == dir || mp == "/" || strings.HasPrefix(dir, mp+"/")) || len(mp) < len(best) {
			return
		}
		best, ok = mp, false // a later mount on the same point hides the earlier
		for _, opt := range f[6:] {
			if opt == "-" {
				break
			}
			if strings.HasPrefix(opt, "shared:") || strings.HasPrefix(opt, "master:") {
				ok = true
			}
		}
	})
	if err == nil && best == "" {
		err = fmt.Errorf("devnode: no mount holds %s", dir)
	}
	return ok, err
}

// shareNetnsDir makes HostNetnsDir a shared mount of its own when the
// mount it lies in does not propagate, as `ip netns add` does (a
// recursive bind of the directory on itself, then shared), and records
// that Stop takes it away. On a host where it propagates already it does
// nothing.
func (n *layout) shareNetnsDir() error {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return err
	}
	ok, err := propagates(f, HostNetnsDir)
	f.Close()
	if err != nil || ok {
		return err
	}
	if _, err := os.Lstat(HostNetnsDir); errors.Is(err, fs.ErrNotExist) {
		n.CreatedHostDirs = append(n.CreatedHostDirs, outermostMissing(HostNetnsDir))
	}
	n.NetnsDirShared = true
	if err := n.save(); err != nil {
		return err
	}
	if err := os.MkdirAll(HostNetnsDir, 0o755); err != nil {
		return err
	}
	if err := unix.Mount(HostNetnsDir, HostNetnsDir, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("devnode: binding %s on itself: %w", HostNetnsDir, err)
	}
	if err := unix.Mount("", HostNetnsDir, "", unix.MS_SHARED|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("devnode: making %s shared: %w", HostNetnsDir, err)
	}
	return nil
}

// unshareNetnsDir takes away the mount shareNetnsDir made, once the
// node's namespaces are gone: what lies under it (namespaces bound
// before the node started) shows again.
func (n *layout) unshareNetnsDir() error {
	if !n.NetnsDirShared {
		return nil
	}
	if err := unix.Unmount(HostNetnsDir, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("unmount %s: %w", HostNetnsDir, err)
	}
	return nil
}
