package claims

import (
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	ipamclaimsv1alpha1 "github.com/tenure-ipam/tenure/api/ipamclaims/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/kubevirt"
)

func TestMayPresent(t *testing.T) {
	pod := func(name, node string, f func(p *corev1.Pod)) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "vms", Name: name, UID: types.UID("uid-" + name)}, Spec: corev1.PodSpec{NodeName: node}}
		if f != nil {
			f(p)
		}
		return p
	}
	plain := &ipamclaimsv1alpha1.IPAMClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "vms", Name: "c"}}
	owned := &ipamclaimsv1alpha1.IPAMClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "vms", Name: "vm1.net",
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "kubevirt.io/v1", Kind: "VirtualMachine", Name: "vm1"}}}}
	labelled := &ipamclaimsv1alpha1.IPAMClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "vms", Name: "vm1.net", Labels: map[string]string{LabelKubeVirtVM: "vm1"}}}
	vmi := &kubevirt.VMI{Namespace: "vms", Name: "vm1", NodeName: "a",
		ActivePods: map[string]string{"uid-src": "a", "uid-new": ""},
		Migration:  &kubevirt.Migration{SourceNode: "a", SourcePod: "src", TargetNode: "b", TargetPod: "dst"}}
	for _, tc := range []struct {
		name   string
		pod    *corev1.Pod
		claim  *ipamclaimsv1alpha1.IPAMClaim
		vmi    *kubevirt.VMI
		reason string
	}{
		{"a running pod, a claim of no VM", pod("p", "a", nil), plain, nil, ""},
		{"a mirror pod by its annotation", pod("p", "a", func(p *corev1.Pod) { p.Annotations = map[string]string{corev1.MirrorPodAnnotationKey: "x"} }), plain, nil, RefusedMirrorPod},
		{"a mirror pod by its Node owner", pod("p", "a", func(p *corev1.Pod) {
			p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: "a"}}
		}), plain, nil, RefusedMirrorPod},
		{"a pod being deleted", pod("p", "a", func(p *corev1.Pod) { p.DeletionTimestamp = &metav1.Time{} }), plain, nil, RefusedDeleting},
		{"a pod that failed", pod("p", "a", func(p *corev1.Pod) { p.Status.Phase = corev1.PodFailed }), plain, nil, RefusedFinished},
		{"a pod that succeeded", pod("p", "a", func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded }), plain, nil, RefusedFinished},
		{"a pod of another namespace", pod("p", "a", func(p *corev1.Pod) { p.Namespace = "x" }), plain, nil, RefusedOtherNamespace},
		{"the VMI's active pod", pod("src", "a", nil), owned, vmi, ""},
		{"an active pod listed before it was scheduled", pod("new", "c", nil), owned, vmi, ""},
		{"the migration's target pod", pod("dst", "b", nil), owned, vmi, ""},
		{"the target pod's name on another node", pod("dst", "c", nil), owned, vmi, RefusedNotVMIsPod},
		{"an active pod's UID on another node", pod("src", "c", nil), owned, vmi, RefusedNotVMIsPod},
		{"a pod the VMI does not name", pod("other", "a", nil), owned, vmi, RefusedNotVMIsPod},
		{"a claim labelled with its VM, a pod the VMI does not name", pod("other", "a", nil), labelled, vmi, RefusedNotVMIsPod},
		{"a claim labelled with its VM, the VMI's pod", pod("src", "a", nil), labelled, vmi, ""},
		{"a VM's claim without its VMI", pod("src", "a", nil), owned, nil, RefusedNoVMI},
		{"a VM's claim with another VM's VMI", pod("src", "a", nil), owned, &kubevirt.VMI{Namespace: "vms", Name: "vm2", ActivePods: vmi.ActivePods}, RefusedNoVMI},
		{"a mirror pod the VMI names", pod("src", "a", func(p *corev1.Pod) { p.Annotations = map[string]string{corev1.MirrorPodAnnotationKey: "x"} }), owned, vmi, RefusedMirrorPod},
	} {
		err := MayPresent(tc.pod, tc.claim, LookupOf(tc.vmi))
		var pe *PresentError
		switch {
		case tc.reason == "" && err != nil:
			t.Errorf("%s: %v, want it presents", tc.name, err)
		case tc.reason != "" && (!errors.As(err, &pe) || pe.Reason != tc.reason):
			t.Errorf("%s: %v, want %q", tc.name, err, tc.reason)
		case pe != nil && (pe.Pod != tc.pod.Namespace+"/"+tc.pod.Name || pe.Claim != Key(tc.claim)):
			t.Errorf("%s: %v names pod %s and claim %s", tc.name, err, pe.Pod, pe.Claim)
		}
	}
	// Where the API serves no VMIs, a VM's claim is judged as any other;
	// a mirror pod still presents nothing.
	if err := MayPresent(pod("other", "a", nil), owned, nil); err != nil {
		t.Errorf("a VM's claim without KubeVirt's API: %v, want it presents", err)
	}
	if err := MayPresent(pod("p", "a", func(p *corev1.Pod) { p.Annotations = map[string]string{corev1.MirrorPodAnnotationKey: "x"} }), owned, nil); err == nil {
		t.Errorf("a mirror pod presents a VM's claim without KubeVirt's API")
	}
}
