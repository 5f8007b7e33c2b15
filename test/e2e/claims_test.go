//go:build integration

package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	current "github.com/containernetworking/cni/pkg/types/100"
	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipamclaimsv1alpha1 "github.com/tenure-ipam/tenure/api/ipamclaims/v1alpha1"
	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/agent"
	"github.com/tenure-ipam/tenure/internal/allocator"
	"github.com/tenure-ipam/tenure/test/testbed"
)

func createClaim(t testing.TB, ctx context.Context, c client.Client, ns, name, network string) *ipamclaimsv1alpha1.IPAMClaim {
	t.Helper()
	if err := testbed.EnsureNamespace(ctx, c, ns); err != nil {
		t.Fatal(err)
	}
	cl := &ipamclaimsv1alpha1.IPAMClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       ipamclaimsv1alpha1.IPAMClaimSpec{Network: network, Interface: "net1"},
	}
	if err := c.Create(ctx, cl); err != nil {
		t.Fatal(err)
	}
	return cl
}

func vmAnnotations(network, claim string) map[string]string {
	return map[string]string{"k8s.v1.cni.cncf.io/networks": fmt.Sprintf(`[{"name":%q,"interface":"net1","ipam-claim-reference":%q}]`, network, claim)}
}

func getClaim(t testing.TB, ctx context.Context, c client.Client, ns, name string) *ipamclaimsv1alpha1.IPAMClaim {
	t.Helper()
	cl := &ipamclaimsv1alpha1.IPAMClaim{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, cl); err != nil {
		t.Fatal(err)
	}
	return cl
}

// ownedBy lists, from the API server, the reservations owned by a UID.
func ownedBy(t *testing.T, ctx context.Context, uid string) []tenurev1alpha1.IPReservation {
	t.Helper()
	list := &tenurev1alpha1.IPReservationList{}
	if err := apiClient(t).List(ctx, list); err != nil {
		t.Fatal(err)
	}
	var out []tenurev1alpha1.IPReservation
	for _, r := range list.Items {
		if r.Spec.Owner.UID == uid {
			out = append(out, r)
		}
	}
	return out
}

func reservedItems(rs []tenurev1alpha1.IPReservation) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.Spec.Address)
	}
	slices.Sort(out)
	return out
}

// Each range holds exactly one item, so "handed out again" is unambiguous.
const vmIPAM = `{"ipRanges":[{"range":"10.90.0.0/24","range_start":"10.90.0.7","range_end":"10.90.0.7"},
	{"range":"fd00:90::/64","range_start":"fd00:90::7","range_end":"fd00:90::7"}],
	"prefix_delegation":{"range":"fd00:9000:0:700::/56","prefix_length":56},"network_name":"vmsan"}`

func TestLiveMigrationKeepsAddressesAndPrefix(t *testing.T) {
	ctx := testContext(t, 2*time.Minute)
	c := apiClient(t)
	agents := startAgents(t, ctx, "mig-a", "mig-b")
	confOn := func(node string) []byte { return netconf("san", agents[node].Socket, vmIPAM) }
	const ns = "vms"
	claim := createClaim(t, ctx, c, ns, "vm1.san", "san")

	src := newPod(t, ctx, c, ns, "mig-a", vmAnnotations("san", "vm1.san"))
	rSrc, err := add(ctx, src, confOn("mig-a"))
	if err != nil {
		t.Fatalf("source ADD: %v", err)
	}
	got := getClaim(t, ctx, c, ns, "vm1.san")
	wantIPs := []string{"10.90.0.7/24", "fd00:90::7/64"}
	wantPrefixes := []string{"fd00:9000:0:700::/56"}
	if !slices.Equal(got.Status.IPs, wantIPs) || !slices.Equal(got.Status.DelegatedPrefixes, wantPrefixes) {
		t.Fatalf("claim status ips %v prefixes %v, want %v %v", got.Status.IPs, got.Status.DelegatedPrefixes, wantIPs, wantPrefixes)
	}
	if got.Status.OwnerPod == nil || got.Status.OwnerPod.Name != src.name {
		t.Fatalf("ownerPod %+v, want %s", got.Status.OwnerPod, src.name)
	}
	if cond := meta.FindStatusCondition(got.Status.Conditions, ipamclaimsv1alpha1.ConditionIPsAllocated); cond == nil || cond.Reason != ipamclaimsv1alpha1.ReasonSuccessfulAllocation {
		t.Fatalf("condition %+v, want IPsAllocated/SuccessfulAllocation", cond)
	}
	held := ownedBy(t, ctx, string(claim.UID))
	if len(held) != 3 {
		t.Fatalf("claim owns %d reservations, want 3 (v4, v6, prefix): %v", len(held), reservedItems(held))
	}

	// The migration target presents the same claim while the source runs.
	dst := newPod(t, ctx, c, ns, "mig-b", vmAnnotations("san", "vm1.san"))
	rDst, err := add(ctx, dst, confOn("mig-b"))
	if err != nil {
		t.Fatalf("target ADD: %v", err)
	}
	if !slices.Equal(addrs(rSrc), addrs(rDst)) {
		t.Fatalf("target got %v, source holds %v", addrs(rDst), addrs(rSrc))
	}
	got = getClaim(t, ctx, c, ns, "vm1.san")
	if got.Status.OwnerPod == nil || got.Status.OwnerPod.Name != dst.name || !slices.Equal(got.Status.DelegatedPrefixes, wantPrefixes) {
		t.Fatalf("after migration: ownerPod %+v prefixes %v", got.Status.OwnerPod, got.Status.DelegatedPrefixes)
	}

	// The source's DEL after migration releases nothing.
	if err := del(ctx, src, confOn("mig-a")); err != nil {
		t.Fatal(err)
	}
	if after := ownedBy(t, ctx, string(claim.UID)); !slices.Equal(reservedItems(after), reservedItems(held)) {
		t.Fatalf("DEL of the source changed the claim's reservations: %v -> %v", reservedItems(held), reservedItems(after))
	}

	// Another claim cannot have them meanwhile.
	createClaim(t, ctx, c, ns, "vm2.san", "san")
	other := newPod(t, ctx, c, ns, "mig-a", vmAnnotations("san", "vm2.san"))
	if _, err := add(ctx, other, confOn("mig-a")); cniCode(err) != agent.CodeRangeFull {
		t.Fatalf("second claim on a one-address range: %v, want exhaustion", err)
	}
	if cond := meta.FindStatusCondition(getClaim(t, ctx, c, ns, "vm2.san").Status.Conditions, ipamclaimsv1alpha1.ConditionIPsAllocated); cond == nil || cond.Reason != ipamclaimsv1alpha1.ReasonSubnetExhausted {
		t.Fatalf("vm2 condition %+v, want SubnetExhausted", cond)
	}

	// Claim deletion: the release the controller performs frees all three.
	if err := c.Delete(ctx, claim); err != nil {
		t.Fatal(err)
	}
	releaseClaim(t, ctx, string(claim.UID))
	r2, err := add(ctx, other, confOn("mig-a"))
	if err != nil {
		t.Fatalf("after the claim's release: %v", err)
	}
	if !slices.Equal(addrs(r2), addrs(rSrc)) {
		t.Fatalf("released items handed out again: got %v, want %v", addrs(r2), addrs(rSrc))
	}
	if got := getClaim(t, ctx, c, ns, "vm2.san").Status.DelegatedPrefixes; !slices.Equal(got, wantPrefixes) {
		t.Fatalf("vm2 prefixes %v, want %v", got, wantPrefixes)
	}
}

// releaseClaim frees what a deleted claim owned, with the same call the
// controller makes.
func releaseClaim(t *testing.T, ctx context.Context, uid string) {
	t.Helper()
	c := apiClient(t)
	for _, r := range ownedBy(t, ctx, uid) {
		if err := (&allocator.Factory{Writer: c}).Release(ctx, &r); err != nil {
			t.Fatal(err)
		}
	}
}

func TestFiftyClaimsMigrateConcurrentlyAcrossFourAgents(t *testing.T) {
	ctx := testContext(t, 4*time.Minute)
	c := apiClient(t)
	nodes := []string{"fc-a", "fc-b", "fc-c", "fc-d"}
	agents := startAgents(t, ctx, nodes...)
	ipam := `{"ipRanges":[{"range":"10.91.0.0/24"},{"range":"fd00:91::/64"}],
		"prefix_delegation":{"range":"fd00:9100::/40","prefix_length":56},"network_name":"fifty"}`
	const ns, n = "fifty", 50
	type vm struct {
		claim    *ipamclaimsv1alpha1.IPAMClaim
		src, dst pod
		first    []string
	}
	vms := make([]*vm, n)
	for i := range vms {
		name := fmt.Sprintf("vm%d.san", i)
		v := &vm{claim: createClaim(t, ctx, c, ns, name, "fifty")}
		v.src = newPod(t, ctx, c, ns, nodes[i%4], vmAnnotations("fifty", name))
		v.dst = newPod(t, ctx, c, ns, nodes[(i+1)%4], vmAnnotations("fifty", name))
		vms[i] = v
	}
	conf := func(p pod) []byte { return netconf("fifty", agents[p.node].Socket, ipam) }
	run := func(f func(v *vm) error) {
		g, gctx := errgroup.WithContext(ctx)
		g.SetLimit(25)
		for _, v := range vms {
			g.Go(func() error {
				_ = gctx
				return f(v)
			})
		}
		if err := g.Wait(); err != nil {
			t.Fatal(err)
		}
	}
	// Sources and targets race: the target of one VM may ADD before its source.
	var mu sync.Mutex
	run(func(v *vm) error {
		var wg sync.WaitGroup
		var rs, rd []string
		var es, ed error
		wg.Add(2)
		go func() { defer wg.Done(); r, err := add(ctx, v.src, conf(v.src)); es = err; rs = resultItems(r) }()
		go func() { defer wg.Done(); r, err := add(ctx, v.dst, conf(v.dst)); ed = err; rd = resultItems(r) }()
		wg.Wait()
		if es != nil || ed != nil {
			return fmt.Errorf("%s: source %v target %v", v.claim.Name, es, ed)
		}
		if !slices.Equal(rs, rd) {
			return fmt.Errorf("%s: source got %v, target got %v", v.claim.Name, rs, rd)
		}
		mu.Lock()
		v.first = rs
		mu.Unlock()
		return nil
	})
	seen := map[string]string{}
	for _, v := range vms {
		cl := getClaim(t, ctx, c, ns, v.claim.Name)
		if !slices.Equal(cl.Status.IPs, v.first) || len(cl.Status.DelegatedPrefixes) != 1 {
			t.Fatalf("%s status %v %v, pods got %v", v.claim.Name, cl.Status.IPs, cl.Status.DelegatedPrefixes, v.first)
		}
		owned := ownedBy(t, ctx, string(v.claim.UID))
		if len(owned) != 3 {
			t.Fatalf("%s owns %d reservations, want 3: %v", v.claim.Name, len(owned), reservedItems(owned))
		}
		for _, item := range append(slices.Clone(cl.Status.IPs), cl.Status.DelegatedPrefixes...) {
			if o, dup := seen[item]; dup {
				t.Fatalf("%s held by %s and %s", item, o, v.claim.Name)
			}
			seen[item] = v.claim.Name
		}
	}
	for _, r := range reservationsOf(t, ctx, "fifty") {
		if r.Spec.Owner.Kind != tenurev1alpha1.OwnerIPAMClaim {
			t.Fatalf("reservation %s is not claim-owned: %+v", r.Name, r.Spec.Owner)
		}
	}
	if got, want := len(reservationsOf(t, ctx, "fifty")), 3*n; got != want {
		t.Fatalf("%d reservations on the network, want %d (nothing leaked by lost races)", got, want)
	}
}

func resultItems(r *current.Result) []string {
	if r == nil {
		return nil
	}
	var out []string
	for _, ip := range r.IPs {
		out = append(out, ip.Address.String())
	}
	return out
}

func TestAgentRestartBetweenSourceAndTargetChangesNothing(t *testing.T) {
	ctx := testContext(t, 2*time.Minute)
	c := apiClient(t)
	agents := startAgents(t, ctx, "rs-a", "rs-b")
	ipam := `{"ipRanges":[{"range":"10.92.0.0/24"},{"range":"fd00:92::/64"}],
		"prefix_delegation":{"range":"fd00:9200::/40","prefix_length":56},"network_name":"restart"}`
	const ns = "restart"
	createClaim(t, ctx, c, ns, "vm.san", "restart")
	src := newPod(t, ctx, c, ns, "rs-a", vmAnnotations("restart", "vm.san"))
	r1, err := add(ctx, src, netconf("restart", agents["rs-a"].Socket, ipam))
	if err != nil {
		t.Fatal(err)
	}
	before := getClaim(t, ctx, c, ns, "vm.san").Status
	for _, node := range []string{"rs-a", "rs-b"} {
		a := agents[node]
		a.Kill()
		restarted, err := testbed.StartAgent(ctx, bins, dirOf(a.Socket), a.Kubeconfig, node)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(restarted.Stop)
	}
	dst := newPod(t, ctx, c, ns, "rs-b", vmAnnotations("restart", "vm.san"))
	r2, err := add(ctx, dst, netconf("restart", agents["rs-b"].Socket, ipam))
	if err != nil {
		t.Fatal(err)
	}
	after := getClaim(t, ctx, c, ns, "vm.san").Status
	if !slices.Equal(addrs(r1), addrs(r2)) || !slices.Equal(before.IPs, after.IPs) || !slices.Equal(before.DelegatedPrefixes, after.DelegatedPrefixes) {
		t.Fatalf("restart changed the claim: %v %v %v -> %v %v %v", addrs(r1), before.IPs, before.DelegatedPrefixes, addrs(r2), after.IPs, after.DelegatedPrefixes)
	}
}

func dirOf(p string) string { return p[:strings.LastIndexByte(p, '/')] }

func TestClaimNetworkMismatchAndOutsideRange(t *testing.T) {
	ctx := testContext(t, time.Minute)
	c := apiClient(t)
	agents := startAgents(t, ctx, "cm")
	const ns = "mismatch"
	createClaim(t, ctx, c, ns, "vm.other", "other-net")
	p := newPod(t, ctx, c, ns, "cm", vmAnnotations("san", "vm.other"))
	_, err := add(ctx, p, netconf("san", agents["cm"].Socket, `{"range":"10.93.0.0/24","network_name":"mm"}`))
	if err == nil || !strings.Contains(err.Error(), "other-net") || !strings.Contains(err.Error(), `"san"`) {
		t.Fatalf("mismatch error %v must name both networks", err)
	}
	if n := len(reservationsOf(t, ctx, "mm")); n != 0 {
		t.Fatalf("a refused ADD wrote %d reservations", n)
	}

	// A claim whose recorded address is outside the current range is
	// reported, not silently re-allocated.
	cl := createClaim(t, ctx, c, ns, "vm.moved", "san")
	cl.Status.IPs = []string{"10.255.0.9/24"}
	if err := c.Status().Update(ctx, cl); err != nil {
		t.Fatal(err)
	}
	p2 := newPod(t, ctx, c, ns, "cm", vmAnnotations("san", "vm.moved"))
	_, err = add(ctx, p2, netconf("san", agents["cm"].Socket, `{"range":"10.93.0.0/24","network_name":"mm"}`))
	if cniCode(err) != agent.CodeClaimMismatch || !strings.Contains(err.Error(), "10.255.0.9") {
		t.Fatalf("outside-range claim: %v", err)
	}
	got := getClaim(t, ctx, c, ns, "vm.moved")
	if !slices.Equal(got.Status.IPs, []string{"10.255.0.9/24"}) {
		t.Fatalf("claim status was rewritten to %v", got.Status.IPs)
	}
	if cond := meta.FindStatusCondition(got.Status.Conditions, ipamclaimsv1alpha1.ConditionIPsAllocated); cond == nil || cond.Reason != ipamclaimsv1alpha1.ReasonAddressesOutsideRange {
		t.Fatalf("condition %+v", cond)
	}
	if n := len(reservationsOf(t, ctx, "mm")); n != 0 {
		t.Fatalf("%d reservations written", n)
	}
	// Events are sent asynchronously by the agent's broadcaster.
	var evs []corev1.Event
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		evs = claimEvents(t, ctx, c, ns, "vm.moved")
		return len(evs) > 0 && evs[0].Reason == ipamclaimsv1alpha1.ReasonAddressesOutsideRange && strings.Contains(evs[0].Message, "10.255.0.9"), nil
	}); err != nil {
		t.Fatalf("no AddressesOutsideRange Event on the claim: %+v", evs)
	}
}

func TestPodWithoutClaimGetsAPrefixOnlyWhenItOptsIn(t *testing.T) {
	ctx := testContext(t, time.Minute)
	c := apiClient(t)
	agents := startAgents(t, ctx, "pdopt")
	conf := netconf("pdopt", agents["pdopt"].Socket, `{"range":"fd00:94::/64","prefix_delegation":{"range":"fd00:9400::/40","prefix_length":56},"network_name":"pdopt"}`)
	plain := newPod(t, ctx, c, "pdopt", "pdopt", nil)
	if _, err := add(ctx, plain, conf); err != nil {
		t.Fatal(err)
	}
	if items := reservedItems(ownedBy(t, ctx, plain.uid)); len(items) != 1 || strings.Contains(items[0], "/") {
		t.Fatalf("a pod that did not opt in holds %v, want one address and no prefix", items)
	}
	for name, ann := range map[string]map[string]string{
		"pod annotation": {"ipam.tenure.dev/prefix-delegation": "net1"},
		"cni-args":       {"k8s.v1.cni.cncf.io/networks": `[{"name":"pdopt","interface":"net1","cni-args":{"tenure.dev/prefix-delegation":true}}]`},
	} {
		p := newPod(t, ctx, c, "pdopt", "pdopt", ann)
		r, err := add(ctx, p, conf)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if len(r.IPs) != 1 {
			t.Fatalf("%s: the CNI result lists %d IPs: a delegated prefix is not an interface address", name, len(r.IPs))
		}
		var prefixes []string
		for _, res := range ownedBy(t, ctx, p.uid) {
			if res.Spec.Kind == tenurev1alpha1.KindDelegatedPrefix {
				prefixes = append(prefixes, res.Spec.Address)
			}
		}
		if len(prefixes) != 1 || !strings.HasSuffix(prefixes[0], "/56") {
			t.Fatalf("%s: delegated prefixes %v, want one /56", name, prefixes)
		}
		if err := del(ctx, p, conf); err != nil {
			t.Fatal(err)
		}
		if left := ownedBy(t, ctx, p.uid); len(left) != 0 {
			t.Fatalf("%s: DEL left %v", name, reservedItems(left))
		}
	}
}

func claimEvents(t *testing.T, ctx context.Context, c client.Client, ns, name string) []corev1.Event {
	t.Helper()
	list := &corev1.EventList{}
	if err := c.List(ctx, list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	var out []corev1.Event
	for _, e := range list.Items {
		if e.InvolvedObject.Kind == "IPAMClaim" && e.InvolvedObject.Name == name {
			out = append(out, e)
		}
	}
	return out
}
