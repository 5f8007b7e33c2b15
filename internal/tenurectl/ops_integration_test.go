//go:build integration

package tenurectl

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	ipamclaimsv1alpha1 "github.com/tenure-ipam/tenure/api/ipamclaims/v1alpha1"
	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/agent"
	"github.com/tenure-ipam/tenure/internal/cniwire"
	"github.com/tenure-ipam/tenure/internal/kube"
	"github.com/tenure-ipam/tenure/internal/ops"
	"github.com/tenure-ipam/tenure/internal/reservation"
	"github.com/tenure-ipam/tenure/test/controlplane"
	"github.com/tenure-ipam/tenure/test/controlplane/cptest"
	"github.com/tenure-ipam/tenure/test/testbed"
)

// The operator commands run against one control plane with Multus's
// NetworkAttachmentDefinition CRD installed besides tenure's.
func init() {
	runTests = func(m *testing.M) int {
		return cptest.Main(m, func(cp *controlplane.ControlPlane) error {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			return controlplane.InstallCRDs(ctx, cp.Config, controlplane.MultusCRDs())
		})
	}
}

const opsNS = "ops"

type ctlResult struct {
	code           int
	stdout, stderr string
}

// ctl runs tenurectl in this process against the control plane.
func ctl(t *testing.T, args ...string) ctlResult {
	t.Helper()
	return ctlRaw(t, append(args, "--kubeconfig", cptest.Current().KubeconfigPath)...)
}

// ctlRaw runs tenurectl with args as they are.
func ctlRaw(t *testing.T, args ...string) ctlResult {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := run(args, &stdout, &stderr)
	t.Logf("tenurectl %s -> %d\n%s%s", strings.Join(args, " "), code, stdout.String(), stderr.String())
	return ctlResult{code, stdout.String(), stderr.String()}
}

// kubeconfigWithContext writes a copy of the control plane's kubeconfig
// with one more context, name, on the same cluster and user, whose
// namespace is namespace.
func kubeconfigWithContext(t *testing.T, name, namespace string) string {
	t.Helper()
	cfg, err := clientcmd.LoadFromFile(cptest.Current().KubeconfigPath)
	if err != nil {
		t.Fatal(err)
	}
	ctx := *cfg.Contexts[cfg.CurrentContext]
	ctx.Namespace = namespace
	cfg.Contexts[name] = &ctx
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// ctlJSON runs a command with -o json and decodes its output into out.
func ctlJSON(t *testing.T, out any, args ...string) {
	t.Helper()
	r := ctl(t, append(args, "-o", "json")...)
	if r.code != 0 {
		t.Fatalf("tenurectl %q: exit %d: %s", args, r.code, r.stderr)
	}
	if err := json.Unmarshal([]byte(r.stdout), out); err != nil {
		t.Fatalf("tenurectl %q -o json: %v\n%s", args, err, r.stdout)
	}
}

// rows are the table lines of out, each with its cells' words joined by
// one space, so column widths do not matter.
func rows(out string) []string {
	var lines []string
	for _, l := range strings.Split(strings.TrimRight(out, "\n"), "\n") {
		lines = append(lines, strings.Join(strings.Fields(l), " "))
	}
	return lines
}

func hasRow(t *testing.T, out string, prefix string) {
	t.Helper()
	if !slices.ContainsFunc(rows(out), func(l string) bool { return strings.HasPrefix(l, prefix) }) {
		t.Errorf("no line starts %q in:\n%s", prefix, out)
	}
}

type cluster struct {
	t   *testing.T
	ctx context.Context
	c   client.Client
}

func newCluster(t *testing.T) *cluster {
	c, err := kube.NewClient(cptest.Config())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	cl := &cluster{t: t, ctx: ctx, c: c}
	cl.reset()
	if err := testbed.EnsureNamespace(ctx, c, opsNS); err != nil {
		t.Fatal(err)
	}
	return cl
}

// reset deletes what a test may have left: every reservation, claim, pool,
// network configuration, pod of the test namespace and node, so that each
// test sees only its own objects.
func (cl *cluster) reset() {
	ctx, c := cl.ctx, cl.c
	nads := &unstructured.Unstructured{}
	nads.SetAPIVersion("k8s.cni.cncf.io/v1")
	nads.SetKind("NetworkAttachmentDefinition")
	for _, del := range []func() error{
		func() error { return c.DeleteAllOf(ctx, &tenurev1alpha1.IPReservation{}) },
		func() error { return c.DeleteAllOf(ctx, &tenurev1alpha1.IPPool{}) },
		func() error { return c.DeleteAllOf(ctx, &ipamclaimsv1alpha1.IPAMClaim{}, client.InNamespace(opsNS)) },
		func() error { return c.DeleteAllOf(ctx, nads, client.InNamespace(opsNS)) },
		func() error {
			return c.DeleteAllOf(ctx, &corev1.Pod{}, client.InNamespace(opsNS), client.GracePeriodSeconds(0))
		},
		func() error { return c.DeleteAllOf(ctx, &corev1.Node{}) },
	} {
		if err := del(); err != nil && !apierrors.IsNotFound(err) {
			cl.t.Fatal(err)
		}
	}
	// DeleteAllOf returns before the objects are gone.
	err := wait.PollUntilContextCancel(ctx, 20*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		pods, rs := &corev1.PodList{}, &tenurev1alpha1.IPReservationList{}
		if err := c.List(ctx, pods, client.InNamespace(opsNS)); err != nil {
			return false, err
		}
		if err := c.List(ctx, rs); err != nil {
			return false, err
		}
		return len(pods.Items) == 0 && len(rs.Items) == 0, nil
	})
	if err != nil {
		cl.t.Fatalf("cleaning the cluster: %v", err)
	}
}

func (cl *cluster) create(obj client.Object) {
	cl.t.Helper()
	if err := cl.c.Create(cl.ctx, obj); err != nil {
		cl.t.Fatalf("creating %T %s: %v", obj, obj.GetName(), err)
	}
}

func (cl *cluster) node(name string) {
	cl.t.Helper()
	if _, err := testbed.CreateNode(cl.ctx, cl.c, name); err != nil {
		cl.t.Fatal(err)
	}
}

func (cl *cluster) pod(name, node, networks string) *corev1.Pod {
	cl.t.Helper()
	var ann map[string]string
	if networks != "" {
		ann = map[string]string{"k8s.v1.cni.cncf.io/networks": networks}
	}
	p, err := testbed.CreatePod(cl.ctx, cl.c, opsNS, name, node, ann)
	if err != nil {
		cl.t.Fatal(err)
	}
	return p
}

// nad creates a NetworkAttachmentDefinition of a macvlan network with
// tenure IPAM keys ipam (a JSON object's members).
func (cl *cluster) nad(name, ipam string) string {
	cl.t.Helper()
	conf := fmt.Sprintf(`{"cniVersion":"1.0.0","name":%q,"type":"macvlan","master":"eth0","ipam":{"type":"tenure",%s}}`, name, ipam)
	cl.createNAD(name, conf)
	return conf
}

// createNAD creates the NetworkAttachmentDefinition name with spec.config
// conf.
func (cl *cluster) createNAD(name, conf string) {
	cl.t.Helper()
	u := &unstructured.Unstructured{}
	u.SetAPIVersion("k8s.cni.cncf.io/v1")
	u.SetKind("NetworkAttachmentDefinition")
	u.SetNamespace(opsNS)
	u.SetName(name)
	if err := unstructured.SetNestedField(u.Object, conf, "spec", "config"); err != nil {
		cl.t.Fatal(err)
	}
	cl.create(u)
}

func (cl *cluster) claim(name, network string) *ipamclaimsv1alpha1.IPAMClaim {
	cl.t.Helper()
	c := &ipamclaimsv1alpha1.IPAMClaim{ObjectMeta: metav1.ObjectMeta{Namespace: opsNS, Name: name}}
	c.Spec.Network, c.Spec.Interface = network, "net1"
	cl.create(c)
	return c
}

// reservation creates a reservation as an agent on node would have made it
// for owner.
func (cl *cluster) reservation(network, item, rng string, owner tenurev1alpha1.ReservationOwner) *tenurev1alpha1.IPReservation {
	cl.t.Helper()
	p, err := reservation.ParseItem(item)
	if err != nil {
		cl.t.Fatal(err)
	}
	kind := tenurev1alpha1.KindAddress
	if strings.Contains(item, "/") {
		kind = tenurev1alpha1.KindDelegatedPrefix
	}
	r := reservation.New(reservation.Spec{Network: network, Kind: kind, Item: p, Range: rng, CNINetwork: network, Owner: owner})
	cl.create(r)
	return r
}

func podOwner(p *corev1.Pod) tenurev1alpha1.ReservationOwner {
	return tenurev1alpha1.ReservationOwner{Kind: tenurev1alpha1.OwnerPod, Namespace: p.Namespace, Name: p.Name, UID: string(p.UID),
		PodName: p.Name, PodUID: string(p.UID), ContainerID: "sandbox-" + p.Name, Interface: "net1", Node: p.Spec.NodeName}
}

// startAgent runs a node agent in this process.
func (cl *cluster) startAgent(node string) *agent.Agent {
	cl.t.Helper()
	a, err := agent.NewForConfig(cptest.Config(), agent.Options{NodeName: node})
	if err != nil {
		cl.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(cl.ctx)
	cl.t.Cleanup(func() { cancel(); a.Shutdown() })
	if err := a.Start(ctx); err != nil {
		cl.t.Fatal(err)
	}
	return a
}

// add runs a CNI ADD of pod's sandbox on net1 through a, and returns the
// response.
func (cl *cluster) add(a *agent.Agent, p *corev1.Pod, conf string) *agent.Response {
	cl.t.Helper()
	return a.Handle(cl.ctx, &cniwire.Request{
		Command: "ADD", ContainerID: "sandbox-" + p.Name, IfName: "net1", Netns: "/var/run/netns/" + p.Name, StdinData: []byte(conf),
		Args: fmt.Sprintf("IgnoreUnknown=1;K8S_POD_NAMESPACE=%s;K8S_POD_NAME=%s;K8S_POD_UID=%s", p.Namespace, p.Name, p.UID),
	})
}

func (cl *cluster) mustAdd(a *agent.Agent, p *corev1.Pod, conf string) {
	cl.t.Helper()
	if r := cl.add(a, p, conf); r.Error != nil {
		cl.t.Fatalf("ADD for %s: code %d: %s", p.Name, r.Error.Code, r.Error.Msg)
	}
}

// heldBy is the item a pod-owned or claim-owned reservation of owner UID
// holds in network.
func (cl *cluster) heldBy(network, uid string, kind tenurev1alpha1.ReservationKind) string {
	cl.t.Helper()
	l := &tenurev1alpha1.IPReservationList{}
	if err := cl.c.List(cl.ctx, l, client.MatchingLabels{reservation.LabelOwnerUID: uid}); err != nil {
		cl.t.Fatal(err)
	}
	for _, r := range l.Items {
		if r.Spec.Network == network && r.Spec.Kind == kind {
			return r.Spec.Address
		}
	}
	cl.t.Fatalf("no %s reservation of %s in %s", kind, uid, network)
	return ""
}

// TestOpsCommands: pools, get, who, why and release against a cluster that
// agents populated, in table and JSON form; check is clean on it.
func TestOpsCommands(t *testing.T) {
	cl := newCluster(t)
	cl.node("node-a")
	cl.node("node-b")
	san := cl.nad("san", `"network_name":"san","range":"10.10.0.0/28","exclude":["10.10.0.1/32"]`)
	vmNet := cl.nad("vm-net", `"network_name":"vm-net","range":"10.30.0.0/24","prefix_delegation":{"range":"2001:db8:100::/40","prefix_length":56}`)
	tiny := cl.nad("tiny", `"network_name":"tiny","range":"10.40.0.10-10.40.0.10/24"`)
	pool := &tenurev1alpha1.IPPool{ObjectMeta: metav1.ObjectMeta{Name: "blue"}}
	pool.Spec.NetworkName, pool.Spec.Ranges = "blue-net", []tenurev1alpha1.PoolRange{{Range: "10.20.0.0/29"}}
	cl.create(pool)

	agentA, agentB := cl.startAgent("node-a"), cl.startAgent("node-b")
	web0 := cl.pod("web-0", "node-a", `[{"name":"san"}]`)
	web1 := cl.pod("web-1", "node-b", `[{"name":"tiny"}]`)
	web2 := cl.pod("web-2", "node-b", `[{"name":"tiny"}]`)
	cl.mustAdd(agentA, web0, san)
	cl.mustAdd(agentB, web2, tiny)
	if r := cl.add(agentB, web1, tiny); r.Error == nil || r.Error.Code != 100 {
		t.Fatalf("ADD into a full range: %+v", r)
	}
	// A VM: its claim's addresses are made on node-a, then it migrates to
	// node-b, whose launcher presents the same claim.
	vm := cl.claim("vm", "vm-net")
	launcherA := cl.pod("launcher-a", "node-a", `[{"name":"vm-net","ipam-claim-reference":"vm"}]`)
	cl.mustAdd(agentA, launcherA, vmNet)
	launcherB := cl.pod("launcher-b", "node-b", `[{"name":"vm-net","ipam-claim-reference":"vm"}]`)
	cl.mustAdd(agentB, launcherB, vmNet)
	web0Addr := cl.heldBy("san", string(web0.UID), tenurev1alpha1.KindAddress)
	vmAddr := cl.heldBy("vm-net", string(vm.UID), tenurev1alpha1.KindAddress)
	vmPrefix := cl.heldBy("vm-net", string(vm.UID), tenurev1alpha1.KindDelegatedPrefix)

	t.Run("pools", func(t *testing.T) {
		r := ctl(t, "pools")
		hasRow(t, r.stdout, "NETWORK RANGE CAPACITY ALLOCATED FREE USAGE")
		hasRow(t, r.stdout, "blue-net 10.20.0.0/29 6 0 6 [....................] 0%")
		hasRow(t, r.stdout, "san 10.10.0.0/28 13 1 12 [##..................] 8%")
		hasRow(t, r.stdout, "tiny 10.40.0.10-10.40.0.10/24 1 1 0 [####################] 100%")
		hasRow(t, r.stdout, "vm-net 10.30.0.0/24 254 1 253")
		hasRow(t, r.stdout, "vm-net 2001:db8:100::/40 as /56 65536 1 65535")
		hasRow(t, ctl(t, "pools", "-o", "wide").stdout, "san 10.10.0.0/28 13 1 12 [##..................] 8% Address <none> <none> 0 NetworkAttachmentDefinition ops/san")
		var rep ops.PoolsReport
		ctlJSON(t, &rep, "pools")
		got := map[string][2]uint64{}
		for _, row := range rep.Rows {
			got[row.Network+" "+row.Range] = [2]uint64{row.Capacity, row.Allocated}
		}
		want := map[string][2]uint64{"blue-net 10.20.0.0/29": {6, 0}, "san 10.10.0.0/28": {13, 1}, "tiny 10.40.0.10-10.40.0.10/24": {1, 1},
			"vm-net 10.30.0.0/24": {254, 1}, "vm-net 2001:db8:100::/40 as /56": {65536, 1}}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("pools -o json: %v, want %v", got, want)
		}
		var fromYAML ops.PoolsReport
		if err := yaml.Unmarshal([]byte(ctl(t, "pools", "-o", "yaml").stdout), &fromYAML); err != nil || fmt.Sprint(fromYAML) != fmt.Sprint(rep) {
			t.Errorf("pools -o yaml: %+v, %v; want what -o json says, %+v", fromYAML, err, rep)
		}
	})

	t.Run("get", func(t *testing.T) {
		r := ctl(t, "get", "san")
		hasRow(t, r.stdout, "ADDRESS NAMESPACE OWNER NODE AGE")
		hasRow(t, r.stdout, web0Addr+" ops pod/web-0 node-a ")
		// The claim's reservations were made on node-a; the VM runs on node-b.
		r = ctl(t, "get", "vm-net", "-o", "wide")
		hasRow(t, r.stdout, "ADDRESS NAMESPACE OWNER NODE AGE POD MADE ON INTERFACE NAME NETWORK")
		for _, item := range []string{vmAddr, vmPrefix} {
			name := reservation.Name("vm-net", map[bool]tenurev1alpha1.ReservationKind{false: tenurev1alpha1.KindAddress, true: tenurev1alpha1.KindDelegatedPrefix}[strings.Contains(item, "/")], mustItem(t, item))
			if !slices.ContainsFunc(rows(r.stdout), func(l string) bool {
				return strings.HasPrefix(l, item+" ops ipamclaim/vm node-b ") && strings.HasSuffix(l, " launcher-b node-a net1 "+name+" vm-net")
			}) {
				t.Errorf("get vm-net -o wide: no row for %s on node-b made on node-a:\n%s", item, r.stdout)
			}
		}
		var rep ops.ReservationsReport
		ctlJSON(t, &rep, "get", "vm-net")
		if len(rep.Reservations) != 2 {
			t.Fatalf("get vm-net -o json: %+v", rep)
		}
		for _, v := range rep.Reservations {
			if v.Node != "node-b" || v.Owner.Node != "node-a" || v.Pod != "launcher-b" || v.Owner.Kind != tenurev1alpha1.OwnerIPAMClaim || v.Owner.Name != "vm" {
				t.Errorf("get vm-net -o json: %+v, want node-b, made on node-a, pod launcher-b, owner IPAMClaim vm", v)
			}
		}
		// The NAD names the same reservations.
		ctlJSON(t, &rep, "get", opsNS+"/vm-net")
		if len(rep.Reservations) != 2 || fmt.Sprint(rep.Scopes) != "[{vm-net [NetworkAttachmentDefinition]}]" {
			t.Errorf("get %s/vm-net -o json: %+v, want the claim's two reservations in the scope vm-net", opsNS, rep)
		}
		if r := ctl(t, "get", "nothing"); r.code != 0 || !strings.Contains(r.stdout, "No reservation in network nothing.") {
			t.Errorf("get of an empty network: %+v", r)
		}
	})

	t.Run("who", func(t *testing.T) {
		r := ctl(t, "who", web0Addr)
		hasRow(t, r.stdout, "ADDRESS NETWORK NAMESPACE OWNER NODE SINCE")
		hasRow(t, r.stdout, web0Addr+" san ops pod/web-0 node-a ")
		// An address inside the VM's delegated prefix is held by the prefix.
		inside := netip.MustParsePrefix(vmPrefix).Addr().Next().String()
		var rep ops.ReservationsReport
		ctlJSON(t, &rep, "who", inside)
		if len(rep.Reservations) != 1 || rep.Reservations[0].Address != vmPrefix || rep.Reservations[0].Created.IsZero() {
			t.Errorf("who %s -o json: %+v, want the prefix %s with its creation time", inside, rep, vmPrefix)
		}
		ctlJSON(t, &rep, "who", "10.0.0.0/8")
		if len(rep.Reservations) != 3 {
			t.Errorf("who 10.0.0.0/8: %d reservations, want web-0's, web-2's and the VM's address", len(rep.Reservations))
		}
		if r := ctl(t, "who", "192.0.2.1"); r.code != 0 || !strings.Contains(r.stdout, "No reservation holds 192.0.2.1/32.") {
			t.Errorf("who of a free address: %+v", r)
		}
	})

	t.Run("why", func(t *testing.T) {
		// The agent's Event is sent asynchronously.
		var r ctlResult
		err := wait.PollUntilContextTimeout(cl.ctx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
			r = ctl(t, "why", "web-1", "-n", opsNS)
			return strings.Contains(r.stdout, "ADD failed"), nil
		})
		if err != nil {
			t.Fatalf("why web-1 never showed the failed ADD:\n%s", r.stdout)
		}
		hasRow(t, r.stdout, "Pod ops/web-1 (uid "+string(web1.UID)+") on node node-b, phase Pending")
		hasRow(t, r.stdout, "net1 ops/tiny <none> <none> <none> ADD failed ")
		if !strings.Contains(r.stdout, "failed with CNI error 100: range 10.40.0.10-10.40.0.10/24 is full") {
			t.Errorf("why web-1 does not say the range is full:\n%s", r.stdout)
		}
		var rep ops.PodReport
		ctlJSON(t, &rep, "why", "launcher-b", "--namespace", opsNS)
		if len(rep.Attachments) != 1 || !rep.Attachments[0].OK || rep.Attachments[0].Claim != "vm" || len(rep.Attachments[0].Addresses) != 2 {
			t.Errorf("why launcher-b -o json: %+v", rep)
		}
		if r := ctl(t, "why", "nobody", "-n", opsNS); r.code != 1 || !strings.Contains(r.stderr, "pod ops/nobody not found") {
			t.Errorf("why of a missing pod: %+v", r)
		}
		// The namespace of the context --context names, from the file
		// --kubeconfig or $KUBECONFIG names, as kubectl reads them.
		kc := kubeconfigWithContext(t, "ops-context", opsNS)
		if r := ctlRaw(t, "why", "web-1", "--kubeconfig", kc, "--context", "ops-context"); r.code != 0 || !strings.Contains(r.stdout, "Pod ops/web-1 ") {
			t.Errorf("why with --context: %+v", r)
		}
		t.Setenv("KUBECONFIG", kc)
		if r := ctlRaw(t, "why", "web-1", "--context=ops-context"); r.code != 0 || !strings.Contains(r.stdout, "Pod ops/web-1 ") {
			t.Errorf("why with $KUBECONFIG and --context: %+v", r)
		}
		if r := ctlRaw(t, "why", "web-1"); r.code != 1 || !strings.Contains(r.stderr, "pod default/web-1 not found") {
			t.Errorf("why in the current context's namespace (default): %+v", r)
		}
	})

	t.Run("completion asks the cluster", func(t *testing.T) {
		kc := kubeconfigWithContext(t, "ops-context", opsNS)
		candidates := func(args ...string) []string {
			t.Helper()
			r := ctlRaw(t, append([]string{"__complete"}, args...)...)
			if r.code != 0 {
				t.Fatalf("__complete %q: exit %d: %s", args, r.code, r.stderr)
			}
			var out []string
			for _, l := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
				name, _, _ := strings.Cut(l, "\t")
				out = append(out, name)
			}
			return out
		}
		for _, tc := range []struct {
			args []string
			want []string
		}{
			{[]string{"get", "--kubeconfig", kc, ""}, []string{"san", "vm-net", "tiny", "blue-net"}},
			{[]string{"why", "--kubeconfig", kc, "-n", opsNS, ""}, []string{"web-0", "web-1", "web-2", "launcher-a", "launcher-b"}},
			{[]string{"why", "--kubeconfig", kc, "--context", "ops-context", ""}, []string{"web-0", "launcher-b"}},
			{[]string{"why", "--kubeconfig", kc, "-n", ""}, []string{opsNS, "default"}},
			{[]string{"pools", "--kubeconfig", kc, "--context", ""}, []string{"ops-context"}},
		} {
			got := candidates(tc.args...)
			for _, w := range tc.want {
				if !slices.Contains(got, w) {
					t.Errorf("__complete %q: %q lacks %s", tc.args, got, w)
				}
			}
		}
		if got := candidates("why", "--kubeconfig", kc, "-n", opsNS, "web-0", ""); !slices.Equal(got, []string{":4"}) {
			t.Errorf("why completes a second pod: %q", got)
		}
	})

	t.Run("flags in the flag package's dialect", func(t *testing.T) {
		kc := cptest.Current().KubeconfigPath
		if r := ctlRaw(t, "why", "web-1", "-namespace", opsNS, "-kubeconfig="+kc, "--o", "json"); r.code != 0 || !strings.Contains(r.stdout, `"namespace": "ops"`) {
			t.Errorf("why with -namespace, -kubeconfig= and --o: %+v", r)
		}
		r := ctlRaw(t, "get", "--n", opsNS, "-kubeconfig", kc, "-o=wide", "san")
		if r.code != 0 {
			t.Errorf("get with --n and -o=wide: %+v", r)
		}
		hasRow(t, r.stdout, "ADDRESS NAMESPACE OWNER NODE AGE POD MADE ON INTERFACE NAME NETWORK")
	})

	t.Run("check is clean", func(t *testing.T) {
		r := ctl(t, "check")
		if r.code != 0 || !strings.Contains(r.stdout, "checked 4 reservations, 1 IPAMClaims, 5 pods, 2 nodes, 1 IPPools, 3 network configurations: no problems") {
			t.Errorf("check of a healthy cluster: %+v", r)
		}
	})

	t.Run("release", func(t *testing.T) {
		// web-0 is alive: refused without --force, and nothing changes.
		r := ctl(t, "release", web0Addr)
		if r.code != 1 || !strings.Contains(r.stderr, "is held by pod ops/web-0, which is alive") || !strings.Contains(r.stderr, "--force") {
			t.Errorf("release of a live pod's address: %+v", r)
		}
		name := reservation.AddressName("san", netip.MustParseAddr(web0Addr))
		if err := cl.c.Get(cl.ctx, types.NamespacedName{Name: name}, &tenurev1alpha1.IPReservation{}); err != nil {
			t.Fatalf("the refused release changed the reservation: %v", err)
		}
		var rel ops.Released
		ctlJSON(t, &rel, "release", web0Addr, "--force")
		if !rel.OwnerAlive || rel.Reservation.Name != name || !strings.HasPrefix(rel.Event, "Pod ops/web-0 Warning ReleasedByOperator") {
			t.Errorf("release --force: %+v", rel)
		}
		if err := cl.c.Get(cl.ctx, types.NamespacedName{Name: name}, &tenurev1alpha1.IPReservation{}); !apierrors.IsNotFound(err) {
			t.Errorf("after release --force the reservation is still there: %v", err)
		}
		wantEvent(t, cl, web0.UID, corev1.EventTypeWarning, web0Addr+" (network san, reservation "+name+") released by tenurectl release with --force while the owner is alive")

		// The claim is alive too; forcing also removes the address from its
		// status, so that its next ADD does not take it back.
		r = ctl(t, "release", vmAddr, "--network", "vm-net", "--force")
		if r.code != 0 || !strings.Contains(r.stdout, "removed "+vmAddr+" from the status of IPAMClaim ops/vm") {
			t.Errorf("release --force of a claim's address: %+v", r)
		}
		got := &ipamclaimsv1alpha1.IPAMClaim{}
		if err := cl.c.Get(cl.ctx, client.ObjectKeyFromObject(vm), got); err != nil || len(got.Status.IPs) != 0 || len(got.Status.DelegatedPrefixes) != 1 {
			t.Errorf("claim status after the release: %+v, %v", got.Status, err)
		}
		// A delegated prefix's own CIDR names the prefix.
		r = ctl(t, "release", vmPrefix, "--force")
		if r.code != 0 || !strings.Contains(r.stdout, "released "+vmPrefix+" (network vm-net, reservation "+reservation.PrefixName("vm-net", netip.MustParsePrefix(vmPrefix))+")") {
			t.Errorf("release --force of a claim's delegated prefix: %+v", r)
		}
		if err := cl.c.Get(cl.ctx, client.ObjectKeyFromObject(vm), got); err != nil || len(got.Status.DelegatedPrefixes) != 0 {
			t.Errorf("claim status after releasing its prefix: %+v, %v", got.Status, err)
		}

		// An orphan (its pod deleted without a DEL) needs no --force.
		if err := testbed.ForceDeletePod(cl.ctx, cl.c, opsNS, "web-2"); err != nil {
			t.Fatal(err)
		}
		// Named as the CNI result prints it: the address with its subnet's
		// length.
		r = ctl(t, "release", "10.40.0.10/24")
		if r.code != 0 || !strings.Contains(r.stdout, "released 10.40.0.10 (network tiny, reservation tiny.10.40.0.10) of pod ops/web-2: owner gone") {
			t.Errorf("release of an orphan: %+v", r)
		}
		wantEvent(t, cl, web2.UID, corev1.EventTypeNormal, "10.40.0.10 (network tiny, reservation tiny.10.40.0.10) released by tenurectl release its owner is gone")
		for _, free := range []string{"10.40.0.10", "10.40.0.10/24"} {
			if r := ctl(t, "release", free); r.code != 1 || !strings.Contains(r.stderr, "address 10.40.0.10: no reservation holds it") {
				t.Errorf("release of a free address as %s: %+v", free, r)
			}
		}
	})
}

func mustItem(t *testing.T, s string) netip.Prefix {
	t.Helper()
	p, err := reservation.ParseItem(s)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// wantEvent waits for an Event of tenurectl on the object with uid.
func wantEvent(t *testing.T, cl *cluster, uid types.UID, typ, messagePrefix string) {
	t.Helper()
	l := &corev1.EventList{}
	if err := cl.c.List(cl.ctx, l, client.InNamespace(opsNS), client.MatchingFields{"involvedObject.uid": string(uid)}); err != nil {
		t.Fatal(err)
	}
	for _, e := range l.Items {
		if e.Source.Component == ops.Component && e.Type == typ && e.Reason == ops.EventReasonReleased && strings.HasPrefix(e.Message, messagePrefix) {
			return
		}
	}
	b, _ := yaml.Marshal(l.Items)
	t.Errorf("no %s Event %q from tenurectl on %s; events:\n%s", typ, messagePrefix, uid, b)
}

// TestCheckFindsEachProblem plants one problem of each kind and expects
// check to report each, with exit 1; removed, check is clean again.
func TestCheckFindsEachProblem(t *testing.T) {
	cl := newCluster(t)
	cl.node("node-a")
	cl.nad("san", `"network_name":"san","range":"10.10.0.0/28"`)
	cl.nad("vm-net", `"network_name":"vm-net","range":"10.30.0.0/24","prefix_delegation":{"range":"2001:db8:100::/40","prefix_length":56}`)
	web := cl.pod("web", "node-a", "")
	// Multus's record of what web's net1 got.
	orig := web.DeepCopy()
	web.Annotations = map[string]string{"k8s.v1.cni.cncf.io/network-status": `[{"name":"ops/san","interface":"net1","ips":["10.10.0.2"],"mac":"be:8e:45:3e:0c:11","dns":{}}]`}
	if err := cl.c.Patch(cl.ctx, web, client.MergeFrom(orig)); err != nil {
		t.Fatal(err)
	}
	ok := cl.reservation("san", "10.10.0.2", "10.10.0.0/28", podOwner(web))
	// web's other interfaces, so that each plant is one problem.
	onIf := func(iface string) tenurev1alpha1.ReservationOwner {
		o := podOwner(web)
		o.Interface = iface
		return o
	}

	// Each plant is what check must name: the objects of its finding.
	gone := podOwner(web)
	gone.Name, gone.UID, gone.PodName, gone.PodUID = "deleted", "uid-deleted", "deleted", "uid-deleted"
	orphan := cl.reservation("san", "10.10.0.3", "10.10.0.0/28", gone)
	outside := cl.reservation("san", "10.10.0.99", "10.10.0.0/28", onIf("net2"))
	// A hand-made object holding web's address under another name: a
	// duplicate, and malformed (its name does not lock the address).
	dup := reservation.New(reservation.Spec{Network: "san", Kind: tenurev1alpha1.KindAddress, Item: netip.MustParsePrefix("10.10.0.2/32"),
		Range: "10.10.0.0/28", Owner: onIf("net3")})
	dup.Name = "san.copy-of-10.10.0.2"
	cl.create(dup)
	// A second address of web's net1 in its range: the one network-status
	// does not list is surplus.
	surplus := cl.reservation("san", "10.10.0.4", "10.10.0.0/28", podOwner(web))
	wide := cl.reservation("vm-net", "2001:db8:100::/48", "2001:db8:100::/40 as /56", podOwner(web))
	narrow := cl.reservation("vm-net", "2001:db8:100::/56", "2001:db8:100::/40 as /56", onIf("net2"))
	vm := cl.claim("vm", "vm-net")
	vm.Status.IPs = []string{"10.30.0.7/24"}
	if err := cl.c.Status().Update(cl.ctx, vm); err != nil {
		t.Fatal(err)
	}

	r := ctl(t, "check")
	if r.code != 1 {
		t.Errorf("check with problems: exit %d, want 1", r.code)
	}
	hasRow(t, r.stdout, "RULE OBJECT ADDRESS MESSAGE")
	hasRow(t, r.stdout, "checked 7 reservations, 1 IPAMClaims, 1 pods, 1 nodes, 0 IPPools, 2 network configurations: 8 problems")
	var rep ops.CheckReport
	rr := ctl(t, "check", "-o", "json")
	if rr.code != 1 {
		t.Errorf("check -o json with problems: exit %d, want 1", rr.code)
	}
	if err := json.Unmarshal([]byte(rr.stdout), &rep); err != nil {
		t.Fatalf("check -o json: %v\n%s", err, rr.stdout)
	}
	var got []string
	for _, f := range rep.Findings {
		got = append(got, string(f.Rule)+" "+f.Object)
	}
	want := []string{
		"Duplicate IPReservation " + ok.Name,
		"Overlap IPReservation " + narrow.Name,
		"OwnerGone IPReservation " + orphan.Name,
		"DuplicateAttachment IPReservation " + surplus.Name,
		"ClaimMismatch IPAMClaim ops/vm",
		"OutsideRange IPReservation " + outside.Name,
		"OutsideRange IPReservation " + wide.Name, // a /48 is no /56 of the pool
		"Malformed IPReservation " + dup.Name,
	}
	if !slices.Equal(got, want) {
		t.Errorf("check findings\n%q\nwant\n%q", got, want)
	}
	for _, f := range rep.Findings {
		if f.Rule == ops.RuleDuplicateAttachment && (!slices.Equal(f.Related, []string{"IPReservation " + ok.Name}) ||
			!strings.Contains(f.Message, "pod ops/web interface net1 (sandbox sandbox-web) holds 2 IPv4 addresses of network san range 10.10.0.0/28: 10.10.0.2 (reservation san.10.10.0.2) and 10.10.0.4 (reservation san.10.10.0.4); its network-status lists 10.10.0.2")) {
			t.Errorf("the DuplicateAttachment finding: %+v", f)
		}
	}
	if rep.Counts.Reservations != 7 || rep.Counts.Claims != 1 || rep.Counts.Pods != 1 || rep.Counts.Nodes != 1 || rep.Counts.NetworkConfigs != 2 {
		t.Errorf("check counts: %+v", rep.Counts)
	}

	for _, o := range []client.Object{orphan, outside, dup, surplus, wide, vm} {
		if err := cl.c.Delete(cl.ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	if r := ctl(t, "check"); r.code != 0 || !strings.Contains(r.stdout, "checked 2 reservations, 0 IPAMClaims, 1 pods, 1 nodes, 0 IPPools, 2 network configurations: no problems") {
		t.Errorf("check once the plants are gone: %+v", r)
	}
	if err := ctl(t, "check", "-o", "json"); err.code != 0 || !strings.Contains(err.stdout, `"findings": []`) {
		t.Errorf("check -o json of a clean cluster: %+v", err)
	}
}

// TestGetFindsAClaimByItsCNINetworkAndItsNAD: a NetworkAttachmentDefinition
// without network_name allocates in the scope "default", while the claim
// names the CNI network ("vm-net", the configuration's name) and users name
// the NAD (ops/tenant-blue). `get vm-net` and `get ops/tenant-blue` each
// list exactly the claim's reservations, by address, and say they show the
// scope default and why; a pod's address in another scope is not listed.
func TestGetFindsAClaimByItsCNINetworkAndItsNAD(t *testing.T) {
	cl := newCluster(t)
	cl.node("node-a")
	san := cl.nad("san", `"network_name":"san","range":"10.10.0.0/28"`)
	const nadName, cniNetwork = "tenant-blue", "vm-net"
	vmConf := `{"cniVersion":"1.0.0","name":"vm-net","type":"bridge","bridge":"br-vm",` +
		`"ipam":{"type":"tenure","range":"10.30.0.0/24","prefix_delegation":{"range":"2001:db8:100::/40","prefix_length":56}}}`
	cl.createNAD(nadName, vmConf)

	agentA := cl.startAgent("node-a")
	web := cl.pod("web-0", "node-a", `[{"name":"san"}]`)
	cl.mustAdd(agentA, web, san)
	webAddr := cl.heldBy("san", string(web.UID), tenurev1alpha1.KindAddress)
	// The claim and launcher as KubeVirt makes them: spec.network is the
	// CNI network name, the pod's network element names the NAD.
	vm := cl.claim("vm1.blue", cniNetwork)
	launcher := cl.pod("virt-launcher-vm1", "node-a",
		fmt.Sprintf(`[{"name":%q,"namespace":%q,"ipam-claim-reference":"vm1.blue"}]`, nadName, opsNS))
	cl.mustAdd(agentA, launcher, vmConf)

	// What the claim holds, read from the API server: its owner-UID label.
	l := &tenurev1alpha1.IPReservationList{}
	if err := cl.c.List(cl.ctx, l, client.MatchingLabels{reservation.LabelOwnerUID: string(vm.UID)}); err != nil {
		t.Fatal(err)
	}
	var held []string
	for _, r := range l.Items {
		if r.Spec.Network != "default" || r.Spec.CNINetwork != cniNetwork {
			t.Fatalf("reservation %s: scope %q, CNI network %q; want scope default (no network_name) and CNI network %s",
				r.Name, r.Spec.Network, r.Spec.CNINetwork, cniNetwork)
		}
		held = append(held, r.Spec.Address)
	}
	slices.Sort(held)
	if len(held) != 2 || strings.Contains(held[0], "/") == strings.Contains(held[1], "/") {
		t.Fatalf("the claim holds %v, want an address and a delegated prefix", held)
	}

	for _, q := range []struct{ query, via string }{
		{cniNetwork, "CNI network name"},
		{opsNS + "/" + nadName, "NetworkAttachmentDefinition"},
	} {
		var rep ops.ReservationsReport
		ctlJSON(t, &rep, "get", q.query)
		var got []string
		for _, v := range rep.Reservations {
			got = append(got, v.Address)
			if v.Network != "default" || v.Owner.Kind != tenurev1alpha1.OwnerIPAMClaim || v.Owner.Name != vm.Name || v.Pod != launcher.Name {
				t.Errorf("get %s -o json: %+v, want scope default, owner IPAMClaim %s, pod %s", q.query, v, vm.Name, launcher.Name)
			}
		}
		slices.Sort(got)
		if !slices.Equal(got, held) || slices.Contains(got, webAddr) {
			t.Errorf("get %s lists %v, want exactly the claim's %v (not web-0's %s in scope san)", q.query, got, held, webAddr)
		}
		if want := "[{default [" + q.via + "]}]"; fmt.Sprint(rep.Scopes) != want {
			t.Errorf("get %s says it shows the scopes %v, want %s", q.query, rep.Scopes, want)
		}
		r := ctl(t, "get", q.query)
		if r.code != 0 || rows(r.stdout)[0] != "Network "+q.query+": allocation scope default ("+q.via+")" {
			t.Errorf("get %s: exit %d, first line %q; want it to name the scope default (%s)", q.query, r.code, rows(r.stdout)[0], q.via)
		}
		for _, item := range held {
			hasRow(t, r.stdout, item+" "+opsNS+" ipamclaim/"+vm.Name+" node-a ")
		}
	}
}
