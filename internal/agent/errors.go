package agent

import (
	"errors"
	"fmt"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/tenure-ipam/tenure/internal/allocator"
	"github.com/tenure-ipam/tenure/internal/config"
)

// Every CNI error code tenure answers with. The shim answers some of them
// itself (internal/shim, where the runtime cannot reach the agent or the
// call never gets that far) and the agent the rest; README.md's table of
// CNI error codes lists these, one row per code.
//
// The spec's codes (0-99) are named after containernetworking/cni's types.
const (
	// CodeIncompatibleCNIVersion: the configuration's cniVersion is not
	// supported, or is below what CHECK, GC or STATUS need.
	CodeIncompatibleCNIVersion = types.ErrIncompatibleCNIVersion // 1
	// CodeInvalidEnvironmentVariables: a CNI_* variable the command needs
	// is missing or invalid, CNI_ARGS lacks the pod, or the pod is bound
	// to another node.
	CodeInvalidEnvironmentVariables = types.ErrInvalidEnvironmentVariables // 4
	// CodeIOFailure: the shim could not read its stdin.
	CodeIOFailure = types.ErrIOFailure // 5
	// CodeDecodingFailure: the network configuration, a request or a
	// prevResult is not what it should decode as.
	CodeDecodingFailure = types.ErrDecodingFailure // 6
	// CodeInvalidNetworkConfig: invalid IPAM configuration or pod
	// annotation; the message names the key and the value. Also a pools
	// list while the IPPool CRD lacks the selector fields (poolSchemaOK).
	CodeInvalidNetworkConfig = types.ErrInvalidNetworkConfig // 7
	// CodeInvalidNetNS: CNI_NETNS is the shim's own network namespace.
	CodeInvalidNetNS = types.ErrInvalidNetNS // 8
	// CodeTryAgainLater: the runtime retries the sandbox (agent
	// unreachable or busy, caches not synced, API errors, pod or claim
	// not found yet).
	CodeTryAgainLater = types.ErrTryAgainLater // 11
	// CodePluginNotAvailable: STATUS finds the agent or the Kubernetes API
	// not available. The spec defines 50; containernetworking/cni's types
	// has no constant for it.
	CodePluginNotAvailable uint = 50
)

// tenure's own codes (the spec leaves 100 and up to plugins).
const (
	// CodeRangeFull: every assignable address of a range is reserved.
	CodeRangeFull uint = 100
	// CodeAddressConflict: an address asked for by name (recorded by an
	// IPAMClaim, or requested in runtimeConfig.ips) is held by another
	// owner; the message names the holder.
	CodeAddressConflict uint = 101
	// CodeClaimMismatch: the IPAMClaim's recorded state does not fit this
	// network, or contradicts the address runtimeConfig.ips asks for.
	CodeClaimMismatch uint = 102
	// CodeNotPresented: the pod names an IPAMClaim it may not present
	// (claims.MayPresent): a mirror pod, a pod being deleted or finished.
	// The message names the pod, the claim and the reason. A KubeVirt
	// VM's pod its VMI does not name yet gets 11 instead: virt-controller
	// lists it when it next syncs the VMI.
	CodeNotPresented uint = 103
	// CodeCheckFailed: CHECK found the attachment's reservations missing
	// or different. It shares 103 with CodeNotPresented (an ADD's answer,
	// never a CHECK's); the message tells them apart.
	CodeCheckFailed uint = 103
	// CodeStaticPod: the pod is a static pod, which the runtime names by
	// its manifest's hash and the API by a mirror pod its node writes: it
	// gets no address (docs/design.md, "Static pods").
	CodeStaticPod uint = 104
)

// cniError is an error with the CNI code it should be reported with.
type cniError struct {
	code uint
	msg  string
	err  error
}

func (e *cniError) Error() string {
	if e.err == nil {
		return e.msg
	}
	return e.msg + ": " + e.err.Error()
}

func (e *cniError) Unwrap() error { return e.err }

func codedf(code uint, err error, format string, args ...any) error {
	return &cniError{code: code, msg: fmt.Sprintf(format, args...), err: err}
}

// toCNI maps any error of a command to the CNI error the shim prints.
func toCNI(err error) *types.Error {
	var ce *cniError
	var cfgErr *config.Error
	var full *allocator.FullError
	var conflict *allocator.ConflictError
	var answered *allocator.AnsweredError
	var notInRange *allocator.ErrNotInRange
	var outside *outsideRangeError
	var asked *claimRequestError
	switch {
	case errors.As(err, &outside):
		return &types.Error{Code: CodeClaimMismatch, Msg: outside.Error()}
	case errors.As(err, &asked):
		return &types.Error{Code: CodeInvalidNetworkConfig, Msg: asked.Error()}
	case errors.As(err, &ce):
		details := ""
		if ce.err != nil {
			details = ce.err.Error()
		}
		return &types.Error{Code: ce.code, Msg: ce.msg, Details: details}
	case errors.As(err, &cfgErr):
		return &types.Error{Code: CodeInvalidNetworkConfig, Msg: cfgErr.Error()}
	case errors.As(err, &full):
		return &types.Error{Code: CodeRangeFull, Msg: full.Error()}
	case errors.As(err, &answered):
		return &types.Error{Code: CodeAddressConflict, Msg: answered.Error()}
	case errors.As(err, &conflict):
		return &types.Error{Code: CodeAddressConflict, Msg: conflict.Error()}
	case errors.As(err, &notInRange):
		return &types.Error{Code: CodeClaimMismatch, Msg: notInRange.Error()}
	case errors.Is(err, allocator.ErrNotReady):
		return &types.Error{Code: CodeTryAgainLater, Msg: err.Error()}
	default:
		// API errors, timeouts: the runtime retries the sandbox.
		return &types.Error{Code: CodeTryAgainLater, Msg: err.Error()}
	}
}
