package repair

import (
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ipamclaimsv1alpha1 "github.com/tenure-ipam/tenure/api/ipamclaims/v1alpha1"
	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
)

// networkStatus is the annotation as Multus writes it: the cluster
// network first, then each secondary interface.
func networkStatus(ifaceIPs ...string) map[string]string {
	entries := []string{`{"name":"kindnet","interface":"eth0","ips":["10.244.1.5"],"mac":"0a:58:0a:f4:01:05","default":true,"dns":{}}`}
	for i := 0; i+1 < len(ifaceIPs); i += 2 {
		entries = append(entries, fmt.Sprintf(`{"name":"ns/san","interface":%q,"ips":[%q],"mac":"aa:bb:cc:00:00:0%d","dns":{}}`, ifaceIPs[i], ifaceIPs[i+1], i))
	}
	return map[string]string{"k8s.v1.cni.cncf.io/network-status": "[" + strings.Join(entries, ",") + "]"}
}

func inRange(rng string) resOpt {
	return withSpec(func(s *tenurev1alpha1.IPReservationSpec) { s.Range = rng })
}

func TestDecideDuplicateAttachment(t *testing.T) {
	policy := Policy{NodeGracePeriod: 5 * time.Minute}
	const rng = "10.0.0.0/24"
	// One sandbox's net1 holds two IPv4 addresses of one range: A made
	// first, B a minute later (a retried ADD whose first create committed).
	a := podRes("net.10.0.0.1", "10.0.0.1", "sandbox-2", t0.Add(-time.Minute), "100", inRange(rng))
	b := podRes("net.10.0.0.2", "10.0.0.2", "sandbox-2", t0, "101", inRange(rng))
	// The same second: resourceVersion orders; without one, the name.
	c := podRes("net.10.0.0.3", "10.0.0.3", "sandbox-2", t0, "102", inRange(rng))
	noRV1 := podRes("net.10.0.0.4", "10.0.0.4", "sandbox-2", t0, "", inRange(rng))
	noRV2 := podRes("net.10.0.0.5", "10.0.0.5", "sandbox-2", t0, "", inRange(rng))
	// Another range of the same family (a config with two IPv4 ranges):
	// one address from each is what the config asks for.
	otherRange := podRes("net.10.0.1.1", "10.0.1.1", "sandbox-2", t0, "103", inRange("10.0.1.0/24"))
	v6 := podRes("net.fd00--1", "fd00::1", "sandbox-2", t0, "104", inRange("fd00::/64"))
	otherIf := podRes("net.10.0.0.6", "10.0.0.6", "sandbox-2", t0, "105", inRange(rng), withOwner(func(o *tenurev1alpha1.ReservationOwner) { o.Interface = "net2" }))
	pdKind := withSpec(func(s *tenurev1alpha1.IPReservationSpec) {
		s.Kind = tenurev1alpha1.KindDelegatedPrefix
		s.Range = "2001:db8::/48"
	})
	pdA := podRes("net.pd.a", "2001:db8:0:100::/56", "sandbox-2", t0.Add(-time.Minute), "110", pdKind)
	pdB := podRes("net.pd.b", "2001:db8:0:200::/56", "sandbox-2", t0, "111", pdKind)
	v6a := podRes("net.fd00--a", "fd00::a", "sandbox-2", t0.Add(-time.Minute), "120", inRange("fd00::/64"))
	v6b := podRes("net.fd00--b", "fd00::b", "sandbox-2", t0, "121", inRange("fd00::/64"))

	settled := t0.Add(DuplicateGrace)
	facts := func(now time.Time, ns map[string]string, rs ...*tenurev1alpha1.IPReservation) Facts {
		f := Facts{Now: now, Pod: running, Siblings: rs, SiblingsKnown: true}
		if ns != nil {
			f.NetworkStatus = NetworkStatusOf(ns)
		}
		return f
	}
	none := map[string]string{}

	type want struct {
		reason  Reason // "" = keep
		askLive bool
		recheck time.Duration
		inMsg   string
	}
	cases := []struct {
		name string
		r    *tenurev1alpha1.IPReservation
		f    Facts
		want want
	}{
		{"network-status lists A: A is the one the pod uses", a, facts(t0, networkStatus("net1", "10.0.0.1"), a, b), want{inMsg: "lists 10.0.0.1, which it uses"}},
		{"network-status lists A: B, the newer, is surplus", b, facts(t0, networkStatus("net1", "10.0.0.1"), a, b), want{reason: DuplicateAttachment, inMsg: "lists 10.0.0.1 (reservation net.10.0.0.1)"}},
		{"network-status lists B: A is surplus", a, facts(t0, networkStatus("net1", "10.0.0.2"), a, b), want{reason: DuplicateAttachment, inMsg: "net.10.0.0.2"}},
		{"network-status lists B: B kept", b, facts(t0, networkStatus("net1", "10.0.0.2"), a, b), want{inMsg: "which it uses"}},
		{"network-status lists both: A kept", a, facts(t0, networkStatus("net1", "10.0.0.1", "net1", "10.0.0.2"), a, b), want{inMsg: "which it uses"}},
		{"network-status lists both: B kept", b, facts(t0, networkStatus("net1", "10.0.0.1", "net1", "10.0.0.2"), a, b), want{inMsg: "which it uses"}},
		{"network-status lists A on another interface only", a, facts(settled, networkStatus("net2", "10.0.0.1"), a, b), want{reason: DuplicateAttachment, inMsg: "lists none of them"}},
		{"IPv6 listed in another spelling", v6b, facts(t0, networkStatus("net1", "fd00:0:0:0:0:0:0:a"), v6a, v6b), want{reason: DuplicateAttachment, inMsg: "net.fd00--a"}},
		{"network-status unknown (a cache): ask the live reads", b, facts(t0, nil, a, b), want{askLive: true, inMsg: "live read"}},
		{"network-status unknown: the other one too", a, facts(t0, nil, a, b), want{askLive: true}},
		{"network-status does not parse: keep", a, facts(settled, map[string]string{"k8s.v1.cni.cncf.io/network-status": "[{"}, a, b), want{inMsg: "unknown"}},
		{"network-status lists an unparsable IP: keep", a, facts(settled, networkStatus("net1", "10.0.0.300"), a, b), want{inMsg: "does not parse"}},
		{"no network-status, settled: the older is surplus", a, facts(settled, none, a, b), want{reason: DuplicateAttachment, inMsg: "has no network-status: the newest, 10.0.0.2 (reservation net.10.0.0.2), is kept"}},
		{"no network-status: the newest kept", b, facts(settled, none, a, b), want{inMsg: "the newest, is kept"}},
		{"no network-status, within the settle time: wait", a, facts(t0.Add(30*time.Second), none, a, b), want{recheck: DuplicateGrace - 30*time.Second, inMsg: "once 2m0s have passed"}},
		{"lists none, same second: resourceVersion orders", b, facts(settled, networkStatus("net1", "10.0.0.9"), b, c), want{reason: DuplicateAttachment, inMsg: "net.10.0.0.3"}},
		{"lists none, same second, newer resourceVersion kept", c, facts(settled, networkStatus("net1", "10.0.0.9"), b, c), want{inMsg: "the newest"}},
		{"lists none, no resourceVersion: name orders", noRV1, facts(settled, none, noRV1, noRV2), want{reason: DuplicateAttachment, inMsg: "net.10.0.0.5"}},
		{"three of one slot, one listed: each other one surplus", c, facts(t0, networkStatus("net1", "10.0.0.1"), a, b, c), want{reason: DuplicateAttachment, inMsg: "holds 3 IPv4 addresses"}},
		{"delegated prefixes are never listed: the newest kept", pdA, facts(settled, networkStatus("net1", "10.0.0.1"), pdA, pdB), want{reason: DuplicateAttachment, inMsg: "IPv6 delegated prefixes"}},
		{"delegated prefixes: the newest", pdB, facts(settled, none, pdA, pdB), want{inMsg: "the newest"}},

		// Not duplicates.
		{"two ranges of one family: one address from each", a, facts(settled, none, a, otherRange), want{inMsg: "exists"}},
		{"the other family", a, facts(settled, none, a, v6), want{inMsg: "exists"}},
		{"another interface", a, facts(settled, none, a, otherIf), want{inMsg: "exists"}},
		{"an address and a delegated prefix", a, facts(settled, none, a, pdB), want{inMsg: "exists"}},
		{"siblings unknown", a, Facts{Now: settled, Pod: running, Siblings: []*tenurev1alpha1.IPReservation{a, b}, NetworkStatus: NetworkStatusOf(none)}, want{inMsg: "exists"}},
		{"pod replaced: its reservations go as PodReplaced", a, Facts{Now: settled, Pod: replaced, Siblings: []*tenurev1alpha1.IPReservation{a, b}, SiblingsKnown: true}, want{reason: PodReplaced}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := Decide(tc.r, tc.f, policy)
			if d.Release != (tc.want.reason != "") || d.Reason != tc.want.reason || d.AskLive != tc.want.askLive || d.RecheckAfter != tc.want.recheck {
				t.Fatalf("Decide = %+v; want reason %q askLive %v recheck %s", d, tc.want.reason, tc.want.askLive, tc.want.recheck)
			}
			if !strings.Contains(d.Message, tc.want.inMsg) {
				t.Fatalf("message %q lacks %q", d.Message, tc.want.inMsg)
			}
		})
	}
}

func TestDecideDuplicateAttachmentOfAClaim(t *testing.T) {
	const rng = "10.0.0.0/24"
	claimed := func(name, addr string, opts ...resOpt) *tenurev1alpha1.IPReservation {
		r := claimRes(append([]resOpt{inRange(rng)}, opts...)...)
		r.Name, r.Spec.Address = name, addr
		// A claim's reservations carry the pod of the ADD that made them:
		// a migration target's ADD made the second one on another node.
		return r
	}
	x := claimed("net.10.0.0.9", "10.0.0.9")
	y := claimed("net.10.0.0.10", "10.0.0.10", withOwner(func(o *tenurev1alpha1.ReservationOwner) { o.ContainerID, o.Interface, o.Node = "c2", "eth1", "node-c" }))
	z := claimed("net.10.0.1.9", "10.0.1.9", inRange("10.0.1.0/24"))
	pdKind := withSpec(func(s *tenurev1alpha1.IPReservationSpec) {
		s.Kind = tenurev1alpha1.KindDelegatedPrefix
		s.Range = "2001:db8::/48"
	})
	p1 := claimed("net.pd.1", "2001:db8:0:100::/56", pdKind)
	p2 := claimed("net.pd.2", "2001:db8:0:200::/56", pdKind)
	claim := func(ips, prefixes []string) *ClaimFact {
		return ClaimFactOf(&ipamclaimsv1alpha1.IPAMClaim{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "vm1", UID: uid1},
			Status:     ipamclaimsv1alpha1.IPAMClaimStatus{IPs: ips, DelegatedPrefixes: prefixes},
		})
	}
	facts := func(c *ClaimFact, rs ...*tenurev1alpha1.IPReservation) Facts {
		return Facts{Now: t0, Claim: c, Siblings: rs, SiblingsKnown: true}
	}
	cases := []struct {
		name  string
		r     *tenurev1alpha1.IPReservation
		f     Facts
		want  Reason
		inMsg string
	}{
		{"status records x: y is surplus", y, facts(claim([]string{"10.0.0.9/24"}, nil), x, y), DuplicateAttachment, "records 10.0.0.9 (reservation net.10.0.0.9)"},
		{"status records x: x kept", x, facts(claim([]string{"10.0.0.9/24"}, nil), x, y), "", "records 10.0.0.9"},
		{"status records y: x is surplus", x, facts(claim([]string{"10.0.0.10/24", "fd00::1/64"}, nil), x, y), DuplicateAttachment, "net.10.0.0.10"},
		{"status records neither yet: keep", x, facts(claim(nil, nil), x, y), "", "records none of them yet"},
		{"status records neither yet: keep the other", y, facts(claim(nil, nil), x, y), "", "records none"},
		{"status unparsable: keep", y, facts(claim([]string{"10.0.0.9/24", "bogus"}, nil), x, y), "", "does not parse"},
		{"delegated prefix recorded: the other is surplus", p2, facts(claim(nil, []string{"2001:db8:0:100::/56"}), p1, p2), DuplicateAttachment, "IPv6 delegated prefix of the claim"},
		{"two ranges: one from each", z, facts(claim([]string{"10.0.0.9/24"}, nil), x, z), "", "exists"},
		{"siblings unknown", y, Facts{Now: t0, Claim: claim([]string{"10.0.0.9/24"}, nil), Siblings: []*tenurev1alpha1.IPReservation{x, y}}, "", "exists"},
		{"claim recreated with another uid", y, facts(&ClaimFact{Exists: true, UID: uid2}, x, y), ClaimGone, "now uid"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := Decide(tc.r, tc.f, Policy{})
			if d.Release != (tc.want != "") || d.Reason != tc.want || d.AskLive {
				t.Fatalf("Decide = %+v; want reason %q", d, tc.want)
			}
			if !strings.Contains(d.Message, tc.inMsg) {
				t.Fatalf("message %q lacks %q", d.Message, tc.inMsg)
			}
		})
	}
}

func TestNetworkStatusOf(t *testing.T) {
	ns := NetworkStatusOf(networkStatus("net1", "10.0.0.1", "net2", "fd00::1"))
	if !ns.Present || ns.Err != nil || len(ns.IPs["net1"]) != 1 || ns.IPs["net1"][0].String() != "10.0.0.1" || ns.IPs["net2"][0].String() != "fd00::1" || len(ns.IPs["eth0"]) != 1 {
		t.Fatalf("NetworkStatusOf = %+v", ns)
	}
	if ns := NetworkStatusOf(nil); ns.Present || ns.Err != nil {
		t.Fatalf("no annotation: %+v", ns)
	}
	if ns := NetworkStatusOf(map[string]string{"k8s.v1.cni.cncf.io/network-status": "{}"}); ns.Err == nil {
		t.Fatalf("an object, not a list: %+v", ns)
	}
}
