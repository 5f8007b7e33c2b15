package claims

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"

	ipamclaimsv1alpha1 "github.com/tenure-ipam/tenure/api/ipamclaims/v1alpha1"
)

// Sticky StatefulSet addresses: a StatefulSet's pod keeps its addresses
// (and delegated prefix) in an IPAMClaim named after the pod and the
// interface, which the agent creates on the first ADD, owned by the
// StatefulSet (ownerReference) rather than by the pod, so the addresses come
// back on the pod of that name wherever it is re-created. The controller
// deletes the claim once the StatefulSet is gone, or has been scaled below
// the pod's ordinal for its grace period (internal/controller/sticky).
const (
	// StickyAnnotation opts a pod in (the StatefulSet's template carries
	// it): "true" or "*" for every attachment, a comma-separated list of
	// interface names for those, "false" to opt out on a network that
	// sets sticky_statefulsets.
	StickyAnnotation = "ipam.tenure.dev/sticky"
	// LabelSticky ("true") marks the claims the agent made for sticky
	// pods: kubectl get ipamclaims -l ipam.tenure.dev/sticky.
	LabelSticky = "ipam.tenure.dev/sticky"
	// LabelStatefulSet is the StatefulSet's name (a DNS label, so always a
	// valid label value); the claim's printer column shows it.
	LabelStatefulSet = "ipam.tenure.dev/statefulset"
	// AnnotationPod is the pod's name: a pod name may be longer than a
	// label value.
	AnnotationPod = "ipam.tenure.dev/pod"
)

// WantsSticky reads StickyAnnotation for interface ifName: set reports
// whether the pod carries it at all (absent, the network's
// sticky_statefulsets decides).
func WantsSticky(pod *corev1.Pod, ifName string) (want, set bool) {
	v, ok := pod.Annotations[StickyAnnotation]
	if !ok {
		return false, false
	}
	switch strings.TrimSpace(v) {
	case "true", "*":
		return true, true
	case "false", "":
		return false, true
	}
	for n := range strings.SplitSeq(v, ",") {
		if strings.TrimSpace(n) == ifName {
			return true, true
		}
	}
	return false, true
}

// StatefulSetOf returns the StatefulSet that controls pod and the pod's
// ordinal (the number its name ends in, after the StatefulSet's name and a
// dash); false when no StatefulSet controls it.
func StatefulSetOf(pod *corev1.Pod) (metav1.OwnerReference, int, bool) {
	ref := metav1.GetControllerOfNoCopy(pod)
	if ref == nil || ref.Kind != "StatefulSet" {
		return metav1.OwnerReference{}, 0, false
	}
	if gv, err := schema.ParseGroupVersion(ref.APIVersion); err != nil || gv.Group != "apps" {
		return metav1.OwnerReference{}, 0, false
	}
	ord, ok := Ordinal(ref.Name, pod.Name)
	if !ok {
		return metav1.OwnerReference{}, 0, false
	}
	return *ref, ord, true
}

// Ordinal parses the ordinal of the StatefulSet's pod called pod.
func Ordinal(statefulSet, pod string) (int, bool) {
	s, ok := strings.CutPrefix(pod, statefulSet+"-")
	if !ok || s == "" || (len(s) > 1 && s[0] == '0') || strings.TrimLeft(s, "0123456789") != "" {
		return 0, false
	}
	n, err := strconv.ParseInt(s, 10, 32) // ordinals are int32, as replicas are
	return int(n), err == nil
}

// StickyClaimName names the sticky claim of a pod's interface:
// "POD.IFNAME" when that is a valid object name (a StatefulSet's pod name
// has no dot, so the first dot separates the two); otherwise (an interface
// name with capitals or underscores, or a name too long) as much of the pod
// name as fits and a hash of both.
func StickyClaimName(pod, ifName string) string {
	n := pod + "." + ifName
	if len(validation.IsDNS1123Subdomain(n)) == 0 {
		return n
	}
	sum := sha256.Sum256([]byte(pod + "/" + ifName))
	h := hex.EncodeToString(sum[:8])
	keep := min(len(pod), validation.DNS1123SubdomainMaxLength-len(h)-1)
	return strings.TrimRight(pod[:keep], ".-") + "-" + h
}

// NewStickyClaim is the claim the agent creates for a sticky pod's
// interface on network: labelled, annotated with the pod's name, owned by
// (but never blocking the deletion of) the StatefulSet.
func NewStickyClaim(pod *corev1.Pod, ifName, network string, sts metav1.OwnerReference) *ipamclaimsv1alpha1.IPAMClaim {
	no := false
	return &ipamclaimsv1alpha1.IPAMClaim{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:   pod.Namespace,
			Name:        StickyClaimName(pod.Name, ifName),
			Labels:      map[string]string{LabelSticky: "true", LabelStatefulSet: sts.Name},
			Annotations: map[string]string{AnnotationPod: pod.Name},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: sts.APIVersion, Kind: sts.Kind, Name: sts.Name, UID: sts.UID,
				Controller: &no, BlockOwnerDeletion: &no,
			}},
		},
		Spec: ipamclaimsv1alpha1.IPAMClaimSpec{Network: network, Interface: ifName},
	}
}

// Sticky is what a sticky claim says of its StatefulSet and pod.
type Sticky struct {
	StatefulSet string
	Pod         string
	Ordinal     int
	// OwnerUID is the UID of the claim's StatefulSet ownerReference, ""
	// when it has none (its StatefulSet was deleted with the orphan
	// policy).
	OwnerUID string
}

// StickyOf reads a sticky claim; an error says what is missing from a claim
// labelled sticky, false (and no error) that it is not labelled so.
func StickyOf(c *ipamclaimsv1alpha1.IPAMClaim) (Sticky, bool, error) {
	if c.Labels[LabelSticky] != "true" {
		return Sticky{}, false, nil
	}
	s := Sticky{StatefulSet: c.Labels[LabelStatefulSet], Pod: c.Annotations[AnnotationPod]}
	ord, ok := Ordinal(s.StatefulSet, s.Pod)
	if s.StatefulSet == "" || !ok {
		return s, true, fmt.Errorf("IPAMClaim %s is labelled %s but its label %s %q and annotation %s %q do not name a StatefulSet and one of its pods",
			Key(c), LabelSticky, LabelStatefulSet, s.StatefulSet, AnnotationPod, s.Pod)
	}
	s.Ordinal = ord
	for _, r := range c.OwnerReferences {
		if r.Kind == "StatefulSet" && r.Name == s.StatefulSet {
			s.OwnerUID = string(r.UID)
		}
	}
	return s, true, nil
}
