// Package v1alpha1 holds tenure's own API: IPReservation, the object whose
// creation is the atomic claim of one address or delegated prefix; IPPool,
// a declared pool that IPAM configs can name; and IPProbe, the controller's
// question to other nodes' agents whether an address answers on the wire.
//
// +kubebuilder:object:generate=true
// +groupName=ipam.tenure.dev
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupVersion is the API group and version of tenure's own objects.
var GroupVersion = schema.GroupVersion{Group: "ipam.tenure.dev", Version: "v1alpha1"}

var (
	// SchemeBuilder collects the functions that add this package's types
	// to a scheme, as k8s.io/api's packages do.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)
	// AddToScheme adds the types of this package to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, &IPReservation{}, &IPReservationList{}, &IPPool{}, &IPPoolList{}, &IPProbe{}, &IPProbeList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
