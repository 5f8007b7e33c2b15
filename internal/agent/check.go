package agent

import (
	"context"
	"encoding/json"
	"net"
	"net/netip"

	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"

	ipamclaimsv1alpha1 "github.com/tenure-ipam/tenure/api/ipamclaims/v1alpha1"
	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/cniwire"
	"github.com/tenure-ipam/tenure/internal/reservation"
	"github.com/tenure-ipam/tenure/internal/store"
)

// checkVerb answers CHECK: every address of the previous result has a
// reservation of the attachment, or of its claim.
type checkVerb struct {
	store *store.Store

	// What it needs of the other parts: the call's config and pod
	// (callReader), what the attachment holds (attachmentReservations)
	// and the claim path.
	prepare func(ctx context.Context, req *cniwire.Request) (*attachment, error)
	holds   attachmentHolder
	claims  checkClaims
}

// checkClaims is what a CHECK asks of the claim path (claimPath).
type checkClaims interface {
	stickyClaim(ctx context.Context, at *attachment, create bool) (string, error)
	getClaim(ctx context.Context, namespace, name string, fresh bool) (*ipamclaimsv1alpha1.IPAMClaim, error)
}

func (cv *checkVerb) run(ctx context.Context, req *cniwire.Request) error {
	at, err := cv.prepare(ctx, req)
	if err != nil {
		return err
	}
	var conf struct {
		CNIVersion string          `json:"cniVersion"`
		PrevResult json.RawMessage `json:"prevResult"`
	}
	if err := json.Unmarshal(req.StdinData, &conf); err != nil || len(conf.PrevResult) == 0 {
		return codedf(CodeInvalidNetworkConfig, err, "CHECK needs prevResult")
	}
	prev, err := version.NewResult(conf.CNIVersion, conf.PrevResult)
	if err != nil {
		return codedf(CodeDecodingFailure, err, "decoding prevResult")
	}
	pr, err := current.NewResultFromResult(prev)
	if err != nil {
		return codedf(CodeDecodingFailure, err, "converting prevResult")
	}
	held := cv.store.ByAttachment(req.ContainerID, req.IfName)
	if at.sel.Claim == "" {
		if at.sel.Claim, err = cv.claims.stickyClaim(ctx, at, false); err != nil {
			return err
		}
	}
	if at.sel.Claim != "" {
		if claim, err := cv.claims.getClaim(ctx, at.pod.Namespace, at.sel.Claim, false); err == nil {
			owned, err := cv.store.ClaimHolds(ctx, string(claim.UID))
			if err != nil {
				return err
			}
			held = append(held, owned...)
		}
	}
	have := map[netip.Addr]bool{}
	note := func(held []*tenurev1alpha1.IPReservation) {
		for _, r := range held {
			if _, unsettled := cv.store.Unsettled(r.Name); unsettled {
				continue // not known to exist
			}
			if r.Spec.Kind == tenurev1alpha1.KindAddress {
				if p, err := reservation.ParseItem(r.Spec.Address); err == nil {
					have[p.Addr()] = true
				}
			}
		}
	}
	missing := func() net.IP {
		for _, ipc := range pr.IPs {
			if addr, ok := netip.AddrFromSlice(ipc.Address.IP); !ok || !have[addr.Unmap()] {
				return ipc.Address.IP
			}
		}
		return nil
	}
	note(held)
	if missing() != nil {
		// The node cache may lag (its watch broke, the agent restarted):
		// what it lacks is read from the API server before CHECK fails.
		live, err := cv.holds.attachmentHolds(ctx, req.ContainerID, req.IfName, string(at.pod.UID), true, false)
		if err != nil {
			return err
		}
		note(live)
	}
	if ip := missing(); ip != nil {
		return codedf(CodeCheckFailed, nil, "address %s of the previous result has no reservation for container %s interface %s", ip, req.ContainerID, req.IfName)
	}
	if len(pr.IPs) == 0 && (len(at.cfg.Ranges) > 0 || at.cfg.Pools != nil) {
		return codedf(CodeCheckFailed, nil, "previous result holds no address")
	}
	return nil
}
