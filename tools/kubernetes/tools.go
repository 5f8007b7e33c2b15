//go:build tools

// Package tools pins k8s.io/kubernetes so that `go build
// k8s.io/kubernetes/cmd/...` resolves inside this module: kube-apiserver for
// the local control plane, and the kubelet, kube-controller-manager and
// kube-scheduler for the local node (hack/build-node.sh).
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
