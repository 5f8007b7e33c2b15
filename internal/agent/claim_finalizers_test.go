package agent

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ipamclaimsv1alpha1 "github.com/tenure-ipam/tenure/api/ipamclaims/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/claims"
)

// TestAddOfAClaimBeingDeleted: while a finalizer other than tenure's holds
// a claim being deleted (KubeVirt's, while the VM runs), an ADD of it gets
// what it records, as a migration target does; with only tenure's
// finalizer left it is answered "try again later" and nothing is written.
func TestAddOfAClaimBeingDeleted(t *testing.T) {
	recorded := ipamclaimsv1alpha1.IPAMClaimStatus{IPs: []string{"10.1.0.9/24"}, DelegatedPrefixes: []string{"2001:db8:100:300::/56"}}
	deleting := func(name string, finalizers ...string) *ipamclaimsv1alpha1.IPAMClaim {
		c := ipamClaim(name, "vm-net", recorded)
		c.DeletionTimestamp = &metav1.Time{Time: time.Now()}
		c.Finalizers = finalizers
		return c
	}
	h := startAgent(t,
		deleting("held", "kubevirt.io/persistent-ipam", claims.ReleaseFinalizer), claimPod("launcher-held", "held"),
		deleting("releasing", claims.ReleaseFinalizer), claimPod("launcher-releasing", "releasing"))

	if got := ips(t, h.do(call{cmd: "ADD", ctr: "c1", pod: "launcher-held", conf: vmNet})); !slices.Equal(got, []string{"10.1.0.9"}) {
		t.Fatalf("ADD of a claim KubeVirt's finalizer holds: %v, want the recorded 10.1.0.9", got)
	}
	if got := h.recorded("held").Status.DelegatedPrefixes; !slices.Equal(got, recorded.DelegatedPrefixes) {
		t.Fatalf("delegated prefixes %v, want %v", got, recorded.DelegatedPrefixes)
	}

	creates := h.fake.Creates()
	r := h.do(call{cmd: "ADD", ctr: "c2", pod: "launcher-releasing", conf: vmNet})
	if r.Error == nil || r.Error.Code != types.ErrTryAgainLater || !strings.Contains(r.Error.Msg, "IPAMClaim ns/releasing is being deleted, and no finalizer but ipam.tenure.dev/release holds it") {
		t.Fatalf("ADD of a claim only tenure's finalizer holds: %+v, want code 11", r.Error)
	}
	if h.fake.Creates() != creates {
		t.Fatalf("the refused ADD wrote %d reservations", h.fake.Creates()-creates)
	}
}
