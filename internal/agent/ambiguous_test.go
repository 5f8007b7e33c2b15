package agent

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tenure-ipam/tenure/internal/reservation"
)

// TestAddWhoseCreateReplyWasLostKeepsTheAddress: the API server commits the
// reservation and the reply is lost; the ADD reads it back and answers it,
// and the runtime's retry of the same container gets the same address with
// no second reservation.
func TestAddWhoseCreateReplyWasLostKeepsTheAddress(t *testing.T) {
	h := startAgent(t, pod("p1", thisNode, nil))
	var lost atomic.Int32
	lost.Store(1)
	h.fake.AfterCreate = func(client.Object) error {
		if lost.Add(-1) >= 0 {
			return io.ErrUnexpectedEOF
		}
		return nil
	}
	first := ips(t, h.do(call{cmd: "ADD", ctr: "c1", pod: "p1"}))
	second := ips(t, h.do(call{cmd: "ADD", ctr: "c1", pod: "p1"}))
	if !slices.Equal(first, second) {
		t.Fatalf("ADD gave %v, its retry %v", first, second)
	}
	if got := h.held(); !slices.Equal(got, []string{first[0] + "=p1"}) {
		t.Fatalf("the API holds %v, want only %s=p1", got, first[0])
	}
}

// TestDelRefusedWhileAReservationRemains: a DEL whose delete fails answers
// a retryable error (the reservation is still there), never success; the
// runtime's next DEL releases it.
func TestDelRefusedWhileAReservationRemains(t *testing.T) {
	h := startAgent(t, pod("p1", thisNode, nil))
	addr := ips(t, h.do(call{cmd: "ADD", ctr: "c1", pod: "p1"}))
	h.fake.BeforeDelete = func(client.Object) error {
		return apierrors.NewInternalError(errors.New("etcdserver: request timed out"))
	}
	r := h.do(call{cmd: "DEL", ctr: "c1", pod: "p1"})
	if r.Error == nil || r.Error.Code != types.ErrTryAgainLater {
		t.Fatalf("DEL with the delete failing: %+v, want code 11", r.Error)
	}
	if got := h.held(); !slices.Equal(got, []string{addr[0] + "=p1"}) {
		t.Fatalf("the API holds %v after the refused DEL, want %s=p1", got, addr[0])
	}
	h.fake.BeforeDelete = nil
	if r := h.do(call{cmd: "DEL", ctr: "c1", pod: "p1"}); r.Error != nil {
		t.Fatalf("DEL: %+v", r.Error)
	}
	if got := h.held(); len(got) != 0 {
		t.Fatalf("the API holds %v after DEL succeeded", got)
	}
}

// TestDelReadsPastACacheThatHoldsNothing: the attachment's reservation
// exists but the agent's cache has not seen it (its events held back):
// DEL asks the API server and releases it before answering success.
func TestDelReadsPastACacheThatHoldsNothing(t *testing.T) {
	h := startAgent(t, pod("p1", thisNode, nil))
	h.fake.Pause()
	t.Cleanup(h.fake.Resume)
	r := heldBy("san", "10.0.0.3", "uid-p1", thisNode)
	r.Spec.Owner.Name, r.Spec.Owner.PodName, r.Spec.Owner.ContainerID = "p1", "p1", "c1"
	r = reservation.New(reservation.Spec{Network: "san", Kind: r.Spec.Kind, Item: mustItem(t, "10.0.0.3"), Owner: r.Spec.Owner})
	if err := h.fake.Create(h.ctx, r); err != nil {
		t.Fatal(err)
	}
	if resp := h.do(call{cmd: "DEL", ctr: "c1", pod: "p1"}); resp.Error != nil {
		t.Fatalf("DEL: %+v", resp.Error)
	}
	if got := h.held(); len(got) != 0 {
		t.Fatalf("DEL answered success and the API still holds %v", got)
	}
}

// TestAddIntoAFullRangeGetsWhatTheAttachmentHolds: the range is full and
// one of its reservations is this attachment's, created by an earlier
// attempt the cache has not seen: the ADD gets it, not "range is full".
func TestAddIntoAFullRangeGetsWhatTheAttachmentHolds(t *testing.T) {
	h := startAgent(t, pod("p1", thisNode, nil))
	h.fake.Pause()
	t.Cleanup(h.fake.Resume)
	for _, a := range []string{"10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4", "10.0.0.5"} {
		if err := h.fake.Create(h.ctx, heldBy("san", a, "uid-"+a, "node-b")); err != nil {
			t.Fatal(err)
		}
	}
	mine := heldBy("san", "10.0.0.6", "uid-p1", thisNode)
	mine.Spec.Owner.Name, mine.Spec.Owner.PodName, mine.Spec.Owner.ContainerID = "p1", "p1", "c1"
	mine = reservation.New(reservation.Spec{Network: "san", Kind: mine.Spec.Kind, Item: mustItem(t, "10.0.0.6"), Owner: mine.Spec.Owner})
	if err := h.fake.Create(h.ctx, mine); err != nil {
		t.Fatal(err)
	}
	if got := ips(t, h.do(call{cmd: "ADD", ctr: "c1", pod: "p1"})); !slices.Equal(got, []string{"10.0.0.6"}) {
		t.Fatalf("ADD got %v, want the attachment's 10.0.0.6", got)
	}
	r := h.do(call{cmd: "ADD", ctr: "c2", pod: "p1"})
	if r.Error == nil || r.Error.Code != CodeRangeFull {
		t.Fatalf("another sandbox's ADD: %+v, want range full", r.Error)
	}
}

func mustItem(t *testing.T, a string) netip.Prefix {
	t.Helper()
	addr := netip.MustParseAddr(a)
	return netip.PrefixFrom(addr, addr.BitLen())
}

// TestFreshCacheCostsNoRead: with the cache fresh, a first ADD and the DEL
// of what it holds read nothing from the API server beyond what they did
// before (no list of the attachment's reservations); a DEL the cache knows
// nothing of asks the API server once.
func TestFreshCacheCostsNoRead(t *testing.T) {
	h := startAgent(t, pod("p1", thisNode, nil))
	if err := wait.PollUntilContextTimeout(h.ctx, 2*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return h.agent.store.Fresh(), nil
	}); err != nil {
		t.Fatal("the cache never became fresh")
	}
	lists := h.fake.ReservationLists()
	ips(t, h.do(call{cmd: "ADD", ctr: "c1", pod: "p1"}))
	if r := h.do(call{cmd: "DEL", ctr: "c1", pod: "p1"}); r.Error != nil {
		t.Fatalf("DEL: %+v", r.Error)
	}
	if n := h.fake.ReservationLists() - lists; n != 0 {
		t.Fatalf("ADD and DEL with a fresh cache listed reservations %d times, want 0", n)
	}
	if r := h.do(call{cmd: "DEL", ctr: "c-unknown", pod: "p1"}); r.Error != nil {
		t.Fatalf("DEL of nothing: %+v", r.Error)
	}
	if n := h.fake.ReservationLists() - lists; n != 1 {
		t.Fatalf("DEL of what the cache does not know listed %d times, want 1", n)
	}
}

// TestCallsWaitForTheNodeCacheCheckRatherThanList: the API server closes
// a watch that falls behind, which a burst of ADDs makes likely; the
// reflector reopens it at once. The ADDs that come while the node cache's
// check is under way wait for it, and then read the cache: none reads the
// attachment's reservations past it.
func TestCallsWaitForTheNodeCacheCheckRatherThanList(t *testing.T) {
	h := startAgent(t, pod("p1", thisNode, nil), pod("p2", thisNode, nil), pod("p3", thisNode, nil), pod("p4", thisNode, nil))
	if err := wait.PollUntilContextTimeout(h.ctx, 2*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return h.agent.store.Fresh(), nil
	}); err != nil {
		t.Fatal("the cache never became fresh")
	}
	ips(t, h.do(call{cmd: "ADD", ctr: "c1", pod: "p1"})) // builds the window of the range's block

	h.agent.reservations.freshWait = time.Minute // however slow the machine, the ADDs below come within it
	checking, release := make(chan struct{}, 1), make(chan struct{})
	nodeSel := labels.SelectorFromSet(labels.Set{reservation.LabelNode: reservation.NodeLabel(thisNode)}).String()
	h.fake.SetBeforeList(func(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
		var o client.ListOptions
		o.ApplyOptions(opts)
		if _, meta := list.(*metav1.PartialObjectMetadataList); !meta || o.LabelSelector == nil || o.LabelSelector.String() != nodeSel {
			return nil
		}
		select {
		case checking <- struct{}{}:
		default:
		}
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	h.fake.BreakWatches()
	select {
	case <-checking:
	case <-h.ctx.Done():
		t.Fatal("no check of the node cache after its watch reopened")
	}
	lists := h.fake.ReservationLists()
	results := make(chan *Response, 3)
	for _, p := range []string{"p2", "p3", "p4"} {
		go func() { results <- h.do(call{cmd: "ADD", ctr: "c-" + p, pod: p}) }()
	}
	if err := wait.PollUntilContextTimeout(h.ctx, time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return h.agent.store.Waiting() == 3, nil
	}); err != nil {
		t.Fatalf("%d of 3 ADDs wait for the node cache's check, and %d lists of reservations were made", h.agent.store.Waiting(), h.fake.ReservationLists()-lists)
	}
	rec := httptest.NewRecorder()
	h.agent.MetricsHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if m := rec.Body.String(); !strings.Contains(m, "tenure_agent_node_cache_fresh 0\n") || !strings.Contains(m, "tenure_agent_calls_awaiting_node_cache 3\n") {
		t.Fatalf("during the check the metrics say:\n%s", grepLines(m, "node_cache"))
	}
	close(release)
	for range 3 {
		ips(t, <-results)
	}
	if n := h.fake.ReservationLists() - lists; n != 0 {
		t.Fatalf("3 ADDs during the node cache's check listed reservations %d times, want 0", n)
	}
}
