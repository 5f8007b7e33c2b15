package claims

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"

	ipamclaimsv1alpha1 "github.com/tenure-ipam/tenure/api/ipamclaims/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/kubevirt"
)

// LabelKubeVirtVM is the label KubeVirt's ipam-extensions puts on the
// claims it makes for a VirtualMachine: the VM's (and so its VMI's) name.
const LabelKubeVirtVM = "kubevirt.io/vm"

// Why a pod may not present a claim, as PresentError names it.
const (
	RefusedMirrorPod      = "it is a mirror pod, which the kubelet of its node writes"
	RefusedDeleting       = "it is being deleted"
	RefusedFinished       = "it has finished"
	RefusedNoVMI          = "the claim is a KubeVirt VM's and the VM's VirtualMachineInstance does not exist"
	RefusedNotVMIsPod     = "the claim is a KubeVirt VM's and the VirtualMachineInstance names the pod neither in status.activePods nor as status.migrationState.targetPod"
	RefusedOtherNamespace = "the pod is in another namespace than the claim"
)

// PresentError says which pod may not present which claim, and why.
type PresentError struct {
	Pod, Claim string
	// VMI is namespace/name of the claim's VirtualMachineInstance, for a
	// KubeVirt VM's claim.
	VMI    string
	Reason string
}

func (e *PresentError) Error() string {
	s := fmt.Sprintf("pod %s may not present IPAMClaim %s: %s", e.Pod, e.Claim, e.Reason)
	if e.VMI != "" {
		s += " (VirtualMachineInstance " + e.VMI + ")"
	}
	return s
}

// IsMirrorPod reports whether the kubelet wrote pod from a static
// manifest of its node: the annotation kubernetes.io/config.mirror, or a
// controller reference to a Node (NodeRestriction has the kubelet set one
// on every mirror pod it creates).
func IsMirrorPod(pod *corev1.Pod) bool {
	if _, ok := pod.Annotations[corev1.MirrorPodAnnotationKey]; ok {
		return true
	}
	for _, r := range pod.OwnerReferences {
		if r.Kind == "Node" && r.APIVersion == "v1" {
			return true
		}
	}
	return false
}

// PodMayPresent is the part of MayPresent that needs no claim: nil for a
// pod that is no mirror pod, not being deleted and not finished. A node
// writes mirror pods as it likes (in any namespace, with any
// annotations), and a pod being deleted or finished is one its node may
// have left running, so none of them is evidence that a workload uses a
// claim.
func PodMayPresent(pod *corev1.Pod) string {
	switch {
	case IsMirrorPod(pod):
		return RefusedMirrorPod
	case pod.DeletionTimestamp != nil:
		return RefusedDeleting
	case pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed:
		return RefusedFinished
	}
	return ""
}

// KubeVirtVMI names the VirtualMachineInstance of a KubeVirt VM's claim,
// in the claim's namespace: the VM or VMI its ownerReferences name
// (ipam-extensions makes the VM the claim's controller), else the VM its
// label kubevirt.io/vm names. ok is false for a claim of no VM.
func KubeVirtVMI(claim *ipamclaimsv1alpha1.IPAMClaim) (name string, ok bool) {
	if name, ok := kubevirt.OwnerVMI(claim.OwnerReferences); ok {
		return name, true
	}
	if name := claim.Labels[LabelKubeVirtVM]; name != "" {
		return name, true
	}
	return "", false
}

// MayPresent decides whether pod, which names claim (its
// network-selection element or its sticky StatefulSet claim), presents
// it: only what the pod's node could not have made up counts. Never a
// mirror pod, a pod being deleted or a finished pod (PodMayPresent); for
// a KubeVirt VM's claim (KubeVirtVMI), only a pod the VM's
// VirtualMachineInstance names as its own (kubevirt.VMI.RunsPod:
// virt-controller's status.activePods, or the migration's target pod),
// and none while that VMI does not exist. vmis finds the VMI; nil where
// the API serves no VMIs (KubeVirt is not installed, which no node can
// bring about), and then a VM's claim is judged as any other. The error
// is a *PresentError.
func MayPresent(pod *corev1.Pod, claim *ipamclaimsv1alpha1.IPAMClaim, vmis kubevirt.Lookup) error {
	refuse := func(reason, vmiName string) error {
		return &PresentError{Pod: pod.Namespace + "/" + pod.Name, Claim: Key(claim), VMI: vmiName, Reason: reason}
	}
	if pod.Namespace != claim.Namespace {
		return refuse(RefusedOtherNamespace, "")
	}
	if reason := PodMayPresent(pod); reason != "" {
		return refuse(reason, "")
	}
	name, isVM := KubeVirtVMI(claim)
	if !isVM || vmis == nil {
		return nil
	}
	vmiName := claim.Namespace + "/" + name
	vmi, ok := vmis(claim.Namespace, name)
	switch {
	case !ok:
		return refuse(RefusedNoVMI, vmiName)
	case !vmi.RunsPod(string(pod.UID), pod.Name, pod.Spec.NodeName):
		return refuse(RefusedNotVMIsPod, vmiName)
	}
	return nil
}

// LookupOf is a kubevirt.Lookup that finds only vmi (nil: none).
func LookupOf(vmi *kubevirt.VMI) kubevirt.Lookup {
	return func(namespace, name string) (kubevirt.VMI, bool) {
		if vmi == nil || vmi.Namespace != namespace || vmi.Name != name {
			return kubevirt.VMI{}, false
		}
		return *vmi, true
	}
}
