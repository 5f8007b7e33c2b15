package shim

import (
	"syscall"

	"github.com/tenure-ipam/tenure/internal/cniwire"
)

// OSEnv is the environment of the running process, read through syscall
// only (os would add its package start-up to every call).
func OSEnv() Env {
	return Env{
		Getenv:   func(k string) string { v, _ := syscall.Getenv(k); return v },
		Stdin:    func() ([]byte, error) { return cniwire.ReadAll(0) },
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
