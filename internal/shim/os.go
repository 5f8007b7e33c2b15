package shim

import "syscall"

// OSEnv is the environment of the running process, read through syscall
// only (os would add its package start-up to every call).
func OSEnv() Env {
	return Env{
		Getenv:   func(k string) string { v, _ := syscall.Getenv(k); return v },
		Stdin:    func() ([]byte, error) { return ReadAll(0) },
		OwnNetNS: ownNetNS,
	}
}

// ownNetNS identifies the process's network namespace as the kernel's nsfs
// does: device and inode.
func ownNetNS() (dev, ino uint64, ok bool) {
	var st syscall.Stat_t
	if syscall.Stat("/proc/self/ns/net", &st) != nil {
		return 0, 0, false
	}
	return uint64(st.Dev), st.Ino, true
}

// Write writes all of b to fd.
func Write(fd int, b []byte) {
	for len(b) > 0 {
		n, err := syscall.Write(fd, b)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return
		}
		b = b[n:]
	}
}
