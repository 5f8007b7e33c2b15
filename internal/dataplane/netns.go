package dataplane

import (
	"fmt"
	"runtime"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// namespace is the dataplane network namespace: the one at a path, or the
// agent's own (path "").
type namespace struct {
	path   string
	handle netns.NsHandle // -1 for the agent's own
}

func openNamespace(path string) (*namespace, error) {
	if path == "" {
		return &namespace{handle: netns.None()}, nil
	}
	h, err := netns.GetFromPath(path)
	if err != nil {
		return nil, fmt.Errorf("dataplane network namespace %s: %w", path, err)
	}
	return &namespace{path: path, handle: h}, nil
}

func (n *namespace) own() bool { return n.path == "" }

// netlink returns a netlink handle whose sockets live in the namespace.
func (n *namespace) netlink() (*netlink.Handle, error) {
	if n.own() {
		return netlink.NewHandle()
	}
	return netlink.NewHandleAt(n.handle)
}

// do runs fn on an OS thread switched into the namespace; sockets fn opens
// stay there. The thread is never switched back: its goroutine exits with
// the thread locked, so the Go runtime discards the thread and no other
// goroutine ever runs in the dataplane namespace by accident.
func (n *namespace) do(fn func() error) error {
	if n.own() {
		return fn()
	}
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		// No UnlockOSThread: see above.
		if err := netns.Set(n.handle); err != nil {
			errc <- fmt.Errorf("entering network namespace %s: %w", n.path, err)
			return
		}
		errc <- fn()
	}()
	return <-errc
}

func (n *namespace) close() {
	if !n.own() {
		_ = n.handle.Close()
	}
}

func (n *namespace) String() string {
	if n.own() {
		return "the agent's own network namespace"
	}
	return n.path
}
