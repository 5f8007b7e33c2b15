package repair

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
)

// silentNow: node-c, Ready, heard nothing for the address in a request
// made now.
var silentNow = &WireFact{Asked: true, AskedAt: t0, Answers: []WireAnswer{{Node: "node-c", NodeReady: true, Result: tenurev1alpha1.ProbeSilent, Interface: "san0"}}}

// TestDecideWire: once NodeNotReady is due, the address is released only
// on a silent answer to the current request from a Ready node other than
// the owner node; while anything answers, or while no such answer has
// come, it is kept and waits for the node to be fenced, and the agents are
// asked again every ProbeInterval.
func TestDecideWire(t *testing.T) {
	r := podRes("net.10.0.0.1", "10.0.0.1", "sandbox-1", t0.Add(-time.Hour), "100")
	p := Policy{NodeGracePeriod: 5 * time.Minute, ReleaseUnfenced: true, ProbeInterval: 30 * time.Second}
	asked := func(ago time.Duration, answers ...WireAnswer) *WireFact {
		return &WireFact{Asked: true, AskedAt: t0.Add(-ago), Answers: answers}
	}
	silent := func(node string, ready bool) WireAnswer {
		return WireAnswer{Node: node, NodeReady: ready, Result: tenurev1alpha1.ProbeSilent, Interface: "san0"}
	}
	answered := WireAnswer{Node: "node-c", NodeReady: true, Result: tenurev1alpha1.ProbeAnswered, MAC: "02:00:00:00:00:0b", Kind: "arp-reply", Interface: "san0"}
	failed := WireAnswer{Node: "node-d", NodeReady: true, Result: tenurev1alpha1.ProbeFailed, Message: "interface san0: link not found"}
	const fence = "waiting for node node-b to be fenced"
	cases := []struct {
		name    string
		wire    *WireFact
		release bool
		askLive bool
		reask   bool
		mac     string // the answer that keeps it
		recheck time.Duration
		inMsg   string
	}{
		{"unknown (a cache): the live read decides", nil, false, true, false, "", 0, "live read of its IPProbe"},
		{"not asked yet", &WireFact{}, false, false, false, "", 30 * time.Second, "asking the agents of other nodes whether anything answers for 10.0.0.1"},
		{"asked, no answer yet", asked(10 * time.Second), false, false, false, "", 20 * time.Second, "waiting for an agent of a Ready node other than node-b to probe 10.0.0.1"},
		{"silent from a Ready node", asked(time.Second, silent("node-c", true)), true, false, false, "", 0, "nothing answered for 10.0.0.1 on the wire (node node-c probed it on san0)"},
		{"silent from a NotReady node only", asked(time.Second, silent("node-c", false)), false, false, false, "", 29 * time.Second, "node node-c heard nothing but is not Ready"},
		{"a failed probe only", asked(time.Second, failed), false, false, false, "", 29 * time.Second, "node node-d could not probe: interface san0: link not found"},
		{"answered", asked(time.Second, answered), false, false, false, "02:00:00:00:00:0b", 29 * time.Second, "answers on the wire from MAC 02:00:00:00:00:0b (arp-reply, heard by node node-c on san0)"},
		{"answered by one, silent to another: kept", asked(time.Second, silent("node-d", true), answered), false, false, false, "02:00:00:00:00:0b", 29 * time.Second, fence},
		{"answered, the request stood its interval: ask again", asked(31*time.Second, answered), false, false, true, "02:00:00:00:00:0b", 30 * time.Second, "kept while anything answers"},
		{"no answer within the interval: ask again, fence the node", asked(30 * time.Second), false, false, true, "", 30 * time.Second,
			"no agent of a Ready node other than node-b probed 10.0.0.1 on the wire within 30s of the request: no other node has served network net, or their agents are down; " + fence},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := Decide(r, Facts{Now: t0, Pod: terminating, Node: downLong, Wire: tc.wire}, p)
			if d.Release != tc.release || (tc.release && d.Reason != NodeNotReady) {
				t.Fatalf("Decide = release %v reason %q (%s); want release %v", d.Release, d.Reason, d.Message, tc.release)
			}
			if !strings.Contains(d.Message, tc.inMsg) {
				t.Errorf("message %q lacks %q", d.Message, tc.inMsg)
			}
			if tc.release {
				return
			}
			if !d.Probe || d.Fence != "node-b" || d.AskLive != tc.askLive || d.Reask != tc.reask || d.RecheckAfter != tc.recheck {
				t.Errorf("keep = Probe %v Fence %q AskLive %v Reask %v RecheckAfter %v; want Probe, Fence node-b, AskLive %v, Reask %v, RecheckAfter %v",
					d.Probe, d.Fence, d.AskLive, d.Reask, d.RecheckAfter, tc.askLive, tc.reask, tc.recheck)
			}
			if got := ""; d.Answering != nil || tc.mac != "" {
				if d.Answering != nil {
					got = d.Answering.MAC
				}
				if got != tc.mac {
					t.Errorf("Answering MAC = %q, want %q", got, tc.mac)
				}
			}
		})
	}
}

// TestNoWireProbeBeforeTheGracePeriodOrWithoutOptIn: the wire is asked
// only of an address whose release NodeNotReady makes due; every other
// decision leaves Probe unset, so no IPProbe is made for it. A delegated
// prefix is not probed: it waits for its node to be fenced.
func TestNoWireProbeBeforeTheGracePeriodOrWithoutOptIn(t *testing.T) {
	r := podRes("net.10.0.0.1", "10.0.0.1", "sandbox-1", t0.Add(-time.Hour), "100")
	optIn := Policy{NodeGracePeriod: 5 * time.Minute, ReleaseUnfenced: true}
	prefix := podRes("net.fd00--64", "fd00::/64", "sandbox-1", t0.Add(-time.Hour), "100", withSpec(func(s *tenurev1alpha1.IPReservationSpec) {
		s.Kind = tenurev1alpha1.KindDelegatedPrefix
	}))
	if d := Decide(prefix, Facts{Now: t0, Pod: terminating, Node: downLong, Wire: silentNow}, optIn); d.Release || d.Probe || d.Fence != "node-b" ||
		!strings.Contains(d.Message, "a delegated prefix is not probed on the wire") {
		t.Errorf("a delegated prefix past the grace period: %+v; want kept, waiting for node-b to be fenced, no probe", d)
	}
	for _, tc := range []struct {
		name string
		pod  *PodFact
		node *NodeFact
		p    Policy
	}{
		{"not opted in", terminating, downLong, Policy{NodeGracePeriod: 5 * time.Minute}},
		{"within the grace period", terminating, downShort, optIn},
		{"fenced", terminating, fenced, optIn},
		{"node deleted", terminating, goneNode, optIn},
		{"Ready node", terminating, readyNode, optIn},
		{"running pod", running, downLong, optIn},
		{"pod gone", gonePod, downLong, optIn},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if d := Decide(r, Facts{Now: t0, Pod: tc.pod, Node: tc.node}, tc.p); d.Probe || d.Reask || d.Answering != nil {
				t.Fatalf("Decide = %+v; want no wire probe", d)
			}
		})
	}
}

// TestWireFactOf: only the answers to the current request (the IPProbe's
// generation) of nodes other than the owner node count, and only the
// nodes that answered are asked whether they are Ready.
func TestWireFactOf(t *testing.T) {
	r := podRes("net.10.0.0.1", "10.0.0.1", "sandbox-1", t0, "100")
	if f := WireFactOf(r, nil, nil); f == nil || f.Asked {
		t.Fatalf("no IPProbe: %+v, want a request not made", f)
	}
	p := &tenurev1alpha1.IPProbe{
		ObjectMeta: metav1.ObjectMeta{Name: r.Name, Generation: 3},
		Spec:       tenurev1alpha1.IPProbeSpec{Network: "net", Address: "10.0.0.1", Node: "node-b", AskedAt: metav1.NewTime(t0)},
		Status: tenurev1alpha1.IPProbeStatus{Answers: []tenurev1alpha1.IPProbeAnswer{
			{Node: "node-b", ObservedGeneration: 3, Result: tenurev1alpha1.ProbeSilent}, // the owner node's word
			{Node: "node-c", ObservedGeneration: 2, Result: tenurev1alpha1.ProbeSilent}, // an earlier request
			{Node: "node-d", ObservedGeneration: 3, Result: tenurev1alpha1.ProbeAnswered, MAC: "02:00:00:00:00:0b"},
			{Node: "node-e", ObservedGeneration: 3, Result: tenurev1alpha1.ProbeSilent, Interface: "san0"},
		}},
	}
	var asked []string
	f := WireFactOf(r, p, func(n string) bool { asked = append(asked, n); return n == "node-e" })
	if !f.Asked || !f.AskedAt.Equal(t0) {
		t.Fatalf("Asked %v at %v, want asked at %v", f.Asked, f.AskedAt, t0)
	}
	var got []string
	for _, a := range f.Answers {
		got = append(got, a.Node+"="+string(a.Result)+"/ready="+map[bool]string{true: "y", false: "n"}[a.NodeReady])
	}
	want := []string{"node-d=Answered/ready=n", "node-e=Silent/ready=y"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("answers = %v, want %v", got, want)
	}
	if strings.Join(asked, " ") != "node-d node-e" {
		t.Errorf("readiness asked of %v, want node-d node-e", asked)
	}
}
