//go:build integration

package e2e

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/controller"
	"github.com/tenure-ipam/tenure/internal/controller/repair"
	tenureops "github.com/tenure-ipam/tenure/internal/ops"
	"github.com/tenure-ipam/tenure/internal/reservation"
)

// TestControllerReleasesDuplicateAttachment: a live pod's attachment holds
// the address its ADD returned (the one Multus's network-status lists) and
// a second one of the same range, made as the agent makes reservations (an
// ADD whose create committed, its reply lost, retried). tenurectl check
// reports the second as DuplicateAttachment naming the pod and both
// reservations; the controller releases it (on its first sweep, and a
// third one made while it runs on the watch's event), though it is the
// newer, and keeps the one the pod uses.
func TestControllerReleasesDuplicateAttachment(t *testing.T) {
	ctx := testContext(t, 2*time.Minute)
	c := apiClient(t)
	const network, ns = "dup", "e2e-dup"
	agents := startAgents(t, ctx, "dup-a")
	conf := netconf(network, agents["dup-a"].Socket, `{"ipRanges":[{"range":"10.65.0.0/24"}],"network_name":"dup"}`)

	p := newPod(t, ctx, c, ns, "dup-a", nil)
	res, err := add(ctx, p, conf)
	if err != nil {
		t.Fatal(err)
	}
	if len(addrs(res)) != 1 {
		t.Fatalf("ADD returned %v, want one address", addrs(res))
	}
	usedAddr := addrs(res)[0]
	used := &tenurev1alpha1.IPReservation{}
	if err := c.Get(ctx, types.NamespacedName{Name: reservationName(network, usedAddr)}, used); err != nil {
		t.Fatal(err)
	}

	// Multus records what the ADD returned on the pod.
	live := &corev1.Pod{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: p.ns, Name: p.name}, live); err != nil {
		t.Fatal(err)
	}
	orig := live.DeepCopy()
	if live.Annotations == nil {
		live.Annotations = map[string]string{}
	}
	live.Annotations["k8s.v1.cni.cncf.io/network-status"] = fmt.Sprintf(`[{"name":"kindnet","interface":"eth0","ips":["10.244.0.7"],"mac":"0a:58:0a:f4:00:07","default":true,"dns":{}},`+
		`{"name":"%s/%s","interface":"net1","ips":[%q],"mac":"be:8e:45:3e:0c:11","dns":{}}]`, ns, network, usedAddr)
	if err := c.Patch(ctx, live, client.MergeFrom(orig)); err != nil {
		t.Fatal(err)
	}

	// The second reservation of the same attachment: same owner (pod,
	// sandbox, interface, node), network, range, pool and CNI network,
	// another address of the range, written through the agent's
	// constructor: the newer of the two (a later resourceVersion).
	second := netip.MustParseAddr("10.65.0.200")
	if second.String() == usedAddr {
		second = second.Next()
	}
	surplus := reservation.New(reservation.Spec{
		Network: used.Spec.Network, Kind: used.Spec.Kind, Item: netip.PrefixFrom(second, 32),
		Range: used.Spec.Range, Pool: used.Spec.Pool, CNINetwork: used.Spec.CNINetwork, Owner: used.Spec.Owner,
	})
	if err := c.Create(ctx, surplus); err != nil {
		t.Fatal(err)
	}

	// tenurectl check, before any controller runs.
	rep, err := tenureops.New(c).Check(ctx, tenureops.CheckOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var dups []tenureops.Finding
	for _, f := range rep.Findings {
		if f.Rule == tenureops.RuleDuplicateAttachment && f.Network == network {
			dups = append(dups, f)
		}
	}
	wantMsg := fmt.Sprintf("pod %s/%s interface net1 (sandbox %s) holds 2 IPv4 addresses of network %s range %s", ns, p.name, p.containerID[:16], network, used.Spec.Range)
	if len(dups) != 1 || dups[0].Object != "IPReservation "+surplus.Name || !slices.Equal(dups[0].Related, []string{"IPReservation " + used.Name}) ||
		!strings.Contains(dups[0].Message, wantMsg) || !strings.Contains(dups[0].Message, used.Name) || !strings.Contains(dups[0].Message, surplus.Name) {
		t.Fatalf("check's DuplicateAttachment findings: %+v; want one on %s naming %s, %q", dups, surplus.Name, used.Name, wantMsg)
	}
	t.Logf("tenurectl check: %s %s: %s", dups[0].Rule, dups[0].Object, dups[0].Message)

	// The first sweep runs when it leads; the next not within the test, so
	// what it releases later is the watch's doing.
	ctrl := ctlStart(t, ctx, "e2e-dup")
	ctrl.waitLeading(t, ctx)
	ctlPoll(t, ctx, "the surplus reservation released", func() (bool, error) {
		return present(t, ctx, network)[surplus.Name] == "", nil
	})
	if got := present(t, ctx, network); len(got) != 1 || got[used.Name] != string(used.UID) {
		t.Fatalf("after the first sweep: %v, want only %s (uid %s), the one network-status lists", got, used.Name, used.UID)
	}
	if n, _ := ctrl.metric(t, "tenure_releases_total", `reason="`+string(repair.DuplicateAttachment)+`"`); n != 1 {
		t.Errorf("tenure_releases_total{reason=DuplicateAttachment} = %v, want 1", n)
	}
	ctlPoll(t, ctx, "the release Event on the pod", func() (bool, error) {
		evs := &corev1.EventList{}
		if err := c.List(ctx, evs, client.InNamespace(ns)); err != nil {
			return false, err
		}
		for _, e := range evs.Items {
			if e.Reason == controller.EventReason && string(e.InvolvedObject.UID) == p.uid && strings.Contains(e.Message, surplus.Name) &&
				strings.Contains(e.Message, string(repair.DuplicateAttachment)) {
				return true, nil
			}
		}
		return false, nil
	})
	// With the controller running, the watch finds the next one: its
	// creation nominates it and its siblings.
	third := reservation.New(reservation.Spec{
		Network: used.Spec.Network, Kind: used.Spec.Kind, Item: netip.PrefixFrom(second.Next(), 32),
		Range: used.Spec.Range, Pool: used.Spec.Pool, CNINetwork: used.Spec.CNINetwork, Owner: used.Spec.Owner,
	})
	if err := c.Create(ctx, third); err != nil {
		t.Fatal(err)
	}
	ctlPoll(t, ctx, "the third reservation released", func() (bool, error) {
		return present(t, ctx, network)[third.Name] == "", nil
	})
	if got := present(t, ctx, network); len(got) != 1 || got[used.Name] != string(used.UID) {
		t.Fatalf("after the watch's release: %v, want only %s (uid %s)", got, used.Name, used.UID)
	}
	if n, _ := ctrl.metric(t, "tenure_releases_total", `reason="`+string(repair.DuplicateAttachment)+`"`); n != 2 {
		t.Errorf("tenure_releases_total{reason=DuplicateAttachment} = %v, want 2", n)
	}
	rep, err = tenureops.New(c).Check(ctx, tenureops.CheckOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range rep.Findings {
		if f.Network == network {
			t.Errorf("after the release, check finds %s %s: %s", f.Rule, f.Object, f.Message)
		}
	}
	// The pod's DEL frees what it uses.
	if err := del(ctx, p, conf); err != nil {
		t.Fatal(err)
	}
	if got := present(t, ctx, network); len(got) != 0 {
		t.Fatalf("after DEL: %v", got)
	}
}
