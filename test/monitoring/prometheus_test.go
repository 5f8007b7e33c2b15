//go:build integration

package monitoring_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/yaml"

	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/kube"
	"github.com/tenure-ipam/tenure/test/controlplane/cptest"
	"github.com/tenure-ipam/tenure/test/testbed"
)

// prometheus is Debian's Prometheus server on loopback, scraping every
// second and evaluating tenure's rules every second.
type prometheus struct {
	*testbed.Process
	base string
}

// startPrometheus writes a configuration scraping agents as job
// tenure-agent and controller as tenure-controller (the job names the
// alerts use), and the rules with every `for:` shortened to forDur.
func startPrometheus(t *testing.T, ctx context.Context, agents []string, controller string, forDur string) *prometheus {
	t.Helper()
	bin, err := exec.LookPath("prometheus")
	if err != nil {
		testbed.SkipUnlessEverything(t, "prometheus not found (apt-get install prometheus)")
	}
	dir := t.TempDir()
	groups := prometheusRuleGroups(t)
	for gi := range groups.Groups {
		for ri := range groups.Groups[gi].Rules {
			if groups.Groups[gi].Rules[ri].For != "" {
				groups.Groups[gi].Rules[ri].For = forDur
			}
		}
	}
	rules, err := yaml.Marshal(groups)
	if err != nil {
		t.Fatal(err)
	}
	conf, err := yaml.Marshal(map[string]any{
		"global":     map[string]any{"scrape_interval": "1s", "evaluation_interval": "1s"},
		"rule_files": []string{filepath.Join(dir, "tenure.rules.yml")},
		"scrape_configs": []any{
			map[string]any{"job_name": "tenure-agent", "static_configs": []any{map[string]any{"targets": agents}}},
			map[string]any{"job_name": "tenure-controller", "static_configs": []any{map[string]any{"targets": []string{controller}}}},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{"tenure.rules.yml": rules, "prometheus.yml": conf} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	addr := testbed.FreeLoopbackAddr(t)
	log := filepath.Join(dir, "prometheus.log")
	p, err := testbed.StartProcess("prometheus", bin, log, "--config.file="+filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(dir, "data"), "--web.listen-address="+addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.Stop()
		if t.Failed() {
			b, _ := os.ReadFile(log)
			t.Logf("prometheus log:\n%s", b)
		}
	})
	prom := &prometheus{Process: p, base: "http://" + addr}
	poll(t, ctx, "prometheus ready", func() (bool, error) {
		if !p.Running() {
			return false, fmt.Errorf("prometheus exited: %v", p.Wait())
		}
		resp, err := http.Get(prom.base + "/-/ready")
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	return prom
}

// api GETs /api/v1/PATH and decodes its data.
func (p *prometheus) api(path string, q url.Values, data any) error {
	resp, err := http.Get(p.base + "/api/v1/" + path + "?" + q.Encode())
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var body struct {
		Status string          `json:"status"`
		Error  string          `json:"error"`
		Data   json.RawMessage `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return err
	}
	if body.Status != "success" {
		return fmt.Errorf("%s: %s", path, body.Error)
	}
	return json.Unmarshal(body.Data, data)
}

type vectorSample struct {
	Metric map[string]string `json:"metric"`
	Value  [2]any            `json:"value"`
}

// query evaluates an instant PromQL query into label set -> value.
func (p *prometheus) query(expr string) (map[string]string, error) {
	var data struct {
		Result []vectorSample `json:"result"`
	}
	if err := p.api("query", url.Values{"query": {expr}}, &data); err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, s := range data.Result {
		var labels []string
		for k, v := range s.Metric {
			labels = append(labels, k+"="+v)
		}
		slices.Sort(labels)
		v, _ := s.Value[1].(string)
		out[strings.Join(labels, ",")] = v
	}
	return out, nil
}

type alert struct {
	Labels map[string]string `json:"labels"`
	State  string            `json:"state"`
}

func (p *prometheus) alerts() ([]alert, error) {
	var data struct {
		Alerts []alert `json:"alerts"`
	}
	err := p.api("alerts", nil, &data)
	return data.Alerts, err
}

// alertState is the state ("firing", "pending") of the alert name whose
// labels include want, "" when it is not active.
func (p *prometheus) alertState(name string, want map[string]string) (string, error) {
	as, err := p.alerts()
	if err != nil {
		return "", err
	}
	for _, a := range as {
		if a.Labels["alertname"] != name {
			continue
		}
		match := true
		for k, v := range want {
			match = match && a.Labels[k] == v
		}
		if match {
			return a.State, nil
		}
	}
	return "", nil
}

func poll(t *testing.T, ctx context.Context, what string, cond func() (bool, error)) {
	t.Helper()
	var last error
	err := wait.PollUntilContextCancel(ctx, 250*time.Millisecond, true, func(context.Context) (bool, error) {
		ok, err := cond()
		if err != nil {
			last = err
		}
		return ok, nil
	})
	if err != nil {
		t.Fatalf("%s: %v (last error: %v)", what, err, last)
	}
}

// TestPrometheusRangeFullFiresAndResolves: a real Prometheus scrapes two
// agents and the controller of a local control plane with tenure's rules
// loaded (every `for:` one second). Filling a /29 that a
// NetworkAttachmentDefinition configures, then an ADD answered code 100,
// makes TenureRangeFull fire in /api/v1/alerts for that scope, range and
// CNI network; the CNI latency histogram and the agents' API write
// metrics have samples for every command and write used; releasing one
// address (CNI DEL) resolves the alert.
func TestPrometheusRangeFullFiresAndResolves(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cp := cptest.Current()
	c, err := kube.NewClient(cp.Config)
	if err != nil {
		t.Fatal(err)
	}
	const (
		ns, scope, cniNet, rng = "monitoring", "mon-san", "mon-san-net", "10.60.0.0/29"
	)
	if err := testbed.EnsureNamespace(ctx, c, ns); err != nil {
		t.Fatal(err)
	}
	ipam := fmt.Sprintf(`{"type":"tenure","range":%q,"network_name":%q}`, rng, scope)
	nad := &unstructured.Unstructured{}
	nad.SetAPIVersion("k8s.cni.cncf.io/v1")
	nad.SetKind("NetworkAttachmentDefinition")
	nad.SetNamespace(ns)
	nad.SetName("san")
	if err := unstructured.SetNestedField(nad.Object, fmt.Sprintf(`{"cniVersion":"1.1.0","name":%q,"type":"macvlan","master":"eth0","ipam":%s}`, cniNet, ipam),
		"spec", "config"); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, nad); err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	nodes := []string{"mon-node-a", "mon-node-b"}
	agents := map[string]*testbed.Agent{}
	var agentAddrs []string
	for _, n := range nodes {
		addr := testbed.FreeLoopbackAddr(t)
		a, err := testbed.StartNodeAgent(ctx, bins, dir, cp.Config, n, "--metrics-addr", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(a.Stop)
		agents[n] = a
		agentAddrs = append(agentAddrs, addr)
	}
	ctlAddr := testbed.FreeLoopbackAddr(t)
	ctlLog := filepath.Join(dir, "controller.log")
	ctl, err := testbed.StartProcess("controller", bins.Controller, ctlLog, "--kubeconfig", cp.KubeconfigPath,
		"--metrics-addr", ctlAddr, "--health-addr", testbed.FreeLoopbackAddr(t), "--leader-election-id", "tenure-monitoring",
		"--leader-election-lease-duration", "10s", "--leader-election-renew-deadline", "8s", "--leader-election-retry-period", "250ms")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctl.Stop()
		if t.Failed() {
			b, _ := os.ReadFile(ctlLog)
			t.Logf("controller log:\n%s", b)
		}
	})
	prom := startPrometheus(t, ctx, agentAddrs, ctlAddr, "1s")
	poll(t, ctx, "every target up", func() (bool, error) {
		up, err := prom.query(`up == 1`)
		return len(up) == len(nodes)+1, err
	})
	// The controller's range metrics know the range before any address
	// is taken: capacity 6, from the NetworkAttachmentDefinition.
	rangeSel := fmt.Sprintf(`{scope=%q,network=%q,range=%q,kind="Address"}`, scope, cniNet, rng)
	poll(t, ctx, "capacity of the range scraped", func() (bool, error) {
		v, err := prom.query(`tenure_range_capacity` + rangeSel)
		return len(v) == 1 && slices.Contains(mapsValues(v), "6"), err
	})

	type podRef struct{ name, uid, node, ctr string }
	conf := func(node string) []byte {
		return []byte(fmt.Sprintf(`{"cniVersion":"1.1.0","name":%q,"type":"macvlan","master":"eth0","ipam":%s}`,
			cniNet, strings.Replace(ipam, `"type":"tenure"`, fmt.Sprintf(`"type":"tenure","agent_socket":%q`, agents[node].Socket), 1)))
	}
	call := func(cmd string, p podRef) testbed.CNICall {
		return testbed.CNICall{Command: cmd, ContainerID: p.ctr, IfName: "net1", Args: testbed.PodArgs(ns, p.name, p.uid), Config: conf(p.node)}
	}
	var pods []podRef
	for i := range 7 {
		node := nodes[i%len(nodes)]
		name := fmt.Sprintf("mon-%d", i)
		p, err := testbed.CreatePod(ctx, c, ns, name, node, nil)
		if err != nil {
			t.Fatal(err)
		}
		pods = append(pods, podRef{name: name, uid: string(p.UID), node: node, ctr: "sandbox-" + string(p.UID)})
	}
	for _, p := range pods[:6] {
		if _, err := testbed.ExecShim(ctx, bins.Shim, call("ADD", p)); err != nil {
			t.Fatalf("ADD %s: %v", p.name, err)
		}
		if _, err := testbed.ExecShim(ctx, bins.Shim, call("CHECK", p)); err != nil {
			var cniErr *types.Error
			if !errors.As(err, &cniErr) {
				t.Fatalf("CHECK %s: %v", p.name, err)
			}
		}
	}
	_, err = testbed.ExecShim(ctx, bins.Shim, call("ADD", pods[6]))
	var cniErr *types.Error
	if !errors.As(err, &cniErr) || cniErr.Code != 100 {
		t.Fatalf("the seventh ADD into a /29: %v, want code 100 (range full)", err)
	}

	want := map[string]string{"scope": scope, "network": cniNet, "range": rng, "kind": "Address", "severity": "critical"}
	t.Cleanup(func() {
		if t.Failed() {
			as, err := prom.alerts()
			t.Logf("active alerts: %+v (%v)", as, err)
			for _, q := range []string{`tenure_range_free`, `tenure_cni_requests_total{code!="0"}`} {
				v, err := prom.query(q)
				t.Logf("%s: %v (%v)", q, v, err)
			}
		}
	})
	poll(t, ctx, "TenureRangeFull firing", func() (bool, error) {
		st, err := prom.alertState("TenureRangeFull", want)
		return st == "firing", err
	})

	// Every command used has latency samples; the agents' writes to the
	// API server are counted and timed.
	for _, expr := range []string{
		`sum(tenure_cni_request_duration_seconds_count{command="ADD"}) >= 7`,
		`sum(tenure_cni_request_duration_seconds_count{command="CHECK"}) >= 6`,
		`sum(tenure_cni_requests_total{command="ADD",code="100"}) >= 1`,
		`sum(tenure_agent_api_request_duration_seconds_count{method="POST"}) >= 6`,
		`sum(tenure_agent_api_requests_total{method="POST",code="201"}) >= 6`,
	} {
		poll(t, ctx, expr, func() (bool, error) {
			v, err := prom.query(expr)
			return len(v) == 1, err
		})
	}

	// Releasing one address resolves the alert.
	if _, err := testbed.ExecShim(ctx, bins.Shim, call("DEL", pods[0])); err != nil {
		t.Fatalf("DEL %s: %v", pods[0].name, err)
	}
	poll(t, ctx, "TenureRangeFull resolved", func() (bool, error) {
		st, err := prom.alertState("TenureRangeFull", want)
		return st == "", err
	})
	poll(t, ctx, "DEL latency sampled", func() (bool, error) {
		v, err := prom.query(`sum(tenure_cni_request_duration_seconds_count{command="DEL"}) >= 1`)
		return len(v) == 1, err
	})
	free, err := prom.query(`tenure_range_free` + rangeSel)
	if err != nil || !slices.Contains(mapsValues(free), "1") {
		t.Fatalf("tenure_range_free%s = %v (%v), want 1", rangeSel, free, err)
	}

	// What remains: the five pods that still hold an address of the range.
	list := &tenurev1alpha1.IPReservationList{}
	if err := c.List(ctx, list); err != nil {
		t.Fatal(err)
	}
	var holders []string
	for _, r := range list.Items {
		if r.Spec.Network == scope {
			holders = append(holders, r.Spec.Owner.Name)
		}
	}
	slices.Sort(holders)
	var wantHolders []string
	for _, p := range pods[1:6] {
		wantHolders = append(wantHolders, p.name)
	}
	if !slices.Equal(holders, wantHolders) {
		t.Fatalf("reservations of %s held by %v, want %v", scope, holders, wantHolders)
	}
}

func mapsValues(m map[string]string) []string {
	var out []string
	for _, v := range m {
		out = append(out, v)
	}
	return out
}
