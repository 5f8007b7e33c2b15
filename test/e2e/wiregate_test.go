//go:build integration

package e2e

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/controller"
	"github.com/tenure-ipam/tenure/internal/controller/repair"
	tenureops "github.com/tenure-ipam/tenure/internal/ops"
	"github.com/tenure-ipam/tenure/test/testbed"
)

// With --release-unfenced and a short grace period, the address of a
// terminating pod on a NotReady node that is not fenced is kept while it
// answers on the wire, and released once it stops. The SAN is a bridge in
// a namespace of its own; the partitioned node's pod is a host plugged
// into it holding the pod's address (its node cut off from the API
// server, its SAN leg up); the agent of another node, whose ADD used the
// network on that bridge, probes there for the controller. While the pod
// answers: the reservation stays (by name and UID) through the agents
// being asked again, with a Warning Event naming the MAC that answered,
// the metric and a `tenurectl check` finding. Once its leg of the bridge
// is cut: the next request's silent answer releases it, as NodeNotReady,
// and its IPProbe goes; the prober's own reservation stays.
func TestGracePeriodReleaseWaitsWhileTheAddressAnswers(t *testing.T) {
	ctx := testContext(t, 3*time.Minute)
	c := apiClient(t)
	network := fmt.Sprintf("wg%d", podSeq.Add(1))
	ns := "e2e-" + network
	lost, prober := network+"-lost", network+"-prober"
	addr := netip.MustParseAddr("10.74.0.10")
	// The partitioned pod, on the SAN with its address.
	s := newSegment(t, netip.PrefixFrom(addr, 24))

	// The lost node's agent has no wire check (nothing here for it to
	// probe on): its pod gets the one address of its range.
	lostAgent := startAgents(t, ctx, lost)[lost]
	lostPod := newPod(t, ctx, c, ns, lost, nil)
	if res, err := add(ctx, lostPod, netconf(network, lostAgent.Socket,
		`{"range":"10.74.0.0/24","range_start":"10.74.0.10","range_end":"10.74.0.10","network_name":"`+network+`"}`)); err != nil {
		t.Fatal(err)
	} else if got := addrs(res); len(got) != 1 || got[0] != addr.String() {
		t.Fatalf("the lost node's pod got %v, want %s", got, addr)
	}
	held := reservationName(network, addr.String())
	// The prober's ADD of the same network on the bridge: its agent knows
	// the network's parent interface.
	probeAgent, _ := startProbingAgent(t, ctx, prober, s, 2*time.Second)
	proberPod := newPod(t, ctx, c, ns, prober, nil)
	if _, err := add(ctx, proberPod, []byte(fmt.Sprintf(`{"cniVersion":"1.1.0","name":%q,"type":"bridge","bridge":%q,
		"ipam":{"type":"tenure","agent_socket":%q,"range":"10.74.0.0/24","range_start":"10.74.0.20","range_end":"10.74.0.29","network_name":%q}}`,
		network, s.bridge, probeAgent.Socket, network))); err != nil {
		t.Fatal(err)
	}
	before := present(t, ctx, network)
	if len(before) != 2 || before[held] == "" {
		t.Fatalf("reservations %v, want %s and the prober's", before, held)
	}

	const grace = time.Second
	ctrl := ctlStart(t, ctx, ns, "--release-unfenced", "--node-grace-period", grace.String(), "--probe-interval", "2s", "--sweep-interval", "1h")
	ctrl.waitLeading(t, ctx)
	lostAgent.Kill()
	if err := testbed.SetNodeReady(ctx, c, lost, false); err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: lostPod.ns, Name: lostPod.name}}); err != nil {
		t.Fatal(err)
	}

	// The prober hears the pod answer, in answer to a request, and again
	// when the controller asks again.
	answered := func(gen int64) func() (bool, error) {
		return func() (bool, error) {
			p := &tenurev1alpha1.IPProbe{}
			if err := c.Get(ctx, client.ObjectKey{Name: held}, p); err != nil {
				return false, client.IgnoreNotFound(err)
			}
			for _, a := range p.Status.Answers {
				if a.Node == prober && a.ObservedGeneration == p.Generation && p.Generation >= gen {
					if a.Result != tenurev1alpha1.ProbeAnswered || a.MAC != s.squatMAC.String() || a.Interface != s.bridge {
						return false, fmt.Errorf("the prober answered %+v, want the MAC %s on %s", a, s.squatMAC, s.bridge)
					}
					if p.Spec.Node != lost || p.Spec.Address != addr.String() || p.Spec.Network != network {
						return false, fmt.Errorf("IPProbe %s asks %+v", held, p.Spec)
					}
					return true, nil
				}
			}
			return false, nil
		}
	}
	ctlPoll(t, ctx, "the prober's answer: "+addr.String()+" answers", answered(1))
	ctlPoll(t, ctx, "the prober's answer to a second request: it still answers", answered(2))
	if now := present(t, ctx, network); now[held] != before[held] || len(now) != 2 {
		t.Fatalf("reservations while the address answers: %v, want those before the node was lost: %v", now, before)
	}
	// The Warning Event on the pod names the MAC; the metric counts it.
	ctlPoll(t, ctx, "an AddressAnswers Event naming "+s.squatMAC.String(), func() (bool, error) {
		evs := &corev1.EventList{}
		if err := c.List(ctx, evs, client.InNamespace(ns)); err != nil {
			return false, err
		}
		for _, e := range evs.Items {
			if e.Reason == controller.EventReasonAddressAnswers && e.Type == corev1.EventTypeWarning && e.InvolvedObject.Name == lostPod.name &&
				strings.Contains(e.Message, s.squatMAC.String()) && strings.Contains(e.Message, "(IPReservation "+held+")") {
				return true, nil
			}
		}
		return false, nil
	})
	if n, _ := ctrl.metric(t, "tenure_reservations_answering"); n < 1 {
		t.Errorf("tenure_reservations_answering = %v, want at least 1", n)
	}
	rep, err := tenureops.New(c).Check(ctx, tenureops.CheckOptions{ReleaseUnfenced: true, NodeGracePeriod: grace})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, f := range rep.Findings {
		if f.Rule == tenureops.RuleAddressAnswers && f.Object == "IPReservation "+held && strings.Contains(f.Message, s.squatMAC.String()) {
			found = true
		}
		if f.Object == "IPReservation "+held && f.Rule == tenureops.RuleOwnerGone {
			t.Errorf("tenurectl check says the controller releases %s while it answers: %s", held, f.Message)
		}
	}
	if !found {
		t.Errorf("check findings %+v, want %s of IPReservation %s naming %s", rep.Findings, tenureops.RuleAddressAnswers, held, s.squatMAC)
	}
	// tenurectl why, judging as this controller does, says the address is
	// kept because it answers, and names the MAC.
	why, err := tenureops.New(c).Why(ctx, ns, lostPod.name, repair.Policy{ReleaseUnfenced: true, NodeGracePeriod: grace})
	if err != nil {
		t.Fatal(err)
	}
	if len(why.Attachments) != 1 || !strings.Contains(why.Attachments[0].Outcome, "kept: ") ||
		!strings.Contains(why.Attachments[0].Outcome, addr.String()+" answers on the wire from MAC "+s.squatMAC.String()) {
		t.Errorf("tenurectl why --release-unfenced: attachments %+v, want %s kept as answering from %s", why.Attachments, addr, s.squatMAC)
	}
	released, _ := ctrl.metric(t, "tenure_releases_total", `reason="NodeNotReady"`)

	// The pod's leg of the SAN is cut (its link down; the bridge keeps
	// its port): the next request finds the address silent.
	if out, err := testbed.IPIn(s.squatNs, "link", "set", "eth0", "down"); err != nil {
		t.Fatalf("cutting the pod's leg: %v: %s", err, out)
	}
	ctlPoll(t, ctx, held+" released", func() (bool, error) { return present(t, ctx, network)[held] == "", nil })
	after := present(t, ctx, network)
	delete(before, held)
	if fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("reservations after the release: %v, want the prober's only: %v", after, before)
	}
	if n, _ := ctrl.metric(t, "tenure_releases_total", `reason="NodeNotReady"`); n != released+1 {
		t.Errorf("tenure_releases_total{reason=NodeNotReady} = %v, want %v", n, released+1)
	}
	ctlPoll(t, ctx, "the release Event: nothing answered", func() (bool, error) {
		evs := &corev1.EventList{}
		if err := c.List(ctx, evs, client.InNamespace(ns)); err != nil {
			return false, err
		}
		for _, e := range evs.Items {
			if e.Reason == controller.EventReason && e.InvolvedObject.Name == lostPod.name && strings.Contains(e.Message, "NodeNotReady") &&
				strings.Contains(e.Message, "nothing answered for "+addr.String()+" on the wire (node "+prober+" probed it on "+s.bridge+")") {
				return true, nil
			}
		}
		return false, nil
	})
	ctlPoll(t, ctx, "IPProbe "+held+" deleted", func() (bool, error) {
		return probesOf(t, ctx, c, map[string]bool{held: true}) == 0, nil
	})
}
