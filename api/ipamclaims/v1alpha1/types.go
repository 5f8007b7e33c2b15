package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// IPAMClaim binds addresses to a workload (a KubeVirt VM's interface)
// rather than to a pod, so every pod that presents the claim gets them.
// +kubebuilder:object:root=true
// +kubebuilder:resource:path=ipamclaims,singular=ipamclaim,scope=Namespaced
// +kubebuilder:storageversion
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Network",type=string,JSONPath=`.spec.network`
// +kubebuilder:printcolumn:name="Interface",type=string,JSONPath=`.spec.interface`
// +kubebuilder:printcolumn:name="IPs",type=string,JSONPath=`.status.ips`
// +kubebuilder:printcolumn:name="Prefixes",type=string,JSONPath=`.status.delegatedPrefixes`
// +kubebuilder:printcolumn:name="Owner",type=string,JSONPath=`.status.ownerPod.name`
// +kubebuilder:printcolumn:name="StatefulSet",type=string,JSONPath=`.metadata.labels.ipam\.tenure\.dev/statefulset`,description="The StatefulSet whose pod keeps its addresses in this sticky claim; empty for other claims"
type IPAMClaim struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   IPAMClaimSpec   `json:"spec,omitempty"`
	Status IPAMClaimStatus `json:"status,omitempty"`
}

// IPAMClaimSpec names the attachment the claim is for.
type IPAMClaimSpec struct {
	// The network name for which this persistent allocation was created
	Network string `json:"network"`
	// The pod interface name for which this allocation was created
	Interface string `json:"interface"`
}

// IPAMClaimStatus contains the observed status of the IPAMClaim.
type IPAMClaimStatus struct {
	// The list of IP addresses (v4, v6) that were allocated for the pod interface
	IPs []string `json:"ips"`
	// The list of IPv6 prefixes (CIDR) delegated to the pod interface via DHCPv6
	// Prefix Delegation, persisted so the same prefix is reproduced across pod
	// churn (e.g. KubeVirt live migration)
	// +optional
	DelegatedPrefixes []string `json:"delegatedPrefixes,omitempty"`
	// The name of the pod holding the IPAMClaim
	// +optional
	OwnerPod *OwnerPod `json:"ownerPod,omitempty"`
	// Conditions contains details for one aspect of the current state of this API Resource
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// OwnerPod names the pod that last got the claim's addresses.
type OwnerPod struct {
	Name string `json:"name"`
}

// IPAMClaimList is a list of IPAMClaim.
// +kubebuilder:object:root=true
type IPAMClaimList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []IPAMClaim `json:"items"`
}

// Condition type and reasons, as OVN-Kubernetes writes them.
const (
	ConditionIPsAllocated       = "IPsAllocated"
	ReasonSuccessfulAllocation  = "SuccessfulAllocation"
	ReasonSubnetExhausted       = "SubnetExhausted"
	ReasonIPAddressConflict     = "IPAddressConflict"
	ReasonAddressesOutsideRange = "AddressesOutsideRange"
	// A claim's requested address (ipam.tenure.dev/requested-ips) lies in
	// no subnet of the network, or in one but is never handed out (the
	// gateway, an excluded or set-aside address).
	ReasonRequestedIPOutsideSubnet = "RequestedIPOutsideSubnet"
	ReasonReservedIPRequested      = "ReservedIPRequested"
)

// tenure's condition on whether status.delegatedPrefixes holds what the
// claim's reservations hold: False with FieldPrunedByCRD when the
// installed CRD has no such field and the API server drops it.
const (
	ConditionDelegatedPrefixesRecorded = "DelegatedPrefixesRecorded"
	ReasonFieldPrunedByCRD             = "FieldPrunedByCRD"
	ReasonDelegatedPrefixesRecorded    = "Recorded"
)
