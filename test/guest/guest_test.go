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
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/tenure-ipam/tenure/internal/dhcp6"
	"github.com/tenure-ipam/tenure/test/guest"
	"github.com/tenure-ipam/tenure/test/testbed"
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
// The other end of the veth is on the "node"'s bridge, where tenure's
// DHCPv6 server (internal/dhcp6, as the agent serves it) holds one binding
// for the VM's MAC. The guest's own dhclient asks for IA_NA and IA_PD with a DUID-LL of
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

	site := newSite(ctx, t, 1)
	prefixAddr := netip.MustParseAddr("fd00:1030:100::1")

	vm := site.start(ctx, t, img, 0, "")
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
	bound := waitBound(ctx, t, con)
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

	site.routePrefix(t)
	for _, dst := range []netip.Addr{vmIPv4.Addr(), vmAddr, prefixAddr} {
		pingUntil(ctx, t, site.nodePath, dst)
	}
	// An address of the prefix the guest did not put on an interface: no
	// answer, so the answers above are the guest's own addresses'.
	if err := guest.Ping(site.nodePath, netip.MustParseAddr("fd00:1030:100::2"), time.Second); err == nil {
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

// site is a node namespace with a bridge, br0, on which tenure's DHCPv6
// server holds one binding (the VM's), and launcher pod namespaces, each
// wired as KubeVirt's bridge binding wires a pod: a veth from br0 to the
// pod's eth0, and in the pod a bridge (k6t-eth0) holding eth0 and the
// VM's tap, tap0; eth0's addresses are the guest's.
type site struct {
	nodeNS, nodePath string
	pods             []string // network namespace paths
}

func newSite(ctx context.Context, t *testing.T, pods int) *site {
	t.Helper()
	sfx := strconv.Itoa(os.Getpid())
	s := &site{nodeNS: "tg-node-" + sfx}
	var err error
	var rm func()
	if s.nodePath, rm, err = testbed.AddNetns(s.nodeNS); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rm)
	cmds := []struct{ ns, args string }{
		{s.nodeNS, "link add br0 type bridge"},
		{s.nodeNS, "addr add " + nodeIPv4.String() + "/24 dev br0"},
		{s.nodeNS, "addr add " + nodeIPv6 + " dev br0 nodad"},
		{s.nodeNS, "addr add " + nodeLL.String() + "/64 dev br0 nodad"},
		{s.nodeNS, "link set br0 up"},
	}
	for i := range pods {
		podNS := fmt.Sprintf("tg-pod%d-%s", i, sfx)
		path, rm, err := testbed.AddNetns(podNS)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(rm)
		s.pods = append(s.pods, path)
		port := fmt.Sprintf("pod%d", i)
		cmds = append(cmds, []struct{ ns, args string }{
			{s.nodeNS, "link add " + port + " type veth peer name eth0 netns " + podNS},
			{s.nodeNS, "link set " + port + " master br0"},
			{s.nodeNS, "link set " + port + " up"},
			{podNS, "link add k6t-eth0 type bridge"},
			{podNS, "tuntap add dev tap0 mode tap"},
			{podNS, "link set eth0 master k6t-eth0"},
			{podNS, "link set tap0 master k6t-eth0"},
			{podNS, "link set k6t-eth0 up"},
			{podNS, "link set eth0 up"},
			{podNS, "link set tap0 up"},
		}...)
	}
	for _, c := range cmds {
		if out, err := testbed.IPIn(c.ns, splitArgs(c.args)...); err != nil {
			t.Fatalf("ip -n %s %s: %v: %s", c.ns, c.args, err, out)
		}
	}

	// tenure's DHCPv6 server on br0, one binding: the VM's.
	nodeMAC, err := linkMAC(s.nodeNS, "br0")
	if err != nil {
		t.Fatal(err)
	}
	binding := dhcp6.Binding{Key: "guest/vm1", MAC: vmMAC, Address: vmAddr, Prefix: vmPrefix}
	lookup := dhcp6.LookupFunc(func(mac net.HardwareAddr, ifname string) (dhcp6.Binding, bool) {
		return binding, ifname == "br0" && bytes.Equal(mac, vmMAC)
	})
	h := dhcp6.NewHandler(dhcp6.Config{ServerDUID: dhcp6.DUIDFromMAC(nodeMAC),
		PreferredLifetime: 4 * time.Second, ValidLifetime: 60 * time.Second, Preference: 255}, lookup, nil)
	var srv *dhcp6.Server
	if err := testbed.InNetns(s.nodeNS, func() (err error) {
		srv, err = dhcp6.NewServer("br0", h)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve() }()
	t.Cleanup(func() { srv.Close() })
	return s
}

// start starts the VM's QEMU in pod i, waiting for a migration on incoming
// when set.
func (s *site) start(ctx context.Context, t *testing.T, img guest.Image, i int, incoming string) *guest.VM {
	t.Helper()
	vm, err := guest.Start(ctx, guest.Config{
		Image: img, Dir: t.TempDir(), Netns: s.pods[i], Tap: "tap0", MAC: vmMAC,
		IPv4: vmIPv4, GatewayV4: nodeIPv4, GatewayV6: nodeLL, Incoming: incoming,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(vm.Stop)
	return vm
}

// routePrefix routes the VM's prefix to its address on br0, as the agent
// of the node serving it does.
func (s *site) routePrefix(t *testing.T) {
	t.Helper()
	if out, err := testbed.IPIn(s.nodeNS, "-6", "route", "replace", vmPrefix.String(), "via", vmAddr.String(), "dev", "br0", "onlink"); err != nil {
		t.Fatalf("route: %v: %s", err, out)
	}
}

// waitBound waits for the guest to bind an address and a prefix, checks
// they are the binding's, and returns the console index of the prefix's
// report.
func waitBound(ctx context.Context, t *testing.T, con *guest.Console) int {
	t.Helper()
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
	return bound
}

// The VM migrates live between two launcher pods (QMP migrate from the
// source QEMU to a target QEMU started with -incoming), as KubeVirt moves a
// VM, while the node probes its IPv4 address, its IA_NA address and an
// address of its prefix every 10 ms. The guest keeps its address and
// prefix, its dhclient renews them from the target, and every address
// answers again after the move; each address's loss window is reported
// beside QEMU's own downtime.
func TestRealVMMigratesBetweenPodsKeepingItsAddressAndPrefix(t *testing.T) {
	testbed.NeedPlumb(t)
	if _, err := exec.LookPath(guest.QEMU); err != nil {
		testbed.SkipUnlessEverything(t, "no "+guest.QEMU+": install Debian's qemu-system-x86 (hack/test-deps.sh does)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	img, err := guest.Build(ctx)
	if err != nil {
		t.Fatal(err)
	}
	site := newSite(ctx, t, 2)
	prefixAddr := netip.MustParseAddr("fd00:1030:100::1")
	src := site.start(ctx, t, img, 0, "")
	t.Logf("QEMU runs with %s", src.Accel())
	waitBound(ctx, t, src.Console())
	site.routePrefix(t)
	targets := []netip.Addr{vmIPv4.Addr(), vmAddr, prefixAddr}
	for _, dst := range targets {
		pingUntil(ctx, t, site.nodePath, dst)
	}

	sock := filepath.Join(t.TempDir(), "migrate.sock")
	dst := site.start(ctx, t, img, 1, "unix:"+sock)
	defer func() {
		if t.Failed() {
			t.Logf("the source's console:\n%s\nthe target's console:\n%s", src.Console(), dst.Console())
		}
	}()
	if err := dst.WaitStatus(ctx, "inmigrate"); err != nil {
		t.Fatal(err)
	}
	prober, err := guest.StartProber(site.nodePath, 10*time.Millisecond, targets...)
	if err != nil {
		t.Fatal(err)
	}
	defer prober.Stop()
	warm := time.Now()
	waitAnswered(ctx, t, prober, targets, warm)

	// The stream goes over TCP as between nodes: the source writes into a
	// connection to a port the node serves and joins to the target's
	// incoming socket.
	proxy, err := guest.ServeMigration(site.nodePath, net.JoinHostPort(nodeIPv4.String(), "0"), sock)
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Stop()
	conn, err := guest.DialIn(site.nodePath, proxy.Addr())
	if err != nil {
		t.Fatal(err)
	}
	begin := time.Now()
	err = src.MigrateConn(conn)
	conn.Close()
	if err != nil {
		t.Fatal(err)
	}
	m, err := src.WaitMigration(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := dst.WaitStatus(ctx, "running"); err != nil {
		t.Fatal(err)
	}
	end := time.Now()
	if s, err := src.Status(); err != nil || s != "postmigrate" {
		t.Errorf("the source QEMU reports %q, %v after the migration; want postmigrate", s, err)
	}
	// KubeVirt ends the source's QEMU once the target runs.
	src.Stop()

	// The guest renews from the target, with the same address and prefix.
	if _, _, err := dst.Console().Wait(ctx, 0, reRenewed); err != nil {
		t.Fatal(err)
	}
	waitAnswered(ctx, t, prober, targets, time.Now())
	if err := prober.Stop(); err != nil {
		t.Fatal(err)
	}
	for _, l := range append(src.Console().Leases(), dst.Console().Leases()...) {
		if (l.Address.IsValid() && l.Address != vmAddr) || (l.Prefix.IsValid() && l.Prefix != vmPrefix) {
			t.Errorf("the guest reported %+v, the binding holds %s and %s", l, vmAddr, vmPrefix)
		}
	}

	t.Logf("migration: %v from migrate to the target running; QEMU: downtime %d ms, total %d ms", end.Sub(begin).Round(time.Millisecond), m.Downtime, m.TotalTime)
	windows := map[netip.Addr]time.Duration{}
	for _, a := range targets {
		var window time.Duration
		lost := 0
		for _, o := range guest.Outages(prober.Probes(a)) {
			if o.End.IsZero() {
				t.Errorf("%s: unanswered from %s to the end", a, o.Start.Format("15:04:05.000"))
				continue
			}
			if o.Start.Before(begin) || o.Start.After(end) {
				t.Errorf("%s: %d probes lost from %s, outside the migration (%s to %s)", a, o.Lost, o.Start.Format("15:04:05.000"),
					begin.Format("15:04:05.000"), end.Format("15:04:05.000"))
			}
			window += o.Window(end)
			lost += o.Lost
		}
		t.Logf("%s: loss window %v (%d probes)", a, window.Round(time.Millisecond), lost)
		windows[a] = window
		// The bound for a migration under TCG.
		if window > time.Second {
			t.Errorf("%s: loss window %v, over 1 s", a, window)
		}
	}
	if d := windows[prefixAddr] - windows[vmAddr]; d > 50*time.Millisecond {
		t.Errorf("the prefix's loss window %v exceeds the address's %v by %v, over 50 ms", windows[prefixAddr], windows[vmAddr], d)
	}
	t.Logf("the guest's DHCPv6 exchanges, source then target (migration %s to %s):\n%s%s", begin.Format("15:04:05.000"), end.Format("15:04:05.000"),
		linesString(src.Console().Exchanges()), linesString(dst.Console().Exchanges()))
}

// waitAnswered waits until every one of dsts answered a probe sent after t.
func waitAnswered(ctx context.Context, t *testing.T, p *guest.Prober, dsts []netip.Addr, after time.Time) {
	t.Helper()
	for _, d := range dsts {
		for !p.AnsweredAfter(d, after) {
			select {
			case <-ctx.Done():
				t.Fatalf("%s answers no probe sent after %s", d, after.Format("15:04:05.000"))
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
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
