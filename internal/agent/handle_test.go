package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	current "github.com/containernetworking/cni/pkg/types/100"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipamclaimsv1alpha1 "github.com/tenure-ipam/tenure/api/ipamclaims/v1alpha1"
	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/cniwire"
	"github.com/tenure-ipam/tenure/internal/reservation"
	"github.com/tenure-ipam/tenure/test/kubefake"
)

// The table tests of Agent.Handle: the agent's whole CNI path (config,
// pod and claim lookup, allocator, store and its informers) on an
// in-memory API. The same behaviour against a real API server, CNI plugins
// and network namespaces is tested in test/e2e.

const (
	thisNode = "node-a"
	san29    = `{"cniVersion":"1.1.0","name":"san","type":"macvlan","ipam":{"type":"tenure","range":"10.0.0.0/29","network_name":"san"}}`
	vmNet    = `{"cniVersion":"1.1.0","name":"vm-net","type":"bridge","ipam":{"type":"tenure","range":"10.1.0.0/24","network_name":"vm-net",` +
		`"prefix_delegation":{"range":"2001:db8:100::/48","prefix_length":56}}}`
)

type harness struct {
	t     testing.TB
	ctx   context.Context
	fake  *kubefake.Client
	agent *Agent
	logs  *lockedBuffer
}

// lockedBuffer collects the agent's log lines.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func startAgent(t *testing.T, objs ...client.Object) *harness {
	t.Helper()
	return startAgentOn(t, thisNode, objs...)
}

func startAgentOn(t *testing.T, node string, objs ...client.Object) *harness {
	t.Helper()
	logs := &lockedBuffer{}
	h := startAgentWith(t, Options{NodeName: node, Logger: slog.New(slog.NewTextHandler(logs, nil)), PodWait: 50 * time.Millisecond}, objs...)
	h.logs = logs
	return h
}

// startAgentWith starts an agent of opts on a kubefake API holding objs.
func startAgentWith(t testing.TB, opts Options, objs ...client.Object) *harness {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	fc := kubefake.New(objs...)
	opts.Client = fc
	a, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Shutdown)
	// The caches run on ctx for the test's life (Start's context is what
	// they run under, as in cmd/tenure-agent).
	if err := a.Start(ctx); err != nil {
		t.Fatal(err)
	}
	return &harness{t: t, ctx: ctx, fake: fc, agent: a}
}

func pod(name, node string, annotations map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name), Annotations: annotations},
		Spec:       corev1.PodSpec{NodeName: node},
	}
}

func claimPod(name, claim string) *corev1.Pod {
	return pod(name, thisNode, map[string]string{
		"k8s.v1.cni.cncf.io/networks": fmt.Sprintf(`[{"name":"vm-net","ipam-claim-reference":%q}]`, claim),
	})
}

func ipamClaim(name, network string, status ipamclaimsv1alpha1.IPAMClaimStatus) *ipamclaimsv1alpha1.IPAMClaim {
	return &ipamclaimsv1alpha1.IPAMClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("claim-uid-" + name)},
		Spec:       ipamclaimsv1alpha1.IPAMClaimSpec{Network: network, Interface: "net1"},
		Status:     status,
	}
}

// heldBy is a reservation made before the agent starts, as another node's
// agent would have made it.
func heldBy(network, addr, ownerUID, node string) *tenurev1alpha1.IPReservation {
	a := netip.MustParseAddr(addr)
	return reservation.New(reservation.Spec{Network: network, Kind: tenurev1alpha1.KindAddress, Item: netip.PrefixFrom(a, a.BitLen()),
		Owner: tenurev1alpha1.ReservationOwner{Kind: tenurev1alpha1.OwnerPod, Namespace: "ns", Name: "other", UID: ownerUID, PodName: "other",
			PodUID: ownerUID, ContainerID: "c-other", Interface: "net1", Node: node}})
}

// call is one CNI call of pod's sandbox container ctr on interface net1.
type call struct {
	cmd, ctr, pod, conf string
	// prev is CHECK's prevResult: these addresses, /29.
	prev []string
	// valid is GC's cni.dev/valid-attachments: container IDs with net1.
	valid []string
	// uid is K8S_POD_UID when not "uid-" + pod (a pod re-created under
	// its name).
	uid string
	// ctx, when set, is the call's context instead of the harness's (one
	// numbered on arrival earlier, say).
	ctx context.Context
}

func (h *harness) do(c call) *Response {
	h.t.Helper()
	conf := c.conf
	if conf == "" {
		conf = san29
	}
	if c.cmd == "CHECK" {
		res := current.Result{CNIVersion: "1.1.0"}
		for _, ip := range c.prev {
			p := netip.MustParsePrefix(ip + "/29")
			res.IPs = append(res.IPs, &current.IPConfig{Address: net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}})
		}
		conf = withKey(h.t, conf, "prevResult", res)
	}
	if c.cmd == "GC" {
		var valid []map[string]string
		for _, v := range c.valid {
			valid = append(valid, map[string]string{"containerID": v, "ifname": "net1"})
		}
		conf = withKey(h.t, conf, "cni.dev/valid-attachments", valid)
	}
	req := &cniwire.Request{Command: c.cmd, ContainerID: c.ctr, IfName: "net1", Netns: "/var/run/netns/" + c.ctr, StdinData: []byte(conf)}
	if c.pod != "" {
		uid := c.uid
		if uid == "" {
			uid = "uid-" + c.pod
		}
		req.Args = "IgnoreUnknown=1;K8S_POD_NAMESPACE=ns;K8S_POD_NAME=" + c.pod + ";K8S_POD_UID=" + uid
	}
	ctx := h.ctx
	if c.ctx != nil {
		ctx = c.ctx
	}
	return h.agent.Handle(ctx, req)
}

func withKey(t testing.TB, conf, key string, v any) string {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(conf), &m); err != nil {
		t.Fatal(err)
	}
	m[key] = v
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// ips is the interface addresses of an ADD result.
func ips(t *testing.T, r *Response) []string {
	t.Helper()
	if r.Error != nil {
		t.Fatalf("call failed: code %d: %s", r.Error.Code, r.Error.Msg)
	}
	var res current.Result
	if err := json.Unmarshal(r.Result, &res); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, ipc := range res.IPs {
		out = append(out, ipc.Address.IP.String())
	}
	return out
}

// held lists the API's reservations as "address=owner".
func (h *harness) held() []string {
	h.t.Helper()
	var list tenurev1alpha1.IPReservationList
	if err := h.fake.List(h.ctx, &list); err != nil {
		h.t.Fatal(err)
	}
	var out []string
	for _, r := range list.Items {
		out = append(out, r.Spec.Address+"="+r.Spec.Owner.Name)
	}
	slices.Sort(out)
	return out
}

// step is one call and what it must answer.
type step struct {
	before   func(h *harness)
	call     call
	wantCode uint // 0: success
	wantMsg  string
	wantIPs  int // ADD: how many addresses the result holds
	// wantAddrs, when set, are the addresses the ADD result holds.
	wantAddrs []string
	sameAs    int // ADD: 1-based index of an earlier step whose addresses this one must equal
}

func TestHandle(t *testing.T) {
	cases := []struct {
		name  string
		objs  []client.Object
		steps []step
		// wantHeld is every reservation left in the API, as "address=owner".
		wantHeld []string
		// wantHeldCount is used instead when which addresses are chosen is
		// not the point.
		wantHeldCount int
		// wantHolders is used instead when which addresses are chosen is
		// not the point but who holds them is: the owner of every
		// reservation left, sorted.
		wantHolders []string
	}{{
		name:          "ADD reserves one address of the range",
		objs:          []client.Object{pod("p1", thisNode, nil)},
		steps:         []step{{call: call{cmd: "ADD", ctr: "c1", pod: "p1"}, wantIPs: 1}},
		wantHeldCount: 1,
	}, {
		name: "a retried ADD returns the same address and writes nothing",
		objs: []client.Object{pod("p1", thisNode, nil)},
		steps: []step{
			{call: call{cmd: "ADD", ctr: "c1", pod: "p1"}, wantIPs: 1},
			{call: call{cmd: "ADD", ctr: "c1", pod: "p1"}, wantIPs: 1, sameAs: 1},
		},
		wantHeldCount: 1,
	}, {
		name:     "DEL of an attachment that holds nothing succeeds",
		objs:     []client.Object{pod("p1", thisNode, nil)},
		steps:    []step{{call: call{cmd: "DEL", ctr: "never-added", pod: "p1"}}},
		wantHeld: nil,
	}, {
		name: "DEL releases what the ADD reserved, and a second DEL is a no-op",
		objs: []client.Object{pod("p1", thisNode, nil)},
		steps: []step{
			{call: call{cmd: "ADD", ctr: "c1", pod: "p1"}, wantIPs: 1},
			{call: call{cmd: "DEL", ctr: "c1", pod: "p1"}},
			{call: call{cmd: "DEL", ctr: "c1", pod: "p1"}},
		},
		wantHeld: nil,
	}, {
		name: "DEL succeeds on a configuration that no longer parses",
		objs: []client.Object{pod("p1", thisNode, nil)},
		steps: []step{
			{call: call{cmd: "ADD", ctr: "c1", pod: "p1"}, wantIPs: 1},
			{call: call{cmd: "DEL", ctr: "c1", pod: "p1", conf: `{"cniVersion":"1.1.0","name":"san","ipam":{"type":"tenure","range":"bogus"}}`}},
		},
		wantHeld: nil,
	}, {
		name: "GC releases attachments missing from the valid list and keeps the rest",
		objs: []client.Object{pod("p1", thisNode, nil), pod("p2", thisNode, nil)},
		steps: []step{
			{call: call{cmd: "ADD", ctr: "c1", pod: "p1"}, wantIPs: 1},
			{call: call{cmd: "ADD", ctr: "c2", pod: "p2"}, wantIPs: 1},
			{call: call{cmd: "GC", valid: []string{"c2"}}},
		},
		wantHolders: []string{"p2"},
	}, {
		name: "CHECK passes for held addresses and fails with 103 for others",
		objs: []client.Object{pod("p1", thisNode, nil), heldBy("san", "10.0.0.1", "uid-x", "node-b"),
			heldBy("san", "10.0.0.2", "uid-x", "node-b"), heldBy("san", "10.0.0.3", "uid-x", "node-b"),
			heldBy("san", "10.0.0.4", "uid-x", "node-b"), heldBy("san", "10.0.0.5", "uid-x", "node-b")},
		steps: []step{
			{call: call{cmd: "ADD", ctr: "c1", pod: "p1"}, wantIPs: 1},
			{call: call{cmd: "CHECK", ctr: "c1", pod: "p1", prev: []string{"10.0.0.6"}}},
			{call: call{cmd: "CHECK", ctr: "c1", pod: "p1", prev: []string{"10.0.0.1"}}, wantCode: CodeCheckFailed, wantMsg: "10.0.0.1"},
		},
		wantHeldCount: 6,
	}, {
		// The node cache lags (its watch broke): CHECK reads what the
		// attachment holds from the API server before it fails.
		name: "CHECK passes for an address the stale cache has not seen",
		objs: []client.Object{pod("p1", thisNode, nil)},
		steps: []step{{
			before: func(h *harness) {
				h.fake.Pause()
				a := netip.MustParseAddr("10.0.0.3")
				r := reservation.New(reservation.Spec{Network: "san", Kind: tenurev1alpha1.KindAddress, Item: netip.PrefixFrom(a, 32),
					Range: "10.0.0.0/29", CNINetwork: "san",
					Owner: tenurev1alpha1.ReservationOwner{Kind: tenurev1alpha1.OwnerPod, Namespace: "ns", Name: "p1", UID: "uid-p1",
						PodName: "p1", PodUID: "uid-p1", ContainerID: "c1", Interface: "net1", Node: thisNode}})
				if err := h.fake.Create(h.ctx, r); err != nil {
					h.t.Fatal(err)
				}
			},
			call: call{cmd: "CHECK", ctr: "c1", pod: "p1", prev: []string{"10.0.0.3"}},
		}, {
			call: call{cmd: "CHECK", ctr: "c1", pod: "p1", prev: []string{"10.0.0.4"}}, wantCode: CodeCheckFailed, wantMsg: "10.0.0.4",
		}},
		wantHeld: []string{"10.0.0.3=p1"},
	}, {
		name: "an exhausted range answers 100 naming the range, and writes nothing",
		objs: []client.Object{pod("p1", thisNode, nil), heldBy("san", "10.0.0.1", "uid-x", "node-b"),
			heldBy("san", "10.0.0.2", "uid-x", "node-b"), heldBy("san", "10.0.0.3", "uid-x", "node-b"),
			heldBy("san", "10.0.0.4", "uid-x", "node-b"), heldBy("san", "10.0.0.5", "uid-x", "node-b"),
			heldBy("san", "10.0.0.6", "uid-x", "node-b")},
		steps:         []step{{call: call{cmd: "ADD", ctr: "c1", pod: "p1"}, wantCode: CodeRangeFull, wantMsg: "10.0.0.0/29 is full"}},
		wantHeldCount: 6,
	}, {
		name: "a stale cache: addresses taken behind its back are skipped on AlreadyExists",
		objs: []client.Object{pod("p1", thisNode, nil)},
		steps: []step{{
			before: func(h *harness) {
				h.fake.Pause() // the informers see none of these creates
				for _, a := range []string{"10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4", "10.0.0.5"} {
					if err := h.fake.Create(h.ctx, heldBy("san", a, "uid-x", "node-b")); err != nil {
						h.t.Fatal(err)
					}
				}
			},
			call: call{cmd: "ADD", ctr: "c1", pod: "p1"}, wantIPs: 1,
		}},
		wantHeld: []string{"10.0.0.1=other", "10.0.0.2=other", "10.0.0.3=other", "10.0.0.4=other", "10.0.0.5=other", "10.0.0.6=p1"},
	}, {
		name: "a stale cache that says free on a full range: the live read answers 100",
		objs: []client.Object{pod("p1", thisNode, nil)},
		steps: []step{{
			before: func(h *harness) {
				h.fake.Pause()
				for i := 1; i <= 6; i++ {
					if err := h.fake.Create(h.ctx, heldBy("san", fmt.Sprintf("10.0.0.%d", i), "uid-x", "node-b")); err != nil {
						h.t.Fatal(err)
					}
				}
			},
			call: call{cmd: "ADD", ctr: "c1", pod: "p1"}, wantCode: CodeRangeFull, wantMsg: "is full",
		}},
		wantHeldCount: 6,
	}, {
		// The network names are chosen so that node-a's search starts
		// inside the excluded blocks: the first free address after them
		// is the answer, not "full".
		name: "an empty network is not full where the search starts in excluded blocks",
		objs: []client.Object{pod("p1", thisNode, nil), pod("p2", thisNode, nil)},
		steps: []step{
			{call: call{cmd: "ADD", ctr: "c1", pod: "p1", conf: `{"cniVersion":"1.1.0","name":"wide-v4","ipam":{"type":"tenure",` +
				`"range":"10.0.0.0/8","exclude":["10.0.0.0/9","10.128.0.0/10"],"network_name":"wide-v4"}}`}, wantIPs: 1},
			{call: call{cmd: "ADD", ctr: "c2", pod: "p2", conf: `{"cniVersion":"1.1.0","name":"wide-v6","ipam":{"type":"tenure",` +
				`"range":"2001:db8::/64","exclude":["2001:db8::/65"],"network_name":"wide-v6"}}`}, wantIPs: 1},
		},
		wantHeld: []string{"10.192.0.0=p1", "2001:db8:0:0:8000::=p2"},
	}, {
		name: "a network_name too long for the reservations' spec.network answers 7 naming it, and writes nothing",
		objs: []client.Object{pod("p1", thisNode, nil)},
		steps: []step{{
			// As kube-apiserver does with the CRD's MaxLength.
			before: func(h *harness) {
				h.fake.BeforeCreate = func(obj client.Object) error {
					if r, ok := obj.(*tenurev1alpha1.IPReservation); ok && len(r.Spec.Network) > 253 {
						return apierrors.NewInvalid(tenurev1alpha1.GroupVersion.WithKind("IPReservation").GroupKind(), r.Name,
							field.ErrorList{field.TooLong(field.NewPath("spec", "network"), r.Spec.Network, 253)})
					}
					return nil
				}
			},
			call: call{cmd: "ADD", ctr: "c1", pod: "p1", conf: `{"cniVersion":"1.1.0","name":"san","ipam":{"type":"tenure","range":"10.0.0.0/29",` +
				`"network_name":"` + strings.Repeat(strings.Repeat("n", 63)+".", 3) + strings.Repeat("n", 61) + `","enable_overlapping_ranges":false}}`},
			wantCode: 7, wantMsg: "ipam.network_name",
		}},
		wantHeld: nil,
	}, {
		name: "a range that cannot be a segment answers 7 naming it, and writes nothing",
		objs: []client.Object{pod("p1", thisNode, nil)},
		steps: []step{
			{call: call{cmd: "ADD", ctr: "c1", pod: "p1", conf: `{"cniVersion":"1.1.0","name":"san","ipam":{"type":"tenure","range":"0.0.0.0/0"}}`},
				wantCode: 7, wantMsg: `ipam.range: "0.0.0.0/0": is a /0`},
			{call: call{cmd: "ADD", ctr: "c1", pod: "p1", conf: `{"cniVersion":"1.1.0","name":"san","ipam":{"type":"tenure","ipRanges":[{"range":"::/0"}]}}`},
				wantCode: 7, wantMsg: `ipam.ipRanges[0].range: "::/0": is a /0`},
		},
		wantHeld: nil,
	}, {
		name:     "a pod bound to another node is refused with 4",
		objs:     []client.Object{pod("p1", "node-b", nil)},
		steps:    []step{{call: call{cmd: "ADD", ctr: "c1", pod: "p1"}, wantCode: 4, wantMsg: "bound to node node-b"}},
		wantHeld: nil,
	}, {
		name:     "a pod bound to no node is refused with 4",
		objs:     []client.Object{pod("p1", "", nil)},
		steps:    []step{{call: call{cmd: "ADD", ctr: "c1", pod: "p1"}, wantCode: 4, wantMsg: "not bound to a node"}},
		wantHeld: nil,
	}, {
		name:     "a pod that does not exist: try again later (11)",
		steps:    []step{{call: call{cmd: "ADD", ctr: "c1", pod: "ghost"}, wantCode: 11, wantMsg: "not found"}},
		wantHeld: nil,
	}, {
		name: "a bad IPAM config answers 7 naming the key, and writes nothing",
		objs: []client.Object{pod("p1", thisNode, nil)},
		steps: []step{{call: call{cmd: "ADD", ctr: "c1", pod: "p1",
			conf: `{"cniVersion":"1.1.0","name":"san","ipam":{"type":"tenure","range":"10.0.0.0/33"}}`}, wantCode: 7, wantMsg: "range"}},
		wantHeld: nil,
	}, {
		name: "two pods presenting one claim get the same address and prefix; DEL of either releases nothing",
		objs: []client.Object{ipamClaim("vm1", "vm-net", ipamclaimsv1alpha1.IPAMClaimStatus{}), claimPod("virt-launcher-src", "vm1"), claimPod("virt-launcher-dst", "vm1")},
		steps: []step{
			{call: call{cmd: "ADD", ctr: "src", pod: "virt-launcher-src", conf: vmNet}, wantIPs: 1},
			{call: call{cmd: "ADD", ctr: "dst", pod: "virt-launcher-dst", conf: vmNet}, wantIPs: 1, sameAs: 1},
			{call: call{cmd: "DEL", ctr: "src", pod: "virt-launcher-src", conf: vmNet}},
			{call: call{cmd: "DEL", ctr: "dst", pod: "virt-launcher-dst", conf: vmNet}},
		},
		wantHeldCount: 2, // the address and the delegated prefix, both the claim's
	}, {
		name: "a claim whose recorded address another owner holds answers 101 naming the holder",
		objs: []client.Object{
			ipamClaim("vm1", "vm-net", ipamclaimsv1alpha1.IPAMClaimStatus{IPs: []string{"10.1.0.9/24"}}),
			claimPod("virt-launcher", "vm1"), heldBy("vm-net", "10.1.0.9", "uid-thief", "node-b"),
		},
		steps:         []step{{call: call{cmd: "ADD", ctr: "c1", pod: "virt-launcher", conf: vmNet}, wantCode: CodeAddressConflict, wantMsg: "10.1.0.9 is held by Pod ns/other"}},
		wantHeldCount: 1,
	}, {
		name: "a claim of another network answers 7",
		objs: []client.Object{ipamClaim("vm1", "other-net", ipamclaimsv1alpha1.IPAMClaimStatus{}), claimPod("virt-launcher", "vm1")},
		steps: []step{{call: call{cmd: "ADD", ctr: "c1", pod: "virt-launcher", conf: vmNet}, wantCode: 7,
			wantMsg: `spec.network "other-net" but the CNI network is "vm-net"`}},
		wantHeld: nil,
	}, {
		name: "a claim recording addresses outside every range answers 102",
		objs: []client.Object{ipamClaim("vm1", "vm-net", ipamclaimsv1alpha1.IPAMClaimStatus{IPs: []string{"192.168.7.7/24"}}), claimPod("virt-launcher", "vm1")},
		steps: []step{{call: call{cmd: "ADD", ctr: "c1", pod: "virt-launcher", conf: vmNet}, wantCode: CodeClaimMismatch,
			wantMsg: "192.168.7.7/24 outside every range"}},
		wantHeldCount: 0,
	}, {
		// Requested addresses: runtimeConfig.ips (Multus' "ips").
		name:     "runtimeConfig.ips gets exactly that address, as a CIDR or a bare address",
		objs:     []client.Object{pod("p1", thisNode, nil), pod("p2", thisNode, nil)},
		steps:    []step{{call: call{cmd: "ADD", ctr: "c1", pod: "p1", conf: withIPs(san29, "10.0.0.5/29")}, wantAddrs: []string{"10.0.0.5"}}, {call: call{cmd: "ADD", ctr: "c2", pod: "p2", conf: withIPs(san29, "10.0.0.3")}, wantAddrs: []string{"10.0.0.3"}}},
		wantHeld: []string{"10.0.0.3=p2", "10.0.0.5=p1"},
	}, {
		name: "a retried ADD with a requested address returns it and writes nothing more",
		objs: []client.Object{pod("p1", thisNode, nil)},
		steps: []step{
			{call: call{cmd: "ADD", ctr: "c1", pod: "p1", conf: withIPs(san29, "10.0.0.5")}, wantIPs: 1},
			{call: call{cmd: "ADD", ctr: "c1", pod: "p1", conf: withIPs(san29, "10.0.0.5")}, wantIPs: 1, sameAs: 1},
		},
		wantHeld: []string{"10.0.0.5=p1"},
	}, {
		name: "a requested address another pod holds answers 101 naming the holder, writes nothing, and is given once DEL freed it",
		objs: []client.Object{pod("p1", thisNode, nil), pod("p2", thisNode, nil)},
		steps: []step{
			{call: call{cmd: "ADD", ctr: "c1", pod: "p1", conf: withIPs(san29, "10.0.0.5")}, wantIPs: 1},
			{call: call{cmd: "ADD", ctr: "c2", pod: "p2", conf: withIPs(san29, "10.0.0.5")}, wantCode: CodeAddressConflict, wantMsg: "10.0.0.5 is held by Pod ns/p1 (uid uid-p1)"},
			{before: func(h *harness) { h.wantHeld([]string{"10.0.0.5=p1"}) }, call: call{cmd: "DEL", ctr: "c1", pod: "p1"}},
			{call: call{cmd: "ADD", ctr: "c2", pod: "p2", conf: withIPs(san29, "10.0.0.5")}, wantIPs: 1},
		},
		wantHeld: []string{"10.0.0.5=p2"},
	}, {
		name: "a requested address another node's pod holds, unknown to a paused cache, answers 101 naming it",
		objs: []client.Object{pod("p1", thisNode, nil)},
		steps: []step{{
			before: func(h *harness) {
				h.fake.Pause()
				if err := h.fake.Create(h.ctx, heldBy("san", "10.0.0.5", "uid-x", "node-b")); err != nil {
					h.t.Fatal(err)
				}
			},
			call: call{cmd: "ADD", ctr: "c1", pod: "p1", conf: withIPs(san29, "10.0.0.5")}, wantCode: CodeAddressConflict, wantMsg: "10.0.0.5 is held by Pod ns/other (uid uid-x)",
		}},
		wantHeld: []string{"10.0.0.5=other"},
	}, {
		name: "a dual-stack ADD whose requested IPv6 address is held answers 101 and keeps nothing of its IPv4 address",
		objs: []client.Object{pod("p1", thisNode, nil), heldBy("dual", "fd00::5", "uid-x", "node-b")},
		steps: []step{{call: call{cmd: "ADD", ctr: "c1", pod: "p1", conf: withIPs(dual, "10.2.0.5", "fd00::5")},
			wantCode: CodeAddressConflict, wantMsg: "fd00::5 is held by Pod ns/other"}},
		wantHeld: []string{"fd00::5=other"},
	}, {
		name: "requested addresses outside every range, excluded or the gateway answer 7 naming them, and write nothing",
		objs: []client.Object{pod("p1", thisNode, nil)},
		steps: []step{
			{call: call{cmd: "ADD", ctr: "c1", pod: "p1", conf: withIPs(dual, "10.3.0.5")}, wantCode: 7, wantMsg: `runtimeConfig.ips[0]: "10.3.0.5": is outside every range`},
			{call: call{cmd: "ADD", ctr: "c1", pod: "p1", conf: withIPs(dual, "10.2.0.201/24")}, wantCode: 7, wantMsg: `"10.2.0.201/24": is excluded from ipam.ipRanges[0].range "10.2.0.0/24" by ipam.ipRanges[0].exclude[0] "10.2.0.200/29"`},
			{call: call{cmd: "ADD", ctr: "c1", pod: "p1", conf: withIPs(dual, "10.2.0.1")}, wantCode: 7, wantMsg: `"10.2.0.1": is the gateway`},
		},
		wantHeld: nil,
	}, {
		name: "a new sandbox of a pod takes over its requested address from the earlier sandbox, whose late DEL frees nothing",
		objs: []client.Object{pod("p1", thisNode, nil)},
		steps: []step{
			{call: call{cmd: "ADD", ctr: "c1", pod: "p1", conf: withIPs(san29, "10.0.0.5")}, wantIPs: 1},
			{call: call{cmd: "ADD", ctr: "c2", pod: "p1", conf: withIPs(san29, "10.0.0.5")}, wantIPs: 1, sameAs: 1},
			{call: call{cmd: "DEL", ctr: "c1", pod: "p1"}},
			{before: func(h *harness) { h.wantHeld([]string{"10.0.0.5=p1"}) }, call: call{cmd: "CHECK", ctr: "c2", pod: "p1", prev: []string{"10.0.0.5"}}},
		},
		wantHeld: []string{"10.0.0.5=p1"},
	}, {
		name:          "a claim-bound pod's requested address becomes the claim's",
		objs:          []client.Object{ipamClaim("vm1", "vm-net", ipamclaimsv1alpha1.IPAMClaimStatus{}), claimPod("virt-launcher", "vm1")},
		steps:         []step{{call: call{cmd: "ADD", ctr: "c1", pod: "virt-launcher", conf: withIPs(vmNet, "10.1.0.77/24")}, wantAddrs: []string{"10.1.0.77"}}},
		wantHeldCount: 2, // the address and a delegated prefix
	}, {
		name: "a claim that records another address than the requested one answers 102 and writes nothing",
		objs: []client.Object{ipamClaim("vm1", "vm-net", ipamclaimsv1alpha1.IPAMClaimStatus{IPs: []string{"10.1.0.9/24"}}), claimPod("virt-launcher", "vm1")},
		steps: []step{{call: call{cmd: "ADD", ctr: "c1", pod: "virt-launcher", conf: withIPs(vmNet, "10.1.0.77")}, wantCode: CodeClaimMismatch,
			wantMsg: "IPAMClaim ns/vm1 records 10.1.0.9, but runtimeConfig.ips asks for 10.1.0.77"}},
		wantHeld: nil,
	}, {
		// Sticky StatefulSet pods.
		name: "a sticky StatefulSet pod keeps its address in its claim: DEL frees nothing, the pod re-created under its name gets it back",
		objs: []client.Object{stsPod("db-0", "uid-db-0", stickyAnn)},
		steps: []step{
			{call: call{cmd: "ADD", ctr: "c1", pod: "db-0"}, wantIPs: 1},
			{call: call{cmd: "DEL", ctr: "c1", pod: "db-0"}},
			{before: recreate("db-0", "uid-db-0-b"), call: call{cmd: "ADD", ctr: "c2", pod: "db-0", uid: "uid-db-0-b"}, wantIPs: 1, sameAs: 1},
		},
		wantHeldCount: 1,
	}, {
		name:     "a sticky pod's requested address is its claim's",
		objs:     []client.Object{stsPod("db-0", "uid-db-0", stickyAnn)},
		steps:    []step{{call: call{cmd: "ADD", ctr: "c1", pod: "db-0", conf: withIPs(san29, "10.0.0.6")}, wantIPs: 1}, {call: call{cmd: "DEL", ctr: "c1", pod: "db-0"}}},
		wantHeld: []string{"10.0.0.6=db-0.net1"},
	}, {
		name: "sticky_statefulsets makes a network's StatefulSet pods sticky, not other pods, nor one whose annotation opts out",
		objs: []client.Object{stsPod("db-0", "uid-db-0", nil), pod("plain", thisNode, nil), stsPod("db-1", "uid-db-1", map[string]string{"ipam.tenure.dev/sticky": "false"})},
		steps: []step{
			{call: call{cmd: "ADD", ctr: "c1", pod: "db-0", conf: stickyNet}, wantIPs: 1},
			{call: call{cmd: "ADD", ctr: "c2", pod: "plain", conf: stickyNet}, wantIPs: 1},
			{call: call{cmd: "ADD", ctr: "c3", pod: "db-1", conf: stickyNet}, wantIPs: 1},
			{call: call{cmd: "DEL", ctr: "c1", pod: "db-0", conf: stickyNet}},
			{call: call{cmd: "DEL", ctr: "c2", pod: "plain", conf: stickyNet}},
			{call: call{cmd: "DEL", ctr: "c3", pod: "db-1", conf: stickyNet}},
		},
		wantHolders: []string{"db-0.net1"},
	}, {
		name:     "the sticky annotation on a pod no StatefulSet controls answers 7 and writes nothing",
		objs:     []client.Object{pod("p1", thisNode, stickyAnn)},
		steps:    []step{{call: call{cmd: "ADD", ctr: "c1", pod: "p1"}, wantCode: 7, wantMsg: "pod ns/p1 has annotation ipam.tenure.dev/sticky but is not a StatefulSet's pod"}},
		wantHeld: nil,
	}, {
		name:     "a claim of the sticky claim's name that is not sticky answers 7 and writes nothing",
		objs:     []client.Object{stsPod("db-0", "uid-db-0", stickyAnn), ipamClaim("db-0.net1", "san", ipamclaimsv1alpha1.IPAMClaimStatus{})},
		steps:    []step{{call: call{cmd: "ADD", ctr: "c1", pod: "db-0"}, wantCode: 7, wantMsg: "IPAMClaim ns/db-0.net1 exists but is not the sticky claim of pod db-0"}},
		wantHeld: nil,
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := startAgent(t, tc.objs...)
			var got [][]string
			for i, s := range tc.steps {
				if s.before != nil {
					s.before(h)
				}
				r := h.do(s.call)
				var addrs []string
				switch {
				case s.wantCode != 0:
					if r.Error == nil || r.Error.Code != s.wantCode || !strings.Contains(r.Error.Msg, s.wantMsg) {
						t.Fatalf("step %d (%s): got %+v, want code %d with %q", i+1, s.call.cmd, r.Error, s.wantCode, s.wantMsg)
					}
				case r.Error != nil:
					t.Fatalf("step %d (%s): code %d: %s", i+1, s.call.cmd, r.Error.Code, r.Error.Msg)
				case s.wantAddrs != nil:
					if addrs = ips(t, r); !slices.Equal(addrs, s.wantAddrs) {
						t.Fatalf("step %d: ADD gave %v, want %v", i+1, addrs, s.wantAddrs)
					}
				case s.call.cmd == "ADD":
					addrs = ips(t, r)
					if len(addrs) != s.wantIPs {
						t.Fatalf("step %d: ADD gave %v, want %d addresses", i+1, addrs, s.wantIPs)
					}
				}
				if s.sameAs != 0 && !slices.Equal(addrs, got[s.sameAs-1]) {
					t.Fatalf("step %d gave %v, step %d gave %v: want the same", i+1, addrs, s.sameAs, got[s.sameAs-1])
				}
				got = append(got, addrs)
			}
			h.fake.Resume()
			held := h.held()
			if tc.wantHolders != nil {
				var holders []string
				for _, r := range held {
					_, owner, _ := strings.Cut(r, "=")
					holders = append(holders, owner)
				}
				slices.Sort(holders)
				if !slices.Equal(holders, tc.wantHolders) {
					t.Fatalf("reservations left: %v, want one each of %v", held, tc.wantHolders)
				}
			} else if tc.wantHeld != nil || tc.wantHeldCount == 0 {
				if !slices.Equal(held, tc.wantHeld) {
					t.Fatalf("reservations left: %v, want %v", held, tc.wantHeld)
				}
			} else if len(held) != tc.wantHeldCount {
				t.Fatalf("reservations left: %v, want %d", held, tc.wantHeldCount)
			}
		})
	}
}

// recorded waits until the claim's status records addresses, and returns it.
func (h *harness) recorded(name string) *ipamclaimsv1alpha1.IPAMClaim {
	h.t.Helper()
	claim := &ipamclaimsv1alpha1.IPAMClaim{}
	err := wait.PollUntilContextTimeout(h.ctx, 5*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		return len(claim.Status.IPs) > 0, h.fake.Get(ctx, client.ObjectKey{Namespace: "ns", Name: name}, claim)
	})
	if err != nil {
		h.t.Fatal(err)
	}
	return claim
}

// TestRetriedAddWritesOnce: the idempotent path costs no API write.
func TestRetriedAddWritesOnce(t *testing.T) {
	h := startAgent(t, pod("p1", thisNode, nil))
	first := ips(t, h.do(call{cmd: "ADD", ctr: "c1", pod: "p1"}))
	writes := h.fake.Creates()
	// The retry may come before the informer has reported the first
	// create: the agent's own record of it must answer either way.
	second := ips(t, h.do(call{cmd: "ADD", ctr: "c1", pod: "p1"}))
	if !slices.Equal(first, second) || h.fake.Creates() != writes || writes != 1 {
		t.Fatalf("ADD gave %v then %v with %d creates in all, want the same address and 1 create", first, second, h.fake.Creates())
	}
}

// TestClaimStatusRecordsTheAllocation: the claim's status is what the
// migration target reads; the first ADD must write it.
func TestClaimStatusRecordsTheAllocation(t *testing.T) {
	h := startAgent(t, ipamClaim("vm1", "vm-net", ipamclaimsv1alpha1.IPAMClaimStatus{}), claimPod("virt-launcher", "vm1"))
	addrs := ips(t, h.do(call{cmd: "ADD", ctr: "c1", pod: "virt-launcher", conf: vmNet}))
	claim := h.recorded("vm1")
	if len(claim.Status.IPs) != 1 || !strings.HasPrefix(claim.Status.IPs[0], addrs[0]+"/") || len(claim.Status.DelegatedPrefixes) != 1 ||
		claim.Status.OwnerPod == nil || claim.Status.OwnerPod.Name != "virt-launcher" {
		t.Fatalf("claim status %+v after ADD gave %v", claim.Status, addrs)
	}
	if !strings.HasSuffix(claim.Status.DelegatedPrefixes[0], "/56") {
		t.Fatalf("delegated prefix %q is not a /56 of the pool", claim.Status.DelegatedPrefixes[0])
	}
}

// TestNodeNameLongerThanALabel: node names are DNS subdomains of up to 253
// bytes, label values stop at 63; a node with a long name still gets its
// reservations written, found by its own cache and released on DEL.
func TestNodeNameLongerThanALabel(t *testing.T) {
	node := strings.Repeat("rack-17.", 12) + "node-a.example.com"
	h := startAgentOn(t, node, pod("p1", node, nil))
	first := ips(t, h.do(call{cmd: "ADD", ctr: "c1", pod: "p1"}))
	again := ips(t, h.do(call{cmd: "ADD", ctr: "c1", pod: "p1"}))
	if !slices.Equal(first, again) || h.fake.Creates() != 1 {
		t.Fatalf("ADD gave %v then %v with %d creates, want one reservation found again", first, again, h.fake.Creates())
	}
	if r := h.do(call{cmd: "DEL", ctr: "c1", pod: "p1"}); r.Error != nil {
		t.Fatalf("DEL: %+v", r.Error)
	}
	if held := h.held(); len(held) != 0 {
		t.Fatalf("left after DEL: %v", held)
	}
}

// TestWindowMetrics: the agent's first ADD on a network widens its window
// by the block it allocates from, and /metrics says so; the window counts
// another node's reservation of that block, not the agent's own (the node
// cache holds those).
func TestWindowMetrics(t *testing.T) {
	h := startAgent(t, pod("p1", thisNode, nil))
	scrape := func() string {
		rec := httptest.NewRecorder()
		h.agent.MetricsHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
		return rec.Body.String()
	}
	if m := scrape(); !strings.Contains(m, "tenure_agent_window_rebuilds_total 0\n") || !strings.Contains(m, "tenure_agent_window_reservations 0\n") {
		t.Fatalf("before any ADD the window is empty and was never built:\n%s", grepLines(m, "tenure_agent_window"))
	}
	ips(t, h.do(call{cmd: "ADD", ctr: "c1", pod: "p1"}))
	if m := scrape(); !strings.Contains(m, "tenure_agent_window_rebuilds_total 1\n") {
		t.Fatalf("after one ADD: one rebuild:\n%s", grepLines(m, "tenure_agent_window"))
	}
	// Another node's create in the block reaches the window by the watch,
	// after the agent's own (one stream, in order): one reservation, not two.
	if err := h.fake.Create(h.ctx, heldBy("san", "10.0.0.6", "uid-x", "node-b")); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(h.ctx, 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return strings.Contains(scrape(), "tenure_agent_window_reservations 1\n"), nil
	}); err != nil {
		t.Fatalf("the window never held node-b's reservation alone:\n%s", grepLines(scrape(), "tenure_agent_window"))
	}
}

func grepLines(text, sub string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestClaimListedOnlyForASlotNothingRecords: the first ADD of a claim
// asks the API server for the claim's unrecorded items (to adopt what an
// ADD that died left); the migration target's ADD, whose every slot the
// status records, asks nothing and gets the same items.
func TestClaimListedOnlyForASlotNothingRecords(t *testing.T) {
	h := startAgent(t, ipamClaim("vm1", "vm-net", ipamclaimsv1alpha1.IPAMClaimStatus{}), claimPod("virt-launcher-src", "vm1"), claimPod("virt-launcher-dst", "vm1"))
	var lists atomic.Int64
	h.fake.SetBeforeList(func(_ context.Context, l client.ObjectList, opts ...client.ListOption) error {
		o := &client.ListOptions{}
		o.ApplyOptions(opts)
		if _, ok := l.(*metav1.PartialObjectMetadataList); ok && o.LabelSelector != nil && strings.Contains(o.LabelSelector.String(), reservation.LabelOwnerUID) {
			lists.Add(1)
		}
		return nil
	})
	src := ips(t, h.do(call{cmd: "ADD", ctr: "src", pod: "virt-launcher-src", conf: vmNet}))
	if n := lists.Load(); n != 1 {
		t.Fatalf("the claim's first ADD listed its reservations %d times, want 1", n)
	}
	// The target's ADD reads the claim from the agent's cache, as a
	// migration target long after the source's ADD does.
	if err := wait.PollUntilContextTimeout(h.ctx, 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		obj, ok, _ := h.agent.claims.GetIndexer().GetByKey("ns/vm1")
		return ok && len(obj.(*ipamclaimsv1alpha1.IPAMClaim).Status.IPs) > 0, nil
	}); err != nil {
		t.Fatalf("the agent's cache never held the claim's recorded status: %v", err)
	}
	dst := ips(t, h.do(call{cmd: "ADD", ctr: "dst", pod: "virt-launcher-dst", conf: vmNet}))
	if n := lists.Load(); n != 1 || !slices.Equal(src, dst) {
		t.Fatalf("the migration target got %v (source %v) after %d lists in all, want the source's with none of its own", dst, src, n)
	}
}
