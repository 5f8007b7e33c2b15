package agent

import (
	"slices"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
)

// TestAddThatArrivedBeforeARunDelIsAbandoned: the runtime gave up on an
// ADD the agent had not answered (paused) and sent the DEL; the agent
// then ran the DEL first. The stale ADD must reserve nothing, or the
// sandbox the runtime tore down would hold an address nobody DELs.
func TestAddThatArrivedBeforeARunDelIsAbandoned(t *testing.T) {
	h := startAgent(t, pod("p1", thisNode, nil))
	addArrived := h.agent.arrivals.withArrival(h.ctx)
	delArrived := h.agent.arrivals.withArrival(h.ctx)
	if r := h.do(call{cmd: "DEL", ctr: "c1", pod: "p1", ctx: delArrived}); r.Error != nil {
		t.Fatalf("DEL: %+v", r.Error)
	}
	r := h.do(call{cmd: "ADD", ctr: "c1", pod: "p1", ctx: addArrived})
	if r.Error == nil || r.Error.Code != types.ErrTryAgainLater {
		t.Fatalf("stale ADD after its DEL: %+v, want code 11", r.Error)
	}
	if got := h.held(); len(got) != 0 {
		t.Fatalf("the stale ADD left %v reserved", got)
	}
	// Another attachment of the pod, and a new ADD of this one that
	// arrived after the DEL (a runtime re-adding the sandbox), are served.
	if r := h.do(call{cmd: "ADD", ctr: "c2", pod: "p1", ctx: addArrived}); r.Error != nil {
		t.Fatalf("ADD of another attachment: %+v", r.Error)
	}
	addr := ips(t, h.do(call{cmd: "ADD", ctr: "c1", pod: "p1"}))
	if got := h.held(); !slices.Contains(got, addr[0]+"=p1") || len(got) != 2 {
		t.Fatalf("held %v, want c1's %s and c2's", got, addr[0])
	}
}

// TestAddThatArrivedAfterADelIsServed: a DEL before the first ADD (a
// runtime cleaning up before it sets up) never blocks that ADD.
func TestAddThatArrivedAfterADelIsServed(t *testing.T) {
	h := startAgent(t, pod("p1", thisNode, nil))
	if r := h.do(call{cmd: "DEL", ctr: "c1", pod: "p1"}); r.Error != nil {
		t.Fatalf("DEL: %+v", r.Error)
	}
	addr := ips(t, h.do(call{cmd: "ADD", ctr: "c1", pod: "p1"}))
	if got := h.held(); !slices.Equal(got, []string{addr[0] + "=p1"}) {
		t.Fatalf("held %v, want %s=p1", got, addr[0])
	}
}
