//go:build tools

// Package tools pins containerd for the local node. `go install
// github.com/containerd/containerd/v2/cmd/containerd@VERSION` is refused
// because containerd's go.mod has exclude directives; building inside a
// module that requires it works (hack/build-node.sh).
package tools

import (
	_ "github.com/containerd/containerd/v2/cmd/containerd"
	_ "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2"
	_ "github.com/containerd/containerd/v2/cmd/ctr"
)
