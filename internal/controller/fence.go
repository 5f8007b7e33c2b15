package controller

import (
	"log/slog"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/controller/repair"
)

// EventReasonFenceWait is the reason of the Warning Event on a pod whose
// addresses are kept because it is terminating (or terminal) on a node
// that is not Ready and not fenced: someone has to fence the node (the
// out-of-service taint, or deleting the Node) for them to be released.
const EventReasonFenceWait = "WaitingForFence"

// fenceWaits tells, once per reservation, that a reservation waits for
// its node to be fenced: a Warning Event on the pod, a log line, and the
// count in tenure_reservations_waiting_for_fence. A reservation is
// forgotten once it is released or deleted, and only then: a keep for
// another reason may come from a sweep's older view of the node (its
// nodes are listed as it begins), and a pod that is terminating on a node
// stays so until its reservations go.
type fenceWaits struct {
	events EventRecorder // nil: no Events
	log    *slog.Logger
	*toldOnce
}

func newFenceWaits(events EventRecorder, log *slog.Logger) *fenceWaits {
	return &fenceWaits{events: events, log: log, toldOnce: newToldOnce(fenceWaitGauge)}
}

// observe is told a decision about r (read from a cache or live).
func (f *fenceWaits) observe(r *tenurev1alpha1.IPReservation, d repair.Decision) {
	switch {
	case d.Release:
		f.forget(r.Name)
		return
	case d.Fence == "":
		return
	}
	if !f.first(r.Name, d.Fence) {
		return
	}
	o := r.Spec.Owner
	f.log.Info("kept: waiting for the node to be fenced", "reservation", r.Name, "address", r.Spec.Address, "network", r.Spec.Network,
		"owner", "Pod "+o.Namespace+"/"+o.Name, "uid", o.UID, "node", d.Fence, "why", d.Message)
	if f.events == nil {
		return
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: o.Namespace, Name: o.Name, UID: types.UID(o.UID)}}
	f.events.Eventf(pod, corev1.EventTypeWarning, EventReasonFenceWait, "keeping %s %s of network %s (IPReservation %s): %s",
		kindWord(r), r.Spec.Address, r.Spec.Network, r.Name, d.Message)
}
