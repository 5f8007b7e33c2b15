package dataplane

import (
	"errors"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv6"
	"github.com/insomniacslk/dhcp/iana"
	corev1 "k8s.io/api/core/v1"

	ipamclaimsv1alpha1 "github.com/tenure-ipam/tenure/api/ipamclaims/v1alpha1"
	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/config"
	"github.com/tenure-ipam/tenure/internal/dhcp6"
)

// The DHCPv6 rules of a segment several guests (and, over a VLAN, several
// nodes) share: rule 1 (the prefix route moves only on an answered
// Request, Renew or Rebind from the binding's MAC on its own interface),
// rule 2 (a MAC two bindings hold serves neither) and rule 3 (a binding is
// served with the settings of its own NAD).

// sharedService is a Service over src whose settings are nads, rebound once.
func sharedService(t *testing.T, src *fakeSource, nads map[string]config.DHCPv6, opts Options) *Service {
	t.Helper()
	opts.Source, opts.Logger = src, quietLogger()
	s, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.nl.Close(); s.ns.close() })
	for nad, d := range nads {
		learn(t, s, nad, d.Network, &d)
	}
	s.rebind(src.Pods(), s.Networks())
	return s
}

// routeDev is the interface s routes prefix through, "" when it routes it
// nowhere.
func routeDev(s *Service, prefix string) string {
	bindings, _ := s.rebind(s.opts.Source.Pods(), s.Networks())
	for _, r := range DesiredRoutes(bindings, s.heardSnapshot()) {
		if r.Prefix.String() == prefix {
			return r.Dev
		}
	}
	return ""
}

func TestTheRouteMovesOnlyOnAnAnsweredRequest(t *testing.T) {
	const prefix = "fd00:9000:0:700::/56"
	victim, _ := net.ParseMAC(vmMAC)
	vmPod := testPod("virt-launcher-a", map[string]string{nets: `[{"name":"san","interface":"net1","ipam-claim-reference":"vm1.san","mac":"` + vmMAC + `"}]`})
	claim := testClaim("vm1.san", "san", "virt-launcher-a", []string{"fd00::7/64"}, []string{prefix})
	leases := []dhcpv6.Modifier{dhcpv6.WithIANA(dhcpv6.OptIAAddress{IPv6Addr: net.ParseIP("fd00::7")}),
		dhcpv6.WithIAPD([4]byte{0, 0, 0, 7}, &dhcpv6.OptIAPrefix{Prefix: &net.IPNet{IP: net.ParseIP("fd00:9000:0:700::"), Mask: net.CIDRMask(56, 128)}})}
	sid := dhcpv6.WithServerID(ServerDUID())
	msg := func(typ dhcpv6.MessageType, mods ...dhcpv6.Modifier) dhcpv6.DHCPv6 {
		mods = append([]dhcpv6.Modifier{func(d dhcpv6.DHCPv6) { d.(*dhcpv6.Message).MessageType = typ },
			dhcpv6.WithClientID(&dhcpv6.DUIDLL{HWType: iana.HWTypeEthernet, LinkLayerAddr: victim}),
			dhcpv6.WithOption(dhcpv6.OptElapsedTime(0))}, mods...)
		m, err := dhcpv6.NewMessage(mods...)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	// Everything a guest on br1 (the other interface the network lists) can
	// send from the victim's MAC that is not an answered Request, Renew or
	// Rebind.
	notPlacing := []struct {
		name string
		msg  dhcpv6.DHCPv6
		src  dhcp6.Source
	}{
		{"Solicit", msg(dhcpv6.MessageTypeSolicit, leases...), dhcp6.Source{Ifname: "br1", MAC: victim}},
		{"Rapid Commit Solicit", msg(dhcpv6.MessageTypeSolicit, append(leases, dhcpv6.WithRapidCommit)...), dhcp6.Source{Ifname: "br1", MAC: victim}},
		{"Confirm", msg(dhcpv6.MessageTypeConfirm, leases[0]), dhcp6.Source{Ifname: "br1", MAC: victim}},
		{"Information-request", msg(dhcpv6.MessageTypeInformationRequest), dhcp6.Source{Ifname: "br1", MAC: victim}},
		{"Release", msg(dhcpv6.MessageTypeRelease, append(leases, sid)...), dhcp6.Source{Ifname: "br1", MAC: victim}},
		{"Request for another server", msg(dhcpv6.MessageTypeRequest, append(leases, dhcpv6.WithServerID(&dhcpv6.DUIDLL{HWType: iana.HWTypeEthernet, LinkLayerAddr: net.HardwareAddr{2, 0, 0, 0, 0, 9}}))...), dhcp6.Source{Ifname: "br1", MAC: victim}},
		{"Request without a Server Identifier", msg(dhcpv6.MessageTypeRequest, leases...), dhcp6.Source{Ifname: "br1", MAC: victim}},
		{"Request known only by its DUID-LL", msg(dhcpv6.MessageTypeRequest, append(leases, sid)...), dhcp6.Source{Ifname: "br1"}},
		{"Request from another interface of the node", msg(dhcpv6.MessageTypeRequest, append(leases, sid)...), dhcp6.Source{Ifname: "vlan9", MAC: victim}},
	}
	placing := []struct {
		name string
		msg  dhcpv6.DHCPv6
	}{
		{"Request", msg(dhcpv6.MessageTypeRequest, append(leases, sid)...)},
		{"Renew", msg(dhcpv6.MessageTypeRenew, append(leases, sid)...)},
		{"Rebind", msg(dhcpv6.MessageTypeRebind, leases...)},
	}

	t.Run("the NAD names no interface of the network: the route follows answered Requests", func(t *testing.T) {
		src := &fakeSource{pods: []*corev1.Pod{vmPod}, claims: []*ipamclaimsv1alpha1.IPAMClaim{claim}}
		s := sharedService(t, src, san, Options{})
		h := dhcp6.NewHandler(dhcp6.Config{ServerDUID: ServerDUID()}, s, nil)
		if d := routeDev(s, prefix); d != "br0" {
			t.Fatalf("route via %q before any message, want the first interface br0", d)
		}
		for _, m := range notPlacing {
			r := h.HandleFrom(m.msg, m.src)
			if d := routeDev(s, prefix); d != "br0" {
				t.Errorf("%s from the victim's MAC on %s (outcome %s): route moved to %q", m.name, m.src.Ifname, r.Outcome, d)
			}
		}
		for _, m := range placing {
			for _, ifn := range []string{"br1", "br0"} {
				if r := h.HandleFrom(m.msg, dhcp6.Source{Ifname: ifn, MAC: victim}); !r.Heard {
					t.Fatalf("%s on %s: outcome %s (%s), not a placing answer", m.name, ifn, r.Outcome, r.Reason)
				}
				if d := routeDev(s, prefix); d != ifn {
					t.Errorf("answered %s from the victim's MAC on %s: route via %q, want %s", m.name, ifn, d, ifn)
				}
			}
		}
	})

	t.Run("the NAD's bridge is its own interface: nothing moves the route", func(t *testing.T) {
		src := &fakeSource{pods: []*corev1.Pod{vmPod}, claims: []*ipamclaimsv1alpha1.IPAMClaim{claim}}
		nads := map[string]config.DHCPv6{"vms/san": san["vms/san"]}
		d := nads["vms/san"]
		d.Link = "br1"
		nads["vms/san"] = d
		s := sharedService(t, src, nads, Options{})
		h := dhcp6.NewHandler(dhcp6.Config{ServerDUID: ServerDUID()}, s, nil)
		if d := routeDev(s, prefix); d != "br1" {
			t.Fatalf("route via %q, want the NAD's bridge br1", d)
		}
		for _, m := range placing {
			if r := h.HandleFrom(m.msg, dhcp6.Source{Ifname: "br0", MAC: victim}); r.Reply != nil || r.Heard {
				t.Errorf("%s from the victim's MAC on br0, not its own interface: answered (%s)", m.name, r.Outcome)
			}
			if d := routeDev(s, prefix); d != "br1" {
				t.Errorf("%s from the victim's MAC on br0: route moved to %q", m.name, d)
			}
			if r := h.HandleFrom(m.msg, dhcp6.Source{Ifname: "br1", MAC: victim}); !r.Heard {
				t.Errorf("%s on its own interface br1: outcome %s, want answered", m.name, r.Outcome)
			}
		}
	})

	t.Run("Heard names a binding that is not the one its MAC maps to", func(t *testing.T) {
		src := &fakeSource{pods: []*corev1.Pod{vmPod}, claims: []*ipamclaimsv1alpha1.IPAMClaim{claim}}
		s := sharedService(t, src, san, Options{})
		s.Heard(dhcp6.Binding{Key: "vms/other", MAC: victim}, "br1")
		s.Heard(dhcp6.Binding{Key: "vms/vm1.san", MAC: net.HardwareAddr{2, 0, 0, 0, 0, 0x42}}, "br1")
		if d := routeDev(s, prefix); d != "br0" {
			t.Errorf("route moved to %q on a Heard of no current binding", d)
		}
	})
}

type conflictCounter struct {
	mu sync.Mutex
	n  []int
}

func (c *conflictCounter) Observe(string, string) {}
func (c *conflictCounter) MACConflicts(n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n = append(c.n, n)
}

func TestAMACHeldByTwoBindingsIsServedToNeither(t *testing.T) {
	// A VM's claim, and a tenant's pod without a claim that opted in to a
	// prefix, with the VM's MAC in its network-selection element.
	vm := testPod("virt-launcher-a", map[string]string{nets: `[{"name":"san","interface":"net1","ipam-claim-reference":"vm1.san","mac":"` + vmMAC + `"}]`})
	tenant := testPod("tenant-0", map[string]string{nets: `[{"name":"san","interface":"net1","mac":"` + vmMAC + `"}]`})
	tenant.UID = "tenant-uid"
	bystander := testPod("virt-launcher-c", map[string]string{nets: `[{"name":"san","interface":"net1","ipam-claim-reference":"vm3.san","mac":"02:00:00:aa:bb:03"}]`})
	claims := []*ipamclaimsv1alpha1.IPAMClaim{
		testClaim("vm1.san", "san", "virt-launcher-a", []string{"fd00::7/64"}, []string{"fd00:9000:0:700::/56"}),
		testClaim("vm3.san", "san", "virt-launcher-c", []string{"fd00::3/64"}, nil),
	}
	tenantRes := []*tenurev1alpha1.IPReservation{{Spec: tenurev1alpha1.IPReservationSpec{Kind: tenurev1alpha1.KindDelegatedPrefix,
		Address: "fd00:9000:0:900::/56", CNINetwork: "san",
		Owner: tenurev1alpha1.ReservationOwner{Kind: tenurev1alpha1.OwnerPod, UID: "tenant-uid", ContainerID: "s1", Interface: "net1"}}}}
	in := Inputs{Pods: []*corev1.Pod{tenant, bystander, vm}, Claim: claimSource(claims...), Networks: san,
		PodReservations: func(uid string) []*tenurev1alpha1.IPReservation {
			if uid == "tenant-uid" {
				return tenantRes
			}
			return nil
		}}
	got, skips := Compute(in)
	if len(got) != 1 || got[0].Key != "vms/vm3.san" {
		t.Fatalf("bindings %+v: want vms/vm3.san alone", got)
	}
	skipped := map[string]*MACConflict{}
	for _, k := range skips {
		skipped[k.Claim+"|"+k.Pod] = k.Conflict
	}
	for _, who := range []string{"vms/vm1.san|vms/virt-launcher-a", "vms/tenant-0/net1|vms/tenant-0"} {
		c := skipped[who]
		if c == nil || c.MAC != vmMAC || c.Interface != "br0" {
			t.Fatalf("%s: conflict %+v, want MAC %s on br0", who, c, vmMAC)
		}
		for _, w := range []string{"vms/vm1.san (pod vms/virt-launcher-a interface net1)", "vms/tenant-0/net1 (pod vms/tenant-0 interface net1)"} {
			if !strings.Contains(c.String(), w) {
				t.Errorf("conflict %q does not name %q", c, w)
			}
		}
	}
	if len(skips) != 2 {
		t.Errorf("skips %+v, want the two holders", skips)
	}

	// In either order of the pods: no sort order settles it.
	slices.Reverse(in.Pods)
	if again, _ := Compute(in); len(again) != 1 || again[0].Key != "vms/vm3.san" {
		t.Fatalf("reversed pods: bindings %+v", again)
	}

	// Behind interfaces they do not share (each NAD names its own bridge),
	// one MAC is two guests that the interface tells apart: both served.
	apart := map[string]config.DHCPv6{"vms/san": san["vms/san"], "vms/san-b": san["vms/san"]}
	a, b := apart["vms/san"], apart["vms/san-b"]
	a.Link, b.Link = "br0", "br1"
	apart["vms/san"], apart["vms/san-b"] = a, b
	tenantB := testPod("tenant-0", map[string]string{nets: `[{"name":"san-b","interface":"net1","mac":"` + vmMAC + `"}]`})
	tenantB.UID = "tenant-uid"
	in.Pods = []*corev1.Pod{vm, bystander, tenantB}
	in.Networks = apart
	if got, skips := Compute(in); len(got) != 3 || len(skips) != 0 {
		t.Fatalf("on separate interfaces: bindings %+v, skips %+v; want all three", got, skips)
	}

	// The Service reports the conflict once while it lasts (the agent makes
	// an Event of it), counts it, and serves neither holder.
	src := &fakeSource{pods: []*corev1.Pod{vm, bystander, testPod("virt-launcher-b", map[string]string{
		nets: `[{"name":"san","interface":"net1","ipam-claim-reference":"vm2.san","mac":"` + vmMAC + `"}]`})},
		claims: append(claims, testClaim("vm2.san", "san", "virt-launcher-b", []string{"fd00::8/64"}, nil))}
	var reported []MACConflict
	counter := &conflictCounter{}
	s := sharedService(t, src, san, Options{Observer: counter, OnConflict: func(c MACConflict) { reported = append(reported, c) }})
	s.rebind(src.Pods(), s.Networks())
	mac, _ := net.ParseMAC(vmMAC)
	for _, ifn := range []string{"br0", "br1"} {
		if b, ok := s.Lookup(mac, ifn); ok {
			t.Errorf("the shared MAC is answered on %s as %s", ifn, b.Key)
		}
	}
	if _, ok := s.Lookup(net.HardwareAddr{2, 0, 0, 0xaa, 0xbb, 3}, "br0"); !ok {
		t.Error("the bystander is not answered")
	}
	// The network lists br0 and br1: the conflict is reported once, on
	// the first interface the two share.
	if len(reported) != 1 || reported[0].Interface != "br0" ||
		!strings.Contains(reported[0].String(), "vms/vm1.san") || !strings.Contains(reported[0].String(), "vms/vm2.san") {
		t.Fatalf("reported %v, want one conflict on br0 naming vms/vm1.san and vms/vm2.san", reported)
	}
	s.rebind(src.Pods(), s.Networks())
	if len(reported) != 1 || counter.n[len(counter.n)-1] != 1 {
		t.Errorf("a lasting conflict: reported %d times, counted %v; want once, 1", len(reported), counter.n)
	}
	// One holder goes: the other is served again, and the count drops.
	src.mu.Lock()
	src.pods = src.pods[:2]
	src.mu.Unlock()
	s.rebind(src.Pods(), s.Networks())
	if b, ok := s.Lookup(mac, "br0"); !ok || b.Key != "vms/vm1.san" {
		t.Errorf("after vm2's pod left: lookup %+v %v, want vms/vm1.san", b, ok)
	}
	if counter.n[len(counter.n)-1] != 0 || len(reported) != 1 {
		t.Errorf("after the conflict ended: count %v, reported %d times", counter.n, len(reported))
	}
}

// TestABindingIsServedWithItsOwnNADsSettings: two NADs of different
// namespaces define CNI network "san" on br0, one with an hour's lifetimes
// and no trusted relay, the other with a minute's and its guest trusted as
// a relay. Each binding carries its own NAD's lifetimes and relays, so
// neither NAD retunes the other's guests or speaks for them.
func TestABindingIsServedWithItsOwnNADsSettings(t *testing.T) {
	relay := net.HardwareAddr{2, 0, 0, 0, 0, 0xe}
	victim := testPod("virt-launcher-a", map[string]string{nets: `[{"name":"san","interface":"net1","ipam-claim-reference":"vm1.san","mac":"` + vmMAC + `"}]`})
	tenant := testPod("tenant-vm", map[string]string{nets: `[{"namespace":"tenant","name":"san","interface":"net1","ipam-claim-reference":"vm2.san","mac":"02:00:00:aa:bb:02"}]`})
	nads := map[string]config.DHCPv6{
		"vms/san": {Enabled: true, Network: "san", Interfaces: []string{"br0"}, InstallRoutes: true, PreferredLifetime: time.Hour, ValidLifetime: 2 * time.Hour},
		"tenant/san": {Enabled: true, Network: "san", Interfaces: []string{"br0"}, InstallRoutes: false, PreferredLifetime: time.Minute, ValidLifetime: time.Minute,
			TrustedRelays: []config.TrustedRelay{{Interface: "br0", MAC: relay}}},
	}
	got, skips := Compute(Inputs{Pods: []*corev1.Pod{victim, tenant}, Networks: nads, Claim: claimSource(
		testClaim("vm1.san", "san", "virt-launcher-a", []string{"fd00::7/64"}, []string{"fd00:9000:0:700::/56"}),
		testClaim("vm2.san", "san", "tenant-vm", []string{"fd00::8/64"}, []string{"fd00:9000:0:800::/56"}))})
	if len(got) != 2 || len(skips) != 0 {
		t.Fatalf("bindings %+v, skips %+v", got, skips)
	}
	v, tn := got[0], got[1]
	if v.NAD != "vms/san" || v.PreferredLifetime != time.Hour || v.ValidLifetime != 2*time.Hour || !v.InstallRoutes || v.TrustedRelays == nil || len(v.TrustedRelays) != 0 {
		t.Errorf("victim's binding %+v: want vms/san's hour, routes, and no relay", v)
	}
	if tn.NAD != "tenant/san" || tn.PreferredLifetime != time.Minute || tn.InstallRoutes || len(tn.TrustedRelays) != 1 {
		t.Errorf("tenant's binding %+v: want tenant/san's minute, no routes, its relay", tn)
	}
	// On the wire: br0's server trusts the tenant's relay (some binding
	// there does), yet a Relay-forward naming the victim through it is
	// dropped, and the victim is answered at its own lifetimes.
	cfg := handlerConfig(nads)["br0"]
	h := dhcp6.NewHandler(cfg, dhcp6.LookupFunc(func(mac net.HardwareAddr, ifname string) (dhcp6.Binding, bool) {
		for _, b := range got {
			if b.MAC.String() == mac.String() {
				return b.Binding, true
			}
		}
		return dhcp6.Binding{}, false
	}), nil)
	vmac, _ := net.ParseMAC(vmMAC)
	sol, err := dhcpv6.NewSolicit(vmac, dhcpv6.WithIAPD([4]byte{0, 0, 0, 1}))
	if err != nil {
		t.Fatal(err)
	}
	fw, err := dhcpv6.EncapsulateRelay(sol, dhcpv6.MessageTypeRelayForward, net.IPv6loopback, net.ParseIP("fe80::1"))
	if err != nil {
		t.Fatal(err)
	}
	fw.AddOption(dhcpv6.OptClientLinkLayerAddress(iana.HWTypeEthernet, vmac))
	if r := h.HandleFrom(fw, dhcp6.Source{Ifname: "br0", MAC: relay}); r.Reply != nil || r.Outcome != dhcp6.OutcomeUntrustedRelay {
		t.Errorf("the tenant's relay speaking for the victim: outcome %s, reply %v", r.Outcome, r.Reply != nil)
	}
	r := h.HandleFrom(sol, dhcp6.Source{Ifname: "br0", MAC: vmac})
	adv, ok := r.Reply.(*dhcpv6.Message)
	if !ok {
		t.Fatalf("the victim's Solicit: outcome %s", r.Outcome)
	}
	na := adv.Options.OneIANA()
	if na == nil || len(na.Options.Addresses()) != 1 || na.Options.Addresses()[0].PreferredLifetime != time.Hour || na.Options.Addresses()[0].ValidLifetime != 2*time.Hour {
		t.Errorf("the victim's address is advertised as %v, want its NAD's 1h/2h", na)
	}

}

// The settings of a NAD no pod of this node names are forgotten once no
// ADD gave them for pruneAfter: an edited or deleted NAD's old settings
// then neither serve anyone nor refuse its namespace's other NADs' ADDs.
func TestTheSettingsOfANADNoPodNamesAreForgotten(t *testing.T) {
	used := testPod("virt-launcher-a", map[string]string{nets: `[{"name":"san","interface":"net1"}]`})
	done := testPod("job-0", map[string]string{nets: `[{"name":"san-old","interface":"net1"}]`})
	done.Status.Phase = corev1.PodSucceeded
	src := &fakeSource{pods: []*corev1.Pod{used, done}}
	old := san["vms/san"]
	old.PreferredLifetime = time.Minute
	// vms/san-old first: nothing names it, so vms/san need not agree.
	s := sharedService(t, src, map[string]config.DHCPv6{"vms/san-old": old}, Options{})
	learn(t, s, "vms/san", "san", ptr(san["vms/san"]))
	// vms/san is in use and differs; vms/san-old agrees, and is not in use.
	var conflict *SettingsConflict
	if err := s.Learn("vms/san-new", "san", &old); !errors.As(err, &conflict) || conflict.Other != "vms/san" || conflict.Field != "dhcpv6.preferred_lifetime" {
		t.Fatalf("Learn(vms/san-new) = %v, want a conflict with vms/san on dhcpv6.preferred_lifetime", err)
	}
	now := time.Now()
	s.prune(src.Pods(), now.Add(pruneAfter/2))
	if n := s.Networks(); len(n) != 2 {
		t.Fatalf("forgotten within pruneAfter: %v", n)
	}
	s.prune(src.Pods(), now.Add(pruneAfter+time.Second))
	n := s.Networks()
	if _, ok := n["vms/san"]; !ok || len(n) != 1 {
		t.Fatalf("after pruneAfter: %v, want vms/san (named by a running pod) alone", n)
	}
}

func ptr[T any](v T) *T { return &v }
