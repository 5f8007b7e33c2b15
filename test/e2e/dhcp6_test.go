//go:build integration

package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv6"
	"github.com/insomniacslk/dhcp/dhcpv6/nclient6"
	corev1 "k8s.io/api/core/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tenure-ipam/tenure/test/controlplane/cptest"
	"github.com/tenure-ipam/tenure/test/testbed"
)

// The guest's MAC: the VM keeps it across the migration.
const (
	dhcpVMMAC    = "02:00:00:d6:00:01"
	dhcpOtherMAC = "02:00:00:d6:00:02"
)

// TestDHCPv6ServesTheClaimAcrossLiveMigration: two "nodes" (network
// namespaces with a bridge br0, each served by its own tenure-agent process
// whose dataplane is that namespace), a VM guest behind node-a's bridge and
// the same guest (same MAC, same DUID) behind node-b's after a live
// migration. ISC dhclient in the guest gets the claim's IPv6 address and
// delegated /56 from the agent of the node hosting the claim's owner pod,
// and only from it; the route to the prefix follows the owner.
func TestDHCPv6ServesTheClaimAcrossLiveMigration(t *testing.T) {
	requireDHCPTools(t)
	ctx := testContext(t, 3*time.Minute)
	c := apiClient(t)

	sfx := strconv.Itoa(os.Getpid() % 100000)
	nodeA, nodeB := "tdp-na-"+sfx, "tdp-nb-"+sfx
	ga, gb, gc := "tdp-ga-"+sfx, "tdp-gb-"+sfx, "tdp-gc-"+sfx
	pathA := dhcpNode(t, nodeA)
	pathB := dhcpNode(t, nodeB)
	dhcpGuest(t, ga, nodeA, "vga", dhcpVMMAC)
	dhcpGuest(t, gb, nodeB, "vgb", dhcpVMMAC)
	dhcpGuest(t, gc, nodeA, "vgc", dhcpOtherMAC)
	for _, ns := range []string{nodeA, nodeB} {
		waitLinkLocal(t, ctx, ns, "br0")
	}
	for _, ns := range []string{ga, gb, gc} {
		waitLinkLocal(t, ctx, ns, "eth0")
	}

	agentA, metricsA := startDataplaneAgent(t, ctx, "dhcp-a", pathA, "")
	agentB, _ := startDataplaneAgent(t, ctx, "dhcp-b", pathB, "")
	const ipam = `{"ipRanges":[{"range":"10.96.0.0/24"},{"range":"fd00:96::/64"}],
		"prefix_delegation":{"range":"fd00:9600::/40","prefix_length":56},
		"network_name":"dhcpnet","dhcpv6":{"interfaces":["br0"]}}`
	const ns, claimName = "dhcp6", "vm1.dhcpnet"
	createClaim(t, ctx, c, ns, claimName, "dhcpnet")

	// Pod A: the network-selection element carries the VM's MAC.
	podA := newPod(t, ctx, c, ns, "dhcp-a", map[string]string{"k8s.v1.cni.cncf.io/networks": fmt.Sprintf(
		`[{"name":"dhcpnet","interface":"net1","ipam-claim-reference":%q,"mac":%q}]`, claimName, dhcpVMMAC)})
	if _, err := add(ctx, podA, netconf("dhcpnet", agentA.Socket, ipam)); err != nil {
		t.Fatalf("ADD of pod A: %v", err)
	}
	cl := getClaim(t, ctx, c, ns, claimName)
	var wantAddr netip.Addr
	for _, s := range cl.Status.IPs {
		if p, err := netip.ParsePrefix(s); err == nil && p.Addr().Is6() {
			wantAddr = p.Addr()
		}
	}
	if !wantAddr.IsValid() || len(cl.Status.DelegatedPrefixes) != 1 || cl.Status.OwnerPod == nil || cl.Status.OwnerPod.Name != podA.name {
		t.Fatalf("claim status %+v: want an IPv6 address, one prefix, ownerPod %s", cl.Status, podA.name)
	}
	wantPrefix := netip.MustParsePrefix(cl.Status.DelegatedPrefixes[0])
	if wantPrefix.Bits() != 56 {
		t.Fatalf("delegated prefix %s, want a /56", wantPrefix)
	}
	t.Logf("claim holds %s and %s", wantAddr, wantPrefix)

	// A real client on node-a gets exactly the claim's address and prefix.
	leaseA := runDhclient(t, ctx, ga)
	if leaseA.addr != wantAddr || leaseA.prefix != wantPrefix {
		t.Fatalf("dhclient on node-a leased %s and %s, the claim holds %s and %s", leaseA.addr, leaseA.prefix, wantAddr, wantPrefix)
	}
	if shown, _ := testbed.IPIn(ga, "-6", "addr", "show", "dev", "eth0"); !strings.Contains(shown, wantAddr.String()+"/") {
		t.Fatalf("guest eth0 does not show the leased address %s: %s", wantAddr, shown)
	}
	wantRoute := fmt.Sprintf("%s via %s dev br0", wantPrefix, wantAddr)
	waitRoute(t, ctx, nodeA, wantPrefix, wantRoute, true)

	// A client without a reservation on this node gets nothing; the owner's
	// client, asking the same way at the same time, is answered.
	if adv, err := solicit(t, gc, 3*time.Second); !errors.Is(err, nclient6.ErrNoResponse) {
		t.Fatalf("client without a reservation: advertise %v, err %v; want no response", adv, err)
	}
	if adv, err := solicit(t, ga, 3*time.Second); err != nil || advertisedAddr(adv) != wantAddr {
		t.Fatalf("owner's client on node-a: %v, %v; want an Advertise of %s", adv, err, wantAddr)
	}

	// Live migration: pod B on node-b presents the same claim. Its element
	// has no mac: the MAC comes from the network-status Multus writes after
	// the ADD.
	podB := newPod(t, ctx, c, ns, "dhcp-b", map[string]string{"k8s.v1.cni.cncf.io/networks": fmt.Sprintf(
		`[{"name":"dhcpnet","interface":"net1","ipam-claim-reference":%q}]`, claimName)})
	if _, err := add(ctx, podB, netconf("dhcpnet", agentB.Socket, ipam)); err != nil {
		t.Fatalf("ADD of pod B: %v", err)
	}
	if cl := getClaim(t, ctx, c, ns, claimName); cl.Status.OwnerPod == nil || cl.Status.OwnerPod.Name != podB.name {
		t.Fatalf("after the target's ADD ownerPod is %+v, want %s", cl.Status.OwnerPod, podB.name)
	}
	writeNetworkStatus(t, ctx, c, podB, "net1", dhcpVMMAC, wantAddr)

	waitRoute(t, ctx, nodeB, wantPrefix, wantRoute, true)
	waitRoute(t, ctx, nodeA, wantPrefix, "", false)

	// Node-a no longer answers the VM's identity.
	if adv, err := solicit(t, ga, 3*time.Second); !errors.Is(err, nclient6.ErrNoResponse) {
		t.Fatalf("node-a after the migration: advertise %v, err %v; want no response", adv, err)
	}
	// Node-b answers it with the same address and prefix.
	leaseB := runDhclient(t, ctx, gb)
	if leaseB.addr != wantAddr || leaseB.prefix != wantPrefix {
		t.Fatalf("dhclient on node-b leased %s and %s, want %s and %s", leaseB.addr, leaseB.prefix, wantAddr, wantPrefix)
	}
	if leaseA.duid == "" || leaseA.duid != leaseB.duid {
		t.Fatalf("client DUIDs differ: %q on node-a, %q on node-b", leaseA.duid, leaseB.duid)
	}
	if leaseA.serverID == "" || leaseA.serverID != leaseB.serverID {
		t.Errorf("server identifiers differ across nodes (%q, %q): a migrated guest could not renew", leaseA.serverID, leaseB.serverID)
	}

	// Agent B dies (kill -9) and comes back: it learns the network's dhcpv6
	// settings from its state file, not from an ADD, keeps the route and
	// answers the guest again.
	agentB.Kill()
	startDataplaneAgent(t, ctx, "dhcp-b", pathB, filepath.Dir(agentB.Socket))
	waitRoute(t, ctx, nodeB, wantPrefix, wantRoute, true)
	var (
		adv *dhcpv6.Message
		err error
	)
	poll(t, ctx, 20*time.Second, "an Advertise from the restarted agent", func() bool {
		adv, err = solicit(t, gb, time.Second)
		return err == nil
	})
	if advertisedAddr(adv) != wantAddr {
		t.Fatalf("restarted agent advertised %v, want %s", adv, wantAddr)
	}
	waitRoute(t, ctx, nodeA, wantPrefix, "", false)

	// The VM stops: its pod goes, and so do the route and the answers.
	if err := testbed.ForceDeletePod(ctx, c, ns, podB.name); err != nil {
		t.Fatal(err)
	}
	waitRoute(t, ctx, nodeB, wantPrefix, "", false)
	if adv, err := solicit(t, gb, 2*time.Second); !errors.Is(err, nclient6.ErrNoResponse) {
		t.Fatalf("node-b after the owner pod was deleted: advertise %v, err %v; want no response", adv, err)
	}

	// The agent's metrics saw the silent answer and the advertisements.
	m := scrape(t, metricsA)
	if n := counter(t, m, "solicit", "nobinding"); n < 2 {
		t.Errorf("node-a counted %v unanswered Solicits, want at least 2:\n%s", n, m)
	}
	if n := counter(t, m, "solicit", "advertise"); n < 2 {
		t.Errorf("node-a counted %v Advertises, want at least 2", n)
	}
	if n := counter(t, m, "request", "reply"); n < 1 {
		t.Errorf("node-a counted %v Replies to Request, want at least 1", n)
	}
}

// dhcpNode makes a "node": a namespace with bridge br0 up (DAD off, so its
// link-local address is usable at once).
func dhcpNode(t *testing.T, name string) string {
	t.Helper()
	path, remove, err := testbed.AddNetns(name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(remove)
	noDAD(t, name)
	mustIP(t, name, "link", "add", "br0", "type", "bridge", "mcast_snooping", "0")
	mustIP(t, name, "link", "set", "br0", "up")
	return path
}

// dhcpGuest makes a guest namespace whose eth0 (with mac) is a veth plugged
// into node's br0. Both ends are made inside namespaces of the test.
func dhcpGuest(t *testing.T, name, node, hostIf, mac string) {
	t.Helper()
	_, remove, err := testbed.AddNetns(name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(remove)
	noDAD(t, name)
	mustIP(t, node, "link", "add", hostIf, "type", "veth", "peer", "name", "eth0", "netns", name)
	mustIP(t, node, "link", "set", hostIf, "master", "br0", "up")
	mustIP(t, name, "link", "set", "eth0", "address", mac, "up")
}

func noDAD(t *testing.T, ns string) {
	t.Helper()
	out, err := exec.Command("ip", "netns", "exec", ns, "sh", "-c",
		"echo 0 > /proc/sys/net/ipv6/conf/all/accept_dad && echo 0 > /proc/sys/net/ipv6/conf/default/accept_dad").CombinedOutput()
	if err != nil {
		t.Fatalf("disabling DAD in %s: %v: %s", ns, err, out)
	}
}

func mustIP(t *testing.T, ns string, args ...string) string {
	t.Helper()
	out, err := testbed.IPIn(ns, args...)
	if err != nil {
		t.Fatalf("ip -n %s %s: %v: %s", ns, strings.Join(args, " "), err, out)
	}
	return out
}

func waitLinkLocal(t *testing.T, ctx context.Context, ns, dev string) {
	t.Helper()
	poll(t, ctx, 20*time.Second, fmt.Sprintf("a link-local address on %s in %s", dev, ns), func() bool {
		out, _ := testbed.IPIn(ns, "-6", "addr", "show", "dev", dev, "scope", "link")
		return strings.Contains(out, "fe80::") && !strings.Contains(out, "tentative")
	})
}

// poll calls cond every 50 ms until it holds, failing after d.
func poll(t *testing.T, ctx context.Context, d time.Duration, what string, cond func() bool) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, d, true, func(context.Context) (bool, error) {
		return cond(), nil
	}); err != nil {
		t.Fatalf("timed out after %v waiting for %s", d, what)
	}
}

// startDataplaneAgent starts tenure-agent for node with its dataplane in the
// namespace at netnsPath and metrics on a loopback port; it returns the
// agent and its metrics URL.
// A dir "" is a new one (short: the socket path must fit sun_path); the
// same dir again restarts the agent with its socket and state file.
func startDataplaneAgent(t *testing.T, ctx context.Context, node, netnsPath, dir string) (*testbed.Agent, string) {
	t.Helper()
	if _, err := testbed.CreateNode(ctx, apiClient(t), node); err != nil {
		t.Fatal(err)
	}
	first := dir == ""
	if first {
		var err error
		if dir, err = os.MkdirTemp("", "tdp-"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	// The same dir again: the same pod-bound token, as a restarted container keeps.
	kubeconfig, err := testbed.NodeAgentKubeconfig(ctx, cptest.Current().Config, node, dir)
	if err != nil {
		t.Fatal(err)
	}
	socket := filepath.Join(dir, node+".sock")
	p, err := testbed.StartProcess("agent-"+node, bins.Agent, filepath.Join(dir, node+".log"),
		"--node-name", node, "--socket", socket, "--kubeconfig", kubeconfig,
		"--dataplane-netns", netnsPath, "--metrics-addr", addr, testbed.NoProbe)
	if err != nil {
		t.Fatal(err)
	}
	a := &testbed.Agent{Process: p, Node: node, Socket: socket, Kubeconfig: kubeconfig}
	t.Cleanup(func() {
		a.Stop()
		if first {
			checkNotRefused(t, a)
		}
		if first && (t.Failed() || os.Getenv("TENURE_E2E_LOGS") != "") { // a restart appends to the same log
			b, _ := os.ReadFile(a.Log)
			t.Logf("agent %s log:\n%s", node, b)
		}
	})
	if err := a.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	return a, "http://" + addr + "/metrics"
}

type dhcpLease struct {
	addr     netip.Addr
	prefix   netip.Prefix
	duid     string // default-duid of the lease file
	serverID string
}

// runDhclient runs ISC dhclient in ns (testbed.Dhclient) until its lease
// file holds an address and a prefix, then stops it.
func runDhclient(t *testing.T, ctx context.Context, ns string) dhcpLease {
	t.Helper()
	d := startDhclient(t, ns)
	defer d.stop()
	return d.waitLease(ctx)
}

// dhclientRun is a testbed.Dhclient of one test, stopped when it ends.
type dhclientRun struct {
	t  *testing.T
	ns string
	*testbed.Dhclient
}

// startDhclient starts dhclient in ns; it keeps running, renewing at the
// T1 the server gives, until stop.
func startDhclient(t *testing.T, ns string) *dhclientRun {
	t.Helper()
	d, err := testbed.StartDhclient(ns, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Stop)
	return &dhclientRun{t: t, ns: ns, Dhclient: d}
}

func (d *dhclientRun) stop()                 { d.Stop() }
func (d *dhclientRun) dump() string          { return d.Dump() }
func (d *dhclientRun) scriptCalls() []string { return d.ScriptCalls() }

// waitLease waits until the lease file holds an address and a prefix.
func (d *dhclientRun) waitLease(ctx context.Context) dhcpLease {
	t := d.t
	t.Helper()
	var lease dhcpLease
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		if l, ok := d.Lease(); ok {
			lease = dhcpLease{addr: l.Addr, prefix: l.Prefix, duid: l.DUID, serverID: l.ServerID}
			return true, nil
		}
		if exited, exitErr := d.Exited(); exited {
			return false, fmt.Errorf("dhclient in %s exited (%v) without a lease", d.ns, exitErr)
		}
		return false, nil
	})
	if wait.Interrupted(err) {
		err = fmt.Errorf("dhclient in %s got no lease with an address and a prefix within 30s", d.ns)
	}
	if err != nil {
		t.Fatalf("%v\n%s", err, d.dump())
	}
	// The script installs the address right after the lease is written.
	poll(t, ctx, 10*time.Second, "the dhclient script to install "+lease.addr.String(), func() bool {
		out, _ := testbed.IPIn(d.ns, "-6", "addr", "show", "dev", "eth0")
		return strings.Contains(out, lease.addr.String()+"/")
	})
	t.Logf("dhclient in %s: %s and %s (DUID %s)", d.ns, lease.addr, lease.prefix, lease.duid)
	return lease
}

// solicit sends one Solicit (IA_NA + IA_PD) from eth0 of ns with
// insomniacslk's client and waits up to timeout for an Advertise.
func solicit(t *testing.T, ns string, timeout time.Duration) (*dhcpv6.Message, error) {
	t.Helper()
	var cl *nclient6.Client
	err := testbed.InNetns(ns, func() error {
		var err error
		cl, err = nclient6.New("eth0", nclient6.WithTimeout(timeout), nclient6.WithRetry(1))
		return err
	})
	if err != nil {
		t.Fatalf("DHCPv6 client in %s: %v", ns, err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), timeout+2*time.Second)
	defer cancel()
	return cl.Solicit(ctx, dhcpv6.WithIAPD([4]byte{0, 0, 0, 1}))
}

func advertisedAddr(m *dhcpv6.Message) netip.Addr {
	if m == nil {
		return netip.Addr{}
	}
	for _, ia := range m.Options.IANA() {
		for _, a := range ia.Options.Addresses() {
			if addr, ok := netip.AddrFromSlice(a.IPv6Addr); ok {
				return addr
			}
		}
	}
	return netip.Addr{}
}

// waitRoute polls ns's route to prefix until it contains want (present) or
// is gone (!present).
func waitRoute(t *testing.T, ctx context.Context, ns string, prefix netip.Prefix, want string, present bool) {
	t.Helper()
	what := fmt.Sprintf("route %q in %s", want, ns)
	if !present {
		what = fmt.Sprintf("no route to %s in %s", prefix, ns)
	}
	var last string
	defer func() {
		if t.Failed() {
			t.Logf("last: %q", last)
		}
	}()
	poll(t, ctx, 20*time.Second, what, func() bool {
		last, _ = testbed.IPIn(ns, "-6", "route", "show", prefix.String())
		if present {
			return strings.Contains(last, want) && strings.Contains(last, "onlink")
		}
		return last == ""
	})
}

// writeNetworkStatus writes the network-status annotation as Multus does
// after a successful ADD.
func writeNetworkStatus(t *testing.T, ctx context.Context, c client.Client, p pod, ifName, mac string, addr netip.Addr) {
	t.Helper()
	status := fmt.Sprintf(`[{"name":"%s/dhcpnet","interface":%q,"ips":[%q],"mac":%q,"dns":{}}]`, p.ns, ifName, addr.String(), mac)
	patch, err := jsonMarshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{"k8s.v1.cni.cncf.io/network-status": status}}})
	if err != nil {
		t.Fatal(err)
	}
	obj := &corev1.Pod{}
	obj.Namespace, obj.Name = p.ns, p.name
	if err := c.Patch(ctx, obj, client.RawPatch(k8stypes.MergePatchType, patch)); err != nil {
		t.Fatal(err)
	}
}

func scrape(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("metrics: %v %s", err, resp.Status)
	}
	return string(b)
}

// counter reads tenure_dhcpv6_messages_total{type,outcome} from a scrape;
// -1 when the series is missing.
func counter(t *testing.T, metrics, msgType, outcome string) float64 {
	t.Helper()
	m, err := testbed.ParseMetrics(metrics)
	if err != nil {
		t.Fatalf("parsing the agent's metrics: %v", err)
	}
	v, found := m.Sum("tenure_dhcpv6_messages_total", fmt.Sprintf("type=%q", msgType), fmt.Sprintf("outcome=%q", outcome))
	if !found {
		return -1
	}
	return v
}
