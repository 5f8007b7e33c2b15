//go:build integration

package e2e

import (
	"context"
	"encoding/json"
	"maps"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	ipamclaimsv1alpha1 "github.com/tenure-ipam/tenure/api/ipamclaims/v1alpha1"
	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/agent"
	"github.com/tenure-ipam/tenure/internal/claims"
	"github.com/tenure-ipam/tenure/internal/controller"
	"github.com/tenure-ipam/tenure/internal/ops"
	"github.com/tenure-ipam/tenure/test/controlplane/cptest"
	"github.com/tenure-ipam/tenure/test/testbed"
)

// createKubeVirtClaim creates the claim as KubeVirt's ipam-extensions
// (pkg/vminetworkscontroller) does for a VM's network: named
// <vm>.<logical network>, owned by the VirtualMachine (controller, blocking
// its deletion), labelled kubevirt.io/vm, with its finalizer, spec.network
// the NAD config's network name and spec.interface left empty.
func createKubeVirtClaim(t *testing.T, ctx context.Context, c client.Client, ns, vm, logicalNetwork, network string) *ipamclaimsv1alpha1.IPAMClaim {
	t.Helper()
	if err := testbed.EnsureNamespace(ctx, c, ns); err != nil {
		t.Fatal(err)
	}
	yes := true
	cl := &ipamclaimsv1alpha1.IPAMClaim{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: ns, Name: vm + "." + logicalNetwork,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "kubevirt.io/v1", Kind: "VirtualMachine", Name: vm,
				UID: k8stypes.UID("8a3c5d1e-0000-4000-8000-" + strings.Repeat("0", 12-len(vm)) + vm), Controller: &yes, BlockOwnerDeletion: &yes}},
			Finalizers: []string{testbed.ClaimFinalizer},
			Labels:     map[string]string{"kubevirt.io/vm": vm},
		},
		Spec: ipamclaimsv1alpha1.IPAMClaimSpec{Network: network},
	}
	if err := c.Create(ctx, cl); err != nil {
		t.Fatal(err)
	}
	return cl
}

// claimReservations maps the names of the reservations a UID owns to their UIDs.
func claimReservations(t *testing.T, ctx context.Context, uid string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, r := range ownedBy(t, ctx, uid) {
		out[r.Name] = string(r.UID)
	}
	return out
}

// TestTerminatingKubeVirtClaimKeepsItsAddresses: a claim KubeVirt's
// ipam-extensions made is deleted while its VM runs. While KubeVirt's
// finalizer is on it, nothing of it is released (across controller
// sweeps), a migration target gets the same addresses and prefix, another
// pod asking for one of them is refused (101 naming the claim), and the
// claim's condition and `tenurectl why` name the finalizer. Once KubeVirt
// removes its finalizer, everything is released within seconds and the
// claim is gone. The controller runs as its Deployment's service account,
// the agents under the node-restriction policy.
func TestTerminatingKubeVirtClaimKeepsItsAddresses(t *testing.T) {
	ctx := testContext(t, 3*time.Minute)
	c := apiClient(t)
	agents := startAgents(t, ctx, "tkc-a", "tkc-b")
	saKubeconfig := filepath.Join(t.TempDir(), "controller.kubeconfig")
	if err := testbed.ServiceAccountKubeconfig(ctx, cptest.Current().Config, "tenure-system", "tenure-controller", saKubeconfig); err != nil {
		t.Fatal(err)
	}
	// The Lease its Role lets it write.
	ctrl := ctlStart(t, ctx, "e2e-terminating-claim", "--kubeconfig", saKubeconfig,
		"--leader-election-namespace", "tenure-system", "--leader-election-id", "tenure-controller", "--sweep-interval", "500ms")
	ctrl.waitLeading(t, ctx)

	const ns, network = "e2e-terminating-claim", "tkcnet"
	// Two addresses per range: "another pod" has somewhere else to go, so
	// its refusal is about the one address it asks for.
	ipam := `{"ipRanges":[{"range":"10.95.0.0/24","range_start":"10.95.0.5","range_end":"10.95.0.6"},
		{"range":"fd00:95::/64","range_start":"fd00:95::5","range_end":"fd00:95::6"}],
		"prefix_delegation":{"range":"fd00:9500::/55","prefix_length":56},"network_name":"tkcnet"}`
	conf := func(p pod) []byte { return netconf(network, agents[p.node].Socket, ipam) }
	claim := createKubeVirtClaim(t, ctx, c, ns, "vm1", "san", network)
	launcher := func(node string) pod { return newPod(t, ctx, c, ns, node, vmAnnotations(network, claim.Name)) }

	src := launcher("tkc-a")
	rSrc, err := add(ctx, src, conf(src))
	if err != nil {
		t.Fatalf("source ADD: %v", err)
	}
	recorded := getClaim(t, ctx, c, ns, claim.Name)
	if len(recorded.Status.IPs) != 2 || len(recorded.Status.DelegatedPrefixes) != 1 {
		t.Fatalf("claim status %+v: want two addresses and a prefix", recorded.Status)
	}
	ctlPoll(t, ctx, "tenure's finalizer beside KubeVirt's", func() (bool, error) {
		return slices.Equal(getClaim(t, ctx, c, ns, claim.Name).Finalizers, []string{testbed.ClaimFinalizer, controller.ClaimFinalizer}), nil
	})
	held := claimReservations(t, ctx, string(claim.UID))
	var items []string
	for _, r := range ownedBy(t, ctx, string(claim.UID)) {
		items = append(items, r.Spec.Address)
	}
	slices.Sort(items)
	if len(held) != 3 {
		t.Fatalf("claim holds %v, want an IPv4 and an IPv6 address and a /56", items)
	}

	// kubectl delete ipamclaim while the VM runs.
	if err := c.Delete(ctx, getClaim(t, ctx, c, ns, claim.Name)); err != nil {
		t.Fatal(err)
	}
	deleted := time.Now()
	if getClaim(t, ctx, c, ns, claim.Name).DeletionTimestamp == nil {
		t.Fatal("the claim has no deletionTimestamp: KubeVirt's finalizer must keep it")
	}
	wantMsg := "claim is being deleted; waiting for finalizer " + testbed.ClaimFinalizer + " before releasing " + strings.Join(items, ", ")
	ctlPoll(t, ctx, "condition Released=False WaitingForFinalizers", func() (bool, error) {
		cond := meta.FindStatusCondition(getClaim(t, ctx, c, ns, claim.Name).Status.Conditions, claims.ConditionReleased)
		return cond != nil && cond.Status == metav1.ConditionFalse && cond.Reason == claims.ReasonWaitingForFinalizers && cond.Message == wantMsg, nil
	})
	// Two full sweeps that began after the deletion have judged the claim
	// and its reservations.
	ctrl.waitSweepAfter(t, ctx, deleted)
	ctrl.waitSweepAfter(t, ctx, time.Now())
	if got := claimReservations(t, ctx, string(claim.UID)); !maps.Equal(got, held) {
		t.Fatalf("reservations changed while KubeVirt's finalizer is on the claim: %v -> %v", held, got)
	}

	// A restart of the VM's pod sandbox on the source: the same addresses.
	restarted := src
	restarted.containerID += "-restarted"
	if r, err := add(ctx, restarted, conf(restarted)); err != nil || !slices.Equal(addrs(r), addrs(rSrc)) {
		t.Fatalf("source sandbox restarted: %v %v, want %v", r, err, addrs(rSrc))
	}

	// The migration target: the same addresses and prefix, the same
	// reservations (no new object, no re-creation).
	dst := launcher("tkc-b")
	rDst, err := add(ctx, dst, conf(dst))
	if err != nil {
		t.Fatalf("migration target's ADD of the claim being deleted: %v", err)
	}
	if !slices.Equal(addrs(rDst), addrs(rSrc)) {
		t.Fatalf("target got %v, the source holds %v", addrs(rDst), addrs(rSrc))
	}
	after := getClaim(t, ctx, c, ns, claim.Name)
	if !slices.Equal(after.Status.DelegatedPrefixes, recorded.Status.DelegatedPrefixes) || !slices.Equal(after.Status.IPs, recorded.Status.IPs) {
		t.Fatalf("after the target's ADD the claim records %v %v, before %v %v",
			after.Status.IPs, after.Status.DelegatedPrefixes, recorded.Status.IPs, recorded.Status.DelegatedPrefixes)
	}
	if got := claimReservations(t, ctx, string(claim.UID)); !maps.Equal(got, held) {
		t.Fatalf("the target's ADD changed the claim's reservations: %v -> %v", held, got)
	}

	// Another pod asking for the VM's IPv4 address.
	v4 := addrs(rSrc)[0]
	other := newPod(t, ctx, c, ns, "tkc-a", nil)
	_, err = add(ctx, other, withRuntimeIPs(t, conf(other), v4))
	if cniCode(err) != agent.CodeAddressConflict || !strings.Contains(err.Error(), v4+" is held by IPAMClaim "+ns+"/"+claim.Name+" (uid "+string(claim.UID)+")") {
		t.Fatalf("another pod asking for %s: %v, want code 101 naming the claim", v4, err)
	}
	if left := ownedBy(t, ctx, other.uid); len(left) != 0 {
		t.Fatalf("the refused ADD left %v", reservedItems(left))
	}

	// tenurectl why, as an operator runs it, for the VM's pod.
	why := exec.CommandContext(ctx, bins.CLI, "why", dst.name, "--namespace", ns, "-o", "json", "--kubeconfig", cptest.Current().KubeconfigPath)
	out, err := why.Output()
	if err != nil {
		t.Fatalf("tenurectl why: %v", err)
	}
	rep := &ops.PodReport{}
	if err := json.Unmarshal(out, rep); err != nil {
		t.Fatalf("tenurectl why: %v\n%s", err, out)
	}
	if len(rep.Attachments) != 1 || !rep.Attachments[0].OK || !strings.HasSuffix(rep.Attachments[0].Outcome, "; IPAMClaim "+ns+"/"+claim.Name+": "+wantMsg) {
		t.Fatalf("tenurectl why: %+v, want the attachment's outcome to end with %q", rep.Attachments, wantMsg)
	}
	t.Logf("tenurectl why %s: %s", dst.name, rep.Attachments[0].Outcome)

	// KubeVirt removes its finalizer once the VMI is gone: an Update of the
	// claim without it.
	if got := claimReservations(t, ctx, string(claim.UID)); !maps.Equal(got, held) {
		t.Fatalf("reservations changed while KubeVirt's finalizer is on the claim: %v -> %v", held, got)
	}
	before, _ := ctrl.metric(t, "tenure_releases_total", `reason="ClaimDeleted"`)
	cur := getClaim(t, ctx, c, ns, claim.Name)
	controllerutil.RemoveFinalizer(cur, testbed.ClaimFinalizer)
	if err := c.Update(ctx, cur); err != nil {
		t.Fatal(err)
	}
	removed := time.Now()
	deadline := testContext(t, 10*time.Second)
	ctlPoll(t, deadline, "the claim's reservations released and the claim gone", func() (bool, error) {
		err := c.Get(ctx, client.ObjectKeyFromObject(claim), &ipamclaimsv1alpha1.IPAMClaim{})
		if err != nil && !apierrors.IsNotFound(err) {
			return false, err
		}
		return apierrors.IsNotFound(err) && len(claimReservations(t, ctx, string(claim.UID))) == 0, nil
	})
	t.Logf("released %v and the claim gone %v after KubeVirt's finalizer was removed", items, time.Since(removed).Round(time.Millisecond))
	if n, _ := ctrl.metric(t, "tenure_releases_total", `reason="ClaimDeleted"`); n-before != 3 {
		t.Errorf("tenure_releases_total{reason=ClaimDeleted} grew by %v, want the claim's 3", n-before)
	}
	// Released means another pod may have it now.
	if r, err := add(ctx, other, withRuntimeIPs(t, conf(other), v4)); err != nil || addrs(r)[0] != v4 {
		t.Fatalf("after the release, asking for %s: %v %v", v4, r, err)
	}
	var left []string
	for _, r := range reservationsOf(t, ctx, network) {
		if r.Spec.Owner.Kind == tenurev1alpha1.OwnerIPAMClaim {
			left = append(left, r.Name)
		}
	}
	if len(left) != 0 {
		t.Fatalf("claim-owned reservations left on the network: %v", left)
	}
	if err := del(ctx, other, withRuntimeIPs(t, conf(other), v4)); err != nil {
		t.Fatal(err)
	}
}
