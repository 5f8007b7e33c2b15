package agent

import (
	"errors"
	"fmt"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/tenure-ipam/tenure/internal/allocator"
	"github.com/tenure-ipam/tenure/internal/config"
)

// tenure's CNI error codes (the spec leaves 100 and up to plugins).
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
		return &types.Error{Code: types.ErrInvalidNetworkConfig, Msg: asked.Error()}
	case errors.As(err, &ce):
		details := ""
		if ce.err != nil {
			details = ce.err.Error()
		}
		return &types.Error{Code: ce.code, Msg: ce.msg, Details: details}
	case errors.As(err, &cfgErr):
		return &types.Error{Code: types.ErrInvalidNetworkConfig, Msg: cfgErr.Error()}
	case errors.As(err, &full):
		return &types.Error{Code: CodeRangeFull, Msg: full.Error()}
	case errors.As(err, &answered):
		return &types.Error{Code: CodeAddressConflict, Msg: answered.Error()}
	case errors.As(err, &conflict):
		return &types.Error{Code: CodeAddressConflict, Msg: conflict.Error()}
	case errors.As(err, &notInRange):
		return &types.Error{Code: CodeClaimMismatch, Msg: notInRange.Error()}
	case errors.Is(err, allocator.ErrNotReady):
		return &types.Error{Code: types.ErrTryAgainLater, Msg: err.Error()}
	default:
		// API errors, timeouts: the runtime retries the sandbox.
		return &types.Error{Code: types.ErrTryAgainLater, Msg: err.Error()}
	}
}
