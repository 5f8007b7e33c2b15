//go:build integration

// Package e2e proves tenure's behaviour with real parts: a real
// kube-apiserver and etcd on 127.0.0.1, tenure-agent processes posing as
// nodes, the tenure CNI shim executed as a runtime executes it, and (as
// root) the reference bridge plugin in real network namespaces.
package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/kube"
	"github.com/tenure-ipam/tenure/internal/reservation"
	"github.com/tenure-ipam/tenure/test/controlplane/cptest"
	"github.com/tenure-ipam/tenure/test/testbed"
)

var bins testbed.Binaries

// agentWebhook is the node-restriction webhook TestMain serves.
var agentWebhook *testbed.AgentWebhook

func TestMain(m *testing.M) {
	// Every agent runs as the DaemonSet's would: its RBAC from deploy/rbac,
	// a token bound to a pod on its node, and the node restriction in
	// force: the policy of deploy/policy and the webhook of deploy/webhook,
	// served here as a controller replica serves it.
	os.Exit(testbed.Main(m, &bins, &agentWebhook, nil))
}

func testContext(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func apiClient(t testing.TB) client.WithWatch {
	t.Helper()
	c, err := kube.NewClient(cptest.Current().Config)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// startAgents creates the nodes and starts one agent process per node, each
// with a token bound to an agent pod on its node.
func startAgents(t *testing.T, ctx context.Context, nodes ...string) map[string]*testbed.Agent {
	t.Helper()
	dir := t.TempDir()
	out := map[string]*testbed.Agent{}
	for _, n := range nodes {
		a, err := testbed.StartNodeAgent(ctx, bins, dir, cptest.Current().Config, n)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			a.Stop()
			checkNotRefused(t, a)
		})
		out[n] = a
	}
	return out
}

// checkNotRefused fails the test if the node-restriction policy refused the
// agent anything (or anything of a restart that logged to the same file):
// a refused rollback or release is only logged, and would otherwise show
// only as a leak.
func checkNotRefused(t testing.TB, a *testbed.Agent) {
	t.Helper()
	if refused := testbed.PolicyRefusals(a.Log); len(refused) > 0 {
		t.Errorf("the node-restriction policy refused agent %s:\n%s", a.Node, strings.Join(refused, "\n"))
	}
}

// netconf is a network config as a runtime passes it (top-level type is
// the main plugin; tenure is the ipam section).
func netconf(name, socket, ipam string) []byte {
	ipam = strings.TrimSpace(ipam)
	ipam = strings.TrimSuffix(strings.TrimPrefix(ipam, "{"), "}")
	return []byte(fmt.Sprintf(`{"cniVersion":"1.1.0","name":%q,"type":"macvlan","master":"eth0",
		"ipam":{"type":"tenure","agent_socket":%q,%s}}`, name, socket, ipam))
}

var podSeq atomic.Int64

type pod struct {
	ns, name, uid, node, containerID string
	// ifName is the pod interface the runtime asks for; "" is net1.
	ifName string
}

func newPod(t *testing.T, ctx context.Context, c client.Client, ns, node string, annotations map[string]string) pod {
	t.Helper()
	if err := testbed.EnsureNamespace(ctx, c, ns); err != nil {
		t.Fatal(err)
	}
	n := podSeq.Add(1)
	name := fmt.Sprintf("p%d", n)
	p, err := testbed.CreatePod(ctx, c, ns, name, node, annotations)
	if err != nil {
		t.Fatal(err)
	}
	return pod{ns: ns, name: name, uid: string(p.UID), node: node, containerID: fmt.Sprintf("sandbox-%d-%s", n, p.UID)}
}

func (p pod) call(cmd string, conf []byte) testbed.CNICall {
	ifName := p.ifName
	if ifName == "" {
		ifName = "net1"
	}
	return testbed.CNICall{Command: cmd, ContainerID: p.containerID, IfName: ifName, Args: testbed.PodArgs(p.ns, p.name, p.uid), Config: conf}
}

func add(ctx context.Context, p pod, conf []byte) (*current.Result, error) {
	out, err := testbed.ExecShim(ctx, bins.Shim, p.call("ADD", conf))
	if err != nil {
		return nil, err
	}
	r := &current.Result{}
	if err := json.Unmarshal(out, r); err != nil {
		return nil, fmt.Errorf("result %s: %v", out, err)
	}
	return r, nil
}

func del(ctx context.Context, p pod, conf []byte) error {
	_, err := testbed.ExecShim(ctx, bins.Shim, p.call("DEL", conf))
	return err
}

func cniCode(err error) uint {
	var e *types.Error
	if errors.As(err, &e) {
		return e.Code
	}
	return 0
}

// reservationsOf lists, from the API server, the reservations of one network.
func reservationsOf(t *testing.T, ctx context.Context, network string) []tenurev1alpha1.IPReservation {
	t.Helper()
	list := &tenurev1alpha1.IPReservationList{}
	if err := apiClient(t).List(ctx, list, client.MatchingLabels{reservation.LabelNetwork: reservation.ScopeLabel(network)}); err != nil {
		t.Fatal(err)
	}
	return list.Items
}

func addrs(r *current.Result) []string {
	var out []string
	for _, ip := range r.IPs {
		out = append(out, ip.Address.IP.String())
	}
	return out
}

func jsonMarshal(v any) ([]byte, error) { return json.Marshal(v) }
