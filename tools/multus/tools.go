//go:build tools

// Package tools pins Multus' thin CNI plugin (cmd/multus: the binary that
// Multus' own DaemonSet copies into the node's CNI bin dir) for the local
// node (hack/build-node.sh).
package tools

import _ "gopkg.in/k8snetworkplumbingwg/multus-cni.v4/cmd/multus"
