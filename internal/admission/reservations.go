package admission

import (
	corev1 "k8s.io/api/core/v1"

	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/reservation"
)

// The rules of this file, as refusals name them.
const (
	// RuleReservationShape: a reservation's name, labels and spec
	// summary are what its spec implies, for every writer.
	RuleReservationShape = "reservation-shape"
	// RuleReservationPodBound: a pod's reservation is the agent's of the
	// node that pod is bound to, and names that pod as it is.
	RuleReservationPodBound = "reservation-pod-bound"
)

// ReservationShape judges the creation (old nil) or update of r by any
// writer: its name, labels and spec summary must be what its spec implies
// (reservation.Check). Readers act on them without reading the spec: the
// name is the lock, the labels select an owner's and a node's
// reservations, and the controller's caches read the summary in place of
// the spec. A summary left as it was by an update that changes the spec is
// no lie: the generation rises, and no reader trusts it then.
func ReservationShape(old, r *tenurev1alpha1.IPReservation) Verdict {
	var err error
	if old == nil {
		err = reservation.Check(r)
	} else {
		err = reservation.CheckUpdate(old, r)
	}
	if err != nil {
		return deny(RuleReservationShape, "reservation %s: %v", r.Name, err)
	}
	return Allow()
}

// PodReservationCreate judges the creation of a pod's reservation r by
// the agent of node, as the node authorizer judges a kubelet's write of a
// pod's objects: the pod spec.owner names (namespace and name; pod: it as
// read, nil when there is none) must exist with the owner's UID and be
// bound to node, and podName and podUID must name it too. So a node
// reserves only for its own pods, and never with another object's UID (a
// claim's, a pod's of another node): what it writes names nothing of
// another node's.
func PodReservationCreate(node string, r *tenurev1alpha1.IPReservation, pod *corev1.Pod) Verdict {
	o := r.Spec.Owner
	switch {
	case o.Kind != tenurev1alpha1.OwnerPod:
		return Allow()
	case pod == nil:
		return deny(RuleReservationPodBound, "reservation %s names pod %s/%s, which does not exist", r.Name, o.Namespace, o.Name)
	case string(pod.UID) != o.UID:
		return deny(RuleReservationPodBound, "reservation %s names pod %s/%s with spec.owner.uid %s, but that pod has UID %s",
			r.Name, o.Namespace, o.Name, orNone(o.UID), pod.UID)
	case pod.Spec.NodeName != node:
		return deny(RuleReservationPodBound, "reservation %s names pod %s/%s, which is bound to node %s, not to node %s of the agent",
			r.Name, o.Namespace, o.Name, orNone(pod.Spec.NodeName), node)
	case o.PodName != o.Name || o.PodUID != o.UID:
		return deny(RuleReservationPodBound, "reservation %s of pod %s/%s (uid %s) has spec.owner.podName %q and podUID %q: a pod's reservation names the pod in both",
			r.Name, o.Namespace, o.Name, o.UID, o.PodName, o.PodUID)
	}
	return Allow()
}
