package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ReservationKind says what an IPReservation holds.
// +kubebuilder:validation:Enum=Address;DelegatedPrefix
type ReservationKind string

const (
	// KindAddress is one interface address.
	KindAddress ReservationKind = "Address"
	// KindDelegatedPrefix is an IPv6 prefix delegated over DHCPv6 PD.
	KindDelegatedPrefix ReservationKind = "DelegatedPrefix"
)

// OwnerKind says what keeps a reservation alive.
// +kubebuilder:validation:Enum=Pod;IPAMClaim;Administrator
type OwnerKind string

const (
	// OwnerPod: the reservation lives as long as the pod with Owner.UID and
	// the attachment (ContainerID, Interface) that made it.
	OwnerPod OwnerKind = "Pod"
	// OwnerIPAMClaim: the reservation lives as long as the IPAMClaim with
	// Owner.UID, whatever pods come and go.
	OwnerIPAMClaim OwnerKind = "IPAMClaim"
	// OwnerAdministrator: an address set aside by an administrator
	// (`tenurectl reserve`), with its reason in the annotation
	// ipam.tenure.dev/reason. Nothing hands it out and nothing releases it
	// but an administrator (`tenurectl release`); Name is who set it
	// aside, UID is shared by the addresses set aside together, and there
	// is no Namespace.
	OwnerAdministrator OwnerKind = "Administrator"
)

// ReservationOwner names what holds a reservation, precisely enough for the
// controller to decide, without guessing, that the holder is gone.
// +kubebuilder:validation:XValidation:rule="self.kind != 'Pod' || (has(self.podName) && has(self.podUID))",message="a Pod owner needs podName and podUID"
// +kubebuilder:validation:XValidation:rule="self.kind == 'Administrator' ? !has(self.namespace) && !has(self.node) : has(self.namespace)",message="a Pod or IPAMClaim owner needs a namespace; an Administrator owner has no namespace and no node"
type ReservationOwner struct {
	Kind OwnerKind `json:"kind"`
	// Namespace of the pod or claim; none for an Administrator.
	// +kubebuilder:validation:MinLength=1
	// +optional
	Namespace string `json:"namespace,omitempty"`
	// Name of the owning object (the pod for kind Pod, the claim for IPAMClaim).
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`
	// UID of the owning object.
	// +kubebuilder:validation:MinLength=1
	UID string `json:"uid"`

	// PodName and PodUID name the pod whose ADD made or last used the
	// reservation (equal to Name/UID for kind Pod).
	// +optional
	PodName string `json:"podName,omitempty"`
	// +optional
	PodUID string `json:"podUID,omitempty"`
	// ContainerID of the sandbox whose ADD made the reservation.
	// +optional
	ContainerID string `json:"containerID,omitempty"`
	// Interface is the CNI_IFNAME of that attachment.
	// +optional
	Interface string `json:"interface,omitempty"`
	// Node the attachment was made on.
	// +optional
	Node string `json:"node,omitempty"`
}

// IPReservationSpec is immutable where it identifies the reservation: the
// object's name is derived from Network and Address, and changing either
// would make name and content disagree.
// +kubebuilder:validation:XValidation:rule="self.network == oldSelf.network && self.address == oldSelf.address && self.kind == oldSelf.kind",message="network, address and kind are immutable"
// +kubebuilder:validation:XValidation:rule="self.kind != 'DelegatedPrefix' || self.address.contains('/')",message="a DelegatedPrefix reservation holds a CIDR"
// +kubebuilder:validation:XValidation:rule="self.kind != 'Address' || !self.address.contains('/')",message="an Address reservation holds a single IP"
type IPReservationSpec struct {
	// Network is the allocation scope: network_name of the IPAM config, or
	// "default", plus the range when enable_overlapping_ranges is false.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Network string `json:"network"`
	// Kind of the reservation.
	Kind ReservationKind `json:"kind"`
	// Address is the IP (kind Address) or the CIDR (kind DelegatedPrefix),
	// in canonical form.
	// +kubebuilder:validation:XValidation:rule="isIP(self) || isCIDR(self)",message="address must be an IP or a CIDR"
	// +kubebuilder:validation:MaxLength=43
	Address string `json:"address"`
	// Range the address was allocated from (CIDR or first-last), for
	// reporting and pool usage.
	// +optional
	Range string `json:"range,omitempty"`
	// Pool is the IPPool the range belongs to, when the config named one.
	// +optional
	Pool string `json:"pool,omitempty"`
	// CNINetwork is the `name` of the CNI network configuration that made
	// the reservation; CNI GC is scoped by it.
	// +optional
	CNINetwork string `json:"cniNetwork,omitempty"`
	// Owner is what keeps this reservation alive.
	Owner ReservationOwner `json:"owner"`
}

// IPReservation is one allocated address or delegated prefix. Creating it is
// the atomic claim: the API server refuses a second object of the same name.
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=ipr;iprs,categories=tenure
// +kubebuilder:printcolumn:name="Address",type=string,JSONPath=`.spec.address`
// +kubebuilder:printcolumn:name="Network",type=string,JSONPath=`.spec.network`
// +kubebuilder:printcolumn:name="Owner",type=string,JSONPath=`.spec.owner.name`
// +kubebuilder:printcolumn:name="Kind",type=string,JSONPath=`.spec.owner.kind`,priority=1
// +kubebuilder:printcolumn:name="Namespace",type=string,JSONPath=`.spec.owner.namespace`,priority=1
// +kubebuilder:printcolumn:name="Made On",type=string,JSONPath=`.spec.owner.node`,description="The node the reservation was made on. A claim-bound reservation stays with its claim when the VM migrates: tenurectl get shows the node where its owner runs now."
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type IPReservation struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec IPReservationSpec `json:"spec"`
}

// IPReservationList is a list of IPReservation.
// +kubebuilder:object:root=true
type IPReservationList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []IPReservation `json:"items"`
}
