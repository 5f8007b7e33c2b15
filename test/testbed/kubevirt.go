package testbed

import (
	"context"
	"crypto/sha256"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipamclaimsv1alpha1 "github.com/tenure-ipam/tenure/api/ipamclaims/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/kubevirt"
)

// VMKind is KubeVirt's VirtualMachine.
var VMKind = schema.GroupVersionKind{Group: kubevirt.Group, Version: "v1", Kind: "VirtualMachine"}

// ClaimFinalizer is the finalizer ipam-extensions puts on a VM's claims.
const ClaimFinalizer = "kubevirt.io/persistent-ipam"

// VM is a KubeVirt VirtualMachine with one bridge interface on a Multus
// network, and what KubeVirt's components write of it, written as they
// write it: the VMI by virt-controller, whole objects updated with their
// resourceVersion (a VMI has no status subresource).
type VM struct {
	Namespace, Name string
	UID             k8stypes.UID
	// Network is the interface's network name in the VM spec, NAD the
	// NetworkAttachmentDefinition it names, MAC the interface's address.
	Network, NAD, MAC string
	// Claim is the IPAMClaim ipam-extensions made for the interface.
	Claim string
	// VMI is the VirtualMachineInstance as last written; nil while stopped.
	VMI *unstructured.Unstructured
}

// CreateVM creates the VirtualMachine and its claim as ipam-extensions
// creates it: named <vm>.<network>, owned by the VM, held by its
// finalizer, for the CNI network claimNetwork.
func CreateVM(ctx context.Context, t testing.TB, c client.Client, v VM, claimNetwork string) *VM {
	t.Helper()
	vm := &unstructured.Unstructured{Object: map[string]any{
		"metadata": map[string]any{"namespace": v.Namespace, "name": v.Name},
		"spec": map[string]any{
			"runStrategy": "Always",
			"template": map[string]any{
				"metadata": map[string]any{"labels": map[string]any{"kubevirt.io/vm": v.Name}},
				"spec":     v.VMISpec(),
			},
		},
	}}
	vm.SetGroupVersionKind(VMKind)
	if err := c.Create(ctx, vm); err != nil {
		t.Fatal(err)
	}
	v.UID, v.Claim = vm.GetUID(), v.Name+"."+v.Network
	claim := &ipamclaimsv1alpha1.IPAMClaim{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: v.Namespace, Name: v.Claim,
			Finalizers:      []string{ClaimFinalizer},
			Labels:          map[string]string{"kubevirt.io/vm": v.Name},
			OwnerReferences: []metav1.OwnerReference{v.controllerRef("VirtualMachine", v.UID)},
		},
		Spec: ipamclaimsv1alpha1.IPAMClaimSpec{Network: claimNetwork},
	}
	if err := c.Create(ctx, claim); err != nil {
		t.Fatal(err)
	}
	return &v
}

func (v *VM) controllerRef(kind string, uid k8stypes.UID) metav1.OwnerReference {
	return metav1.OwnerReference{APIVersion: "kubevirt.io/v1", Kind: kind, Name: v.Name, UID: uid,
		Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}
}

// VMISpec is the spec of the VM's VMIs: its one interface, its network.
func (v *VM) VMISpec() map[string]any {
	return map[string]any{
		"domain": map[string]any{
			"devices": map[string]any{"interfaces": []any{
				map[string]any{"name": v.Network, "bridge": map[string]any{}, "macAddress": v.MAC},
			}},
			"memory": map[string]any{"guest": "128Mi"},
		},
		"networks": []any{map[string]any{"name": v.Network, "multus": map[string]any{"networkName": v.NAD}}},
	}
}

// Object is the VirtualMachine, to delete it.
func (v *VM) Object() *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(VMKind)
	u.SetNamespace(v.Namespace)
	u.SetName(v.Name)
	return u
}

// Start creates the VM's VirtualMachineInstance, as virt-controller does
// for a VM to run: owned by the VM, not scheduled yet.
func (v *VM) Start(ctx context.Context, t testing.TB, c client.Client) {
	t.Helper()
	u := &unstructured.Unstructured{Object: map[string]any{
		"metadata": map[string]any{"namespace": v.Namespace, "name": v.Name, "labels": map[string]any{"kubevirt.io/vm": v.Name}},
		"spec":     v.VMISpec(),
		"status":   map[string]any{"phase": "Pending"},
	}}
	u.SetGroupVersionKind(kubevirt.VMIKind)
	u.SetOwnerReferences([]metav1.OwnerReference{v.controllerRef("VirtualMachine", v.UID)})
	if err := c.Create(ctx, u); err != nil {
		t.Fatal(err)
	}
	v.VMI = u
}

// Stop deletes the VMI (the VM's runStrategy became Halted); the claim
// stays, as ipam-extensions keeps it while the VM exists.
func (v *VM) Stop(ctx context.Context, t testing.TB, c client.Client) {
	t.Helper()
	if err := c.Delete(ctx, v.VMI); err != nil {
		t.Fatal(err)
	}
	v.VMI = nil
}

// LauncherInterface is the pod interface virt-controller names for a
// secondary Multus network (namescheme.GenerateHashedInterfaceName).
func LauncherInterface(network string) string {
	return fmt.Sprintf("pod%x", sha256.Sum256([]byte(network)))[:14]
}

// DressLauncher makes p a virt-launcher pod of the VM's VMI as
// virt-controller makes it: its labels, its domain annotation, its one
// Multus attachment presenting the claim, owned by the VMI. A migration
// target carries the migration's UID.
func (v *VM) DressLauncher(p *corev1.Pod, migrationUID string) {
	p.Labels = map[string]string{
		"kubevirt.io":            "virt-launcher",
		"kubevirt.io/created-by": string(v.VMI.GetUID()),
		"vm.kubevirt.io/name":    v.Name,
	}
	if migrationUID != "" {
		p.Labels["kubevirt.io/migrationJobUID"] = migrationUID
	}
	if p.Annotations == nil {
		p.Annotations = map[string]string{}
	}
	p.Annotations["kubevirt.io/domain"] = v.Name
	p.Annotations["k8s.v1.cni.cncf.io/networks"] = fmt.Sprintf(`[{"name":%q,"namespace":%q,"interface":%q,"mac":%q,"ipam-claim-reference":%q}]`,
		v.NAD, v.Namespace, LauncherInterface(v.Network), v.MAC, v.Claim)
	p.OwnerReferences = []metav1.OwnerReference{v.controllerRef("VirtualMachineInstance", v.VMI.GetUID())}
}

// WriteStatus writes the VMI's status as KubeVirt does: the whole object,
// read fresh and updated with its resourceVersion.
func (v *VM) WriteStatus(ctx context.Context, t testing.TB, c client.Client, mutate func(status map[string]any)) {
	t.Helper()
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(kubevirt.VMIKind)
	if err := c.Get(ctx, client.ObjectKey{Namespace: v.Namespace, Name: v.Name}, u); err != nil {
		t.Fatal(err)
	}
	st, _, _ := unstructured.NestedMap(u.Object, "status")
	if st == nil {
		st = map[string]any{}
	}
	mutate(st)
	if err := unstructured.SetNestedMap(u.Object, st, "status"); err != nil {
		t.Fatal(err)
	}
	if err := c.Update(ctx, u); err != nil {
		t.Fatal(err)
	}
	v.VMI = u
}

// Launcher is a virt-launcher pod as the VMI's status names it.
type Launcher struct{ Name, UID, Node string }

// LauncherOf is p as a VMI's status names it.
func LauncherOf(p *corev1.Pod) Launcher {
	return Launcher{Name: p.Name, UID: string(p.UID), Node: p.Spec.NodeName}
}

// Running is virt-controller's write once the launcher p runs: phase
// Running on p's node, p the only active pod.
func (v *VM) Running(ctx context.Context, t testing.TB, c client.Client, p Launcher) {
	t.Helper()
	v.WriteStatus(ctx, t, c, func(st map[string]any) {
		st["phase"] = "Running"
		st["nodeName"] = p.Node
		st["activePods"] = map[string]any{p.UID: p.Node}
	})
}

// PodCreated is virt-controller's write once it sees a new pod of the
// VMI (setActivePods, on every sync): every pod the VMI controls in
// status.activePods, p among them, before the kubelet runs p's ADD.
func (v *VM) PodCreated(ctx context.Context, t testing.TB, c client.Client, p Launcher) {
	t.Helper()
	v.WriteStatus(ctx, t, c, func(st map[string]any) {
		active, _ := st["activePods"].(map[string]any)
		if active == nil {
			active = map[string]any{}
		}
		active[p.UID] = p.Node
		st["activePods"] = active
	})
}

// Migration is one live migration from Src to Dst.
type Migration struct {
	UID      string
	Src, Dst Launcher
}

// MigrationStart is virt-controller's write when the target pod exists:
// both pods active, the migration's nodes and pods, its start.
func (v *VM) MigrationStart(ctx context.Context, t testing.TB, c client.Client, m Migration) {
	t.Helper()
	v.WriteStatus(ctx, t, c, func(st map[string]any) {
		st["activePods"] = map[string]any{m.Src.UID: m.Src.Node, m.Dst.UID: m.Dst.Node}
		st["migrationState"] = map[string]any{
			"migrationUid": m.UID,
			"sourceNode":   m.Src.Node, "sourcePod": m.Src.Name,
			"targetNode": m.Dst.Node, "targetPod": m.Dst.Name,
			"startTimestamp": kubevirtNow(),
		}
	})
}

// DomainReady is the target virt-handler's write once the domain runs on
// the target node; it returns when it was written.
func (v *VM) DomainReady(ctx context.Context, t testing.TB, c client.Client) time.Time {
	t.Helper()
	at := time.Now()
	v.WriteStatus(ctx, t, c, func(st map[string]any) {
		ms, _ := st["migrationState"].(map[string]any)
		ms["targetNodeDomainDetected"] = true
		ms["targetNodeDomainReadyTimestamp"] = kubevirtNow()
	})
	return at
}

// MigrationEnd is the source virt-handler's write at the end: completed
// (and failed, if it did) with the end time; then virt-controller's: a
// completed migration moves nodeName to the target and the source pod
// leaves activePods, a failed one drops the target pod.
func (v *VM) MigrationEnd(ctx context.Context, t testing.TB, c client.Client, m Migration, failed bool) {
	t.Helper()
	v.WriteStatus(ctx, t, c, func(st map[string]any) {
		ms, _ := st["migrationState"].(map[string]any)
		ms["completed"] = true
		ms["endTimestamp"] = kubevirtNow()
		if failed {
			ms["failed"] = true
			ms["failureReason"] = "the test failed it"
		}
	})
	v.WriteStatus(ctx, t, c, func(st map[string]any) {
		keep := m.Dst
		if failed {
			keep = m.Src
		}
		st["nodeName"] = keep.Node
		st["activePods"] = map[string]any{keep.UID: keep.Node}
	})
}

// kubevirtNow is a metav1.Time as KubeVirt serializes it (RFC 3339, seconds).
func kubevirtNow() string { return metav1.Now().UTC().Format(time.RFC3339) }
