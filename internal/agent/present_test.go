package agent

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipamclaimsv1alpha1 "github.com/tenure-ipam/tenure/api/ipamclaims/v1alpha1"
	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/reservation"
)

// TestAPodItsNodeCouldHaveMadeUpPresentsNoClaim: the ADD of a mirror pod
// (by its annotation, or by its Node owner) or of a pod being deleted that
// names a claim fails with 103 naming the pod, the claim and why, and
// reserves and records nothing.
func TestAPodItsNodeCouldHaveMadeUpPresentsNoClaim(t *testing.T) {
	mirror := claimPod("static-web", "vm1.vm-net")
	mirror.Annotations[corev1.MirrorPodAnnotationKey] = "5f1e"
	nodeOwned := claimPod("static-db", "vm1.vm-net")
	nodeOwned.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: thisNode, UID: "node-uid"}}
	deleting := claimPod("going", "vm1.vm-net")
	deleting.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	deleting.Finalizers = []string{"example.com/hold"}
	for _, tc := range []struct {
		pod  *corev1.Pod
		want string
	}{
		{mirror, "mirror pod"},
		{nodeOwned, "mirror pod"},
		{deleting, "being deleted"},
	} {
		t.Run(tc.pod.Name, func(t *testing.T) {
			claim := ipamClaim("vm1.vm-net", "vm-net", ipamclaimsv1alpha1.IPAMClaimStatus{})
			h := startAgent(t, claim, tc.pod)
			r := h.do(call{cmd: "ADD", ctr: "c1", pod: tc.pod.Name, conf: vmNet})
			if r.Error == nil {
				t.Fatalf("the ADD of %s got %s", tc.pod.Name, r.Result)
			}
			if r.Error.Code != CodeNotPresented || !strings.Contains(r.Error.Msg, "pod ns/"+tc.pod.Name) ||
				!strings.Contains(r.Error.Msg, "IPAMClaim ns/vm1.vm-net") || !strings.Contains(r.Error.Msg, tc.want) {
				t.Fatalf("code %d %q: want %d naming pod ns/%s, IPAMClaim ns/vm1.vm-net and %q", r.Error.Code, r.Error.Msg, CodeNotPresented, tc.pod.Name, tc.want)
			}
			h.wantHeld(nil)
			got := &ipamclaimsv1alpha1.IPAMClaim{}
			if err := h.fake.Get(h.ctx, client.ObjectKey{Namespace: "ns", Name: "vm1.vm-net"}, got); err != nil {
				t.Fatal(err)
			}
			if len(got.Status.IPs)+len(got.Status.DelegatedPrefixes) > 0 || got.Status.OwnerPod != nil {
				t.Fatalf("the claim's status became %+v", got.Status)
			}
		})
	}
}

// TestAStaticPodIsRefusedByName: the runtime names a static pod by its
// manifest's hash, which its mirror pod carries as kubernetes.io/config.mirror;
// its ADD fails with 104 naming the pod and the hash, at once, and
// reserves nothing. A runtime UID no pod has is still a deleted pod's
// sandbox (11, try again).
func TestAStaticPodIsRefusedByName(t *testing.T) {
	static := pod("static-web", thisNode, map[string]string{corev1.MirrorPodAnnotationKey: "6c1d0e5a"})
	h := startAgent(t, static)
	r := h.do(call{cmd: "ADD", ctr: "c1", pod: static.Name, uid: "6c1d0e5a"})
	if r.Error == nil || r.Error.Code != CodeStaticPod || !strings.Contains(r.Error.Msg, "pod ns/static-web is a static pod") ||
		!strings.Contains(r.Error.Msg, "kubernetes.io/config.mirror=6c1d0e5a") {
		t.Fatalf("the static pod's ADD: %+v, want %d naming pod ns/static-web and its hash", r, CodeStaticPod)
	}
	h.wantHeld(nil)
	r = h.do(call{cmd: "ADD", ctr: "c2", pod: static.Name, uid: "no-such-uid"})
	if r.Error == nil || r.Error.Code != 11 {
		t.Fatalf("an ADD under a UID no pod has: %+v, want 11", r)
	}
	h.wantHeld(nil)
}

// TestAClaimsStatusIsAppendedTo: a configuration grown by an IPv4 range
// appends the claim's new address after the IPv6 one it records, which
// keeps its place.
func TestAClaimsStatusIsAppendedTo(t *testing.T) {
	dual := `{"cniVersion":"1.1.0","name":"vm-net","type":"bridge","ipam":{"type":"tenure","network_name":"vm-net",` +
		`"ipRanges":[{"range":"10.1.0.0/24"},{"range":"2001:db8:1::/64"}]}}`
	claim := ipamClaim("vm1.vm-net", "vm-net", ipamclaimsv1alpha1.IPAMClaimStatus{IPs: []string{"2001:db8:1::5/64"}})
	h := startAgent(t, claim, claimPod("launcher", "vm1.vm-net"))
	got := ips(t, h.do(call{cmd: "ADD", ctr: "c1", pod: "launcher", conf: dual}))
	if len(got) != 2 || !slices.Contains(got, "2001:db8:1::5") {
		t.Fatalf("the ADD got %v, want the recorded 2001:db8:1::5 and an IPv4 address", got)
	}
	st := h.recorded("vm1.vm-net").Status
	if len(st.IPs) != 2 || st.IPs[0] != "2001:db8:1::5/64" || !strings.HasPrefix(st.IPs[1], "10.1.0.") {
		t.Fatalf("status.ips %v: want 2001:db8:1::5/64 first, the new IPv4 address after it", st.IPs)
	}
}

// TestAnItemAnotherNodeWroteIsNamedWithThatNode: a claim whose status
// records a second address of one slot, made on another node, and an
// address outside every range: the ADD fails naming each item, the claim,
// and the reservation and node that made the first.
func TestAnItemAnotherNodeWroteIsNamedWithThatNode(t *testing.T) {
	claim := ipamClaim("vm1.vm-net", "vm-net", ipamclaimsv1alpha1.IPAMClaimStatus{
		IPs: []string{"10.1.0.5/24", "10.1.0.9/24", "10.9.0.1/24"}, DelegatedPrefixes: []string{"2001:db8:100:100::/56"}})
	planted := reservation.New(reservation.Spec{Network: "vm-net", Kind: tenurev1alpha1.KindAddress, Item: netip.MustParsePrefix("10.1.0.9/32"),
		Range: "10.1.0.0/24", CNINetwork: "vm-net", Owner: tenurev1alpha1.ReservationOwner{
			Kind: tenurev1alpha1.OwnerIPAMClaim, Namespace: "ns", Name: claim.Name, UID: string(claim.UID),
			PodName: "decoy", PodUID: "uid-decoy", ContainerID: "ffff", Interface: "net1", Node: "node-z"}})
	h := startAgent(t, claim, planted, claimPod("launcher", "vm1.vm-net"))
	r := h.do(call{cmd: "ADD", ctr: "c1", pod: "launcher", conf: vmNet})
	if r.Error == nil {
		t.Fatalf("the ADD got %s", r.Result)
	}
	for _, want := range []string{
		"IPAMClaim ns/vm1.vm-net",
		"10.1.0.9/24, a second item of the slot 10.1.0.0/24 after 10.1.0.5/32 (reservation " + planted.Name + ", made on node node-z for pod decoy)",
		"10.9.0.1/24 outside every range of the current configuration (no reservation of the claim holds it)",
	} {
		if !strings.Contains(r.Error.Msg, want) {
			t.Errorf("the ADD's error %q does not say %q", r.Error.Msg, want)
		}
	}
	if r.Error.Code != CodeClaimMismatch {
		t.Errorf("code %d, want %d", r.Error.Code, CodeClaimMismatch)
	}
}
