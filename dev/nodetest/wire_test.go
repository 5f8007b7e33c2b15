package nodetest

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/tenure-ipam/tenure/test/testbed"
)

func TestConflictsAndAnsweredBy(t *testing.T) {
	a, b := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2")
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	rounds := []WireRound{
		{At: at, Answers: map[netip.Addr][]string{a: {"m1"}, b: {"m2"}}},
		{At: at.Add(time.Second), Answers: map[netip.Addr][]string{a: {"m1", "m3"}}},
		{At: at.Add(2 * time.Second), Answers: map[netip.Addr][]string{a: {"m3"}}},
	}
	if got, want := Conflicts(rounds), []string{"10.0.0.1 at 2026-01-01T00:00:01Z: m1, m3"}; !slices.Equal(got, want) {
		t.Errorf("Conflicts: %q, want %q", got, want)
	}
	for _, c := range []struct {
		addr netip.Addr
		mac  string
		want int
	}{{a, "m1", 2}, {a, "m3", 2}, {b, "m2", 1}, {b, "m1", 0}} {
		if got := AnsweredBy(rounds, c.addr, c.mac); got != c.want {
			t.Errorf("AnsweredBy(%s, %s) = %d, want %d", c.addr, c.mac, got, c.want)
		}
	}
}

// On a real bridge: one host answers for .2, then a second host takes .2
// too; the sampler records .2 answered by one MAC, then by both in one
// round, and .3 by the second host alone.
func TestWireSamplerRecordsEveryMACThatAnswers(t *testing.T) {
	testbed.NeedPlumb(t)
	id := fmt.Sprint(os.Getpid() % 100000)
	names := map[string]string{}
	for _, role := range []string{"br", "probe", "h1", "h2"} {
		name := "tws-" + role + "-" + id
		if _, remove, err := testbed.AddNetns(name); err != nil {
			t.Fatal(err)
		} else {
			t.Cleanup(remove)
		}
		names[role] = name
	}
	ip := func(ns string, args ...string) {
		t.Helper()
		if out, err := testbed.IPIn(ns, args...); err != nil {
			t.Fatalf("ip -n %s %s: %v: %s", ns, strings.Join(args, " "), err, out)
		}
	}
	ip(names["br"], "link", "add", "br0", "type", "bridge")
	ip(names["br"], "link", "set", "br0", "up")
	for _, role := range []string{"probe", "h1", "h2"} {
		ip(names["br"], "link", "add", "l-"+role, "type", "veth", "peer", "name", "eth0", "netns", names[role])
		ip(names["br"], "link", "set", "l-"+role, "master", "br0", "up")
		ip(names[role], "link", "set", "eth0", "up")
	}
	ip(names["h1"], "addr", "add", "10.77.0.2/29", "dev", "eth0")
	ip(names["h2"], "addr", "add", "10.77.0.3/29", "dev", "eth0")
	mac := map[string]string{}
	for _, role := range []string{"h1", "h2"} {
		m, err := LinkMAC("/var/run/netns/"+names[role], "eth0")
		if err != nil {
			t.Fatal(err)
		}
		mac[role] = m
	}
	s, err := StartWireSampler("/var/run/netns/"+names["probe"], "eth0", netip.MustParsePrefix("10.77.0.0/29"), 200*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	two, three := netip.MustParseAddr("10.77.0.2"), netip.MustParseAddr("10.77.0.3")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	waitRound := func(what string, ok func(WireRound) bool) {
		t.Helper()
		since := time.Now()
		err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(context.Context) (bool, error) {
			return slices.ContainsFunc(s.Rounds(since), ok), nil
		})
		if err != nil {
			t.Fatalf("no round with %s: %v; rounds %v", what, err, s.Rounds(since))
		}
	}
	waitRound(".2 by h1 alone and .3 by h2 alone", func(r WireRound) bool {
		return slices.Equal(r.Answers[two], []string{mac["h1"]}) && slices.Equal(r.Answers[three], []string{mac["h2"]})
	})
	if c := Conflicts(s.Rounds(time.Time{})); len(c) > 0 {
		t.Fatalf("conflicts before any: %v", c)
	}
	ip(names["h2"], "addr", "add", "10.77.0.2/29", "dev", "eth0")
	waitRound(".2 by h1 and h2", func(r WireRound) bool {
		got := slices.Sorted(slices.Values(r.Answers[two]))
		want := slices.Sorted(slices.Values([]string{mac["h1"], mac["h2"]}))
		return slices.Equal(got, want)
	})
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	all := s.Rounds(time.Time{})
	if c := Conflicts(all); !slices.ContainsFunc(c, func(x string) bool { return strings.HasPrefix(x, "10.77.0.2 at ") }) {
		t.Errorf("Conflicts %v: want .2's", c)
	}
	if n := AnsweredBy(all, three, mac["h1"]); n != 0 {
		t.Errorf(".3 answered by h1 in %d rounds", n)
	}
}
