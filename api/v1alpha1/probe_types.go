package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ProbeResult is what one node's probe of an address heard.
// +kubebuilder:validation:Enum=Silent;Answered;Failed
type ProbeResult string

const (
	// ProbeSilent: nothing answered for the address within the probe.
	ProbeSilent ProbeResult = "Silent"
	// ProbeAnswered: something answered for it (MAC names what).
	ProbeAnswered ProbeResult = "Answered"
	// ProbeFailed: the probe could not be sent or listened for.
	ProbeFailed ProbeResult = "Failed"
)

// IPProbeSpec is the controller's request: probe Address of allocation
// scope Network on the wire, from any node but Node.
type IPProbeSpec struct {
	// Network is the allocation scope of the reservation (its
	// spec.network): an agent probes on the parent interface of the
	// networks of that scope it has served.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Network string `json:"network"`
	// Address to probe: an IPv4 address gets an ARP probe, an IPv6 one a
	// duplicate-address-detection Neighbor Solicitation.
	// +kubebuilder:validation:XValidation:rule="isIP(self)",message="address must be an IP"
	// +kubebuilder:validation:MaxLength=39
	Address string `json:"address"`
	// Node the reservation was made on, the NotReady node whose pod may
	// still answer: its agent does not probe, and its word does not count.
	// +kubebuilder:validation:MinLength=1
	Node string `json:"node"`
	// AskedAt is when the controller last asked; asking again changes it,
	// and so metadata.generation, which every answer names.
	AskedAt metav1.Time `json:"askedAt"`
}

// IPProbeAnswer is one node's answer to one request.
type IPProbeAnswer struct {
	// Node whose agent probed. An agent may write only its own node's
	// entry (the policy tenure-agent-node-restriction).
	// +kubebuilder:validation:MinLength=1
	Node string `json:"node"`
	// ObservedGeneration is the metadata.generation of the request the
	// agent read before it probed: the answer counts for that request
	// only.
	ObservedGeneration int64 `json:"observedGeneration"`
	// ProbedAt is when the probe ended, by the agent's clock.
	ProbedAt metav1.Time `json:"probedAt"`
	Result   ProbeResult `json:"result"`
	// MAC that answered (Result Answered).
	// +optional
	MAC string `json:"mac,omitempty"`
	// What it sent: arp-reply, arp-announcement, arp-probe,
	// neighbor-advertisement, dad-solicitation.
	// +optional
	Kind string `json:"kind,omitempty"`
	// Interface the probe was sent on.
	// +optional
	Interface string `json:"interface,omitempty"`
	// Message says why a probe failed.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Message string `json:"message,omitempty"`
}

// IPProbeStatus holds the answers, one per node.
type IPProbeStatus struct {
	// +listType=map
	// +listMapKey=node
	// +kubebuilder:validation:MaxItems=256
	// +optional
	Answers []IPProbeAnswer `json:"answers,omitempty"`
}

// IPProbe asks the agents of other nodes whether anything answers on the
// wire for the address of an IPReservation that NodeNotReady would release
// (tenure-controller --release-unfenced): the controller creates it, named
// and owned as the reservation, releases the address only on a silent
// answer to the current request from a Ready node other than spec.node,
// and deletes it once the reservation is released or no longer due.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=ipprobe,categories=tenure
// +kubebuilder:printcolumn:name="Address",type=string,JSONPath=`.spec.address`
// +kubebuilder:printcolumn:name="Network",type=string,JSONPath=`.spec.network`
// +kubebuilder:printcolumn:name="Node",type=string,JSONPath=`.spec.node`,description="The NotReady node the reservation was made on."
// +kubebuilder:printcolumn:name="Asked",type=date,JSONPath=`.spec.askedAt`
type IPProbe struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec IPProbeSpec `json:"spec"`
	// +optional
	Status IPProbeStatus `json:"status,omitempty"`
}

// IPProbeList is a list of IPProbe.
// +kubebuilder:object:root=true
type IPProbeList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []IPProbe `json:"items"`
}
