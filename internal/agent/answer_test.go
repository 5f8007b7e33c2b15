package agent

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/addrspace"
	"github.com/tenure-ipam/tenure/internal/config"
	"github.com/tenure-ipam/tenure/internal/probe"
)

func probeRequest(node string, gen int64, answers ...tenurev1alpha1.IPProbeAnswer) *tenurev1alpha1.IPProbe {
	return &tenurev1alpha1.IPProbe{
		ObjectMeta: metav1.ObjectMeta{Name: "san.10.102.0.1", Generation: gen, UID: "probe-uid"},
		Spec:       tenurev1alpha1.IPProbeSpec{Network: "san", Address: "10.102.0.1", Node: node},
		Status:     tenurev1alpha1.IPProbeStatus{Answers: answers},
	}
}

// TestAnAgentAnswersOnlyRequestsItsNodeCanProbe: an agent answers a
// request once per generation, never about an address made on its own
// node, and only for an allocation scope its ADDs probed on (so it knows
// the parent interface), on that interface.
func TestAnAgentAnswersOnlyRequestsItsNodeCanProbe(t *testing.T) {
	w := newWire(WireOptions{}, slog.New(slog.NewTextHandler(io.Discard, nil)), nil, nil)
	c, err := config.Parse([]byte(`{"cniVersion":"1.1.0","name":"san","ipam":{"type":"tenure","range":"10.102.0.0/29"}}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	w.use("san0", "san", addrspace.AddressSpace{Range: c.Ranges[0]})
	a := &answerer{node: "node-c", wire: w}
	mine := tenurev1alpha1.IPProbeAnswer{Node: "node-c", ObservedGeneration: 2, Result: tenurev1alpha1.ProbeSilent}
	other := tenurev1alpha1.IPProbeAnswer{Node: "node-d", ObservedGeneration: 3, Result: tenurev1alpha1.ProbeAnswered}
	unserved := probeRequest("node-b", 1)
	unserved.Spec.Network = "other"
	deleting := probeRequest("node-b", 1)
	deleting.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	for _, tc := range []struct {
		name string
		p    *tenurev1alpha1.IPProbe
		want bool
	}{
		{"a new request about another node's address", probeRequest("node-b", 1), true},
		{"another node answered, this one not yet", probeRequest("node-b", 3, other), true},
		{"answered an earlier request", probeRequest("node-b", 3, mine, other), true},
		{"answered this request", probeRequest("node-b", 2, mine), false},
		{"about an address made on this node", probeRequest("node-c", 1), false},
		{"of a scope this node never probed on", unserved, false},
		{"being deleted", deleting, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			iface, addr, ok := a.due(tc.p)
			if ok != tc.want {
				t.Fatalf("due = %v, want %v", ok, tc.want)
			}
			if ok && (iface != "san0" || addr != netip.MustParseAddr("10.102.0.1")) {
				t.Errorf("probes %s on %s, want 10.102.0.1 on san0", addr, iface)
			}
		})
	}
}

// TestAnAgentsAnswerSaysWhatItsProbeHeard: the answer names this node and
// the generation it read, and says silent, answered (with the MAC and
// what it sent) or failed (with why).
func TestAnAgentsAnswerSaysWhatItsProbeHeard(t *testing.T) {
	mac := net.HardwareAddr{2, 0, 0, 0, 0, 0x0b}
	at := time.Date(2026, 12, 5, 1, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name string
		ans  *probe.Answer
		err  error
		want tenurev1alpha1.IPProbeAnswer
	}{
		{"silent", nil, nil, tenurev1alpha1.IPProbeAnswer{Result: tenurev1alpha1.ProbeSilent}},
		{"answered", &probe.Answer{MAC: mac, Kind: "arp-reply"}, nil,
			tenurev1alpha1.IPProbeAnswer{Result: tenurev1alpha1.ProbeAnswered, MAC: "02:00:00:00:00:0b", Kind: "arp-reply"}},
		{"failed", nil, errors.New("probe: interface san0: link not found"), tenurev1alpha1.IPProbeAnswer{Result: tenurev1alpha1.ProbeFailed, Message: "probe: interface san0: link not found"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var probed string
			a := &answerer{node: "node-c", log: slog.New(slog.NewTextHandler(io.Discard, nil)), now: func() time.Time { return at },
				probe: func(_ context.Context, iface string, addr netip.Addr) (*probe.Answer, error) {
					probed = iface + " " + addr.String()
					return tc.ans, tc.err
				}}
			got := a.probeOnce(context.Background(), probeRequest("node-b", 4), "san0", netip.MustParseAddr("10.102.0.1"))
			want := tc.want
			want.Node, want.ObservedGeneration, want.ProbedAt, want.Interface = "node-c", 4, metav1.NewTime(at), "san0"
			if got != want {
				t.Errorf("answer = %+v, want %+v", got, want)
			}
			if probed != "san0 10.102.0.1" {
				t.Errorf("probed %q, want 10.102.0.1 on san0", probed)
			}
		})
	}
}
