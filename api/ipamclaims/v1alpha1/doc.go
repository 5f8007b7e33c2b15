// Package v1alpha1 is the NPWG IPAMClaim API (k8s.cni.cncf.io/v1alpha1) as
// tenure ships it: the upstream fields plus status.delegatedPrefixes. The
// addition is optional and omitempty, so claims and CRDs without it keep
// working.
//
// +kubebuilder:object:generate=true
// +groupName=k8s.cni.cncf.io
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupVersion is the IPAMClaim API group and version.
var GroupVersion = schema.GroupVersion{Group: "k8s.cni.cncf.io", Version: "v1alpha1"}

var (
	// SchemeBuilder collects the functions that add this package's types
	// to a scheme, as k8s.io/api's packages do.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)
	// AddToScheme adds the types of this package to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, &IPAMClaim{}, &IPAMClaimList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
