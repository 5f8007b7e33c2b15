package ops

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	ipamclaimsv1alpha1 "github.com/tenure-ipam/tenure/api/ipamclaims/v1alpha1"
	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/controller/repair"
	"github.com/tenure-ipam/tenure/internal/inventory"
)

func nad(ns, name, config string) inventory.NetworkConfig {
	return inventory.NetworkConfig{Namespace: ns, Name: name, Config: config}
}

func ipPool(name, network string, ranges ...string) tenurev1alpha1.IPPool {
	p := tenurev1alpha1.IPPool{ObjectMeta: metav1.ObjectMeta{Name: name}}
	p.Spec.NetworkName = network
	for _, r := range ranges {
		p.Spec.Ranges = append(p.Spec.Ranges, tenurev1alpha1.PoolRange{Range: r})
	}
	return p
}

// spaces is "NETWORK RANGE [SOURCES]" per space.
func spaces(inv *inventory.Inventory) []string {
	var out []string
	for _, s := range inv.Spaces() {
		out = append(out, s.Scope+" "+s.Space.String()+" "+strings.Join(s.Sources, ","))
	}
	return out
}

func TestPoolRows(t *testing.T) {
	inv := inventory.BuildInventory([]tenurev1alpha1.IPPool{ipPool("blue", "blue-net", "10.4.0.0/29")},
		[]inventory.NetworkConfig{nad("ns", "san", `{"name":"san","type":"macvlan","ipam":{"type":"tenure","network_name":"san","range":"10.0.0.0/28","exclude":["10.0.0.1/32"]}}`)})
	rs := []*tenurev1alpha1.IPReservation{
		withRange(podRes("san", "10.0.0.2", "ns", "a", "ua", "n"), "10.0.0.0/28"),
		withRange(podRes("san", "10.0.0.3", "ns", "b", "ub", "n"), "10.0.0.0/28"),
		withRange(podRes("blue-net", "10.4.0.1", "ns", "c", "uc", "n"), "10.4.0.0/29"),
		withRange(podRes("lab", "10.9.0.3", "ns", "d", "ud", "n"), "10.9.0.2-10.9.0.5/24"),
		withRange(podRes("lab", "2001:db8:ff00::/56", "ns", "d", "ud", "n"), "2001:db8:ff00::/40 as /56"),
		podRes("old", "10.8.0.1", "ns", "e", "ue", "n"),
	}
	got := PoolRows(inv, rs)
	type row struct {
		network, rng, sources     string
		capacity, allocated, free uint64
	}
	want := []row{
		{"blue-net", "10.4.0.0/29", "IPPool blue", 6, 1, 5},
		{"lab", "10.9.0.2-10.9.0.5/24", "reservations", 4, 1, 3},
		{"lab", "2001:db8:ff00::/40 as /56", "reservations", 65536, 1, 65535},
		{"old", "", "reservations", 0, 1, 0},
		{"san", "10.0.0.0/28", "NetworkAttachmentDefinition ns/san", 13, 2, 11},
	}
	if len(got) != len(want) {
		t.Fatalf("rows %+v, want %+v", got, want)
	}
	for i, w := range want {
		g := got[i]
		if (row{g.Network, g.Range, strings.Join(g.Sources, ","), g.Capacity, g.Allocated, g.Free}) != w {
			t.Errorf("row %d: %+v, want %+v", i, g, w)
		}
	}
	var b bytes.Buffer
	if err := (&PoolsReport{Rows: got}).WriteTable(&b, false); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(b.String(), "\n")
	for i, want := range []string{"NETWORK RANGE CAPACITY ALLOCATED FREE USAGE", "", "", "", "old <none> 0 1 0 -",
		"san 10.0.0.0/28 13 2 11 [###.................] 15%"} {
		if got := strings.Join(strings.Fields(lines[i]), " "); want != "" && got != want {
			t.Errorf("table line %d: %q, want %q:\n%s", i, got, want, b.String())
		}
	}
}

func TestUsageBar(t *testing.T) {
	for _, tc := range []struct {
		allocated, capacity uint64
		want                string
	}{
		{0, 10, "[..........]   0%"},
		{5, 10, "[#####.....]  50%"},
		{10, 10, "[##########] 100%"},
		{12, 10, "[##########] 120%"},
		{1, 1 << 40, "[#.........]  <1%"},
		{3, 0, "-"},
	} {
		if got := UsageBar(tc.allocated, tc.capacity, 10); got != tc.want {
			t.Errorf("UsageBar(%d, %d) = %q, want %q", tc.allocated, tc.capacity, got, tc.want)
		}
	}
}

func TestCurrentPlacement(t *testing.T) {
	vm := claimRes("vm-net", "10.1.0.1", "ns", "vm", "c1", "launcher-a", "node-a")
	migrated := claim("ns", "vm", "c1", []string{"10.1.0.1/24"})
	migrated.Status.OwnerPod = &ipamclaimsv1alpha1.OwnerPod{Name: "launcher-b"}
	fresh := claim("ns", "vm", "c1", []string{"10.1.0.1/24"})
	replaced := claim("ns", "vm", "c-new", nil)
	pods := map[string]PodPlacement{"ns/launcher-a": {NodeName: "node-a"}, "ns/launcher-b": {NodeName: "node-b"}}
	for _, tc := range []struct {
		name  string
		r     *tenurev1alpha1.IPReservation
		claim *ipamclaimsv1alpha1.IPAMClaim
		pods  map[string]PodPlacement
		want  Placement
	}{
		{"a pod owner runs where it was made", podRes("san", "10.0.0.1", "ns", "web", "u", "node-c"), nil, nil, Placement{"web", "node-c"}},
		{"a claim after a migration: its ownerPod's node", vm, &migrated, pods, Placement{"launcher-b", "node-b"}},
		{"a claim without ownerPod: the pod that made it", vm, &fresh, pods, Placement{"launcher-a", "node-a"}},
		{"a claim whose pod is gone", vm, &migrated, map[string]PodPlacement{"ns/launcher-a": {NodeName: "node-a"}}, Placement{}},
		{"a claim that is gone", vm, nil, pods, Placement{}},
		{"a claim of the same name, another UID", vm, &replaced, pods, Placement{}},
	} {
		if got := CurrentPlacement(tc.r, tc.claim, tc.pods); got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

func TestParseQuery(t *testing.T) {
	for in, want := range map[string]string{
		"10.0.0.5": "10.0.0.5/32", " 10.0.0.0/24 ": "10.0.0.0/24", "10.0.0.7/24": "10.0.0.0/24", "2001:db8::1": "2001:db8::1/128",
		"::ffff:10.0.0.5": "10.0.0.5/32", "2001:db8:100::/56": "2001:db8:100::/56", "bogus": "", "fe80::1%eth0": "",
	} {
		got, err := ParseQuery(in)
		if (err != nil) != (want == "") || (err == nil && got.String() != want) {
			t.Errorf("ParseQuery(%q) = %v, %v; want %q", in, got, err, want)
		}
	}
}

func event(uid types.UID, kind, name, typ, reason, component, host, msg string, at time.Time) corev1.Event {
	return corev1.Event{
		InvolvedObject: corev1.ObjectReference{Kind: kind, Name: name, UID: uid},
		Type:           typ, Reason: reason, Message: msg,
		Source:        corev1.EventSource{Component: component, Host: host},
		LastTimestamp: metav1.NewTime(at), Count: 1,
	}
}

func TestExplain(t *testing.T) {
	now := t0.Add(10 * time.Minute)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web", UID: "u1", Annotations: map[string]string{
		nadv1.NetworkAttachmentAnnot: `[{"name":"san"},{"name":"vm-net","interface":"eth9","ipam-claim-reference":"vm"},{"name":"full","namespace":"other"},{"name":"quiet"}]`,
	}}, Spec: corev1.PodSpec{NodeName: "node-a"}, Status: corev1.PodStatus{Phase: corev1.PodPending}}
	san := podRes("san", "10.0.0.5", "ns", "web", "u1", "node-a")
	san.Spec.Owner.Interface = "net1"
	stale := podRes("san", "10.0.0.6", "ns", "web", "u-old", "node-a") // not this pod's UID
	stale.Spec.Owner.Interface = "net1"
	vmAddr := claimRes("vm-net", "10.1.0.1", "ns", "vm", "c1", "web", "node-a")
	vmClaim := claim("ns", "vm", "c1", []string{"10.1.0.1/24"})
	evs := []corev1.Event{
		event("u1", "Pod", "web", corev1.EventTypeWarning, "AddFailed", AgentComponent, "node-a",
			"ADD of interface net3 (network full, container abcdef) failed with CNI error 100: range 10.2.0.0/30 is full", t0.Add(5*time.Minute)),
		event("u1", "Pod", "web", corev1.EventTypeWarning, "AddFailed", AgentComponent, "node-a",
			"ADD of interface net1 (network san, container 0123) failed with CNI error 11: the API server timed out", t0.Add(-time.Minute)),
		event("u1", "Pod", "web", corev1.EventTypeNormal, "Scheduled", "default-scheduler", "", "assigned", t0.Add(-2*time.Minute)),
	}
	rep := Explain(pod, []*tenurev1alpha1.IPReservation{san, stale}, []PodClaim{{Name: "vm", Claim: &vmClaim, Reservations: []*tenurev1alpha1.IPReservation{vmAddr}}}, evs, now)
	type att struct {
		ifName, network, claim string
		ok                     bool
		outcome                string
	}
	want := []att{
		{"net1", "ns/san", "", true, "allocated 10.0.0.5 10m ago on node node-a"},
		{"eth9", "ns/vm-net", "vm", true, "allocated 10.1.0.1 10m ago on node node-a"},
		{"net3", "other/full", "", false, "ADD failed 5m ago on node node-a: ADD of interface net3 (network full, container abcdef) failed with CNI error 100: range 10.2.0.0/30 is full"},
		{"net4", "ns/quiet", "", false, "no ADD has reached tenure for this interface: no reservation and no Event"},
	}
	if len(rep.Attachments) != len(want) {
		t.Fatalf("attachments %+v, want %+v", rep.Attachments, want)
	}
	for i, w := range want {
		a := rep.Attachments[i]
		if (att{a.Interface, a.Network, a.Claim, a.OK, a.Outcome}) != w {
			t.Errorf("attachment %d:\n%+v\nwant\n%+v", i, att{a.Interface, a.Network, a.Claim, a.OK, a.Outcome}, w)
		}
	}
	if len(rep.Events) != 3 || rep.Events[0].Reason != "Scheduled" || rep.Events[2].From != "tenure-agent, node-a" {
		t.Errorf("events not in time order or without source: %+v", rep.Events)
	}

	// Without a networks annotation the attachments are what reservations
	// and the agent's Events name; a later failure is told after the
	// allocation; a claim's condition and an unscheduled pod speak for
	// themselves.
	bare := pod.DeepCopy()
	bare.Annotations = nil
	later := event("u1", "Pod", "web", corev1.EventTypeWarning, "AddFailed", AgentComponent, "node-a",
		"ADD of interface net1 (network san, container 4567) failed with CNI error 11: timeout", t0.Add(time.Minute))
	rep = Explain(bare, []*tenurev1alpha1.IPReservation{san}, nil, []corev1.Event{later}, now)
	if len(rep.Attachments) != 1 || !strings.Contains(rep.Attachments[0].Outcome, "allocated 10.0.0.5 10m ago on node node-a; a later ADD failed 9m ago: ADD of interface net1") {
		t.Errorf("later failure: %+v", rep.Attachments)
	}

	exhausted := claim("ns", "vm", "c1", nil)
	exhausted.Status.Conditions = []metav1.Condition{{Type: ipamclaimsv1alpha1.ConditionIPsAllocated, Status: metav1.ConditionFalse,
		Reason: ipamclaimsv1alpha1.ReasonSubnetExhausted, Message: "range 10.1.0.0/30 is full"}}
	unscheduled := pod.DeepCopy()
	unscheduled.Spec.NodeName = ""
	unscheduled.Annotations[nadv1.NetworkAttachmentAnnot] = `[{"name":"vm-net","ipam-claim-reference":"vm"},{"name":"san"}]`
	rep = Explain(unscheduled, nil, []PodClaim{{Name: "vm", Claim: &exhausted}}, nil, now)
	if got := []string{rep.Attachments[0].Outcome, rep.Attachments[1].Outcome}; !slices.Equal(got, []string{
		"IPAMClaim ns/vm: SubnetExhausted: range 10.1.0.0/30 is full", "the pod is not scheduled to a node: no ADD yet"}) {
		t.Errorf("claim condition and unscheduled pod: %q", got)
	}
	rep = Explain(unscheduled, nil, []PodClaim{{Name: "vm"}}, nil, now)
	if got := rep.Attachments[0].Outcome; got != "IPAMClaim ns/vm does not exist" {
		t.Errorf("missing claim: %q", got)
	}

	// A claim being deleted: which finalizer its release waits for, and
	// what it will release.
	vmPrefix := claimRes("vm-net", "2001:db8:1::/56", "ns", "vm", "c1", "web", "node-a")
	deleting := claim("ns", "vm", "c1", []string{"10.1.0.1/24"})
	deleting.DeletionTimestamp = &metav1.Time{Time: t0}
	deleting.Finalizers = []string{"kubevirt.io/persistent-ipam", "ipam.tenure.dev/release"}
	vmOnly := pod.DeepCopy()
	vmOnly.Annotations[nadv1.NetworkAttachmentAnnot] = `[{"name":"vm-net","interface":"eth9","ipam-claim-reference":"vm"}]`
	rep = Explain(vmOnly, nil, []PodClaim{{Name: "vm", Claim: &deleting, Reservations: []*tenurev1alpha1.IPReservation{vmAddr, vmPrefix}}}, nil, now)
	if got, want := rep.Attachments[0].Outcome, "allocated 10.1.0.1, 2001:db8:1::/56 10m ago on node node-a; IPAMClaim ns/vm: claim is being deleted;"+
		" waiting for finalizer kubevirt.io/persistent-ipam before releasing 10.1.0.1, 2001:db8:1::/56"; got != want {
		t.Errorf("claim being deleted:\n%s\nwant\n%s", got, want)
	}
	deleting.Finalizers = []string{"ipam.tenure.dev/release"}
	rep = Explain(vmOnly, nil, []PodClaim{{Name: "vm", Claim: &deleting, Reservations: []*tenurev1alpha1.IPReservation{vmAddr}}}, nil, now)
	if got := rep.Attachments[0].Outcome; !strings.HasSuffix(got, "; IPAMClaim ns/vm: claim is being deleted; no finalizer but ipam.tenure.dev/release is left, so the controller releases 10.1.0.1") {
		t.Errorf("claim being deleted, only tenure's finalizer: %q", got)
	}

	sandbox := event("u1", "Pod", "web", corev1.EventTypeWarning, "FailedCreatePodSandBox", "kubelet", "node-a", "plugin type=multus failed: ...", t0)
	broken := pod.DeepCopy()
	broken.Annotations[nadv1.NetworkAttachmentAnnot] = `[{"name":"san"}]`
	rep = Explain(broken, nil, nil, []corev1.Event{sandbox}, now)
	if got := rep.Attachments[0].Outcome; got != "the pod's sandbox failed 10m ago (FailedCreatePodSandBox): plugin type=multus failed: ..." {
		t.Errorf("sandbox failure: %q", got)
	}
	broken.Annotations[nadv1.NetworkAttachmentAnnot] = `[{"name":`
	if rep = Explain(broken, nil, nil, nil, now); !strings.Contains(rep.Problem, "does not parse") {
		t.Errorf("bad annotation: problem %q", rep.Problem)
	}
}

// A terminating pod on a node that is not Ready and not fenced: why says
// its addresses wait for the node to be fenced and names the taint; on a
// Ready node, a fenced one or a deleted one it says nothing of the kind.
// Judged by the controller's --release-unfenced, it says the grace period
// and the wire too, and that NodeNotReady releases them once the wire is
// silent.
func TestExplainFence(t *testing.T) {
	now := t0.Add(10 * time.Minute)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web", UID: "u1", DeletionTimestamp: &metav1.Time{Time: t0},
		Annotations: map[string]string{nadv1.NetworkAttachmentAnnot: `[{"name":"san"},{"name":"quiet"}]`}},
		Spec: corev1.PodSpec{NodeName: "node-a"}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	san := podRes("san", "10.0.0.5", "ns", "web", "u1", "node-a")
	san.Spec.Owner.Interface = "net1"
	const wait = "; kept: waiting for node node-a to be fenced (kubectl taint node node-a node.kubernetes.io/out-of-service=nodeshutdown:NoExecute, or delete the Node)"
	notReady := &repair.NodeFact{Exists: true, NotReadySince: t0}
	unfenced := repair.Policy{ReleaseUnfenced: true, NodeGracePeriod: 5 * time.Minute}
	asked := func(answers ...repair.WireAnswer) *repair.WireFact {
		return &repair.WireFact{Asked: true, AskedAt: now.Add(-time.Second), Answers: answers}
	}
	for _, tc := range []struct {
		name   string
		node   *repair.NodeFact
		pod    func(*corev1.Pod)
		policy repair.Policy
		wire   *repair.WireFact
		want   []string // in the attachment's outcome after "allocated ..."; none: no wait
	}{
		{"terminating, NotReady, not fenced", notReady, func(*corev1.Pod) {}, repair.Policy{}, nil, []string{wait}},
		{"terminal, NotReady, not fenced", notReady, func(p *corev1.Pod) { p.DeletionTimestamp, p.Status.Phase = nil, corev1.PodFailed }, repair.Policy{}, nil, []string{wait}},
		{"terminating, Ready", &repair.NodeFact{Exists: true, Ready: true}, func(*corev1.Pod) {}, repair.Policy{}, nil, nil},
		{"terminating, NotReady, fenced", &repair.NodeFact{Exists: true, NotReadySince: t0, OutOfService: true}, func(*corev1.Pod) {}, repair.Policy{}, nil, nil},
		{"terminating, node deleted", &repair.NodeFact{}, func(*corev1.Pod) {}, repair.Policy{}, nil, nil},
		{"release-unfenced, within the grace period", notReady, func(*corev1.Pod) {},
			repair.Policy{ReleaseUnfenced: true, NodeGracePeriod: time.Hour}, nil,
			[]string{"; kept: pod ns/web is terminating on node node-a, NotReady for 10m0s: waiting for node node-a to be fenced", "or for the end of its 1h0m0s grace period"}},
		{"release-unfenced, past the grace period, the address answers", notReady, func(*corev1.Pod) {}, unfenced,
			asked(repair.WireAnswer{Node: "node-b", NodeReady: true, Result: tenurev1alpha1.ProbeAnswered, MAC: "02:00:00:00:00:05", Kind: "arp", Interface: "san0"}),
			[]string{"; kept: pod ns/web (uid u1) is terminating on node node-a, NotReady for 10m0s (grace period 5m0s), not fenced", "answers on the wire from MAC 02:00:00:00:00:05", "waiting for node node-a to be fenced"}},
		{"release-unfenced, past the grace period, nothing answers", notReady, func(*corev1.Pod) {}, unfenced,
			asked(repair.WireAnswer{Node: "node-b", NodeReady: true, Result: tenurev1alpha1.ProbeSilent, Interface: "san0"}),
			[]string{"; the controller releases it: pod ns/web (uid u1) is terminating on node node-a", "nothing answered for 10.0.0.5 on the wire (node node-b probed it on san0)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := pod.DeepCopy()
			tc.pod(p)
			owned := []*tenurev1alpha1.IPReservation{san}
			rep := Explain(p, owned, nil, nil, now)
			d := repair.Decide(san, repair.Facts{Now: now, Pod: repair.PodFactOf(p), Node: tc.node, Wire: tc.wire}, tc.policy)
			rep.ExplainFence(owned, []repair.Decision{d}, tc.policy.ReleaseUnfenced)
			allocated := "allocated 10.0.0.5 10m ago on node node-a"
			got := rep.Attachments[0].Outcome
			if tc.want == nil {
				if rep.Fence != "" || got != allocated {
					t.Fatalf("fence %q, outcome %q; want no wait", rep.Fence, got)
				}
				return
			}
			if !strings.HasPrefix(got, allocated+tc.want[0]) {
				t.Errorf("outcome %q, want it to begin %q", got, allocated+tc.want[0])
			}
			for _, w := range tc.want[1:] {
				if !strings.Contains(got, w) {
					t.Errorf("outcome %q lacks %q", got, w)
				}
			}
			if got := rep.Attachments[1].Outcome; strings.Contains(got, "fenced") || strings.Contains(got, "releases") {
				t.Errorf("an attachment that holds nothing waits: %q", got)
			}
			var b strings.Builder
			if err := rep.WriteTable(&b, false); err != nil {
				t.Fatal(err)
			}
			if released := strings.Contains(got, "releases it"); released != (rep.Fence == "") || released == strings.Contains(b.String(), "addresses kept: pod ns/web ") {
				t.Errorf("released %v, fence %q; table:\n%s", released, rep.Fence, b.String())
			}
		})
	}
}

// A sticky claim's reservation names its StatefulSet in the
// OWNER column; a plain claim's and a pod's do not.
func TestOwnerCellShowsStickyStatefulSet(t *testing.T) {
	for _, tc := range []struct {
		view ReservationView
		want string
	}{
		{ReservationView{Owner: tenurev1alpha1.ReservationOwner{Kind: tenurev1alpha1.OwnerPod, Name: "db-0"}}, "pod/db-0"},
		{ReservationView{Owner: tenurev1alpha1.ReservationOwner{Kind: tenurev1alpha1.OwnerIPAMClaim, Name: "vm1.vm-net"}}, "ipamclaim/vm1.vm-net"},
		{ReservationView{Owner: tenurev1alpha1.ReservationOwner{Kind: tenurev1alpha1.OwnerIPAMClaim, Name: "db-0.net1"}, StatefulSet: "db"},
			"ipamclaim/db-0.net1 (sticky, statefulset/db)"},
	} {
		if got := ownerCell(tc.view); got != tc.want {
			t.Errorf("ownerCell(%+v) = %q, want %q", tc.view.Owner, got, tc.want)
		}
	}
}

// TestResolveFindsANetworkByAnyName: get takes an allocation scope, a CNI
// network name or a NetworkAttachmentDefinition, and says how each scope
// matched. A NAD without network_name allocates in the scope "default",
// under its CNI network name.
func TestResolveFindsANetworkByAnyName(t *testing.T) {
	inv := inventory.BuildInventory(nil, []inventory.NetworkConfig{
		{Namespace: "vms", Name: "tenant-blue", Config: `{"cniVersion":"1.0.0","name":"vm-net","type":"bridge",
			"ipam":{"type":"tenure","range":"10.30.0.0/24","prefix_delegation":{"range":"2001:db8:100::/40","prefix_length":56}}}`},
		{Namespace: "ops", Name: "san", Config: `{"cniVersion":"1.0.0","name":"san","type":"macvlan",
			"ipam":{"type":"tenure","network_name":"storage","range":"10.10.0.0/28"}}`},
	})
	cases := []struct {
		query string
		want  string
	}{
		{"vm-net", "[{default [CNI network name]}]"},
		{"vms/tenant-blue", "[{default [NetworkAttachmentDefinition]}]"},
		{"default", "[{default [allocation scope]}]"},
		{"san", "[{storage [CNI network name]}]"},
		{"storage", "[{storage [allocation scope]}]"},
		{"ops/san", "[{storage [NetworkAttachmentDefinition]}]"},
		{"nothing", "[{nothing [allocation scope]}]"},
	}
	for _, c := range cases {
		if got := fmt.Sprint(inv.Resolve(c.query)); got != c.want {
			t.Errorf("Resolve(%q) = %s, want %s", c.query, got, c.want)
		}
	}
	var b strings.Builder
	rep := &ReservationsReport{Query: "vm-net", Scopes: inv.Resolve("vm-net"), Reservations: []ReservationView{{
		Name: "default.10.30.0.5", Network: "default", CNINetwork: "vm-net", Address: "10.30.0.5",
		Owner: tenurev1alpha1.ReservationOwner{Kind: tenurev1alpha1.OwnerIPAMClaim, Namespace: "vms", Name: "vm1.blue"},
	}}}
	if err := rep.WriteTable(&b, true); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(b.String(), "Network vm-net: allocation scope default (CNI network name)\n") ||
		!strings.Contains(strings.Join(strings.Fields(b.String()), " "), " default.10.30.0.5 default (CNI vm-net)") {
		t.Errorf("get vm-net -o wide:\n%s", b.String())
	}
	b.Reset()
	rep.who = true
	if err := rep.WriteTable(&b, false); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(strings.Fields(b.String()), " "), "10.30.0.5 default (CNI vm-net) vms") {
		t.Errorf("who:\n%s", b.String())
	}
}
