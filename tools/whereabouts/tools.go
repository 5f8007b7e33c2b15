//go:build tools

// Package tools pins whereabouts' CNI plugin (cmd/whereabouts.go: the IPAM
// binary its DaemonSet installs on every node) for the end-to-end test of
// switching a running cluster from whereabouts to tenure
// (hack/build-whereabouts.sh). Its CRDs come from the same module's
// doc/crds, copied into the cache at build time.
package tools

import _ "github.com/k8snetworkplumbingwg/whereabouts/cmd"
