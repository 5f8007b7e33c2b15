package agent

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/allocator"
	"github.com/tenure-ipam/tenure/internal/cniwire"
	"github.com/tenure-ipam/tenure/internal/reservation"
	"github.com/tenure-ipam/tenure/internal/store"
)

// gcVerb answers GC: it releases this node's reservations of the CNI
// network's attachments the runtime no longer lists, but for those a call
// is under way for.
type gcVerb struct {
	node  string
	log   *slog.Logger
	store *store.Store
	alloc *allocator.Factory
	// locks are the attachments' calls under way.
	locks *keyedMutex
}

func (gv *gcVerb) run(ctx context.Context, req *cniwire.Request) error {
	var conf struct {
		Name  string `json:"name"`
		Valid []struct {
			ContainerID string `json:"containerID"`
			IfName      string `json:"ifname"`
		} `json:"cni.dev/valid-attachments"`
	}
	if err := json.Unmarshal(req.StdinData, &conf); err != nil {
		return codedf(CodeDecodingFailure, err, "decoding GC configuration")
	}
	valid := map[string]bool{}
	for _, v := range conf.Valid {
		valid[reservation.AttachmentKey(v.ContainerID, v.IfName)] = true
	}
	var errs []error
	for _, r := range gv.store.NodeReservations() {
		o := r.Spec.Owner
		if o.Kind != tenurev1alpha1.OwnerPod || o.Node != gv.node || r.Spec.CNINetwork != conf.Name {
			continue
		}
		key := reservation.AttachmentKey(o.ContainerID, o.Interface)
		if valid[key] || gv.locks.held(key) {
			continue
		}
		if u, ok := gv.store.Unsettled(r.Name); ok {
			// Deleted by name only once it is known to be this one.
			cur, err := gv.alloc.Settle(ctx, u, false)
			if apierrors.IsAlreadyExists(err) || (err == nil && cur == nil) {
				continue
			}
			if err != nil {
				errs = append(errs, err)
				continue
			}
			r = cur
		}
		gv.log.Info("GC releases a reservation of a gone attachment", "reservation", r.Name, "containerID", o.ContainerID, "ifName", o.Interface)
		if err := gv.alloc.Release(ctx, r); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
