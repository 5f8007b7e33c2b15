//go:build tools

// Package tools pins the reference CNI plugins that the end-to-end tests
// and the demo run with tenure as their IPAM, and host-local for the local
// node's cluster network.
package tools

import (
	_ "github.com/containernetworking/plugins/plugins/ipam/host-local"
	_ "github.com/containernetworking/plugins/plugins/main/bridge"
	_ "github.com/containernetworking/plugins/plugins/main/loopback"
	_ "github.com/containernetworking/plugins/plugins/main/macvlan"
)
