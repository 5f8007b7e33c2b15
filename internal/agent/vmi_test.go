package agent

import (
	"context"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	ipamclaimsv1alpha1 "github.com/tenure-ipam/tenure/api/ipamclaims/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/kubevirt"
)

func TestOwnerPodMoves(t *testing.T) {
	pod := func(name, node string) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "vms", Name: name, UID: types.UID("uid-" + name), Annotations: map[string]string{
				"k8s.v1.cni.cncf.io/networks": `[{"name":"vm-net","interface":"net1","ipam-claim-reference":"vm1.vm-net"}]`}},
			Spec: corev1.PodSpec{NodeName: node},
		}
	}
	claim := func(owner string, vmOwned bool) *ipamclaimsv1alpha1.IPAMClaim {
		c := &ipamclaimsv1alpha1.IPAMClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "vms", Name: "vm1.vm-net"}}
		if owner != "" {
			c.Status.OwnerPod = &ipamclaimsv1alpha1.OwnerPod{Name: owner}
		}
		if vmOwned {
			c.OwnerReferences = []metav1.OwnerReference{{APIVersion: "kubevirt.io/v1", Kind: "VirtualMachine", Name: "vm1"}}
		}
		return c
	}
	on := func(node string, m *kubevirt.Migration) kubevirt.Lookup {
		return func(ns, name string) (kubevirt.VMI, bool) {
			// virt-controller lists every pod of the VMI, a migration's target too.
			active := map[string]string{"uid-src": "", "uid-dst": "", "uid-m": "", "uid-z": ""}
			return kubevirt.VMI{Namespace: ns, Name: name, NodeName: node, Migration: m, ActivePods: active}, name == "vm1"
		}
	}
	deleting := pod("src", "a")
	deleting.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	done := pod("src", "a")
	done.Status.Phase = corev1.PodSucceeded
	// A claim being deleted: KubeVirt's finalizer holds it while the VM
	// runs, and it follows the VM still; with only tenure's left it does not.
	held := claim("dst", true)
	held.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	held.Finalizers = []string{"kubevirt.io/persistent-ipam", "ipam.tenure.dev/release"}
	mirror := pod("src", "a")
	mirror.Annotations[corev1.MirrorPodAnnotationKey] = "hash"
	releasing := claim("dst", true)
	releasing.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	releasing.Finalizers = []string{"ipam.tenure.dev/release"}

	cases := []struct {
		name   string
		pods   []*corev1.Pod
		claim  *ipamclaimsv1alpha1.IPAMClaim
		lookup kubevirt.Lookup
		want   string // the pod ownerPod moves to, "" for no move
	}{
		{"failed migration: the ADD had moved ownerPod to the target; the source takes it back",
			[]*corev1.Pod{pod("src", "a")}, claim("dst", true), on("a", &kubevirt.Migration{TargetNode: "b", Completed: true, Failed: true}), "src"},
		{"switchover: the target's agent moves it",
			[]*corev1.Pod{pod("dst", "a")}, claim("src", true), on("a", &kubevirt.Migration{TargetNode: "a", Completed: true}), "dst"},
		{"already on the pod here", []*corev1.Pod{pod("src", "a")}, claim("src", true), on("a", nil), ""},
		{"VM runs on another node", []*corev1.Pod{pod("dst", "a")}, claim("src", true), on("b", &kubevirt.Migration{TargetNode: "a"}), ""},
		{"API not served", []*corev1.Pod{pod("src", "a")}, claim("dst", true), nil, ""},
		{"claim of no VM", []*corev1.Pod{pod("src", "a")}, claim("dst", false), on("a", nil), ""},
		{"no owner recorded yet: the ADD writes the first", []*corev1.Pod{pod("src", "a")}, claim("", true), on("a", nil), ""},
		{"pod being deleted", []*corev1.Pod{deleting}, claim("dst", true), on("a", nil), ""},
		{"claim being deleted that KubeVirt's finalizer holds", []*corev1.Pod{pod("src", "a")}, held, on("a", nil), "src"},
		{"claim being deleted with only tenure's finalizer", []*corev1.Pod{pod("src", "a")}, releasing, on("a", nil), ""},
		{"terminal pod", []*corev1.Pod{done}, claim("dst", true), on("a", nil), ""},
		{"pod of another node in the list", []*corev1.Pod{pod("src", "b")}, claim("dst", true), on("a", nil), ""},
		{"a pod its VMI does not name", []*corev1.Pod{pod("stray", "a")}, claim("dst", true), on("a", nil), ""},
		{"a mirror pod the VMI names", []*corev1.Pod{mirror}, claim("dst", true), on("a", nil), ""},
		{"two pods here: the first by name", []*corev1.Pod{pod("z", "a"), pod("m", "a")}, claim("dst", true), on("a", nil), "m"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			claims := func(ns, name string) (*ipamclaimsv1alpha1.IPAMClaim, bool) {
				return c.claim, ns == c.claim.Namespace && name == c.claim.Name
			}
			got := OwnerPodMoves(c.pods, claims, c.lookup, "a")
			var want []OwnerPodMove
			if c.want != "" {
				want = []OwnerPodMove{{Namespace: "vms", Claim: "vm1.vm-net", Pod: c.want, VMI: "vms/vm1"}}
			}
			if !slices.Equal(got, want) {
				t.Fatalf("moves %+v, want %+v", got, want)
			}
		})
	}
}

// TestOwnerPodStaysWithTheVM: with KubeVirt's API served, a migration
// target's ADD leaves ownerPod on the source while the VMI says the VM runs
// on the source's node. (The move at the switchover is OwnerPodMoves above,
// and end to end in test/e2e/dhcp6_migration_test.go.)
func TestOwnerPodStaysWithTheVM(t *testing.T) {
	crd := &unstructured.Unstructured{Object: map[string]any{
		"metadata": map[string]any{"name": kubevirt.CRDName},
		"spec":     map[string]any{"group": "kubevirt.io", "versions": []any{map[string]any{"name": "v1", "served": true, "storage": true}}},
		"status":   map[string]any{"conditions": []any{map[string]any{"type": "Established", "status": "True"}}},
	}}
	crd.SetGroupVersionKind(schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"})
	vmi := &unstructured.Unstructured{Object: map[string]any{
		"metadata": map[string]any{"namespace": "ns", "name": "vm1"},
		"status":   map[string]any{"nodeName": "node-b", "migrationState": map[string]any{"targetNode": thisNode, "targetPod": "virt-launcher-dst"}},
	}}
	vmi.SetGroupVersionKind(kubevirt.VMIKind)
	claim := ipamClaim("vm1.vm-net", "vm-net", ipamclaimsv1alpha1.IPAMClaimStatus{
		IPs: []string{"10.1.0.5/24"}, DelegatedPrefixes: []string{"2001:db8:100:100::/56"},
		OwnerPod: &ipamclaimsv1alpha1.OwnerPod{Name: "virt-launcher-src"},
	})
	claim.OwnerReferences = []metav1.OwnerReference{{APIVersion: "kubevirt.io/v1", Kind: "VirtualMachine", Name: "vm1", UID: "vm-uid"}}
	h := startAgent(t, crd, vmi, claim, claimPod("virt-launcher-dst", "vm1.vm-net"))
	if err := wait.PollUntilContextTimeout(h.ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return h.agent.vmis.Served(), nil
	}); err != nil {
		t.Fatal("the agent never saw VirtualMachineInstances served")
	}

	if got := ips(t, h.do(call{cmd: "ADD", ctr: "c1", pod: "virt-launcher-dst", conf: vmNet})); !slices.Equal(got, []string{"10.1.0.5"}) {
		t.Fatalf("the target got %v, want the claim's 10.1.0.5", got)
	}
	if owner := h.recorded("vm1.vm-net").Status.OwnerPod; owner == nil || owner.Name != "virt-launcher-src" {
		t.Fatalf("after the target's ADD ownerPod is %+v, want the source's: the VM runs on node-b", owner)
	}
}
