//go:build integration

package guest_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/tenure-ipam/tenure/internal/dev/guest"
	"github.com/tenure-ipam/tenure/internal/dev/testbed"
	"github.com/tenure-ipam/tenure/internal/dhcp6"
)

var (
	vmMAC     = net.HardwareAddr{0x02, 0x00, 0x00, 0x00, 0x97, 0x01}
	vmIPv4    = netip.MustParsePrefix("10.103.0.2/24")
	nodeIPv4  = netip.MustParseAddr("10.103.0.1")
	vmAddr    = netip.MustParseAddr("fd00:103::42")
	vmPrefix  = netip.MustParsePrefix("fd00:1030:100::/56")
	nodeLL    = netip.MustParseAddr("fe80::1")
	nodeIPv6  = "fd00:103::1/64"
	reBound   = regexp.MustCompile(`^tenure-guest: lease reason=BOUND6 prefix=`)
	reRenewed = regexp.MustCompile(`^tenure-guest: lease reason=RENEW6 prefix=`)
	reDUID    = regexp.MustCompile(`^Created duid (".*")\.$`)
)

// A real VM (QEMU, the guest hack/build-guest.sh assembles from Debian
// packages) boots in a network namespace of its own, its tap bridged to a
// veth as KubeVirt's bridge binding plugs a VM into its pod's interface.
// The other end of the veth is the "node", where tenure's DHCPv6 server
// (internal/dhcp6, as the agent serves it) holds one binding for the VM's
// MAC. The guest's own dhclient asks for IA_NA and IA_PD with a DUID-LL of
// its MAC, is given the binding's address and prefix, renews them, and the
// guest answers pings on its IPv4 address, the address and an address of
// the prefix.
func TestRealVMLeasesAddressAndPrefixAndAnswersOnThem(t *testing.T) {
	testbed.NeedPlumb(t)
	if _, err := exec.LookPath(guest.QEMU); err != nil {
		testbed.SkipUnlessEverything(t, "no "+guest.QEMU+": install Debian's qemu-system-x86 (hack/test-deps.sh does)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	img, err := guest.Build(ctx)
	if err != nil {
		t.Fatal(err)
	}

	// The node and the launcher pod, a veth between them; in the pod, the
	// bridge binding's bridge holds the pod's end of the veth and the tap.
	sfx := strconv.Itoa(os.Getpid())
	nodeNS, podNS := "tg-node-"+sfx, "tg-pod-"+sfx
	_, rmNode, err := testbed.AddNetns(nodeNS)
	if err != nil {
		t.Fatal(err)
	}
	defer rmNode()
	podPath, rmPod, err := testbed.AddNetns(podNS)
	if err != nil {
		t.Fatal(err)
	}
	defer rmPod()
	for _, c := range []struct {
		ns   string
		args string
	}{
		{nodeNS, "link add vm0 type veth peer name eth0 netns " + podNS},
		{nodeNS, "addr add " + nodeIPv4.String() + "/24 dev vm0"},
		{nodeNS, "addr add " + nodeIPv6 + " dev vm0 nodad"},
		{nodeNS, "addr add " + nodeLL.String() + "/64 dev vm0 nodad"},
		{nodeNS, "link set vm0 up"},
		{podNS, "link add k6t-eth0 type bridge"},
		{podNS, "tuntap add dev tap0 mode tap"},
		{podNS, "link set eth0 master k6t-eth0"},
		{podNS, "link set tap0 master k6t-eth0"},
		{podNS, "link set k6t-eth0 up"},
		{podNS, "link set eth0 up"},
		{podNS, "link set tap0 up"},
	} {
		if out, err := testbed.IPIn(c.ns, splitArgs(c.args)...); err != nil {
			t.Fatalf("ip -n %s %s: %v: %s", c.ns, c.args, err, out)
		}
	}

	// tenure's DHCPv6 server on the node's end, one binding: the VM's.
	nodeMAC, err := linkMAC(nodeNS, "vm0")
	if err != nil {
		t.Fatal(err)
	}
	binding := dhcp6.Binding{Key: "guest/vm1", MAC: vmMAC, Address: vmAddr, Prefix: vmPrefix}
	lookup := dhcp6.LookupFunc(func(mac net.HardwareAddr, ifname string) (dhcp6.Binding, bool) {
		return binding, ifname == "vm0" && bytes.Equal(mac, vmMAC)
	})
	h := dhcp6.NewHandler(dhcp6.Config{ServerDUID: dhcp6.DUIDFromMAC(nodeMAC),
		PreferredLifetime: 4 * time.Second, ValidLifetime: 60 * time.Second, Preference: 255}, lookup, nil)
	var srv *dhcp6.Server
	if err := testbed.InNetns(nodeNS, func() (err error) {
		srv, err = dhcp6.NewServer("vm0", h)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve() }()
	defer srv.Close()

	vm, err := guest.Start(ctx, guest.Config{
		Image: img, Dir: t.TempDir(), Netns: podPath, Tap: "tap0", MAC: vmMAC,
		IPv4: vmIPv4, GatewayV4: nodeIPv4, GatewayV6: nodeLL,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer vm.Stop()
	t.Logf("QEMU runs with %s", vm.Accel())
	if s, err := vm.Status(); err != nil || s != "running" {
		t.Fatalf("QMP query-status: %q, %v; want running", s, err)
	}
	con := vm.Console()
	defer func() {
		if t.Failed() {
			t.Logf("the guest's console:\n%s", con)
		}
	}()

	// The lease: dhclient's exchange, and what its script installed.
	_, bound, err := con.Wait(ctx, 0, reBound)
	if err != nil {
		t.Fatal(err)
	}
	var gotAddr, prefixAddr netip.Addr
	var gotPfx netip.Prefix
	for _, l := range con.Leases() {
		if l.Reason != "BOUND6" {
			continue
		}
		if l.Address.IsValid() {
			gotAddr = l.Address
		}
		if l.Prefix.IsValid() {
			gotPfx, prefixAddr = l.Prefix, l.PrefixAddress
		}
	}
	if gotAddr != vmAddr || gotPfx != vmPrefix {
		t.Fatalf("the guest bound %s and %s, the binding holds %s and %s", gotAddr, gotPfx, vmAddr, vmPrefix)
	}
	if want := netip.MustParseAddr("fd00:1030:100::1"); prefixAddr != want {
		t.Fatalf("the guest put %s from its prefix on pd0, want %s", prefixAddr, want)
	}
	for _, re := range []string{`^XMT: Forming Solicit`, `^RCV: Advertise message on eth0`, `^XMT: Forming Request`, `^RCV: Reply message on eth0`} {
		if _, i, err := con.Wait(ctx, 0, regexp.MustCompile(re)); err != nil || i > bound {
			t.Errorf("dhclient logged no %q before it bound (line %d, bound at %d): %v", re, i, bound, err)
		}
	}
	// Its DUID is the DUID-LL of its MAC (type 3, hardware type 1).
	l, _, err := con.Wait(ctx, 0, reDUID)
	if err != nil {
		t.Fatal(err)
	}
	duid, err := strconv.Unquote(reDUID.FindStringSubmatch(l.Text)[1])
	if err != nil {
		t.Fatalf("dhclient's DUID %s: %v", l.Text, err)
	}
	if want := append([]byte{0, 3, 0, 1}, vmMAC...); duid != string(want) {
		t.Errorf("the guest's DUID is %x, want the DUID-LL of its MAC %x", duid, want)
	}

	// The node routes the prefix to the guest's address, as the agent does.
	if out, err := testbed.IPIn(nodeNS, "-6", "route", "replace", vmPrefix.String(), "via", vmAddr.String(), "dev", "vm0", "onlink"); err != nil {
		t.Fatalf("route: %v: %s", err, out)
	}
	for _, dst := range []netip.Addr{vmIPv4.Addr(), vmAddr, prefixAddr} {
		pingUntil(ctx, t, "/var/run/netns/"+nodeNS, dst)
	}
	// An address of the prefix the guest did not put on an interface: no
	// answer, so the answers above are the guest's own addresses'.
	if err := guest.Ping("/var/run/netns/"+nodeNS, netip.MustParseAddr("fd00:1030:100::2"), time.Second); err == nil {
		t.Errorf("fd00:1030:100::2, on no interface of the guest, answered a ping")
	}

	// The guest renews (T1 is 2 s) and is answered.
	if _, _, err := con.Wait(ctx, bound, reRenewed); err != nil {
		t.Fatal(err)
	}
	for _, l := range con.Leases() {
		if (l.Address.IsValid() && l.Address != vmAddr) || (l.Prefix.IsValid() && l.Prefix != vmPrefix) {
			t.Errorf("the guest reported %+v, the binding holds %s and %s", l, vmAddr, vmPrefix)
		}
	}
	t.Logf("the guest's DHCPv6 exchanges:\n%s", linesString(con.Exchanges()))
}

// pingUntil pings dst from the namespace at path until it answers.
func pingUntil(ctx context.Context, t *testing.T, path string, dst netip.Addr) {
	t.Helper()
	var err error
	for ctx.Err() == nil {
		if err = guest.Ping(path, dst, 500*time.Millisecond); err == nil {
			return
		}
	}
	t.Fatalf("the guest does not answer on %s: %v", dst, err)
}

func linkMAC(ns, ifname string) (net.HardwareAddr, error) {
	var mac net.HardwareAddr
	err := testbed.InNetns(ns, func() error {
		i, err := net.InterfaceByName(ifname)
		if err != nil {
			return err
		}
		mac = i.HardwareAddr
		return nil
	})
	return mac, err
}

func splitArgs(s string) []string {
	var out []string
	for _, f := range bytes.Fields([]byte(s)) {
		out = append(out, string(f))
	}
	return out
}

func linesString(ls []guest.Line) string {
	var b bytes.Buffer
	for _, l := range ls {
		fmt.Fprintf(&b, "%s %s\n", l.Time.Format("15:04:05.000"), l.Text)
	}
	return b.String()
}
