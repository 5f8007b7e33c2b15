// Command pause is the local node's sandbox process (hack/build-node.sh builds
// it static; the devnode package packs it as the sandbox image so that the
// node needs no registry). It holds the pod's namespaces, reaps the children
// it inherits when the pod shares one PID namespace (it is PID 1 there), and
// exits cleanly on SIGINT or SIGTERM, which is how the runtime stops a sandbox.
package main

import (
	"os"
	"os/signal"

	"golang.org/x/sys/unix"
)

func main() {
	signals := make(chan os.Signal, 8)
	signal.Notify(signals, unix.SIGINT, unix.SIGTERM, unix.SIGCHLD)
	for sig := range signals {
		if sig != unix.SIGCHLD {
			os.Exit(0)
		}
		reapChildren()
	}
}

// reapChildren waits for every child that has exited; signals coalesce, so
// one SIGCHLD may stand for several.
func reapChildren() {
	for {
		var status unix.WaitStatus
		pid, err := unix.Wait4(-1, &status, unix.WNOHANG, nil)
		if err == unix.EINTR {
			continue
		}
		if pid <= 0 || err != nil {
			return
		}
	}
}
