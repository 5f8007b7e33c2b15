package probe

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/mdlayher/arp"
	"github.com/mdlayher/ethernet"
	"github.com/mdlayher/ndp"

	"github.com/tenure-ipam/tenure/test/testbed"
)

// segment is two namespaces joined by a veth pair: the prober's side
// ("node") and a host's ("other"), whose MAC is returned.
func segment(t *testing.T) (nodeNs string, otherNs string, otherMAC net.HardwareAddr) {
	t.Helper()
	testbed.NeedPlumb(t)
	suffix := fmt.Sprint(os.Getpid()%1000, "-", time.Now().UnixNano()%1e6)
	nodeNs, otherNs = "tp-node-"+suffix, "tp-other-"+suffix
	for _, n := range []string{nodeNs, otherNs} {
		_, rm, err := testbed.AddNetns(n)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(rm)
	}
	for _, args := range [][]string{
		{"link", "add", "wire0", "type", "veth", "peer", "name", "wire1", "netns", otherNs},
		{"link", "set", "wire0", "up"},
	} {
		if out, err := testbed.IPIn(nodeNs, args...); err != nil {
			t.Fatalf("ip %v: %v: %s", args, err, out)
		}
	}
	if out, err := testbed.IPIn(otherNs, "link", "set", "wire1", "up"); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	out, err := testbed.IPIn(otherNs, "-br", "link", "show", "wire1")
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	f := strings.Fields(out)
	if len(f) < 3 {
		t.Fatalf("ip -br link: %q", out)
	}
	if otherMAC, err = net.ParseMAC(f[2]); err != nil {
		t.Fatal(err)
	}
	return nodeNs, otherNs, otherMAC
}

// addOtherHostAddrs gives the other host (segment) 10.99.0.7 and fd99::7
// on its wire1, the IPv6 one usable at once (no DAD).
func addOtherHostAddrs(t *testing.T, otherNs string) {
	t.Helper()
	for _, a := range []string{"10.99.0.7/24", "fd99::7/64"} {
		args := []string{"addr", "add", a, "dev", "wire1"}
		if strings.Contains(a, ":") {
			args = append(args, "nodad")
		}
		if out, err := testbed.IPIn(otherNs, args...); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
	}
}

func TestAProbeReturnsTheMACOfTheHostHoldingTheAddress(t *testing.T) {
	nodeNs, otherNs, otherMAC := segment(t)
	addOtherHostAddrs(t, otherNs)
	p := &Prober{Netns: "/var/run/netns/" + nodeNs}
	for _, addr := range []string{"10.99.0.7", "fd99::7"} {
		t.Run(addr, func(t *testing.T) {
			ans, err := p.Probe(context.Background(), "wire0", netip.MustParseAddr(addr))
			if err != nil {
				t.Fatal(err)
			}
			if ans == nil {
				t.Fatalf("nothing answered for %s, which %s holds", addr, otherMAC)
			}
			if ans.MAC.String() != otherMAC.String() {
				t.Fatalf("%s answered by %s (%s), want %s", addr, ans.MAC, ans.Kind, otherMAC)
			}
		})
	}
}

func TestAProbeOfAnAddressNobodyHoldsIsSilentWithinItsBudget(t *testing.T) {
	nodeNs, otherNs, _ := segment(t)
	// The other host is on the segment with addresses of its own, and
	// answers for them; not for the probed ones.
	addOtherHostAddrs(t, otherNs)
	p := &Prober{Netns: "/var/run/netns/" + nodeNs, Count: 3, Interval: 100 * time.Millisecond}
	for _, addr := range []string{"10.99.0.8", "fd99::8"} {
		t.Run(addr, func(t *testing.T) {
			start := time.Now()
			ans, err := p.Probe(context.Background(), "wire0", netip.MustParseAddr(addr))
			took := time.Since(start)
			if err != nil {
				t.Fatal(err)
			}
			if ans != nil {
				t.Fatalf("%s answered by %s (%s); nobody holds it", addr, ans.MAC, ans.Kind)
			}
			if took < p.Budget() {
				t.Fatalf("a silent probe took %v, less than its budget %v: it did not wait out its probes", took, p.Budget())
			}
		})
	}
}

func TestAProbeOnAMissingInterfaceIsAnError(t *testing.T) {
	nodeNs, _, _ := segment(t)
	p := &Prober{Netns: "/var/run/netns/" + nodeNs}
	_, err := p.Probe(context.Background(), "nosuch0", netip.MustParseAddr("10.99.0.7"))
	if err == nil || !strings.Contains(err.Error(), "nosuch0") {
		t.Fatalf("err = %v, want one naming nosuch0", err)
	}
}

func TestAProbeEndsWhenItsContextIsCancelled(t *testing.T) {
	nodeNs, _, _ := segment(t)
	p := &Prober{Netns: "/var/run/netns/" + nodeNs, Count: 3, Interval: 2 * time.Second}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := p.Probe(ctx, "wire0", netip.MustParseAddr("10.99.0.9"))
	if err == nil {
		t.Fatal("a cancelled probe answered nil error: silence it did not wait for")
	}
	if took := time.Since(start); took >= p.Budget() {
		t.Fatalf("the probe took %v, its whole budget %v, though its context ended at 100ms", took, p.Budget())
	}
}

func TestMatchersCountOnlyWhatClaimsTheAddress(t *testing.T) {
	ours := net.HardwareAddr{2, 0, 0, 0, 0, 1}
	theirs := net.HardwareAddr{2, 0, 0, 0, 0, 2}
	x := netip.MustParseAddr("10.1.0.5")
	other := netip.MustParseAddr("10.1.0.6")
	arpOf := func(op arp.Operation, sip, tip netip.Addr) []byte {
		p, err := arp.NewPacket(op, theirs, sip, ethernet.Broadcast, tip)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := p.MarshalBinary()
		return b
	}
	_, _, matchARP, err := arpProbe(ours, x)
	if err != nil {
		t.Fatal(err)
	}

	x6 := netip.MustParseAddr("fd00::5")
	other6 := netip.MustParseAddr("fd00::6")
	ll := netip.MustParseAddr("fe80::2")
	ip6 := func(src netip.Addr, hop byte, m ndp.Message) []byte {
		body, err := ndp.MarshalMessageChecksum(m, src, netip.MustParseAddr("ff02::1"))
		if err != nil {
			t.Fatal(err)
		}
		b := make([]byte, 40+len(body))
		b[0], b[5], b[6], b[7] = 6<<4, byte(len(body)), icmpv6Proto, hop
		s := src.As16()
		copy(b[8:24], s[:])
		copy(b[40:], body)
		return b
	}
	_, _, matchND, err := dadProbe(ours, x6)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		match func([]byte, net.HardwareAddr) *Answer
		b     []byte
		want  string
	}{
		{"arp/reply for x", matchARP, arpOf(arp.OperationReply, x, zero4), "arp-reply"},
		{"arp/gratuitous announcement of x", matchARP, arpOf(arp.OperationRequest, x, x), "arp-announcement"},
		{"arp/a host asking from x", matchARP, arpOf(arp.OperationRequest, x, other), "arp-announcement"},
		{"arp/another probe for x", matchARP, arpOf(arp.OperationRequest, zero4, x), "arp-probe"},
		{"arp/reply for another address", matchARP, arpOf(arp.OperationReply, other, zero4), ""},
		{"arp/another host asking for x", matchARP, arpOf(arp.OperationRequest, other, x), ""},
		{"arp/garbage", matchARP, []byte{1, 2, 3}, ""},
		{"ndp/advertisement of x", matchND, ip6(ll, 255, &ndp.NeighborAdvertisement{TargetAddress: x6, Override: true}), "neighbor-advertisement"},
		{"ndp/another DAD for x", matchND, ip6(netip.IPv6Unspecified(), 255, &ndp.NeighborSolicitation{TargetAddress: x6}), "dad-solicitation"},
		{"ndp/address resolution of x", matchND, ip6(ll, 255, &ndp.NeighborSolicitation{TargetAddress: x6}), ""},
		{"ndp/advertisement of another address", matchND, ip6(ll, 255, &ndp.NeighborAdvertisement{TargetAddress: other6}), ""},
		{"ndp/advertisement of x routed (hop limit below 255)", matchND, ip6(ll, 64, &ndp.NeighborAdvertisement{TargetAddress: x6}), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := tc.match(tc.b, theirs)
			if got := kindOf(a); got != tc.want {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
			// The claiming MAC is the packet's: the ARP sender's, or for
			// NDP the frame's source.
			if a != nil && a.MAC.String() != theirs.String() {
				t.Fatalf("MAC %s, want %s", a.MAC, theirs)
			}
		})
	}
}

func kindOf(a *Answer) string {
	if a == nil {
		return ""
	}
	return a.Kind
}

func TestDefaultRouteInterfaceIsTheOneTheDefaultRouteLeavesBy(t *testing.T) {
	nodeNs, _, _ := segment(t)
	path := "/var/run/netns/" + nodeNs
	if _, err := DefaultRouteInterface(path, false); err == nil {
		t.Fatal("a namespace without a default route has a default route interface")
	}
	for _, args := range [][]string{
		{"link", "add", "other0", "type", "veth", "peer", "name", "other1"}, {"link", "set", "other0", "up"},
		{"addr", "add", "10.99.0.1/24", "dev", "wire0"}, {"route", "add", "10.98.0.0/16", "dev", "other0"},
		{"route", "add", "default", "via", "10.99.0.254", "dev", "wire0"},
	} {
		if out, err := testbed.IPIn(nodeNs, args...); err != nil {
			t.Fatalf("ip %v: %v: %s", args, err, out)
		}
	}
	if name, err := DefaultRouteInterface(path, false); err != nil || name != "wire0" {
		t.Fatalf("DefaultRouteInterface = %q, %v; want wire0", name, err)
	}
}

// TestTwoHostsProbingOneAddressAreNoHoldersOfItWithHoldersOnly: two hosts
// on a segment probe one address at the same moment (the agents of two
// nodes answering one probe request). Each hears the other's probe: an
// answer by default (RFC 5227 and 4862: someone is about to take it), and
// silence with HoldersOnly, which still hears a host that holds it.
func TestTwoHostsProbingOneAddressAreNoHoldersOfItWithHoldersOnly(t *testing.T) {
	nodeNs, otherNs, otherMAC := segment(t)
	for _, addr := range []string{"10.99.0.20", "fd99::20"} {
		t.Run(addr, func(t *testing.T) {
			a := netip.MustParseAddr(addr)
			both := func(holdersOnly bool) [2]*Answer {
				p := [2]*Prober{{Netns: "/var/run/netns/" + nodeNs, HoldersOnly: holdersOnly}, {Netns: "/var/run/netns/" + otherNs, HoldersOnly: holdersOnly}}
				ifs := [2]string{"wire0", "wire1"}
				var out [2]*Answer
				errs := make(chan error, 2)
				for i := range 2 {
					go func() {
						ans, err := p[i].Probe(context.Background(), ifs[i], a)
						out[i] = ans
						errs <- err
					}()
				}
				for range 2 {
					if err := <-errs; err != nil {
						t.Fatal(err)
					}
				}
				return out
			}
			if got := both(false); got[0] == nil && got[1] == nil {
				t.Fatalf("by default neither prober heard the other's probe of %s", addr)
			} else {
				for _, ans := range got {
					if ans != nil && ans.Kind != KindARPProbe && ans.Kind != KindDADSolicitation {
						t.Fatalf("heard %s (%s), want the other's probe", ans.MAC, ans.Kind)
					}
				}
			}
			if got := both(true); got[0] != nil || got[1] != nil {
				t.Fatalf("with HoldersOnly: %+v and %+v, want both silent: nobody holds %s", got[0], got[1], addr)
			}
			args := []string{"addr", "add", addr + "/24", "dev", "wire1"}
			if a.Is6() {
				args = []string{"addr", "add", addr + "/64", "dev", "wire1", "nodad"}
			}
			if out, err := testbed.IPIn(otherNs, args...); err != nil {
				t.Fatalf("%v: %s", err, out)
			}
			p := &Prober{Netns: "/var/run/netns/" + nodeNs, HoldersOnly: true}
			ans, err := p.Probe(context.Background(), "wire0", a)
			if err != nil {
				t.Fatal(err)
			}
			if ans == nil || ans.MAC.String() != otherMAC.String() {
				t.Fatalf("with HoldersOnly, %s held by %s: %+v", addr, otherMAC, ans)
			}
		})
	}
}
