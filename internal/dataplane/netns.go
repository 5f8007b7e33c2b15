package dataplane

import (
	"fmt"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// namespace is the dataplane network namespace: the one at a path, or the
// agent's own (path "").
type namespace struct {
	path string
	ns   ns.NetNS // nil for the agent's own
}

func openNamespace(path string) (*namespace, error) {
	if path == "" {
		return &namespace{}, nil
	}
	n, err := ns.GetNS(path)
	if err != nil {
		return nil, fmt.Errorf("dataplane network namespace %s: %w", path, err)
	}
	return &namespace{path: path, ns: n}, nil
}

func (n *namespace) own() bool { return n.path == "" }

// netlink returns a netlink handle whose sockets live in the namespace.
func (n *namespace) netlink() (*netlink.Handle, error) {
	if n.own() {
		return netlink.NewHandle()
	}
	return netlink.NewHandleAt(netns.NsHandle(n.ns.Fd()))
}

// do runs fn in the namespace; sockets fn opens stay there. ns.Do runs fn
// on a locked thread of its own and discards the thread if it cannot
// switch back, so no other goroutine ever runs in the dataplane namespace
// by accident.
func (n *namespace) do(fn func() error) error {
	if n.own() {
		return fn()
	}
	return n.ns.Do(func(ns.NetNS) error { return fn() })
}

func (n *namespace) close() {
	if !n.own() {
		_ = n.ns.Close()
	}
}

func (n *namespace) String() string {
	if n.own() {
		return "the agent's own network namespace"
	}
	return n.path
}
