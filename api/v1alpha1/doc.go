// Package v1alpha1 holds tenure's own API: IPReservation, the object whose
// creation is the atomic claim of one address or delegated prefix, and
// IPPool, a declared pool that IPAM configs can name.
//
// +kubebuilder:object:generate=true
// +groupName=ipam.tenure.dev
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

// GroupVersion is the API group and version of tenure's own objects.
var GroupVersion = schema.GroupVersion{Group: "ipam.tenure.dev", Version: "v1alpha1"}

var (
	// SchemeBuilder registers the types of this package with a scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}
	// AddToScheme adds the types of this package to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
