// Package v1alpha1 is the NPWG IPAMClaim API (k8s.cni.cncf.io/v1alpha1) as
// tenure ships it: the upstream fields plus status.delegatedPrefixes. The
// addition is optional and omitempty, so claims and CRDs without it keep
// working.
//
// +kubebuilder:object:generate=true
// +groupName=k8s.cni.cncf.io
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

// GroupVersion is the IPAMClaim API group and version.
var GroupVersion = schema.GroupVersion{Group: "k8s.cni.cncf.io", Version: "v1alpha1"}

var (
	// SchemeBuilder registers the types of this package with a scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}
	// AddToScheme adds the types of this package to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
