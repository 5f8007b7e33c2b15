//go:build tools

// Package tools pins Multus for the local node (hack/build-node.sh): the
// thin CNI plugin (cmd/multus, what Multus' thin DaemonSet copies into the
// node's CNI bin dir), and the thick plugin's daemon, shim, installer and
// passthru plugin (what Multus' thick image carries).
package tools

import (
	_ "gopkg.in/k8snetworkplumbingwg/multus-cni.v4/cmd/install_multus"
	_ "gopkg.in/k8snetworkplumbingwg/multus-cni.v4/cmd/multus"
	_ "gopkg.in/k8snetworkplumbingwg/multus-cni.v4/cmd/multus-daemon"
	_ "gopkg.in/k8snetworkplumbingwg/multus-cni.v4/cmd/multus-shim"
	_ "gopkg.in/k8snetworkplumbingwg/multus-cni.v4/cmd/passthru-cni"
)
