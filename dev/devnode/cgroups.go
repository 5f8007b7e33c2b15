package devnode

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// hierarchy is one mounted cgroup hierarchy: a v1 controller set or the
// unified (v2) tree.
type hierarchy struct {
	Mount string // e.g. /sys/fs/cgroup/memory
	V2    bool
	// Controllers of a v1 hierarchy, e.g. ["cpu"] or ["name=systemd"].
	Controllers []string
}

// hierarchies lists the cgroup hierarchies mounted in this mount namespace.
func hierarchies() ([]hierarchy, error) {
	var hs []hierarchy
	seen := map[string]bool{}
	err := eachMount(func(fields []string) {
		sep := slices.Index(fields, "-")
		if sep < 0 || len(fields) < sep+4 {
			return
		}
		fstype, super := fields[sep+1], fields[sep+3]
		if (fstype != "cgroup" && fstype != "cgroup2") || fields[3] != "/" || seen[fields[4]] {
			return
		}
		seen[fields[4]] = true
		h := hierarchy{Mount: fields[4], V2: fstype == "cgroup2"}
		if !h.V2 {
			for _, opt := range strings.Split(super, ",") {
				if opt != "rw" && opt != "ro" && !strings.HasPrefix(opt, "release_agent") && opt != "clone_children" && opt != "noprefix" && opt != "xattr" {
					h.Controllers = append(h.Controllers, opt)
				}
			}
		}
		hs = append(hs, h)
	})
	return hs, err
}

// ownMemoryCgroup is the cgroup path this process has in the memory
// hierarchy (v1) or the unified tree (v2). The node's cgroups go below it,
// so the node stays inside whatever memory limit its launcher runs under.
func ownMemoryCgroup() (string, error) {
	data, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", err
	}
	unified := ""
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		if slices.Contains(strings.Split(parts[1], ","), "memory") {
			return parts[2], nil
		}
		if parts[0] == "0" {
			unified = parts[2]
		}
	}
	if unified == "" {
		return "", errors.New("devnode: no memory or unified cgroup in /proc/self/cgroup")
	}
	return unified, nil
}

// createCgroup makes path (absolute within each hierarchy) in every
// hierarchy and returns the directories it created, outermost first, so
// that removeCgroups takes away exactly those. A new v1 cpuset gets its
// parent's cpus and mems: an empty cpuset accepts no process.
func createCgroup(hs []hierarchy, path string) ([]string, error) {
	var created []string
	for _, h := range hs {
		dir := h.Mount
		for _, part := range strings.Split(strings.Trim(path, "/"), "/") {
			parent := dir
			dir = filepath.Join(dir, part)
			err := os.Mkdir(dir, 0o755)
			if errors.Is(err, fs.ErrExist) {
				continue
			}
			if err != nil {
				return created, err
			}
			created = append(created, dir)
			if slices.Contains(h.Controllers, "cpuset") {
				for _, file := range []string{"cpuset.cpus", "cpuset.mems"} {
					v, err := os.ReadFile(filepath.Join(parent, file))
					if err != nil {
						return created, err
					}
					if err := os.WriteFile(filepath.Join(dir, file), v, 0o644); err != nil {
						return created, err
					}
				}
			}
		}
	}
	return created, nil
}

// cgroupProcs lists every process in the cgroup trees below the given
// directories.
func cgroupProcs(dirs []string) []int {
	var pids []int
	for _, dir := range dirs {
		_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil || !d.IsDir() {
				return nil
			}
			data, err := os.ReadFile(filepath.Join(p, "cgroup.procs"))
			if err != nil {
				return nil
			}
			for _, f := range strings.Fields(string(data)) {
				if pid, err := strconv.Atoi(f); err == nil && !slices.Contains(pids, pid) {
					pids = append(pids, pid)
				}
			}
			return nil
		})
	}
	return pids
}

// dirsUnder lists dir and every directory below it, parents before
// children; none when dir does not exist.
func dirsUnder(dir string) ([]string, error) {
	var dirs []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	return dirs, err
}

// removeCgroupTree removes dir and every cgroup below it, deepest first.
// The processes in them must be gone.
func removeCgroupTree(dir string) error {
	dirs, err := dirsUnder(dir)
	if err != nil {
		return err
	}
	var errs []error
	for i := len(dirs) - 1; i >= 0; i-- {
		if err := unix.Rmdir(dirs[i]); err != nil && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("rmdir %s: %w", dirs[i], err))
		}
	}
	return errors.Join(errs...)
}

// startInCgroup runs start on an OS thread that first joins path in every
// v1 hierarchy (v1 moves single threads through the tasks file), so the
// process start forks is born in the node's cgroup, before it can start
// children of its own; the thread then goes back where it was. A thread
// that cannot go back stays locked, and Go ends it (or, for the main
// thread, parks it) rather than run other goroutines on it. On a v2-only
// host the child is cloned into the cgroup instead (CLONE_INTO_CGROUP, via
// set).
func startInCgroup(hs []hierarchy, path string, set func(cgroupFD int), start func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		tid := strconv.Itoa(unix.Gettid())
		home, err := threadCgroups()
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		var moved []hierarchy
		err = func() error {
			for _, h := range hs {
				if h.V2 {
					if hasV1(hs) {
						continue // hybrid: the v2 tree has no controllers
					}
					fd, err := unix.Open(filepath.Join(h.Mount, path), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
					if err != nil {
						return err
					}
					defer unix.Close(fd)
					set(fd)
					continue
				}
				if err := os.WriteFile(filepath.Join(h.Mount, path, "tasks"), []byte(tid), 0o644); err != nil {
					return fmt.Errorf("joining %s: %w", filepath.Join(h.Mount, path), err)
				}
				moved = append(moved, h)
			}
			return start()
		}()
		for _, h := range moved {
			back := filepath.Join(h.Mount, home[strings.Join(h.Controllers, ",")], "tasks")
			if backErr := os.WriteFile(back, []byte(tid), 0o644); backErr != nil {
				errc <- errors.Join(err, fmt.Errorf("returning to %s: %w", back, backErr))
				return // still locked: this thread never runs another goroutine
			}
		}
		runtime.UnlockOSThread()
		errc <- err
	}()
	return <-errc
}

// threadCgroups maps each v1 hierarchy's controllers ("cpu",
// "name=systemd", ...) to the calling thread's cgroup in it.
func threadCgroups() (map[string]string, error) {
	data, err := os.ReadFile("/proc/thread-self/cgroup")
	if err != nil {
		return nil, err
	}
	paths := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		if parts := strings.SplitN(line, ":", 3); len(parts) == 3 && parts[1] != "" {
			paths[parts[1]] = parts[2]
		}
	}
	return paths, nil
}

func hasV1(hs []hierarchy) bool {
	return slices.ContainsFunc(hs, func(h hierarchy) bool { return !h.V2 })
}

// mountsUnder lists the mount points at or below dir, deepest (latest)
// first.
func mountsUnder(dir string) ([]string, error) {
	var mounts []string
	err := eachMount(func(fields []string) {
		if len(fields) < 5 {
			return
		}
		if mp := unescapeMountinfo(fields[4]); mp == dir || strings.HasPrefix(mp, dir+"/") {
			mounts = append(mounts, mp)
		}
	})
	slices.Reverse(mounts)
	return mounts, err
}

// eachMount calls f with the fields of each line of this mount
// namespace's mountinfo, in order (readMounts).
func eachMount(f func(fields []string)) error {
	file, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return err
	}
	defer file.Close()
	return readMounts(file, f)
}

// readMounts calls f with the fields of each line of a mountinfo: id
// parent major:minor root mountpoint options [optional...] - fstype
// source superoptions.
func readMounts(mountinfo io.Reader, f func(fields []string)) error {
	sc := bufio.NewScanner(mountinfo)
	for sc.Scan() {
		f(strings.Fields(sc.Text()))
	}
	return sc.Err()
}

// unescapeMountinfo undoes mountinfo's octal escapes (\040 for a space).
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
