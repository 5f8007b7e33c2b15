//go:build integration

package e2e

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipamclaimsv1alpha1 "github.com/tenure-ipam/tenure/api/ipamclaims/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/agent"
	"github.com/tenure-ipam/tenure/internal/claims"
	"github.com/tenure-ipam/tenure/test/testbed"
)

// requestingClaim is a claim as a migration tool writes it before the VM
// starts: the addresses and the prefix the VM had elsewhere.
func requestingClaim(t *testing.T, ctx context.Context, c client.Client, ns, name, network, ips, prefix string) *ipamclaimsv1alpha1.IPAMClaim {
	t.Helper()
	if err := testbed.EnsureNamespace(ctx, c, ns); err != nil {
		t.Fatal(err)
	}
	ann := map[string]string{claims.RequestedIPsAnnotation: ips}
	if prefix != "" {
		ann[claims.RequestedPrefixAnnotation] = prefix
	}
	cl := &ipamclaimsv1alpha1.IPAMClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Annotations: ann},
		Spec:       ipamclaimsv1alpha1.IPAMClaimSpec{Network: network, Interface: "net1"},
	}
	if err := c.Create(ctx, cl); err != nil {
		t.Fatal(err)
	}
	return cl
}

// TestClaimWithRequestedAddressesKeepsThemAcrossRestartAndMigration: a
// claim that brings its addresses and prefix gets exactly those on its
// first ADD, after a restart and on a migration target; one asking for an
// address another pod holds fails with IPsAllocated=False IPAddressConflict
// naming the holder; one asking outside every subnet or for the gateway
// fails with RequestedIPOutsideSubnet or ReservedIPRequested. Nothing is
// written for a refused one.
func TestClaimWithRequestedAddressesKeepsThemAcrossRestartAndMigration(t *testing.T) {
	ctx := testContext(t, 2*time.Minute)
	c := apiClient(t)
	agents := startAgents(t, ctx, "req-a", "req-b")
	ipam := `{"gateway":"10.91.0.1","ipRanges":[{"range":"10.91.0.0/24"},{"range":"fd00:91::/64"}],
		"prefix_delegation":{"range":"fd00:9100::/48","prefix_length":56},"network_name":"vmreq"}`
	confOn := func(node string) []byte { return netconf("vmreq", agents[node].Socket, ipam) }
	const ns = "e2e-vmreq"
	wantIPs := []string{"10.91.0.77/24", "fd00:91::77/64"}
	wantPrefixes := []string{"fd00:9100:0:4200::/56"}
	claim := requestingClaim(t, ctx, c, ns, "vm1.req", "vmreq", "10.91.0.77/24, fd00:91::77", "fd00:9100:0:4200::/56")

	check := func(what string, p pod) {
		t.Helper()
		r, err := add(ctx, p, confOn(p.node))
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if got := addrs(r); !slices.Equal(got, []string{"10.91.0.77", "fd00:91::77"}) {
			t.Fatalf("%s got %v", what, got)
		}
		got := getClaim(t, ctx, c, ns, "vm1.req")
		if !slices.Equal(got.Status.IPs, wantIPs) || !slices.Equal(got.Status.DelegatedPrefixes, wantPrefixes) {
			t.Fatalf("%s: claim records %v %v, want %v %v", what, got.Status.IPs, got.Status.DelegatedPrefixes, wantIPs, wantPrefixes)
		}
		if items := reservedItems(ownedBy(t, ctx, string(claim.UID))); !slices.Equal(items, []string{"10.91.0.77", "fd00:9100:0:4200::/56", "fd00:91::77"}) {
			t.Fatalf("%s: the claim's reservations hold %v", what, items)
		}
	}
	first := newPod(t, ctx, c, ns, "req-a", vmAnnotations("vmreq", "vm1.req"))
	check("the first ADD", first)
	before := reservationUIDs(ownedBy(t, ctx, string(claim.UID)))
	if err := del(ctx, first, confOn("req-a")); err != nil {
		t.Fatal(err)
	}
	if err := testbed.ForceDeletePod(ctx, c, ns, first.name); err != nil {
		t.Fatal(err)
	}
	restarted := newPod(t, ctx, c, ns, "req-a", vmAnnotations("vmreq", "vm1.req"))
	check("the restarted VM's ADD", restarted)
	check("the migration target's ADD", newPod(t, ctx, c, ns, "req-b", vmAnnotations("vmreq", "vm1.req")))
	if after := reservationUIDs(ownedBy(t, ctx, string(claim.UID))); !slices.Equal(after, before) {
		t.Fatalf("the claim's reservations were made again: %v -> %v", before, after)
	}

	// An address another pod holds: IPAddressConflict naming it.
	holder := newPod(t, ctx, c, ns, "req-b", nil)
	if _, err := add(ctx, holder, withRuntimeIPs(t, confOn("req-b"), "10.91.0.88")); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		claim, ips string
		code       uint
		reason     string
		names      string
	}{
		{"vm2.req", "10.91.0.88", agent.CodeAddressConflict, ipamclaimsv1alpha1.ReasonIPAddressConflict, "10.91.0.88 is held by Pod " + ns + "/" + holder.name + " (uid " + holder.uid + ")"},
		{"vm3.req", "10.92.0.5", 7, ipamclaimsv1alpha1.ReasonRequestedIPOutsideSubnet, "10.92.0.5"},
		{"vm4.req", "10.91.0.1", 7, ipamclaimsv1alpha1.ReasonReservedIPRequested, "10.91.0.1"},
	} {
		cl := requestingClaim(t, ctx, c, ns, tc.claim, "vmreq", tc.ips, "")
		p := newPod(t, ctx, c, ns, "req-a", vmAnnotations("vmreq", tc.claim))
		_, err := add(ctx, p, confOn("req-a"))
		if cniCode(err) != tc.code || !strings.Contains(err.Error(), tc.names) {
			t.Errorf("%s asking for %s: %v, want code %d naming %q", tc.claim, tc.ips, err, tc.code, tc.names)
		}
		cond := meta.FindStatusCondition(getClaim(t, ctx, c, ns, tc.claim).Status.Conditions, ipamclaimsv1alpha1.ConditionIPsAllocated)
		if cond == nil || cond.Status != metav1.ConditionFalse || cond.Reason != tc.reason || !strings.Contains(cond.Message, tc.names) {
			t.Errorf("%s: condition %+v, want IPsAllocated=False %s naming %q", tc.claim, cond, tc.reason, tc.names)
		}
		if left := ownedBy(t, ctx, string(cl.UID)); len(left) != 0 {
			t.Errorf("%s: the refused ADD left %v", tc.claim, reservedItems(left))
		}
	}
}
