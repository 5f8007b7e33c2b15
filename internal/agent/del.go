package agent

import (
	"context"
	"time"

	"github.com/tenure-ipam/tenure/internal/allocator"
	"github.com/tenure-ipam/tenure/internal/cniwire"
	"github.com/tenure-ipam/tenure/internal/store"
)

// delVerb answers DEL: it releases the reservations of the attachment and
// answers success only when the attachment holds nothing.
type delVerb struct {
	store *store.Store
	alloc *allocator.Factory
	// locks and arrivals order the calls of one attachment.
	locks    *keyedMutex
	arrivals *arrivals

	// What it needs of the other parts: what the attachment holds
	// (attachmentReservations), and the dataplane glue's Detached.
	holds    attachmentHolder
	detached func(network string)
}

func (dv *delVerb) run(ctx context.Context, req *cniwire.Request) error {
	if req.ContainerID == "" || req.IfName == "" {
		return codedf(CodeInvalidEnvironmentVariables, nil, "CNI_CONTAINERID and CNI_IFNAME are required")
	}
	// DEL must succeed on a config that no longer parses: it only needs the
	// attachment identity, so a bad config does not strand reservations.
	unlock := dv.locks.lock(attachmentKey(req))
	defer unlock()
	dv.arrivals.recordDel(attachmentKey(req), arrivalOf(ctx), time.Now())
	var released []string // their CNI networks
	defer func() {
		for _, network := range released {
			dv.detached(network)
		}
	}()
	// DEL answers success only when the attachment holds nothing: a cache
	// that may lag, or that holds nothing for it, is read past.
	podUID := ""
	if args, err := parseCNIArgs(req.Args); err == nil {
		podUID = args.UID
	}
	fresh := dv.holds.fresh(ctx)
	live := !fresh || len(dv.store.ByAttachment(req.ContainerID, req.IfName)) == 0
	held, err := dv.holds.attachmentHolds(ctx, req.ContainerID, req.IfName, podUID, live, false)
	if err != nil {
		return err
	}
	for _, r := range held {
		// Claim-owned ones are not listed: released only when the claim goes.
		if err := dv.alloc.Release(ctx, r); err != nil {
			return codedf(CodeTryAgainLater, err, "releasing %s of container %s interface %s", r.Name, req.ContainerID, req.IfName)
		}
		released = append(released, r.Spec.CNINetwork)
	}
	return nil
}
