// Command tenure is the CNI IPAM plugin the container runtime executes. It is
// a shim: it forwards the call to the node agent over a unix socket and
// prints the agent's answer, so it holds no credentials and no state.
//
// It talks to the kernel through syscall only (no os, no fmt): the runtime
// starts it for every attachment, and each package's start-up is paid there.
package main

import (
	"runtime"
	"syscall"

	"github.com/tenure-ipam/tenure/internal/cniwire"
	"github.com/tenure-ipam/tenure/internal/shim"
)

func main() {
	// One goroutine, and most of its life blocked reading the agent's
	// answer: with a second P the runtime's scheduler and sysmon keep
	// waking up through that wait, about 0.5 ms of CPU over a 200 ms answer.
	runtime.GOMAXPROCS(1)
	out := shim.Run(shim.OSEnv())
	_ = cniwire.WriteAll(1, out.Stdout)
	_ = cniwire.WriteAll(2, out.Stderr)
	syscall.Exit(out.Exit)
}
