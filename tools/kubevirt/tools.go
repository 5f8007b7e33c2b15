//go:build tools

// Package tools pins KubeVirt's API module, whose core/v1 types
// hack/gen-kubevirt-crds.sh turns into the VirtualMachine and
// VirtualMachineInstance CRDs the end-to-end tests install.
package tools

import _ "kubevirt.io/api/core/v1"
