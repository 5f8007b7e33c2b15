//go:build integration

package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	ipamclaimsv1alpha1 "github.com/tenure-ipam/tenure/api/ipamclaims/v1alpha1"
	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/reservation"
	"github.com/tenure-ipam/tenure/test/testbed"
)

// BenchmarkWebhookJudgedWrites measures what the webhook adds to the
// agent's judged writes: the same dry-run requests (judged as real ones,
// nothing stored) sent with the agent's node-bound token, which the policy
// and the webhook judge, first with the webhook's configuration in place
// and then with it removed, so only the policy judges. The difference of
// the two, per kind, is the webhook's round trip and its reads; compare
// them with benchstat:
//
//	go test -tags integration ./test/e2e -run '^$' -bench BenchmarkWebhookJudgedWrites -count 6
func BenchmarkWebhookJudgedWrites(b *testing.B) {
	ctx := testContext(b, 10*time.Minute)
	admin := apiClient(b)
	const ns, network = "lat", "lat-net"
	a := newNodeAgent(b, ctx, fmt.Sprintf("lat-%d", time.Now().UnixNano()%100000))
	claim := createClaim(b, ctx, admin, ns, "vm-"+a.node, network)
	launcher := "launcher-" + a.node
	presentOn(b, ctx, a.node, launcher, claim)
	for i := range 20 { // neighbours in the namespace and on the node, as a busy node has
		if _, err := testbed.CreatePod(ctx, admin, ns, fmt.Sprintf("other-%s-%d", a.node, i), a.node, vmAnnotations(network, fmt.Sprintf("vm-%d", i))); err != nil {
			b.Fatal(err)
		}
	}
	podLat, err := testbed.CreatePod(ctx, admin, ns, "pod-"+a.node, a.node, nil)
	if err != nil {
		b.Fatal(err)
	}
	podOwner := testbed.PodOwner(podLat, a.node)

	kinds := []struct {
		name string
		do   func(i int) error
	}{
		{"pod-reservation-create", func(i int) error {
			return a.c.Create(ctx, reservation.New(reservation.Spec{Network: network, Kind: tenurev1alpha1.KindAddress,
				Item: netip.MustParsePrefix(fmt.Sprintf("10.96.%d.%d/32", i/200%200, i%200+1)), Range: "10.96.0.0/16", Owner: podOwner}), client.DryRunAll)
		}},
		{"claim-reservation-create", func(i int) error {
			return a.c.Create(ctx, heldFor(a.node, network, fmt.Sprintf("10.95.%d.%d", i/200%200, i%200+1), claim, launcher), client.DryRunAll)
		}},
		// Each includes the administrator's read of the claim, alike in
		// both phases.
		{"claim-status-update", func(int) error {
			cl := getClaim(b, ctx, admin, ns, claim.Name)
			cl.Status.IPs, cl.Status.OwnerPod = []string{}, &ipamclaimsv1alpha1.OwnerPod{Name: launcher}
			return a.c.Status().Update(ctx, cl, client.DryRunAll)
		}},
	}
	run := func(phase string) {
		for _, k := range kinds {
			b.Run(phase+"/"+k.name, func(b *testing.B) {
				for i := 0; b.Loop(); i++ {
					if err := k.do(i); err != nil {
						b.Fatalf("%s %s: %v", k.name, phase, err)
					}
				}
			})
		}
	}
	run("with-webhook")
	vwc := webhookConfigObject(b, ctx)
	if err := admin.Delete(ctx, vwc); err != nil {
		b.Fatal(err)
	}
	defer func() {
		vwc.ResourceVersion, vwc.UID = "", ""
		if err := admin.Create(context.Background(), vwc); err != nil {
			b.Errorf("restoring the webhook configuration: %v", err)
		}
	}()
	waitWebhookGone(b, ctx, a)
	run("without-webhook")
}
