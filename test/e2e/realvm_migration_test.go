//go:build integration

package e2e

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tenure-ipam/tenure/internal/dataplane"
	"github.com/tenure-ipam/tenure/test/guest"
	"github.com/tenure-ipam/tenure/test/testbed"
)

// rvmIPAM: the router's and the nodes' addresses on the segment are
// excluded from the ranges, so no claim is given one of them.
const rvmIPAM = `{"ipRanges":[{"range":"10.98.0.0/24","exclude":["10.98.0.248/29"]},{"range":"fd00:98::/64","exclude":["fd00:98::f0/124"]}],
	"prefix_delegation":{"range":"fd00:9800::/40","prefix_length":56},
	"network_name":"realvm","dhcpv6":{"interfaces":["br0"],"preferred_lifetime":4,"valid_lifetime":60}}`

const (
	rvmMAC      = "02:00:00:00:98:01"
	rvmRouter4  = "10.98.0.254"
	rvmRouter6  = "fd00:98::fe"
	rvmRouterLL = "fe80::fe"
)

var rvmRenewed = regexp.MustCompile(`^tenure-guest: lease reason=RENEW6 prefix=`)

// A real VM (test/guest: QEMU, its own kernel and ISC dhclient)
// migrates live between two nodes served by tenure agents, KubeVirt's part
// played by writing its objects as its controllers do. Each node is a
// namespace whose bridge br0 holds the launcher pod's interface (a veth to
// the pod's namespace, where a bridge holds it and the VM's tap, as
// KubeVirt's bridge binding wires it, the pod's addresses handed to the
// guest) and an uplink to the segment's router, a third namespace. The
// router is the guests' default gateway, and it routes a delegated prefix
// to the node that routes it (a route follower plays the routing protocol
// that would export tenure's proto-116 routes: it copies each node's route
// as it appears). The router probes the guest's IPv4 address, its IA_NA
// address and an address of its prefix every 10 ms throughout.
//   - The source QEMU runs in the pod on node a; its dhclient leases the
//     claim's address and prefix from node a's agent, which routes the
//     prefix.
//   - The target pod's ADD runs on node b, the VMI records the migration,
//     and a target QEMU starts there with -incoming; the source migrates to
//     it (QMP migrate). Once the target QEMU runs, the VMI gets
//     targetNodeDomainReadyTimestamp as the target's virt-handler writes
//     it: node b routes the prefix, node a no more, the guest's next Renew
//     is answered by node b with the same address and prefix.
//   - Each address's loss window is at most 1 s; they are reported with
//     QEMU's downtime and the guest's DHCPv6 exchanges before, during and
//     after the migration.
func TestRealVMMigratesBetweenTwoNodesWithItsAddressPrefixAndRoute(t *testing.T) {
	ctx, c := dhcpTest(t, 6*time.Minute)
	if _, err := exec.LookPath(guest.QEMU); err != nil {
		testbed.SkipUnlessEverything(t, "no "+guest.QEMU+": install Debian's qemu-system-x86 (hack/test-deps.sh does)")
	}
	img, err := guest.Build(ctx)
	if err != nil {
		t.Fatal(err)
	}
	installKubeVirtCRDs(t, ctx)

	nodeA, nodeB, pathA, pathB := twoNodes(t, ctx, "trv")
	sfx := strconv.Itoa(os.Getpid() % 100000)
	router := "trv-r" + sfx
	routerPath, rm, err := testbed.AddNetns(router)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rm)
	noDAD(t, router)
	mustIP(t, router, "link", "add", "san0", "type", "bridge", "mcast_snooping", "0")
	mustIP(t, router, "addr", "add", rvmRouter4+"/24", "dev", "san0")
	mustIP(t, router, "addr", "add", rvmRouter6+"/64", "dev", "san0")
	mustIP(t, router, "addr", "add", rvmRouterLL+"/64", "dev", "san0")
	mustIP(t, router, "link", "set", "san0", "up")
	// The router follows the routes the nodes announce, not the nodes'
	// redirects to the guest itself.
	sysctl(t, router, "net.ipv6.conf.all.accept_redirects", "0")
	sysctl(t, router, "net.ipv6.conf.san0.accept_redirects", "0")
	nodeAddr := map[string]string{nodeA: "fd00:98::fa", nodeB: "fd00:98::fb"}
	for i, n := range []string{nodeA, nodeB} {
		up := fmt.Sprintf("up%d", i)
		mustIP(t, n, "link", "add", "uplink", "type", "veth", "peer", "name", up, "netns", router)
		mustIP(t, n, "link", "set", "uplink", "master", "br0", "up")
		mustIP(t, router, "link", "set", up, "master", "san0", "up")
		// A bridge takes the lowest MAC of its ports unless given one: each
		// new launcher pod's port could change it under the router's
		// neighbour entry for the node. A node's uplink has a MAC of its own.
		mustIP(t, n, "link", "set", "br0", "address", fmt.Sprintf("02:00:00:00:fa:%02x", i))
		mustIP(t, n, "addr", "add", nodeAddr[n]+"/64", "dev", "br0")
		sysctl(t, n, "net.ipv6.conf.all.forwarding", "1")
	}
	follow, err := guest.FollowRoutes(routerPath, "san0", dataplane.RouteProtocol,
		map[string]netip.Addr{pathA: netip.MustParseAddr(nodeAddr[nodeA]), pathB: netip.MustParseAddr(nodeAddr[nodeB])})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(follow.Stop)

	agentA, metricsA := startDataplaneAgent(t, ctx, "rvm-a", pathA, "")
	agentB, metricsB := startDataplaneAgent(t, ctx, "rvm-b", pathB, "")
	waitVMIsServed(t, ctx, agentA, agentB)
	confA, confB := netconf("dhcpnet", agentA.Socket, rvmIPAM), netconf("dhcpnet", agentB.Socket, rvmIPAM)

	vm := createVM(t, ctx, c, "realvm", "vm1", rvmMAC)
	vm.Start(ctx, t, c)
	podA := launcher(t, ctx, c, vm, "rvm-a", "")
	res, err := add(ctx, podA, confA)
	if err != nil {
		t.Fatalf("ADD of the source pod: %v", err)
	}
	vm.Running(ctx, t, c, podA.launcher())
	wantAddr, wantPrefix := claimHolds(t, ctx, c, vm.Namespace, vm.Claim)
	var ipv4 netip.Prefix
	for _, ip := range res.IPs {
		if a, ok := netip.AddrFromSlice(ip.Address.IP.To4()); ok && ip.Address.IP.To4() != nil {
			ones, _ := ip.Address.Mask.Size()
			ipv4 = netip.PrefixFrom(a, ones)
		}
	}
	if !ipv4.IsValid() {
		t.Fatalf("the source pod's ADD gave no IPv4 address: %v", addrs(res))
	}
	prefixAddr := wantPrefix.Addr().Next()
	mac, _ := net.ParseMAC(rvmMAC)
	// Each launcher pod has a network namespace of its own.
	vmConfig := func(node, incoming string) guest.Config {
		return guest.Config{Image: img, Dir: t.TempDir(), Netns: bridgeBindingPod(t, node), Tap: "tap0", MAC: mac,
			IPv4: ipv4, GatewayV4: netip.MustParseAddr(rvmRouter4), GatewayV6: netip.MustParseAddr(rvmRouterLL), Incoming: incoming}
	}
	src, err := guest.Start(ctx, vmConfig(nodeA, ""))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(src.Stop)
	t.Logf("QEMU runs with %s", src.Accel())
	// The consoles of every QEMU the VM ran in, in order.
	consoles := []*guest.Console{src.Console()}
	defer func() {
		if t.Failed() {
			for i, con := range consoles {
				t.Logf("QEMU %d's console:\n%s", i, con)
			}
		}
	}()
	if _, _, err := src.Console().Wait(ctx, 0, regexp.MustCompile(`^tenure-guest: lease reason=BOUND6 prefix=`)); err != nil {
		t.Fatal(err)
	}
	checkLeases(t, src.Console(), wantAddr, wantPrefix)
	wantRoute := fmt.Sprintf("%s via %s dev br0", wantPrefix, wantAddr)
	waitRoute(t, ctx, nodeA, wantPrefix, wantRoute, true)
	waitVia(t, ctx, follow, wantPrefix, nodeAddr[nodeA])

	targets := []netip.Addr{ipv4.Addr(), wantAddr, prefixAddr}
	prober, err := guest.StartProber(routerPath, 10*time.Millisecond, targets...)
	if err != nil {
		t.Fatal(err)
	}
	defer prober.Stop()
	waitAnswered(t, ctx, prober, targets, time.Now())

	nodeOf := map[string]string{"rvm-a": nodeA, "rvm-b": nodeB}
	metricsOf := map[string]string{"rvm-a": metricsA, "rvm-b": metricsB}
	agentOf := map[string]*testbed.Agent{"rvm-a": agentA, "rvm-b": agentB}
	confOf := map[string][]byte{"rvm-a": confA, "rvm-b": confB}
	type window struct {
		what       string
		begin, end time.Time
		downtime   int64
	}
	var windows []window
	cur, curPod, curNode := src, podA, "rvm-a"

	// migrate moves the VM from where it runs to node to, as KubeVirt does:
	// the target pod and its ADD, the VMI's migrationState, the target
	// QEMU with -incoming, QMP migrate from the source. With fail, the
	// target QEMU is killed before it runs, and the migration fails.
	migrate := func(uid, to string, fail bool) {
		t.Helper()
		from := curNode
		m := kvMigration{uid: uid, src: curPod}
		m.dst = launcher(t, ctx, c, vm, to, m.uid)
		if _, err := add(ctx, m.dst, confOf[to]); err != nil {
			t.Fatalf("ADD of the target pod on %s: %v", to, err)
		}
		vm.MigrationStart(ctx, t, c, m.kv())
		waitAgentLog(t, ctx, agentOf[to], "runs on node "+from+"; this node is its migration target")
		sock := filepath.Join(t.TempDir(), "migrate.sock")
		dst, err := guest.Start(ctx, vmConfig(nodeOf[to], "unix:"+sock))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(dst.Stop)
		if err := dst.WaitStatus(ctx, "inmigrate"); err != nil {
			t.Fatal(err)
		}
		renewsTo := counter(t, scrape(t, metricsOf[to]), "renew", "reply")
		renewsFrom := counter(t, scrape(t, metricsOf[from]), "renew", "reply")
		begin := time.Now()
		if err := cur.Migrate("unix:" + sock); err != nil {
			t.Fatal(err)
		}
		if fail {
			dst.Kill()
			if _, err := cur.WaitMigration(ctx); err == nil {
				t.Fatalf("the migration to %s completed with its target QEMU killed", to)
			}
			if err := cur.WaitStatus(ctx, "running"); err != nil {
				t.Fatal(err)
			}
			end := time.Now()
			vm.MigrationEnd(ctx, t, c, m.kv(), true)
			if err := del(ctx, m.dst, confOf[to]); err != nil {
				t.Fatalf("DEL of the failed migration's target pod: %v", err)
			}
			if err := testbed.ForceDeletePod(ctx, c, vm.Namespace, m.dst.name); err != nil {
				t.Fatal(err)
			}
			windows = append(windows, window{what: "failed migration " + from + " to " + to, begin: begin, end: end})
			// The guest stays served and routed where it runs.
			mark := len(cur.Console().Lines())
			if _, _, err := cur.Console().Wait(ctx, mark, rvmRenewed); err != nil {
				t.Fatal(err)
			}
			if n := counter(t, scrape(t, metricsOf[from]), "renew", "reply"); n <= renewsFrom {
				t.Fatalf("%s answered %v Renews, %v before the failed migration", from, n, renewsFrom)
			}
			if n := counter(t, scrape(t, metricsOf[to]), "renew", "reply"); n != renewsTo {
				t.Errorf("%s answered %v Renews after a failed migration to it, %v before", to, n, renewsTo)
			}
			waitRoute(t, ctx, nodeOf[from], wantPrefix, wantRoute, true)
			waitRoute(t, ctx, nodeOf[to], wantPrefix, "", false)
			waitVia(t, ctx, follow, wantPrefix, nodeAddr[nodeOf[from]])
			waitOwner(t, ctx, c, vm.Namespace, vm.Claim, curPod.name)
			return
		}
		mig, err := cur.WaitMigration(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := dst.WaitStatus(ctx, "running"); err != nil {
			t.Fatal(err)
		}
		running := time.Now()
		// The target's virt-handler reports the domain ready once it runs.
		signalled := vm.DomainReady(ctx, t, c)
		cur.Stop()
		waitRoute(t, ctx, nodeOf[to], wantPrefix, wantRoute, true)
		routed := time.Now()
		waitRoute(t, ctx, nodeOf[from], wantPrefix, "", false)
		waitVia(t, ctx, follow, wantPrefix, nodeAddr[nodeOf[to]])
		// The switchover ends when the fabric routes the prefix to the
		// target: a probe lost until then is the migration's.
		switched := time.Now()
		t.Logf("%s to %s: QEMU migrated in %d ms (downtime %d ms); the target ran %v after migrate; targetNodeDomainReadyTimestamp written %v later; %s's route seen %v after that",
			from, to, mig.TotalTime, mig.Downtime, running.Sub(begin).Round(time.Millisecond),
			signalled.Sub(running).Round(time.Millisecond), to, routed.Sub(signalled).Round(time.Millisecond))
		windows = append(windows, window{what: "migration " + from + " to " + to, begin: begin, end: switched, downtime: mig.Downtime})

		// The guest's next Renew, from the target, is answered there, and
		// the one after it too; the source answers none.
		_, renewed, err := dst.Console().Wait(ctx, 0, rvmRenewed)
		if err != nil {
			t.Fatal(err)
		}
		if n := counter(t, scrape(t, metricsOf[to]), "renew", "reply"); n <= renewsTo {
			t.Fatalf("%s answered %v Renews, %v before the migration: the guest's Renew from it was not answered there", to, n, renewsTo)
		}
		renewsFrom = counter(t, scrape(t, metricsOf[from]), "renew", "reply")
		if _, _, err := dst.Console().Wait(ctx, renewed+1, rvmRenewed); err != nil {
			t.Fatal(err)
		}
		if n := counter(t, scrape(t, metricsOf[from]), "renew", "reply"); n != renewsFrom {
			t.Errorf("%s answered %v Renews after the switchover, %v before", from, n, renewsFrom)
		}
		checkLeases(t, dst.Console(), wantAddr, wantPrefix)
		waitOwner(t, ctx, c, vm.Namespace, vm.Claim, m.dst.name)
		vm.MigrationEnd(ctx, t, c, m.kv(), false)
		if err := del(ctx, curPod, confOf[from]); err != nil {
			t.Fatalf("DEL of the source pod: %v", err)
		}
		if err := testbed.ForceDeletePod(ctx, c, vm.Namespace, curPod.name); err != nil {
			t.Fatal(err)
		}
		cur, curPod, curNode = dst, m.dst, to
		consoles = append(consoles, dst.Console())
	}
	migrate("migration-1", "rvm-b", false)
	migrate("migration-2", "rvm-a", true)
	migrate("migration-3", "rvm-a", false)
	if a, p := claimHolds(t, ctx, c, vm.Namespace, vm.Claim); a != wantAddr || p != wantPrefix {
		t.Fatalf("after the migrations the claim holds %s and %s, want %s and %s", a, p, wantAddr, wantPrefix)
	}

	defer func() {
		if t.Failed() {
			for _, n := range []string{router, nodeA, nodeB} {
				r, _ := testbed.IPIn(n, "-6", "route", "show")
				nb, _ := testbed.IPIn(n, "-6", "neigh", "show")
				t.Logf("%s: routes:\n%s\nneighbours:\n%s", n, r, nb)
			}
		}
	}()
	waitAnswered(t, ctx, prober, targets, time.Now())
	if err := prober.Stop(); err != nil {
		t.Fatal(err)
	}
	end := time.Now()
	var spans []guest.Span
	for _, w := range windows {
		spans = append(spans, guest.Span{From: w.begin, To: w.end})
	}
	for _, a := range targets {
		for _, o := range guest.Unattributed(guest.Outages(prober.Probes(a)), spans) {
			t.Errorf("%s: %d probes lost from %s, outside every migration", a, o.Lost, o.Start.Format("15:04:05.000"))
		}
	}
	for _, w := range windows {
		lost := map[netip.Addr]time.Duration{}
		var report []string
		for _, a := range targets {
			var n int
			lost[a], n = guest.LostIn(guest.Outages(prober.Probes(a)), guest.Span{From: w.begin, To: w.end}, end)
			report = append(report, fmt.Sprintf("%s %v (%d probes)", a, lost[a].Round(time.Millisecond), n))
			if lost[a] > time.Second {
				t.Errorf("%s: %s lost %v, over 1 s", w.what, a, lost[a])
			}
		}
		t.Logf("%s (QEMU downtime %d ms): loss windows %s; the prefix's exceeds the IA_NA address's by %v",
			w.what, w.downtime, strings.Join(report, ", "), (lost[prefixAddr] - lost[wantAddr]).Round(time.Millisecond))
	}
	var ex strings.Builder
	for i, con := range consoles {
		fmt.Fprintf(&ex, "QEMU %d:\n%s", i, linesOf(con.Exchanges()))
	}
	var ws []string
	for _, w := range windows {
		ws = append(ws, fmt.Sprintf("%s %s to %s", w.what, w.begin.Format("15:04:05.000"), w.end.Format("15:04:05.000")))
	}
	t.Logf("the guest's DHCPv6 exchanges (%s):\n%s", strings.Join(ws, "; "), ex.String())
}

// bridgeBindingPod makes a launcher pod's network namespace behind node's
// br0, wired as KubeVirt's bridge binding wires it: the pod's interface
// (eth0, a veth from br0) without addresses, in a bridge (k6t-eth0) with
// the VM's tap (tap0). It returns the namespace's path.
func bridgeBindingPod(t *testing.T, node string) string {
	t.Helper()
	n := podSeq.Add(1)
	name := fmt.Sprintf("%s-pod%d", node, n)
	port := fmt.Sprintf("vmpod%d", n)
	path, rm, err := testbed.AddNetns(name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rm)
	mustIP(t, node, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", name)
	mustIP(t, node, "link", "set", port, "master", "br0", "up")
	for _, args := range [][]string{
		{"link", "add", "k6t-eth0", "type", "bridge"},
		{"tuntap", "add", "dev", "tap0", "mode", "tap"},
		{"link", "set", "eth0", "master", "k6t-eth0"},
		{"link", "set", "tap0", "master", "k6t-eth0"},
		{"link", "set", "k6t-eth0", "up"},
		{"link", "set", "eth0", "up"},
		{"link", "set", "tap0", "up"},
	} {
		mustIP(t, name, args...)
	}
	return path
}

func sysctl(t *testing.T, ns, key, value string) {
	t.Helper()
	if out, err := exec.Command("ip", "netns", "exec", ns, "sysctl", "-qw", key+"="+value).CombinedOutput(); err != nil {
		t.Fatalf("sysctl %s=%s in %s: %v: %s", key, value, ns, err, out)
	}
}

// waitVia waits until the router routes prefix via the node address addr.
func waitVia(t *testing.T, ctx context.Context, f *guest.RouteFollower, prefix netip.Prefix, addr string) {
	t.Helper()
	poll(t, ctx, 20*time.Second, fmt.Sprintf("the router's route to %s via %s", prefix, addr), func() bool {
		via, ok := f.Via(prefix)
		return ok && via.String() == addr
	})
}

// checkLeases checks every lease report of the console names addr or
// prefix, and that there is one.
func checkLeases(t *testing.T, con *guest.Console, addr netip.Addr, prefix netip.Prefix) {
	t.Helper()
	leases := con.Leases()
	if len(leases) == 0 {
		t.Fatalf("the guest reported no lease")
	}
	for _, l := range leases {
		if (l.Address.IsValid() && l.Address != addr) || (l.Prefix.IsValid() && l.Prefix != prefix) {
			t.Errorf("the guest reported %+v, the claim holds %s and %s", l, addr, prefix)
		}
	}
}

// waitAnswered waits until every one of dsts answered a probe sent after t.
func waitAnswered(t *testing.T, ctx context.Context, p *guest.Prober, dsts []netip.Addr, after time.Time) {
	t.Helper()
	for _, d := range dsts {
		poll(t, ctx, 30*time.Second, fmt.Sprintf("%s to answer a probe sent after %s", d, after.Format("15:04:05.000")), func() bool {
			return p.AnsweredAfter(d, after)
		})
	}
}

func linesOf(ls []guest.Line) string {
	var b strings.Builder
	for _, l := range ls {
		fmt.Fprintf(&b, "%s %s\n", l.Time.Format("15:04:05.000"), l.Text)
	}
	return b.String()
}
