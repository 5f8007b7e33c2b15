package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// PoolRange is one range of a pool, in whereabouts' vocabulary.
type PoolRange struct {
	// Range is a CIDR, or first-last/prefix (e.g. 10.0.0.10-10.0.0.20/24).
	// +kubebuilder:validation:MinLength=1
	Range string `json:"range"`
	// +optional
	RangeStart string `json:"range_start,omitempty"`
	// +optional
	RangeEnd string `json:"range_end,omitempty"`
	// Exclude lists CIDRs or single IPs never handed out.
	// +optional
	Exclude []string `json:"exclude,omitempty"`
}

// PrefixDelegationPool hands out IPv6 prefixes of one length from a range.
type PrefixDelegationPool struct {
	// Range is an IPv6 CIDR, e.g. 2001:db8:100::/40.
	// +kubebuilder:validation:XValidation:rule="isCIDR(self) && cidr(self).ip().family() == 6",message="range must be an IPv6 CIDR"
	Range string `json:"range"`
	// PrefixLength of each delegated prefix, e.g. 56.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=128
	PrefixLength int32 `json:"prefix_length"`
}

// IPPoolSpec declares address ranges once, for many configs to name.
type IPPoolSpec struct {
	// Ranges, one address per entry per ADD (an IPv4 and an IPv6 entry give
	// dual-stack).
	// +kubebuilder:validation:MinItems=1
	Ranges []PoolRange `json:"ranges"`
	// NetworkName scopes allocations like whereabouts' network_name.
	// +optional
	NetworkName string `json:"network_name,omitempty"`
	// Gateway handed out in results.
	// +optional
	Gateway string `json:"gateway,omitempty"`
	// +optional
	PrefixDelegation *PrefixDelegationPool `json:"prefix_delegation,omitempty"`
	// NamespaceSelector selects the namespaces whose pods an IPAM config's
	// "pools" list may give this pool's addresses; unset or empty selects
	// every namespace. A config naming this pool alone ("pool") ignores it.
	// +optional
	NamespaceSelector *metav1.LabelSelector `json:"namespaceSelector,omitempty"`
	// NodeSelector selects, the same way, the nodes whose pods may get
	// this pool's addresses from a "pools" list. A kubelet may set most
	// labels of its own Node: select on labels under
	// node-restriction.kubernetes.io/, which it cannot.
	// +optional
	NodeSelector *metav1.LabelSelector `json:"nodeSelector,omitempty"`
}

// IPPoolStatus reports usage; it is written in batches, not on every ADD.
type IPPoolStatus struct {
	// Capacity is the number of assignable addresses over all ranges.
	// +optional
	Capacity int64 `json:"capacity,omitempty"`
	// Allocated is the number of live address reservations.
	// +optional
	Allocated int64 `json:"allocated,omitempty"`
	// Free is Capacity minus Allocated.
	// +optional
	Free int64 `json:"free,omitempty"`
	// +optional
	DelegatedPrefixes int64 `json:"delegatedPrefixes,omitempty"`
	// +optional
	LastUpdated *metav1.Time `json:"lastUpdated,omitempty"`
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// IPPool is a declared pool of address ranges with its usage in status.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=ipp,categories=tenure
// +kubebuilder:printcolumn:name="Network",type=string,JSONPath=`.spec.network_name`
// +kubebuilder:printcolumn:name="Capacity",type=integer,JSONPath=`.status.capacity`
// +kubebuilder:printcolumn:name="Used",type=integer,JSONPath=`.status.allocated`
// +kubebuilder:printcolumn:name="Free",type=integer,JSONPath=`.status.free`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type IPPool struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec IPPoolSpec `json:"spec"`
	// +optional
	Status IPPoolStatus `json:"status,omitempty"`
}

// IPPoolList is a list of IPPool.
// +kubebuilder:object:root=true
type IPPoolList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []IPPool `json:"items"`
}
