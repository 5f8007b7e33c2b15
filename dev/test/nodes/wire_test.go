//go:build integration

package nodes_test

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tenure-ipam/tenure/dev/devnode"
	"github.com/tenure-ipam/tenure/dev/localnode"
	"github.com/tenure-ipam/tenure/dev/nodetest"
	tenureops "github.com/tenure-ipam/tenure/internal/ops"
	"github.com/tenure-ipam/tenure/internal/reservation"
)

// squatterOnTheSAN: a host plugged into the SAN by hand, outside every
// node, holds a free address of each family of a dual-stack range of 21
// addresses a family. Twenty pods spread over the three nodes (macvlan on
// each node's SAN leg, each agent probing there) get the twenty others of
// each family and never the squatter's; the AddressConflict Events, the
// agents' tenure_address_conflicts_total and `tenurectl check` name each
// squatted address with the squatter's MAC.
func squatterOnTheSAN(t *testing.T) {
	ctx := nodetest.Context(t, 8*time.Minute)
	ns := kc.Namespace(ctx, t, "squat3")
	const network = "squat-san"
	kc.NAD(ctx, t, ns, network, `{
		"cniVersion": "1.0.0", "name": "`+network+`", "type": "macvlan", "master": "`+devnode.SANLink+`", "mode": "bridge",
		"ipam": {"type": "tenure", "ipRanges": [
			{"range": "10.104.0.0/24", "range_start": "10.104.0.10", "range_end": "10.104.0.30"},
			{"range": "fd04::/64", "range_start": "fd04::10", "range_end": "fd04::24"}]}}`)
	squat4, squat6 := netip.MustParsePrefix("10.104.0.17/24"), netip.MustParsePrefix("fd04::17/64")
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		ctx := context.Background()
		var evs corev1.EventList
		if err := cl.List(ctx, &evs, client.InNamespace(ns)); err == nil {
			for _, e := range evs.Items {
				if e.Reason != "Scheduled" && e.Reason != "Pulled" && e.Reason != "Created" && e.Reason != "Started" {
					t.Logf("Event %s %s on %s: %v %q", e.Type, e.Reason, e.InvolvedObject.Name, e.Annotations, e.Message)
				}
			}
		}
		var pods corev1.PodList
		if err := cl.List(ctx, &pods, client.InNamespace(localnode.Namespace), client.MatchingLabels{"app.kubernetes.io/name": "tenure-agent"}); err != nil {
			return
		}
		for _, p := range pods.Items {
			b, err := cs.CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{Container: "agent"}).DoRaw(ctx)
			if err != nil {
				t.Logf("agent %s logs: %v", p.Spec.NodeName, err)
				continue
			}
			for _, l := range strings.Split(string(b), "\n") {
				if strings.Contains(l, "wire") || strings.Contains(l, "probe") || strings.Contains(l, "level=WARN") || strings.Contains(l, "level=ERROR") || strings.Contains(l, "event") {
					t.Logf("agent %s: %s", p.Spec.NodeName, l)
				}
			}
		}
	})
	guest, err := cluster.PlugSAN("squat")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := guest.Unplug(); err != nil {
			t.Errorf("unplugging the squatter: %v", err)
		}
	})
	for _, p := range []netip.Prefix{squat4, squat6} {
		args := []string{"--net=" + guest.Netns, "ip", "addr", "add", p.String(), "dev", guest.Link}
		if p.Addr().Is6() {
			args = append(args, "nodad") // held already, as by a host long up
		}
		if out, err := exec.Command("nsenter", args...).CombinedOutput(); err != nil {
			t.Fatalf("the squatter's %s: %v: %s", p, err, out)
		}
	}
	// The guest's MAC read in its namespace (/sys outside a mount
	// namespace of its own shows the host's links).
	macStr, err := nodetest.LinkMAC(guest.Netns, guest.Link)
	if err != nil {
		t.Fatal(err)
	}
	mac, err := net.ParseMAC(macStr)
	if err != nil {
		t.Fatal(err)
	}

	var names []string
	for i := range 20 {
		name := fmt.Sprintf("sq-%d", i)
		names = append(names, name)
		p := localnode.Pod(ns, name, network)
		p.Spec.NodeName = cluster.Nodes[i%3].Name
		if err := cl.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	holder := map[netip.Addr]string{}
	for _, name := range names {
		p := kc.WaitRunning(ctx, t, ns, name)
		ips, err := localnode.AttachmentIPs(p, "net1")
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range ips {
			a := netip.MustParseAddr(s)
			if other, dup := holder[a]; dup {
				t.Errorf("%s and %s both got %s", name, other, a)
			}
			holder[a] = name
		}
	}
	for _, r := range []struct{ first, last, squat netip.Addr }{
		{netip.MustParseAddr("10.104.0.10"), netip.MustParseAddr("10.104.0.30"), squat4.Addr()},
		{netip.MustParseAddr("fd04::10"), netip.MustParseAddr("fd04::24"), squat6.Addr()},
	} {
		if p, ok := holder[r.squat]; ok {
			t.Errorf("pod %s got %s, which the squatter %s holds on the SAN", p, r.squat, mac)
		}
		for a := r.first; a.Compare(r.last) <= 0; a = a.Next() {
			if _, ok := holder[a]; !ok && a != r.squat {
				t.Errorf("no pod holds %s: 20 pods, 20 free addresses of the family", a)
			}
		}
	}

	// The Events: a Warning on one of the pods per squatted address,
	// naming it and the MAC.
	evCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	kc.Poll(evCtx, t, "an AddressConflict Event for each squatted address", func() error {
		var evs corev1.EventList
		if err := cl.List(evCtx, &evs, client.InNamespace(ns)); err != nil {
			return err
		}
		var seen []string
		for _, e := range evs.Items {
			if e.Reason == reservation.EventAddressConflict {
				seen = append(seen, fmt.Sprintf("%s on %s: %s %s %q", e.Type, e.InvolvedObject.Name,
					e.Annotations[reservation.AnnotationConflictAddress], e.Annotations[reservation.AnnotationConflictMAC], e.Message))
			}
		}
		for _, squat := range []netip.Addr{squat4.Addr(), squat6.Addr()} {
			if !slices.ContainsFunc(evs.Items, func(e corev1.Event) bool {
				return e.Reason == reservation.EventAddressConflict && e.Type == corev1.EventTypeWarning &&
					slices.Contains(names, e.InvolvedObject.Name) &&
					e.Annotations[reservation.AnnotationConflictAddress] == squat.String() &&
					e.Annotations[reservation.AnnotationConflictMAC] == mac.String() &&
					strings.Contains(e.Message, squat.String()) && strings.Contains(e.Message, mac.String())
			}) {
				return fmt.Errorf("none names %s and %s; AddressConflict Events: %v", squat, mac, seen)
			}
		}
		return nil
	})
	// The metric, summed over the three agents.
	var conflicts float64
	for i, n := range cluster.Nodes {
		m, err := scrapeInNode(ctx, n, net.JoinHostPort(devnode.NodeIP(i+1), "9467"))
		if err != nil {
			t.Fatalf("%s's agent metrics: %v", n.Name, err)
		}
		v, _ := m.Sum("tenure_address_conflicts_total", fmt.Sprintf("network=%q", network))
		conflicts += v
	}
	if conflicts < 2 {
		t.Errorf("tenure_address_conflicts_total{network=%q} over the agents: %v, want at least one per squatted address", network, conflicts)
	}
	// tenurectl check.
	rep, err := tenureops.New(cl).Check(ctx, tenureops.CheckOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, squat := range []netip.Addr{squat4.Addr(), squat6.Addr()} {
		if !slices.ContainsFunc(rep.Findings, func(f tenureops.Finding) bool {
			return f.Rule == tenureops.RuleAddressConflict && f.Network == network && f.Address == squat.String() && strings.Contains(f.Message, mac.String())
		}) {
			t.Errorf("tenurectl check: no %s finding of %s naming %s and %s: %+v", tenureops.RuleAddressConflict, network, squat, mac, rep.Findings)
		}
	}
	for _, name := range names {
		_ = cl.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}})
	}
	kc.WaitReleased(ctx, t, ns)
}
