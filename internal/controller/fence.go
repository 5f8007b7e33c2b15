package controller

import (
	"sync"

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

// fenceWaits tells, once per reservation and node, that a reservation
// waits for its node to be fenced: a Warning Event on the pod, and the
// count in tenure_reservations_waiting_for_fence. Each decision about a
// reservation that exists is observed; one that no longer waits, or no
// longer exists, is forgotten, so a node that fails again is told again.
type fenceWaits struct {
	events EventRecorder // nil: no Events
	mu     sync.Mutex
	told   map[string]string // reservation name: the node it waits for
}

func newFenceWaits(events EventRecorder) *fenceWaits {
	return &fenceWaits{events: events, told: map[string]string{}}
}

// observe is told a decision about r (read from a cache or live).
func (f *fenceWaits) observe(r *tenurev1alpha1.IPReservation, d repair.Decision) {
	if d.Fence == "" {
		f.forget(r.Name)
		return
	}
	f.mu.Lock()
	if f.told[r.Name] == d.Fence {
		f.mu.Unlock()
		return
	}
	f.told[r.Name] = d.Fence
	fenceWaitGauge.Set(float64(len(f.told)))
	f.mu.Unlock()
	if f.events == nil {
		return
	}
	o := r.Spec.Owner
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: o.Namespace, Name: o.Name, UID: types.UID(o.UID)}}
	f.events.Eventf(pod, corev1.EventTypeWarning, EventReasonFenceWait, "keeping %s %s of network %s (IPReservation %s): %s",
		kindWord(r), r.Spec.Address, r.Spec.Network, r.Name, d.Message)
}

// forget drops a reservation that is gone or no longer waits.
func (f *fenceWaits) forget(name string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.told[name]; ok {
		delete(f.told, name)
		fenceWaitGauge.Set(float64(len(f.told)))
	}
}
