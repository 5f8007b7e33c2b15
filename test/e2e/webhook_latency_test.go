//go:build integration

package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	ipamclaimsv1alpha1 "github.com/tenure-ipam/tenure/api/ipamclaims/v1alpha1"
	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/dev/testbed"
	"github.com/tenure-ipam/tenure/internal/reservation"
)

// TestWebhookLatency measures what the webhook adds to the agent's judged
// writes: the same dry-run requests (judged as real ones, nothing stored)
// sent with the agent's node-bound token, which the policy and the webhook
// judge, and with the agent's service account as it would be without the
// webhook: its configuration removed, so only the policy judges. The
// difference of the two is the webhook's round trip and its reads.
func TestWebhookLatency(t *testing.T) {
	ctx := testContext(t, 3*time.Minute)
	admin := apiClient(t)
	const ns, network, n = "lat", "lat-net", 200
	a := newNodeAgent(t, ctx, "lat-a")
	claim := createClaim(t, ctx, admin, ns, "vm-lat", network)
	presentOn(t, ctx, a.node, "launcher-lat", claim)
	for i := range 20 { // neighbours in the namespace and on the node, as a busy node has
		if _, err := testbed.CreatePod(ctx, admin, ns, fmt.Sprintf("other-%d", i), a.node, vmAnnotations(network, fmt.Sprintf("vm-%d", i))); err != nil {
			t.Fatal(err)
		}
	}

	podLat, err := testbed.CreatePod(ctx, admin, ns, "pod-lat", a.node, nil)
	if err != nil {
		t.Fatal(err)
	}
	podOwner := testbed.PodOwner(podLat, a.node)

	kinds := []struct {
		name string
		do   func(i int) error
	}{
		{"pod's reservation create", func(i int) error {
			return a.c.Create(ctx, reservation.New(reservation.Spec{Network: network, Kind: tenurev1alpha1.KindAddress,
				Item: netip.MustParsePrefix(fmt.Sprintf("10.96.%d.%d/32", i/200, i%200+1)), Range: "10.96.0.0/16", Owner: podOwner}), client.DryRunAll)
		}},
		{"claim's reservation create", func(i int) error {
			return a.c.Create(ctx, heldFor(a.node, network, fmt.Sprintf("10.95.%d.%d", i/200, i%200+1), claim, "launcher-lat"), client.DryRunAll)
		}},
		{"claim status update", func(i int) error {
			cl := getClaim(t, ctx, admin, ns, claim.Name)
			cl.Status.IPs, cl.Status.OwnerPod = []string{}, &ipamclaimsv1alpha1.OwnerPod{Name: "launcher-lat"}
			return a.c.Status().Update(ctx, cl, client.DryRunAll)
		}},
	}
	measure := func(do func(int) error) ([]time.Duration, error) {
		var ds []time.Duration
		for i := range n {
			start := time.Now()
			if err := do(i); err != nil {
				return nil, err
			}
			ds = append(ds, time.Since(start))
		}
		slices.Sort(ds)
		return ds, nil
	}
	// Each status update includes the administrator's read of the claim,
	// alike in both runs.
	with := map[string][]time.Duration{}
	for _, k := range kinds {
		ds, err := measure(k.do)
		if err != nil {
			t.Fatalf("%s with the webhook: %v", k.name, err)
		}
		with[k.name] = ds
	}
	vwc := webhookConfigObject(t, ctx)
	if err := admin.Delete(ctx, vwc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		vwc.ResourceVersion, vwc.UID = "", ""
		if err := admin.Create(context.Background(), vwc); err != nil {
			t.Errorf("restoring the webhook configuration: %v", err)
		}
	})
	waitWebhookGone(t, ctx, a)
	for _, k := range kinds {
		ds, err := measure(k.do)
		if err != nil {
			t.Fatalf("%s without the webhook: %v", k.name, err)
		}
		w := with[k.name]
		p := func(ds []time.Duration, q float64) time.Duration { return ds[int(q*float64(len(ds)-1))] }
		t.Logf("%s, %d requests: with the webhook p50 %v p90 %v p99 %v; without p50 %v p90 %v p99 %v; added at p50 %v",
			k.name, n, p(w, .5), p(w, .9), p(w, .99), p(ds, .5), p(ds, .9), p(ds, .99), p(w, .5)-p(ds, .5))
	}
}
