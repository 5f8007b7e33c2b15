package agent

import (
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"slices"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipamclaimsv1alpha1 "github.com/tenure-ipam/tenure/api/ipamclaims/v1alpha1"
	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/allocator"
	"github.com/tenure-ipam/tenure/internal/claims"
	"github.com/tenure-ipam/tenure/internal/kubevirt"
	"github.com/tenure-ipam/tenure/internal/reservation"
)

// statusRecorder writes a claim's status: the items a claim's ADD holds,
// its ownerPod, its conditions (IPsAllocated, DelegatedPrefixesRecorded)
// and the Events that go with them.
type statusRecorder struct {
	client   client.Client
	log      *slog.Logger
	recorder record.EventRecorder
	// pruned counts the claims whose status.delegatedPrefixes the API
	// server dropped (agentMetrics.prefixRecordPruned).
	pruned prometheus.Counter
	// vmRunsElsewhere is the VMI follower's: whether the claim's VM runs
	// on another node, read from the API server.
	vmRunsElsewhere func(ctx context.Context, claim *ipamclaimsv1alpha1.IPAMClaim, pod *corev1.Pod) (kubevirt.VMI, bool, error)
}

// recordClaim writes status.ips, status.delegatedPrefixes, ownerPod and the
// condition, only when something changed; a conflict is returned as is.
func (s *statusRecorder) recordClaim(ctx context.Context, claim *ipamclaimsv1alpha1.IPAMClaim, pod *corev1.Pod, held []heldSlot, fresh bool) error {
	var ips, prefixes []string
	recordedBefore := slices.Clone(claim.Status.DelegatedPrefixes)
	for _, h := range held {
		p, err := reservation.ParseItem(h.res.Spec.Address)
		if err != nil {
			return err
		}
		if h.slot.Range != nil {
			ips = append(ips, netip.PrefixFrom(p.Addr(), h.slot.Range.Prefix.Bits()).String())
		} else {
			prefixes = append(prefixes, p.String())
		}
	}
	// The lists are append-only by position (the webhook's
	// claim-status-append-only): an item held here that the status does
	// not record goes after the recorded ones, which keep their places.
	newIPs := appendUnrecorded(claim.Status.IPs, ips, func(x, y netip.Prefix) bool { return x.Addr() == y.Addr() })
	newPrefixes := appendUnrecorded(claim.Status.DelegatedPrefixes, prefixes, func(x, y netip.Prefix) bool { return x == y })
	changed := fresh || !slices.Equal(claim.Status.IPs, newIPs) || !slices.Equal(claim.Status.DelegatedPrefixes, newPrefixes)
	claim.Status.IPs, claim.Status.DelegatedPrefixes = newIPs, newPrefixes
	if claim.Status.IPs == nil {
		claim.Status.IPs = []string{}
	}
	if claim.Status.OwnerPod == nil || claim.Status.OwnerPod.Name != pod.Name {
		// A migration target's ADD comes while the VM still runs on the
		// source: where KubeVirt says so, ownerPod stays on the source until
		// the switchover (vmi.go).
		var vmi kubevirt.VMI
		elsewhere := false
		if claim.Status.OwnerPod != nil && claim.Status.OwnerPod.Name != "" {
			var err error
			if vmi, elsewhere, err = s.vmRunsElsewhere(ctx, claim, pod); err != nil {
				return err
			}
		}
		if elsewhere {
			s.log.Info("claim's ownerPod stays: its VM runs on another node", "claim", claims.Key(claim), "pod", pod.Name,
				"ownerPod", claim.Status.OwnerPod.Name, "vmi", vmi.Namespace+"/"+vmi.Name, "vmNode", vmi.Node())
		} else {
			claim.Status.OwnerPod = &ipamclaimsv1alpha1.OwnerPod{Name: pod.Name}
			changed = true
		}
	}
	if claims.SetCondition(claim, true, ipamclaimsv1alpha1.ReasonSuccessfulAllocation, "IPs allocated to pod "+claim.Status.OwnerPod.Name) {
		changed = true
	}
	if !changed {
		return nil
	}
	sent := slices.Clone(claim.Status.DelegatedPrefixes)
	wctx, warnings := collectWarnings(ctx)
	if err := s.client.Status().Update(wctx, claim); err != nil {
		return err
	}
	s.checkPrefixRecord(ctx, claim, sent, recordedBefore, warnings)
	return nil
}

// appendUnrecorded is recorded with each item of held that no item of
// recorded matches (same) appended, in held's order. An item of recorded
// that does not parse matches nothing and stays where it is.
func appendUnrecorded(recorded, held []string, same func(x, y netip.Prefix) bool) []string {
	out := slices.Clone(recorded)
	for _, h := range held {
		hp, err := netip.ParsePrefix(h)
		if err != nil {
			continue
		}
		if !slices.ContainsFunc(out, func(r string) bool {
			rp, err := reservation.ParseItem(r)
			return err == nil && same(rp, hp)
		}) {
			out = append(out, h)
		}
	}
	return out
}

// reportClaimFailure sets the condition and an Event; best effort, the ADD
// error is what the runtime acts on.
func (s *statusRecorder) reportClaimFailure(ctx context.Context, claim *ipamclaimsv1alpha1.IPAMClaim, cause error) {
	reason := ""
	var outside *outsideRangeError
	var asked *claimRequestError
	var conflict *allocator.ConflictError
	switch {
	case errors.As(cause, &asked):
		reason = asked.reason
	case errors.Is(cause, allocator.ErrFull):
		reason = ipamclaimsv1alpha1.ReasonSubnetExhausted
	case errors.As(cause, &conflict) && conflict.Holder.Kind == tenurev1alpha1.OwnerAdministrator:
		reason = ipamclaimsv1alpha1.ReasonReservedIPRequested
	case errors.Is(cause, allocator.ErrAllocated):
		reason = ipamclaimsv1alpha1.ReasonIPAddressConflict
	case errors.As(cause, &outside):
		reason = ipamclaimsv1alpha1.ReasonAddressesOutsideRange
	default:
		return
	}
	if s.recorder != nil {
		s.recorder.Event(claim, corev1.EventTypeWarning, reason, cause.Error())
	}
	if claim.Status.IPs == nil {
		claim.Status.IPs = []string{} // required by the upstream schema
	}
	if claims.SetCondition(claim, false, reason, cause.Error()) {
		if err := s.client.Status().Update(ctx, claim); err != nil {
			s.log.Info("could not record claim condition", "claim", claims.Key(claim), "err", err)
		}
	}
}
