package agent

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tenure-ipam/tenure/internal/cniwire"
)

// TestCNIMetricsCountEveryCallByCommandAndCode drives calls through the
// socket as the shim does and reads the agent's registry: every answered
// call is counted under its command and the code of its answer (0, 100 for
// a full range, other for an unknown command), and timed per command.
func TestCNIMetricsCountEveryCallByCommandAndCode(t *testing.T) {
	var pods []client.Object
	for i := range 7 {
		pods = append(pods, pod(fmt.Sprintf("p%d", i), thisNode, nil))
	}
	h := startAgent(t, pods...)
	socket := filepath.Join(t.TempDir(), "agent.sock")
	l, err := Listen(socket)
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = h.agent.Serve(h.ctx, l) }()
	send := func(req cniwire.Request) {
		t.Helper()
		b, err := json.Marshal(req)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := cniwire.Call(socket, b, 5*time.Second, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	call := func(cmd string, i int) cniwire.Request {
		return cniwire.Request{Command: cmd, ContainerID: fmt.Sprintf("c%d", i), IfName: "net1", Netns: fmt.Sprintf("/var/run/netns/c%d", i),
			Args: fmt.Sprintf("IgnoreUnknown=1;K8S_POD_NAMESPACE=ns;K8S_POD_NAME=p%d;K8S_POD_UID=uid-p%d", i, i), StdinData: []byte(san29)}
	}
	// A /29 has six addresses: the seventh ADD finds the range full.
	for i := range 7 {
		send(call("ADD", i))
	}
	send(call("DEL", 0))
	send(call("DEL", 6))
	send(cniwire.Request{Command: "BOGUS", StdinData: []byte(san29)})

	series := gather(t, h.agent)
	for _, c := range []struct {
		command, code string
		want          float64
	}{
		{"ADD", "0", 6}, {"ADD", "100", 1}, {"DEL", "0", 2}, {"CHECK", "0", 0}, {CommandOther, "4", 1},
	} {
		key := "tenure_cni_requests_total{code=" + c.code + ",command=" + c.command + "}"
		if got, ok := series[key]; !ok || got.GetCounter().GetValue() != c.want {
			t.Errorf("%s = %v, want %v", key, got.GetCounter().GetValue(), c.want)
		}
	}
	n := 0
	for k := range series {
		if strings.HasPrefix(k, "tenure_cni_requests_total{") {
			n++
		}
	}
	if n != len(cniCommands)+2 {
		t.Errorf("tenure_cni_requests_total has %d series, want %d: one per command at 0, ADD 100 and other 4", n, len(cniCommands)+2)
	}
	for cmd, want := range map[string]uint64{"ADD": 7, "DEL": 2, "CHECK": 0, "GC": 0, "STATUS": 0, CommandOther: 1} {
		key := "tenure_cni_request_duration_seconds{command=" + cmd + "}"
		if got := series[key].GetHistogram().GetSampleCount(); got != want {
			t.Errorf("%s has %d samples, want %d", key, got, want)
		}
	}
}

// gather reads the agent's registry into series keyed
// name{label=value,...}, labels sorted by name.
func gather(t *testing.T, a *Agent) map[string]*dto.Metric {
	t.Helper()
	mfs, err := a.metrics.registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*dto.Metric{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, lp := range m.GetLabel() {
				labels = append(labels, lp.GetName()+"="+lp.GetValue())
			}
			out[mf.GetName()+"{"+strings.Join(labels, ",")+"}"] = m
		}
	}
	return out
}
