package reservation

import tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"

// AttachmentKey identifies one CNI attachment: a container's interface.
// It is what the agent locks an ADD or DEL by, what a GC's valid
// attachments are compared by, and what its cache indexes reservations by.
func AttachmentKey(containerID, ifName string) string { return containerID + "/" + ifName }

// SameAttachment reports whether two reservations are owned by one
// attachment: owner UID, container ID and interface.
func SameAttachment(a, b *tenurev1alpha1.IPReservation) bool {
	x, y := a.Spec.Owner, b.Spec.Owner
	return x.UID == y.UID && x.ContainerID == y.ContainerID && x.Interface == y.Interface
}
