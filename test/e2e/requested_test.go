//go:build integration

package e2e

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tenure-ipam/tenure/internal/agent"
	"github.com/tenure-ipam/tenure/test/testbed"
)

// withRuntimeIPs adds runtimeConfig.ips to a network config, as libcni
// does for a delegate with "capabilities": {"ips": true} when Multus passes
// the network-selection element's "ips".
func withRuntimeIPs(t *testing.T, conf []byte, ips ...string) []byte {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(conf, &m); err != nil {
		t.Fatal(err)
	}
	m["runtimeConfig"] = map[string]any{"ips": ips}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestRequestedAddress(t *testing.T) {
	ctx := testContext(t, 3*time.Minute)
	c := apiClient(t)
	agents := startAgents(t, ctx, "rq-a", "rq-b")
	ctrl := ctlStart(t, ctx, "e2e-requested", "--sweep-interval", "1m")
	ctrl.waitLeading(t, ctx)
	const ns, network = "e2e-requested", "requested"
	ipam := `{"gateway":"10.74.0.1","ipRanges":[{"range":"10.74.0.0/24","exclude":["10.74.0.200/29"]},{"range":"fd00:74::/64"}],"network_name":"requested"}`
	conf := func(p pod, ips ...string) []byte {
		return withRuntimeIPs(t, netconf("requested", agents[p.node].Socket, ipam), ips...)
	}

	// Exactly the addresses asked for, one per family, CIDR or bare.
	first := newPod(t, ctx, c, ns, "rq-a", nil)
	r, err := add(ctx, first, conf(first, "10.74.0.50/24", "fd00:74::50"))
	if err != nil {
		t.Fatal(err)
	}
	if got := addrs(r); !slices.Equal(got, []string{"10.74.0.50", "fd00:74::50"}) {
		t.Fatalf("got %v, want 10.74.0.50 and fd00:74::50", got)
	}
	if got := reservedItems(ownedBy(t, ctx, first.uid)); !slices.Equal(got, []string{"10.74.0.50", "fd00:74::50"}) {
		t.Fatalf("reservations %v", got)
	}

	// A second pod, on another node, asking for the same IPv4 address: 101
	// naming the holder, and nothing written.
	second := newPod(t, ctx, c, ns, "rq-b", nil)
	_, err = add(ctx, second, conf(second, "10.74.0.50"))
	if cniCode(err) != agent.CodeAddressConflict || !strings.Contains(err.Error(), "10.74.0.50 is held by Pod "+ns+"/"+first.name+" (uid "+first.uid+")") {
		t.Fatalf("second asker: %v, want code 101 naming pod %s", err, first.name)
	}
	if left := ownedBy(t, ctx, second.uid); len(left) != 0 {
		t.Fatalf("the refused ADD left %v", reservedItems(left))
	}

	// Outside every range, excluded, the gateway: 7 naming the address;
	// nothing written.
	for _, ip := range []string{"10.75.0.5", "10.74.0.201", "10.74.0.1/24", "fd00:75::1"} {
		_, err := add(ctx, second, conf(second, ip))
		if cniCode(err) != 7 || !strings.Contains(err.Error(), `runtimeConfig.ips[0]: "`+ip+`"`) {
			t.Fatalf("asking for %s: %v, want code 7 naming it", ip, err)
		}
	}
	if n := len(reservationsOf(t, ctx, network)); n != 2 || len(ownedBy(t, ctx, second.uid)) != 0 {
		t.Fatalf("%d reservations on the network after the refusals, want the first pod's 2", n)
	}

	// The first pod is gone without a DEL (force-deleted, as after a node
	// loss): once the controller has released its addresses, the second
	// pod's retried ADD gets the address.
	if err := testbed.ForceDeletePod(ctx, c, first.ns, first.name); err != nil {
		t.Fatal(err)
	}
	ctlPoll(t, ctx, "the second pod's ADD of 10.74.0.50", func() (bool, error) {
		r, err = add(ctx, second, conf(second, "10.74.0.50"))
		if cniCode(err) == agent.CodeAddressConflict {
			return false, nil
		}
		return err == nil, err
	})
	if got := addrs(r); len(got) != 2 || got[0] != "10.74.0.50" {
		t.Fatalf("second pod got %v, want 10.74.0.50 and an IPv6 address", got)
	}

	// A requested address is released on DEL like any other.
	if err := del(ctx, second, conf(second, "10.74.0.50")); err != nil {
		t.Fatal(err)
	}
	if left := ownedBy(t, ctx, second.uid); len(left) != 0 {
		t.Fatalf("DEL left %v", reservedItems(left))
	}
	third := newPod(t, ctx, c, ns, "rq-a", nil)
	if r, err := add(ctx, third, conf(third, "10.74.0.50")); err != nil || addrs(r)[0] != "10.74.0.50" {
		t.Fatalf("after the DEL: %v %v", r, err)
	}
}

// TestStickyPodRequestsAnAddress: a sticky StatefulSet pod that asks for
// an address keeps exactly it in its claim across re-creation, and the
// same ADD asking for another one is refused while the claim records the
// first (102, nothing written).
func TestStickyPodRequestsAnAddress(t *testing.T) {
	ctx := testContext(t, 2*time.Minute)
	c := apiClient(t)
	agents := startAgents(t, ctx, "srq-a", "srq-b")
	ipam := `{"range":"10.76.0.0/24","network_name":"stickyreq","sticky_statefulsets":true}`
	conf := func(p pod) []byte { return netconf("stickyreq", agents[p.node].Socket, ipam) }
	gw := newStatefulSetSim(t, ctx, c, "e2e-stickyreq", "gw", 1, map[string]string{"k8s.v1.cni.cncf.io/networks": `[{"name":"stickyreq","interface":"net1"}]`})
	p := gw.start(0, "srq-a")
	r, err := add(ctx, p, withRuntimeIPs(t, conf(p), "10.76.0.10"))
	if err != nil || !slices.Equal(addrs(r), []string{"10.76.0.10"}) {
		t.Fatalf("ADD: %v %v", r, err)
	}
	gw.stop(0, conf)
	p = gw.start(0, "srq-b")
	if _, err := add(ctx, p, withRuntimeIPs(t, conf(p), "10.76.0.11")); cniCode(err) != agent.CodeClaimMismatch || !strings.Contains(err.Error(), "records 10.76.0.10") {
		t.Fatalf("asking for another address than the claim records: %v, want 102", err)
	}
	r, err = add(ctx, p, withRuntimeIPs(t, conf(p), "10.76.0.10"))
	if err != nil || !slices.Equal(addrs(r), []string{"10.76.0.10"}) {
		t.Fatalf("re-created pod: %v %v", r, err)
	}
	if n := len(reservationsOf(t, ctx, "stickyreq")); n != 1 {
		t.Fatalf("%d reservations, want the claim's one", n)
	}
}
