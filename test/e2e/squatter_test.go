//go:build integration

package e2e

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipamclaimsv1alpha1 "github.com/tenure-ipam/tenure/api/ipamclaims/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/agent"
	tenureops "github.com/tenure-ipam/tenure/internal/ops"
	"github.com/tenure-ipam/tenure/internal/reservation"
	"github.com/tenure-ipam/tenure/test/controlplane/cptest"
	"github.com/tenure-ipam/tenure/test/testbed"
)

// segment is a bridge in a namespace of its own, standing for a node's
// leg of a SAN: the agent probes there (--dataplane-netns), the bridge
// plugin plugs pods into it, and a squatter, a host plugged in by hand,
// sits on it with an address of the pool.
type segment struct {
	hostNs, hostPath, bridge string
	squatNs                  string
	squatMAC                 net.HardwareAddr
}

func newSegment(t testing.TB, squat netip.Prefix) *segment {
	t.Helper()
	if ok, why := testbed.CanPlumb(); !ok {
		t.Fatal(why)
	}
	sfx := fmt.Sprint(time.Now().UnixNano() % 1e6)
	s := &segment{hostNs: "tsq-host-" + sfx, squatNs: "tsq-squat-" + sfx, bridge: "tsqbr" + sfx}
	var err error
	var rm func()
	if s.hostPath, rm, err = testbed.AddNetns(s.hostNs); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rm)
	if _, rm, err = testbed.AddNetns(s.squatNs); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rm)
	addArgs := []string{"addr", "add", squat.String(), "dev", "eth0"}
	if squat.Addr().Is6() {
		addArgs = append(addArgs, "nodad") // it holds the address now, as a host long up does
	}
	for _, step := range []struct {
		ns   string
		args []string
	}{
		{s.hostNs, []string{"link", "add", s.bridge, "type", "bridge"}},
		{s.hostNs, []string{"link", "set", s.bridge, "up"}},
		{s.hostNs, []string{"link", "add", "sq0", "type", "veth", "peer", "name", "eth0", "netns", s.squatNs}},
		{s.hostNs, []string{"link", "set", "sq0", "master", s.bridge, "up"}},
		{s.squatNs, []string{"link", "set", "eth0", "up"}},
		{s.squatNs, addArgs},
	} {
		if out, err := testbed.IPIn(step.ns, step.args...); err != nil {
			t.Fatalf("ip -n %s %v: %v: %s", step.ns, step.args, err, out)
		}
	}
	out, err := testbed.IPIn(s.squatNs, "-br", "link", "show", "eth0")
	if f := strings.Fields(out); err != nil || len(f) < 3 {
		t.Fatalf("squatter's MAC: %v %q", err, out)
	} else if s.squatMAC, err = net.ParseMAC(f[2]); err != nil {
		t.Fatal(err)
	}
	return s
}

// startProbingAgent starts the agent of node with the wire check on, in
// the segment's namespace, a probe's answer standing for fresh.
func startProbingAgent(t testing.TB, ctx context.Context, node string, s *segment, fresh time.Duration, extra ...string) (*testbed.Agent, string) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	maddr := l.Addr().String()
	l.Close()
	a, err := testbed.StartNodeAgent(ctx, bins, t.TempDir(), cptest.Current().Config, node,
		append([]string{"--probe=true", "--dataplane-netns", s.hostPath, "--probe-fresh", fresh.String(), "--metrics-addr", maddr}, extra...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		a.Stop()
		checkNotRefused(t, a)
	})
	return a, "http://" + maddr + "/metrics"
}

// bridgePods adds pods to the segment with the real bridge plugin
// calling tenure, some at once.
type bridgePods struct {
	t       *testing.T
	s       *segment
	list    *libcni.NetworkConfigList
	cni     *libcni.CNIConfig
	c       client.Client
	k8sNs   string
	node    string
	ifAddrs map[string]netip.Addr // pod name -> its address
	mu      sync.Mutex
}

func (b *bridgePods) add(ctx context.Context) (pod, netip.Addr, error) {
	p := newPod(b.t, ctx, b.c, b.k8sNs, b.node, nil)
	nsName := "tsq-pod-" + p.uid[:8]
	path, rm, err := testbed.AddNetns(nsName)
	if err != nil {
		return p, netip.Addr{}, err
	}
	b.t.Cleanup(rm)
	rt := &libcni.RuntimeConf{ContainerID: p.containerID, NetNS: path, IfName: "eth0",
		Args: [][2]string{{"IgnoreUnknown", "1"}, {"K8S_POD_NAMESPACE", p.ns}, {"K8S_POD_NAME", p.name}, {"K8S_POD_UID", p.uid}}}
	var res *current.Result
	err = testbed.InNetns(b.s.hostNs, func() error {
		r, err := b.cni.AddNetworkList(ctx, b.list, rt)
		if err != nil {
			return err
		}
		res, err = current.NewResultFromResult(r)
		return err
	})
	if err != nil {
		return p, netip.Addr{}, err
	}
	if len(res.IPs) != 1 {
		return p, netip.Addr{}, fmt.Errorf("pod %s: result has %d IPs", p.name, len(res.IPs))
	}
	a, _ := netip.AddrFromSlice(res.IPs[0].Address.IP)
	a = a.Unmap()
	b.mu.Lock()
	b.ifAddrs[p.name] = a
	b.mu.Unlock()
	return p, a, nil
}

func TestASquatterAddressIsNeverHandedOut(t *testing.T) {
	squatterTest(t, squatterCase{
		rangeKeys: `"range":"10.72.0.0/24","range_start":"10.72.0.10","range_end":"10.72.0.30"`,
		first:     netip.MustParseAddr("10.72.0.10"), last: netip.MustParseAddr("10.72.0.30"),
		squat: netip.MustParsePrefix("10.72.0.17/24"),
	})
}

func TestASquatterIPv6AddressIsNeverHandedOut(t *testing.T) {
	squatterTest(t, squatterCase{
		rangeKeys: `"range":"fd72::/64","range_start":"fd72::10","range_end":"fd72::24"`,
		first:     netip.MustParseAddr("fd72::10"), last: netip.MustParseAddr("fd72::24"),
		squat: netip.MustParsePrefix("fd72::17/64"),
	})
}

type squatterCase struct {
	rangeKeys   string
	first, last netip.Addr // the range's 21 addresses
	squat       netip.Prefix
}

// squatterTest: a range of 21 addresses, one of them held on the segment
// by a host tenure never gave it to. 20 pods get exactly the 20 others;
// the Event, the metric and `tenurectl check` name the squatter's address
// and MAC; a 21st pod is refused with the address conflict; once the
// squatter leaves, the address is handed out.
func squatterTest(t *testing.T, tc squatterCase) {
	ctx := testContext(t, 4*time.Minute)
	c := apiClient(t)
	s := newSegment(t, tc.squat)
	const fresh = 2 * time.Second
	node := "nsq-v4"
	if tc.squat.Addr().Is6() {
		node = "nsq-v6"
	}
	a, metricsURL := startProbingAgent(t, ctx, node, s, fresh)
	network := "san-" + node
	conf := fmt.Sprintf(`{"cniVersion":"1.1.0","name":%q,"plugins":[{"type":"bridge","bridge":%q,
		"ipam":{"type":"tenure","agent_socket":%q,%s,"network_name":%q}}]}`, network, s.bridge, a.Socket, tc.rangeKeys, network)
	list, err := libcni.ConfListFromBytes([]byte(conf))
	if err != nil {
		t.Fatal(err)
	}
	b := &bridgePods{t: t, s: s, list: list, c: c, k8sNs: "e2e-squat", node: node, ifAddrs: map[string]netip.Addr{},
		cni: libcni.NewCNIConfigWithCacheDir([]string{referencePlugins(t), bins.Dir}, t.TempDir(), nil)}

	var want []netip.Addr
	for x := tc.first; x.Compare(tc.last) <= 0; x = x.Next() {
		if x != tc.squat.Addr() {
			want = append(want, x)
		}
	}
	if len(want) != 20 {
		t.Fatalf("the range has %d free addresses, want 20", len(want))
	}
	// Five at a time: concurrent ADDs, as a ReplicaSet's.
	var g sync.WaitGroup
	errs := make(chan error, 20)
	sem := make(chan struct{}, 5)
	for range 20 {
		g.Add(1)
		sem <- struct{}{}
		go func() {
			defer g.Done()
			defer func() { <-sem }()
			if _, _, err := b.add(ctx); err != nil {
				errs <- err
			}
		}()
	}
	g.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("ADD: %v", err)
	}
	var got []netip.Addr
	for name, ip := range b.ifAddrs {
		if ip == tc.squat.Addr() {
			t.Fatalf("pod %s got %s, which the squatter %s holds on the segment", name, ip, s.squatMAC)
		}
		got = append(got, ip)
	}
	slices.SortFunc(got, netip.Addr.Compare)
	if !slices.Equal(got, want) {
		t.Fatalf("the 20 pods got %v, want every address of the range but %s: %v", got, tc.squat.Addr(), want)
	}

	// The Event names the address and the MAC, on a pod of ours.
	var ev *corev1.Event
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		evs := &corev1.EventList{}
		if err := c.List(ctx, evs, client.InNamespace(b.k8sNs)); err != nil {
			return false, err
		}
		for i := range evs.Items {
			e := &evs.Items[i]
			if e.Reason == agent.EventAddressConflict && e.Annotations[reservation.AnnotationConflictNetwork] == network {
				ev = e
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("no %s Event for network %s: %v", agent.EventAddressConflict, network, err)
	}
	if _, ours := b.ifAddrs[ev.InvolvedObject.Name]; !ours || ev.Type != corev1.EventTypeWarning ||
		ev.Annotations[reservation.AnnotationConflictAddress] != tc.squat.Addr().String() ||
		ev.Annotations[reservation.AnnotationConflictMAC] != s.squatMAC.String() ||
		!strings.Contains(ev.Message, s.squatMAC.String()) || !strings.Contains(ev.Message, tc.squat.Addr().String()) {
		t.Fatalf("Event on %s %s/%s: %s %v %q, want a Warning on one of the pods naming %s and %s",
			ev.InvolvedObject.Kind, ev.InvolvedObject.Namespace, ev.InvolvedObject.Name, ev.Type, ev.Annotations, ev.Message, tc.squat.Addr(), s.squatMAC)
	}

	m, err := testbed.ParseMetrics(scrape(t, metricsURL))
	if err != nil {
		t.Fatal(err)
	}
	if n, ok := m.Sum("tenure_address_conflicts_total", fmt.Sprintf("network=%q", network)); !ok || n < 1 {
		t.Fatalf("tenure_address_conflicts_total{network=%q} = %v (found %v), want at least 1", network, n, ok)
	}
	// The gauge names the address and the MAC while the network is kept
	// probed ahead (its answer renewed within --probe-fresh).
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		m, err := testbed.ParseMetrics(scrape(t, metricsURL))
		if err != nil {
			return false, err
		}
		n, ok := m.Sum("tenure_agent_squatted_address", fmt.Sprintf("address=%q", tc.squat.Addr()), fmt.Sprintf("mac=%q", s.squatMAC))
		return ok && n == 1, nil
	})
	if err != nil {
		t.Fatalf("tenure_agent_squatted_address{address=%q,mac=%q} never 1: %v", tc.squat.Addr(), s.squatMAC, err)
	}

	// tenurectl check names it.
	rep, err := tenureops.New(c).Check(ctx, tenureops.CheckOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var finding *tenureops.Finding
	for i := range rep.Findings {
		f := &rep.Findings[i]
		if f.Rule == tenureops.RuleAddressConflict && f.Network == network {
			finding = f
		}
	}
	if finding == nil || finding.Address != tc.squat.Addr().String() || !strings.Contains(finding.Message, s.squatMAC.String()) {
		t.Fatalf("check findings %+v, want an %s finding of network %s naming %s and %s", rep.Findings, tenureops.RuleAddressConflict, network, tc.squat.Addr(), s.squatMAC)
	}

	// The 21st pod: every free address answers. Refused, naming it.
	_, _, err = b.add(ctx)
	var ce *types.Error
	if !errors.As(err, &ce) || ce.Code != agent.CodeAddressConflict || !strings.Contains(ce.Msg, tc.squat.Addr().String()) {
		t.Fatalf("21st ADD: %v, want CNI error %d naming %s", err, agent.CodeAddressConflict, tc.squat.Addr())
	}

	// A claim-bound interface is refused the same, and its claim says
	// why: IPsAllocated false, IPAddressConflict, naming the address.
	claimName := "sq-" + node
	createClaim(t, ctx, c, b.k8sNs, claimName, network)
	vm := newPod(t, ctx, c, b.k8sNs, node, vmAnnotations(network, claimName))
	vmConf := []byte(fmt.Sprintf(`{"cniVersion":"1.1.0","name":%q,"type":"bridge","bridge":%q,
		"ipam":{"type":"tenure","agent_socket":%q,%s,"network_name":%q}}`, network, s.bridge, a.Socket, tc.rangeKeys, network))
	if _, err := add(ctx, vm, vmConf); err == nil || !strings.Contains(err.Error(), tc.squat.Addr().String()) {
		t.Fatalf("claim-bound ADD: %v, want a refusal naming %s", err, tc.squat.Addr())
	}
	cond := meta.FindStatusCondition(getClaim(t, ctx, c, b.k8sNs, claimName).Status.Conditions, ipamclaimsv1alpha1.ConditionIPsAllocated)
	if cond == nil || cond.Status != metav1.ConditionFalse || cond.Reason != ipamclaimsv1alpha1.ReasonIPAddressConflict || !strings.Contains(cond.Message, tc.squat.Addr().String()) {
		t.Fatalf("claim %s condition %+v, want IPsAllocated false, %s, naming %s", claimName, cond, ipamclaimsv1alpha1.ReasonIPAddressConflict, tc.squat.Addr())
	}

	// The squatter leaves: once its last answer is older than the
	// probe's freshness, the address is handed out.
	if out, err := testbed.IPIn(s.squatNs, "link", "set", "eth0", "down"); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	var p pod
	var ip netip.Addr
	var addErr error
	err = wait.PollUntilContextTimeout(ctx, fresh/2, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		p, ip, addErr = b.add(ctx)
		return addErr == nil, nil
	})
	if err != nil || ip != tc.squat.Addr() {
		t.Fatalf("after the squatter left: pod %s got %v (%v, last ADD: %v), want %s", p.name, ip, err, addErr, tc.squat.Addr())
	}
}
