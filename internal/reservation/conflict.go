package reservation

// EventAddressConflict is the reason of the Warning Event an agent records
// on a pod whose ADD skipped an address because something answered for it
// on the wire though no reservation holds it. The Event's annotations
// (AnnotationConflict*) name the network, the address, the MAC that
// answered and the interface probed; `tenurectl check` reads them.
const EventAddressConflict = "AddressConflict"

// Annotations of an EventAddressConflict Event.
const (
	// AnnotationConflictNetwork is the CNI network's name.
	AnnotationConflictNetwork = "ipam.tenure.dev/network"
	// AnnotationConflictAddress is the address that answered.
	AnnotationConflictAddress = "ipam.tenure.dev/address"
	// AnnotationConflictMAC is the MAC that answered for it.
	AnnotationConflictMAC = "ipam.tenure.dev/mac"
	// AnnotationConflictInterface is the node's interface probed on.
	AnnotationConflictInterface = "ipam.tenure.dev/interface"
)
