package agent

import (
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ipamclaimsv1alpha1 "github.com/tenure-ipam/tenure/api/ipamclaims/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/kubevirt"
)

func TestOwnerPodMoves(t *testing.T) {
	pod := func(name, node string) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "vms", Name: name, Annotations: map[string]string{
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
			return kubevirt.VMI{Namespace: ns, Name: name, NodeName: node, Migration: m}, name == "vm1"
		}
	}
	deleting := pod("src", "a")
	deleting.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	done := pod("src", "a")
	done.Status.Phase = corev1.PodSucceeded

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
		{"terminal pod", []*corev1.Pod{done}, claim("dst", true), on("a", nil), ""},
		{"pod of another node in the list", []*corev1.Pod{pod("src", "b")}, claim("dst", true), on("a", nil), ""},
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
