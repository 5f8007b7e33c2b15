package dataplane

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	ipamclaimsv1alpha1 "github.com/tenure-ipam/tenure/api/ipamclaims/v1alpha1"
	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/claims"
	"github.com/tenure-ipam/tenure/internal/config"
	"github.com/tenure-ipam/tenure/internal/kubevirt"
)

const (
	nets   = "k8s.v1.cni.cncf.io/networks"
	status = "k8s.v1.cni.cncf.io/network-status"
	vmMAC  = "02:00:00:aa:bb:01"
)

func testPod(name string, ann map[string]string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "vms", Name: name, Annotations: ann}, Spec: corev1.PodSpec{NodeName: "n1"}}
}

func testClaim(name, network, owner string, ips, prefixes []string) *ipamclaimsv1alpha1.IPAMClaim {
	c := &ipamclaimsv1alpha1.IPAMClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "vms", Name: name},
		Spec:       ipamclaimsv1alpha1.IPAMClaimSpec{Network: network, Interface: "net1"},
		Status:     ipamclaimsv1alpha1.IPAMClaimStatus{IPs: ips, DelegatedPrefixes: prefixes},
	}
	if owner != "" {
		c.Status.OwnerPod = &ipamclaimsv1alpha1.OwnerPod{Name: owner}
	}
	return c
}

func claimSource(cs ...*ipamclaimsv1alpha1.IPAMClaim) func(ns, name string) (*ipamclaimsv1alpha1.IPAMClaim, bool) {
	return func(ns, name string) (*ipamclaimsv1alpha1.IPAMClaim, bool) {
		for _, c := range cs {
			if c.Namespace == ns && c.Name == name {
				return c, true
			}
		}
		return nil, false
	}
}

// san is what the NAD vms/san gives CNI network "san".
var san = map[string]config.DHCPv6{
	"vms/san": {Enabled: true, Network: "san", Interfaces: []string{"br0", "br1"}, InstallRoutes: true, PreferredLifetime: time.Hour, ValidLifetime: 2 * time.Hour},
}

func TestCompute(t *testing.T) {
	dual := []string{"10.0.0.7/24", "fd00::7/64"}
	pd := []string{"fd00:9000:0:700::/56"}
	withMAC := map[string]string{nets: `[{"name":"san","interface":"net1","ipam-claim-reference":"vm1.san","mac":"02:00:00:AA:BB:01"}]`}
	noMAC := map[string]string{nets: `[{"name":"san","interface":"net1","ipam-claim-reference":"vm1.san"}]`}
	statusMAC := func(ifName, mac string) string {
		return `[{"name":"default/pod-net","interface":"eth0","mac":"0a:58:0a:f4:00:05","default":true},` +
			`{"name":"vms/san","interface":"` + ifName + `","mac":"` + mac + `"}]`
	}
	merge := func(a map[string]string, kv ...string) map[string]string {
		out := map[string]string{}
		for k, v := range a {
			out[k] = v
		}
		for i := 0; i+1 < len(kv); i += 2 {
			out[kv[i]] = kv[i+1]
		}
		return out
	}

	type want struct {
		key, mac, source, addr, prefix, pod, ifName string
	}
	cases := []struct {
		name     string
		pods     []*corev1.Pod
		claims   []*ipamclaimsv1alpha1.IPAMClaim
		networks map[string]config.DHCPv6
		want     []want
		skip     string // substring of the only skip reason, "" for none
	}{
		{name: "MAC from the network-selection element",
			pods:   []*corev1.Pod{testPod("virt-launcher-a", withMAC)},
			claims: []*ipamclaimsv1alpha1.IPAMClaim{testClaim("vm1.san", "san", "virt-launcher-a", dual, pd)},
			want:   []want{{"vms/vm1.san", vmMAC, MACFromSelection, "fd00::7", "fd00:9000:0:700::/56", "vms/virt-launcher-a", "net1"}}},
		{name: "element MAC wins over network-status",
			pods:   []*corev1.Pod{testPod("virt-launcher-a", merge(withMAC, status, statusMAC("net1", "02:00:00:00:00:99")))},
			claims: []*ipamclaimsv1alpha1.IPAMClaim{testClaim("vm1.san", "san", "virt-launcher-a", dual, pd)},
			want:   []want{{"vms/vm1.san", vmMAC, MACFromSelection, "fd00::7", "fd00:9000:0:700::/56", "vms/virt-launcher-a", "net1"}}},
		{name: "MAC from network-status of the interface",
			pods:   []*corev1.Pod{testPod("virt-launcher-a", merge(noMAC, status, statusMAC("net1", vmMAC)))},
			claims: []*ipamclaimsv1alpha1.IPAMClaim{testClaim("vm1.san", "san", "virt-launcher-a", dual, pd)},
			want:   []want{{"vms/vm1.san", vmMAC, MACFromNetworkStatus, "fd00::7", "fd00:9000:0:700::/56", "vms/virt-launcher-a", "net1"}}},
		{name: "malformed element MAC falls through to network-status",
			pods: []*corev1.Pod{testPod("virt-launcher-a", map[string]string{
				nets:   `[{"name":"san","interface":"net1","ipam-claim-reference":"vm1.san","mac":"not-a-mac"}]`,
				status: statusMAC("net1", vmMAC)})},
			claims: []*ipamclaimsv1alpha1.IPAMClaim{testClaim("vm1.san", "san", "virt-launcher-a", dual, pd)},
			want:   []want{{"vms/vm1.san", vmMAC, MACFromNetworkStatus, "fd00::7", "fd00:9000:0:700::/56", "vms/virt-launcher-a", "net1"}}},
		{name: "interface by position matches network-status net2",
			pods: []*corev1.Pod{testPod("virt-launcher-a", map[string]string{
				nets:   `[{"name":"other"},{"name":"san","ipam-claim-reference":"vm1.san"}]`,
				status: statusMAC("net2", vmMAC)})},
			claims: []*ipamclaimsv1alpha1.IPAMClaim{testClaim("vm1.san", "san", "virt-launcher-a", dual, pd)},
			want:   []want{{"vms/vm1.san", vmMAC, MACFromNetworkStatus, "fd00::7", "fd00:9000:0:700::/56", "vms/virt-launcher-a", "net2"}}},
		{name: "no MAC: network-status not written yet",
			pods:   []*corev1.Pod{testPod("virt-launcher-a", noMAC)},
			claims: []*ipamclaimsv1alpha1.IPAMClaim{testClaim("vm1.san", "san", "virt-launcher-a", dual, pd)},
			skip:   "no MAC"},
		{name: "no MAC: network-status has another interface only",
			pods:   []*corev1.Pod{testPod("virt-launcher-a", merge(noMAC, status, statusMAC("net7", vmMAC)))},
			claims: []*ipamclaimsv1alpha1.IPAMClaim{testClaim("vm1.san", "san", "virt-launcher-a", dual, pd)},
			skip:   "no MAC"},
		{name: "no MAC: network-status malformed",
			pods:   []*corev1.Pod{testPod("virt-launcher-a", merge(noMAC, status, `[{"name":`))},
			claims: []*ipamclaimsv1alpha1.IPAMClaim{testClaim("vm1.san", "san", "virt-launcher-a", dual, pd)},
			skip:   "network-status is malformed"},
		{name: "ownerPod is this node's pod",
			pods:   []*corev1.Pod{testPod("virt-launcher-src", withMAC), testPod("virt-launcher-dst", withMAC)},
			claims: []*ipamclaimsv1alpha1.IPAMClaim{testClaim("vm1.san", "san", "virt-launcher-dst", dual, pd)},
			want:   []want{{"vms/vm1.san", vmMAC, MACFromSelection, "fd00::7", "fd00:9000:0:700::/56", "vms/virt-launcher-dst", "net1"}},
			skip:   "owned by pod virt-launcher-dst"},
		{name: "ownerPod runs elsewhere",
			pods:   []*corev1.Pod{testPod("virt-launcher-src", withMAC)},
			claims: []*ipamclaimsv1alpha1.IPAMClaim{testClaim("vm1.san", "san", "virt-launcher-dst", dual, pd)},
			skip:   "owned by pod virt-launcher-dst"},
		{name: "claim without ownerPod",
			pods:   []*corev1.Pod{testPod("virt-launcher-a", withMAC)},
			claims: []*ipamclaimsv1alpha1.IPAMClaim{testClaim("vm1.san", "san", "", dual, pd)},
			skip:   "no status.ownerPod"},
		{name: "claim without prefix: address only",
			pods:   []*corev1.Pod{testPod("virt-launcher-a", withMAC)},
			claims: []*ipamclaimsv1alpha1.IPAMClaim{testClaim("vm1.san", "san", "virt-launcher-a", dual, nil)},
			want:   []want{{"vms/vm1.san", vmMAC, MACFromSelection, "fd00::7", "invalid Prefix", "vms/virt-launcher-a", "net1"}}},
		{name: "claim with IPv4 only and a prefix: prefix only",
			pods:   []*corev1.Pod{testPod("virt-launcher-a", withMAC)},
			claims: []*ipamclaimsv1alpha1.IPAMClaim{testClaim("vm1.san", "san", "virt-launcher-a", []string{"10.0.0.7/24"}, pd)},
			want:   []want{{"vms/vm1.san", vmMAC, MACFromSelection, "invalid IP", "fd00:9000:0:700::/56", "vms/virt-launcher-a", "net1"}}},
		{name: "claim with nothing IPv6",
			pods:   []*corev1.Pod{testPod("virt-launcher-a", withMAC)},
			claims: []*ipamclaimsv1alpha1.IPAMClaim{testClaim("vm1.san", "san", "virt-launcher-a", []string{"10.0.0.7/24"}, nil)},
			skip:   "no IPv6 address or delegated prefix"},
		{name: "bare IPv6 in status.ips",
			pods:   []*corev1.Pod{testPod("virt-launcher-a", withMAC)},
			claims: []*ipamclaimsv1alpha1.IPAMClaim{testClaim("vm1.san", "san", "virt-launcher-a", []string{"fd00::9"}, pd)},
			want:   []want{{"vms/vm1.san", vmMAC, MACFromSelection, "fd00::9", "fd00:9000:0:700::/56", "vms/virt-launcher-a", "net1"}}},
		{name: "claim missing",
			pods: []*corev1.Pod{testPod("virt-launcher-a", withMAC)},
			skip: "claim not found"},
		{name: "claim being deleted",
			pods: []*corev1.Pod{testPod("virt-launcher-a", withMAC)},
			claims: []*ipamclaimsv1alpha1.IPAMClaim{func() *ipamclaimsv1alpha1.IPAMClaim {
				c := testClaim("vm1.san", "san", "virt-launcher-a", dual, pd)
				c.DeletionTimestamp = &metav1.Time{Time: time.Now()}
				return c
			}()},
			skip: "being deleted"},
		{name: "claim being deleted that KubeVirt's finalizer holds: the VM still runs, still served",
			pods: []*corev1.Pod{testPod("virt-launcher-a", withMAC)},
			claims: []*ipamclaimsv1alpha1.IPAMClaim{func() *ipamclaimsv1alpha1.IPAMClaim {
				c := testClaim("vm1.san", "san", "virt-launcher-a", dual, pd)
				c.DeletionTimestamp = &metav1.Time{Time: time.Now()}
				c.Finalizers = []string{"kubevirt.io/persistent-ipam", claims.ReleaseFinalizer}
				return c
			}()},
			want: []want{{"vms/vm1.san", vmMAC, MACFromSelection, "fd00::7", "fd00:9000:0:700::/56", "vms/virt-launcher-a", "net1"}}},
		{name: "claim being deleted with only tenure's finalizer left",
			pods: []*corev1.Pod{testPod("virt-launcher-a", withMAC)},
			claims: []*ipamclaimsv1alpha1.IPAMClaim{func() *ipamclaimsv1alpha1.IPAMClaim {
				c := testClaim("vm1.san", "san", "virt-launcher-a", dual, pd)
				c.DeletionTimestamp = &metav1.Time{Time: time.Now()}
				c.Finalizers = []string{claims.ReleaseFinalizer}
				return c
			}()},
			skip: "being deleted"},
		{name: "network without dhcpv6 learnt",
			pods:     []*corev1.Pod{testPod("virt-launcher-a", withMAC)},
			claims:   []*ipamclaimsv1alpha1.IPAMClaim{testClaim("vm1.san", "san", "virt-launcher-a", dual, pd)},
			networks: map[string]config.DHCPv6{"vms/other": san["vms/san"]},
			skip:     `NAD vms/san of network "san" has no dhcpv6`},
		{name: "network with dhcpv6 but no interfaces",
			pods:     []*corev1.Pod{testPod("virt-launcher-a", withMAC)},
			claims:   []*ipamclaimsv1alpha1.IPAMClaim{testClaim("vm1.san", "san", "virt-launcher-a", dual, pd)},
			networks: map[string]config.DHCPv6{"vms/san": {Enabled: true, Network: "san", InstallRoutes: true}},
			skip:     "dhcpv6.interfaces is empty"},
		{name: "terminal pod",
			pods: []*corev1.Pod{func() *corev1.Pod {
				p := testPod("virt-launcher-a", withMAC)
				p.Status.Phase = corev1.PodSucceeded
				return p
			}()},
			claims: []*ipamclaimsv1alpha1.IPAMClaim{testClaim("vm1.san", "san", "virt-launcher-a", dual, pd)}},
		{name: "attachment without claim is ignored",
			pods: []*corev1.Pod{testPod("plain", map[string]string{nets: `[{"name":"san","interface":"net1","mac":"02:00:00:aa:bb:01"}]`})}},
		{name: "malformed networks annotation",
			pods: []*corev1.Pod{testPod("bad", map[string]string{nets: `[{"name":`})},
			skip: "annotation k8s.v1.cni.cncf.io/networks"},
		// Found by claims.FuzzSelect: the annotation library panicked on it.
		{name: "null element in the networks annotation",
			pods: []*corev1.Pod{testPod("bad", map[string]string{nets: `[{"name":"san","interface":"net1","ipam-claim-reference":"vm1.san"}, null]`})},
			skip: "element 1 is null"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			networks := c.networks
			if networks == nil {
				networks = san
			}
			got, skips := Compute(Inputs{Pods: c.pods, Claim: claimSource(c.claims...), Networks: networks})
			if len(got) != len(c.want) {
				t.Fatalf("got %d bindings %+v (skips %+v), want %d", len(got), got, skips, len(c.want))
			}
			for i, w := range c.want {
				b := got[i]
				g := want{b.Key, b.MAC.String(), b.MACSource, b.Address.String(), b.Prefix.String(), b.Pod, b.PodInterface}
				if g != w {
					t.Errorf("binding %d = %+v, want %+v", i, g, w)
				}
				if !slices.Equal(b.Interfaces, []string{"br0", "br1"}) || !b.InstallRoutes || b.Network != "san" {
					t.Errorf("binding %d serves on %v routes %v network %q", i, b.Interfaces, b.InstallRoutes, b.Network)
				}
			}
			switch {
			case c.skip == "" && len(skips) != 0:
				t.Errorf("unexpected skips %+v", skips)
			case c.skip != "" && (len(skips) != 1 || !strings.Contains(skips[0].Reason, c.skip)):
				t.Errorf("skips %+v, want one containing %q", skips, c.skip)
			}
		})
	}
}

func TestComputeIsOrderIndependent(t *testing.T) {
	var pods []*corev1.Pod
	var cls []*ipamclaimsv1alpha1.IPAMClaim
	for _, n := range []string{"c", "a", "b"} {
		pods = append(pods, testPod("p-"+n, map[string]string{nets: `[{"name":"san","interface":"net1","ipam-claim-reference":"` + n + `","mac":"02:00:00:00:00:0` + string(n[0]-'a'+'1') + `"}]`}))
		cls = append(cls, testClaim(n, "san", "p-"+n, []string{"fd00::" + n + "/64"}, nil))
	}
	a, _ := Compute(Inputs{Pods: pods, Claim: claimSource(cls...), Networks: san})
	slices.Reverse(pods)
	b, _ := Compute(Inputs{Pods: pods, Claim: claimSource(cls...), Networks: san})
	keys := func(bs []Binding) (out []string) {
		for _, x := range bs {
			out = append(out, x.Key)
		}
		return out
	}
	if !slices.Equal(keys(a), []string{"vms/a", "vms/b", "vms/c"}) || !slices.Equal(keys(a), keys(b)) {
		t.Fatalf("keys %v and %v", keys(a), keys(b))
	}
}

func binding(key, addr, prefix string, routes bool, ifaces ...string) Binding {
	b := Binding{InstallRoutes: routes, Interfaces: ifaces}
	b.Key = key
	if addr != "" {
		b.Address = netip.MustParseAddr(addr)
	}
	if prefix != "" {
		b.Prefix = netip.MustParsePrefix(prefix)
	}
	return b
}

// TestComputeFollowsTheVM: rule 4 where KubeVirt's API is served. The
// migration's source pod runs on node n1, its target on n2; each row says
// what each node computes for its pod: "" is a binding, else a substring of
// the reason it has none. Exactly one node serves in every row.
func TestComputeFollowsTheVM(t *testing.T) {
	withMAC := map[string]string{nets: `[{"name":"san","interface":"net1","ipam-claim-reference":"vm1.san","mac":"02:00:00:aa:bb:01"}]`}
	claim := func(owner string, vmOwned bool) *ipamclaimsv1alpha1.IPAMClaim {
		c := testClaim("vm1.san", "san", owner, []string{"fd00::7/64"}, []string{"fd00:9000:0:700::/56"})
		if vmOwned {
			c.OwnerReferences = []metav1.OwnerReference{{APIVersion: "kubevirt.io/v1", Kind: "VirtualMachine", Name: "vm1", UID: "u1"}}
		}
		return c
	}
	on := func(node string, m *kubevirt.Migration) kubevirt.Lookup {
		return func(ns, name string) (kubevirt.VMI, bool) {
			return kubevirt.VMI{Namespace: ns, Name: name, NodeName: node, Migration: m}, ns == "vms" && name == "vm1"
		}
	}
	pod := func(name, node string, launched bool) *corev1.Pod {
		p := testPod(name, withMAC)
		p.Spec.NodeName = node
		if launched { // a virt-launcher pod's controller is its VMI
			yes := true
			p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "kubevirt.io/v1", Kind: "VirtualMachineInstance", Name: "vm1", UID: "v1", Controller: &yes}}
		}
		return p
	}
	const src, dst = "virt-launcher-src", "virt-launcher-dst"
	toN2 := func(completed, failed bool) *kubevirt.Migration {
		return &kubevirt.Migration{SourceNode: "n1", TargetNode: "n2", Completed: completed, Failed: failed}
	}
	ready := time.Date(2026, 12, 2, 1, 0, 0, 0, time.UTC)
	domainReady := func(failed bool) *kubevirt.Migration {
		m := toN2(failed, failed)
		m.DomainReady = ready
		if failed {
			m.End = ready.Add(time.Second)
		}
		return m
	}
	cases := []struct {
		name     string
		claim    *ipamclaimsv1alpha1.IPAMClaim
		vmi      kubevirt.Lookup // nil: the API does not serve VMIs
		launched bool            // the pods are owned by VMI vm1
		atSrc    string
		atDst    string
		cause    *MigrationCause // of the serving node's binding
	}{
		{"API not served: ownerPod decides, as without KubeVirt", claim(dst, true), nil, false, "owned by pod " + dst, "", nil},
		{"VM runs on n1", claim(src, true), on("n1", nil), false, "", "runs on node n1", nil},
		{"migration under way, ownerPod on the target: the source serves", claim(dst, true), on("n1", toN2(false, false)), false, "", "runs on node n1; this node is its migration target", nil},
		{"target's domain ready: the target serves before completed", claim(src, true), on("n1", domainReady(false)), false, "runs on node n2", "", &MigrationCause{Outcome: SwitchoverTarget, Signal: ready}},
		{"failed after the target's domain was ready: back to the source", claim(dst, true), on("n1", domainReady(true)), false, "", "runs on node n1; its migration to this node failed", &MigrationCause{Outcome: SwitchoverBack, Signal: ready.Add(time.Second)}},
		{"switchover: status.nodeName is n2", claim(src, true), on("n2", toN2(true, false)), false, "runs on node n2", "", &MigrationCause{Outcome: SwitchoverTarget}},
		{"completed before status.nodeName moved: the target serves", claim(src, true), on("n1", toN2(true, false)), false, "runs on node n2", "", nil},
		{"failed migration: the source keeps serving", claim(dst, true), on("n1", toN2(true, true)), false, "", "runs on node n1", nil},
		{"VMI missing: ownerPod decides", claim(dst, true), func(string, string) (kubevirt.VMI, bool) { return kubevirt.VMI{}, false }, false, "owned by pod " + dst, "", nil},
		{"VMI not scheduled yet: ownerPod decides", claim(src, true), on("", nil), false, "", "owned by pod " + src, nil},
		{"claim of no VM: ownerPod decides", claim(dst, false), on("n1", nil), false, "owned by pod " + dst, "", nil},
		{"claim of no VM presented by a VMI's pods: the pods' VMI decides", claim(dst, false), on("n1", toN2(false, false)), true, "", "migration target", nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for _, side := range []struct{ pod, node, want string }{{src, "n1", c.atSrc}, {dst, "n2", c.atDst}} {
				got, skips := Compute(Inputs{Pods: []*corev1.Pod{pod(side.pod, side.node, c.launched)}, Claim: claimSource(c.claim), Networks: san, VMI: c.vmi})
				switch {
				case side.want == "" && (len(got) != 1 || got[0].Key != "vms/vm1.san" || got[0].Pod != "vms/"+side.pod || len(skips) != 0):
					t.Errorf("node %s: bindings %+v, skips %+v; want pod %s served", side.node, got, skips, side.pod)
				case side.want != "" && (len(got) != 0 || len(skips) != 1 || !strings.Contains(skips[0].Reason, side.want)):
					t.Errorf("node %s: bindings %+v, skips %+v; want none because %q", side.node, got, skips, side.want)
				case side.want == "" && c.cause != nil && (got[0].Migration == nil || *got[0].Migration != *c.cause):
					t.Errorf("node %s: binding's migration %+v, want %+v", side.node, got[0].Migration, c.cause)
				}
			}
		})
	}
}

// TestComputeServesStickyClaims: rule 2, an element without a claim
// reference is served its pod's sticky StatefulSet claim.
func TestComputeServesStickyClaims(t *testing.T) {
	pod := testPod("web-0", map[string]string{nets: `[{"name":"san","interface":"net1","mac":"02:00:00:aa:bb:01"}]`})
	sticky := func(claimPod string) *ipamclaimsv1alpha1.IPAMClaim {
		c := testClaim("web-0.net1", "san", "web-0", []string{"fd00::7/64"}, []string{"fd00:9000:0:700::/56"})
		c.Labels = map[string]string{"ipam.tenure.dev/sticky": "true", "ipam.tenure.dev/statefulset": "web"}
		c.Annotations = map[string]string{"ipam.tenure.dev/pod": claimPod}
		return c
	}
	got, skips := Compute(Inputs{Pods: []*corev1.Pod{pod}, Claim: claimSource(sticky("web-0")), Networks: san})
	if len(got) != 1 || got[0].Key != "vms/web-0.net1" || got[0].Prefix.String() != "fd00:9000:0:700::/56" || len(skips) != 0 {
		t.Fatalf("bindings %+v, skips %+v; want the sticky claim served", got, skips)
	}
	// A claim of that name that is not this pod's is not presented by it.
	if got, skips := Compute(Inputs{Pods: []*corev1.Pod{pod}, Claim: claimSource(sticky("web-1")), Networks: san}); len(got) != 0 || len(skips) != 0 {
		t.Fatalf("bindings %+v, skips %+v; want nothing", got, skips)
	}
}

// TestComputeServesPodPrefixes: rule 7, an attachment without a claim whose
// pod opted in to a delegated prefix is served from the pod's reservations.
func TestComputeServesPodPrefixes(t *testing.T) {
	pod := testPod("router-0", map[string]string{nets: `[{"name":"san","interface":"net1","mac":"02:00:00:aa:bb:01"}]`})
	pod.UID = "pod-uid"
	res := func(kind tenurev1alpha1.ReservationKind, item, sandbox, ifName, network string) *tenurev1alpha1.IPReservation {
		return &tenurev1alpha1.IPReservation{Spec: tenurev1alpha1.IPReservationSpec{
			Network: network, Kind: kind, Address: item, CNINetwork: network,
			Owner: tenurev1alpha1.ReservationOwner{Kind: tenurev1alpha1.OwnerPod, UID: "pod-uid", ContainerID: sandbox, Interface: ifName},
		}}
	}
	addr := res(tenurev1alpha1.KindAddress, "fd00::9", "s1", "net1", "san")
	v4 := res(tenurev1alpha1.KindAddress, "10.0.0.9", "s1", "net1", "san")
	prefix := res(tenurev1alpha1.KindDelegatedPrefix, "fd00:9000:0:900::/56", "s1", "net1", "san")
	cases := []struct {
		name      string
		rs        []*tenurev1alpha1.IPReservation
		served    bool // PodReservations set
		addr, pfx string
		reason    string
	}{
		{name: "address and prefix", rs: []*tenurev1alpha1.IPReservation{v4, addr, prefix}, served: true, addr: "fd00::9", pfx: "fd00:9000:0:900::/56"},
		{name: "prefix only", rs: []*tenurev1alpha1.IPReservation{v4, prefix}, served: true, addr: "invalid IP", pfx: "fd00:9000:0:900::/56"},
		{name: "no prefix: not served", rs: []*tenurev1alpha1.IPReservation{v4, addr}, served: true},
		{name: "no reservation source", rs: []*tenurev1alpha1.IPReservation{addr, prefix}},
		{name: "another interface's prefix", rs: []*tenurev1alpha1.IPReservation{res(tenurev1alpha1.KindDelegatedPrefix, "fd00:9000:0:900::/56", "s1", "net2", "san")}, served: true},
		{name: "two sandboxes' reservations", rs: []*tenurev1alpha1.IPReservation{prefix, res(tenurev1alpha1.KindDelegatedPrefix, "fd00:9000:0:a00::/56", "s2", "net1", "san")},
			served: true, reason: "2 sandboxes"},
		{name: "network without dhcpv6", rs: []*tenurev1alpha1.IPReservation{res(tenurev1alpha1.KindDelegatedPrefix, "fd00:9000:0:900::/56", "s1", "net1", "other")},
			served: true, reason: `NAD vms/san defines network "san", the attachment's is "other"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			in := Inputs{Pods: []*corev1.Pod{pod}, Claim: claimSource(), Networks: san}
			if c.served {
				in.PodReservations = func(uid string) []*tenurev1alpha1.IPReservation {
					if uid != "pod-uid" {
						return nil
					}
					return c.rs
				}
			}
			got, skips := Compute(in)
			switch {
			case c.pfx != "" && (len(got) != 1 || got[0].Key != "vms/router-0/net1" || got[0].Address.String() != c.addr || got[0].Prefix.String() != c.pfx || got[0].MAC.String() != vmMAC):
				t.Fatalf("bindings %+v (skips %+v), want %s and %s", got, skips, c.addr, c.pfx)
			case c.pfx == "" && len(got) != 0:
				t.Fatalf("bindings %+v, want none", got)
			case c.reason != "" && (len(skips) != 1 || !strings.Contains(skips[0].Reason, c.reason)):
				t.Fatalf("skips %+v, want one containing %q", skips, c.reason)
			case c.reason == "" && len(skips) != 0:
				t.Fatalf("unexpected skips %+v", skips)
			}
			if routes := DesiredRoutes(got, nil); c.addr == "fd00::9" && (len(routes) != 1 || routes[0].String() != "fd00:9000:0:900::/56 via fd00::9 dev br0 onlink") {
				t.Fatalf("routes %v", routes)
			}
		})
	}
}

// TestComputeTakesTheClaimsPrefixFromItsReservations: a claim whose
// status.delegatedPrefixes was dropped (a CRD without the field) is served
// the prefix its reservation holds; the record decides only while the
// reservations are not known, and a recorded prefix no reservation holds is
// not served.
func TestComputeTakesTheClaimsPrefixFromItsReservations(t *testing.T) {
	pod := testPod("launcher", map[string]string{nets: `[{"name":"san","interface":"net1","ipam-claim-reference":"vm1.san","mac":"` + vmMAC + `"}]`})
	prefixRes := func(uid types.UID, item string) *tenurev1alpha1.IPReservation {
		r := &tenurev1alpha1.IPReservation{ObjectMeta: metav1.ObjectMeta{Name: "san.pd." + item}}
		r.Spec.Kind, r.Spec.Address, r.Spec.Owner.UID = tenurev1alpha1.KindDelegatedPrefix, item, string(uid)
		return r
	}
	const held, other = "fd00:9000:0:700::/56", "fd00:9000:0:800::/56"
	for _, tc := range []struct {
		name     string
		recorded []string
		rs       []*tenurev1alpha1.IPReservation
		known    bool
		want     string
	}{
		{"record dropped, reservation holds it", nil, []*tenurev1alpha1.IPReservation{prefixRes("c1", held)}, true, held},
		{"record and reservation agree", []string{held}, []*tenurev1alpha1.IPReservation{prefixRes("c1", held)}, true, held},
		{"reservations not known yet: the record", []string{held}, nil, false, held},
		{"recorded, held by nobody: not served", []string{held}, nil, true, ""},
		{"another owner's reservation is not the claim's", nil, []*tenurev1alpha1.IPReservation{prefixRes("c2", held)}, true, ""},
		{"two unrecorded: the lowest", nil, []*tenurev1alpha1.IPReservation{prefixRes("c1", other), prefixRes("c1", held)}, true, held},
		{"two, one recorded: the recorded one", []string{other}, []*tenurev1alpha1.IPReservation{prefixRes("c1", held), prefixRes("c1", other)}, true, other},
	} {
		cl := testClaim("vm1.san", "san", "launcher", []string{"10.0.0.7/24", "fd00::7/64"}, tc.recorded)
		cl.UID = "c1"
		bs, skips := Compute(Inputs{Pods: []*corev1.Pod{pod}, Claim: claimSource(cl), Networks: san,
			ClaimReservations: func(c *ipamclaimsv1alpha1.IPAMClaim) ([]*tenurev1alpha1.IPReservation, bool) {
				if c.UID != "c1" {
					t.Fatalf("%s: asked for the reservations of %s", tc.name, c.UID)
				}
				return tc.rs, tc.known
			}})
		if len(bs) != 1 {
			t.Fatalf("%s: bindings %+v, skips %+v", tc.name, bs, skips)
		}
		got := ""
		if bs[0].Prefix.IsValid() {
			got = bs[0].Prefix.String()
		}
		if got != tc.want || bs[0].Address != netip.MustParseAddr("fd00::7") {
			t.Errorf("%s: binding serves %s and prefix %q, want fd00::7 and %q", tc.name, bs[0].Address, got, tc.want)
		}
		routes := DesiredRoutes(bs, nil)
		if (tc.want != "") != (len(routes) == 1) {
			t.Errorf("%s: routes %v", tc.name, routes)
		}
	}
}
