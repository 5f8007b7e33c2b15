package agent

import (
	"context"
	"log/slog"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/allocator"
	"github.com/tenure-ipam/tenure/internal/reservation"
	"github.com/tenure-ipam/tenure/internal/store"
)

// attachmentReservations reads what an attachment holds, settling what is
// unsettled, and releases what a failed ADD made.
type attachmentReservations struct {
	node   string
	log    *slog.Logger
	store  *store.Store
	client client.Reader
	alloc  *allocator.Factory
	// freshWait: how long after the node cache went stale a call waits
	// for it to be found whole (the const freshWait; tests lengthen it).
	freshWait time.Duration
}

// attachmentHolder is what the verbs need of attachmentReservations.
type attachmentHolder interface {
	fresh(ctx context.Context) bool
	attachmentHolds(ctx context.Context, containerID, ifName, podUID string, live, recreate bool) ([]*tenurev1alpha1.IPReservation, error)
}

// fresh waits, up to freshWait, for the node cache to be found whole;
// false when it may lag.
func (ar *attachmentReservations) fresh(ctx context.Context) bool {
	return ar.store.AwaitFresh(ctx, ar.freshWait)
}

// attachmentHolds returns the pod-owned reservations of one attachment
// (of pod UID podUID; "" when unknown): the node cache's, or with live
// the API server's (a list by the owner-UID label, or by this node's label
// when the pod UID is unknown). Creates of the attachment whose outcome is
// unknown (Store.Unsettled) are settled first by live reads; with
// recreate (ADD) a name found free is created again, so a create still in
// flight cannot commit beside it. One that cannot be settled in time is a
// retryable error.
func (ar *attachmentReservations) attachmentHolds(ctx context.Context, containerID, ifName, podUID string, live, recreate bool) ([]*tenurev1alpha1.IPReservation, error) {
	ours := func(r *tenurev1alpha1.IPReservation) bool {
		o := r.Spec.Owner
		// Made on this node: any node may write a reservation naming this
		// node's pod and sandbox, and none but this node's is the
		// attachment's.
		return o.Kind == tenurev1alpha1.OwnerPod && o.ContainerID == containerID && o.Interface == ifName && (podUID == "" || o.UID == podUID) &&
			o.Node == ar.node
	}
	var out, unsettled []*tenurev1alpha1.IPReservation
	for _, r := range ar.store.ByAttachment(containerID, ifName) {
		if !ours(r) {
			continue
		}
		if u, ok := ar.store.Unsettled(r.Name); ok {
			unsettled = append(unsettled, u)
			continue
		}
		if !live {
			out = append(out, r)
		}
	}
	if live {
		sel := client.MatchingLabels{reservation.LabelOwnerUID: podUID}
		if podUID == "" {
			sel = client.MatchingLabels{reservation.LabelNode: reservation.NodeLabel(ar.node)}
		}
		list := &tenurev1alpha1.IPReservationList{}
		if err := ar.client.List(ctx, list, sel); err != nil {
			return nil, codedf(CodeTryAgainLater, err, "reading what container %s interface %s holds from the API server", containerID, ifName)
		}
		for i := range list.Items {
			r := &list.Items[i]
			if _, ok := ar.store.Unsettled(r.Name); ok || !ours(r) {
				continue // settled below
			}
			out = append(out, r)
		}
	}
	for _, u := range unsettled {
		r, err := ar.alloc.Settle(ctx, u, recreate)
		switch {
		case apierrors.IsAlreadyExists(err):
			// Someone else's: the create did not commit for this attachment.
		case err != nil:
			return nil, codedf(CodeTryAgainLater, err, "container %s interface %s: an earlier create of %s is unsettled", containerID, ifName, u.Name)
		case r != nil:
			out = append(out, r)
		}
	}
	return out, nil
}

// rollback frees what a failed ADD created, so a dual-stack ADD that got
// its IPv4 address but not its IPv6 one leaves nothing behind.
func rollback(alloc *allocator.Factory, log *slog.Logger, created []*tenurev1alpha1.IPReservation) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, r := range created {
		if err := alloc.Release(ctx, r); err != nil {
			log.Error("rollback failed; the controller will release it", "reservation", r.Name, "err", err)
		}
	}
}

// freshWait bounds how long after the node cache went stale a call waits
// for it to be found whole (Store.AwaitFresh) rather than read past it: a
// watch the API server closed reopens within milliseconds, and its check
// takes one list and the reopened watch's catch-up; a cache stale for
// longer is read past at once.
const freshWait = time.Second
