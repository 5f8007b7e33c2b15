package bench

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ipamclaimsv1alpha1 "github.com/tenure-ipam/tenure/api/ipamclaims/v1alpha1"
	"github.com/tenure-ipam/tenure/test/testbed"
)

func init() {
	registerScenario(Scenario{Name: "webhook", Summary: "claim-bound and pod ADDs through an agent on a pod-bound token, without and then with the node-restriction webhook: what it adds per ADD",
		Run: (*env).webhookScenario})
}

const (
	// webhookOps ADDs of each kind per phase (Options.WebhookOps when
	// set), one at a time: the added time is per ADD, not queueing behind
	// other ADDs.
	webhookOps    = 100
	webhookWarmup = 10
	webhookNode   = "bench-wh1"
	webhookNet    = "bench-webhook"
	webhookClaims = "bench-webhook-claims"
)

// webhookScenario measures what the agent node-restriction webhook of
// deploy/webhook adds to an ADD. The agent runs as the DaemonSet's does: the
// RBAC of deploy/rbac, a token bound to an agent pod on its node, and the
// CEL policy of deploy/policy in force in both phases. The phases are the
// same ADDs on fresh pods (claim-bound ADDs of IPv4 + IPv6 + a delegated
// /56, the ADDs of a second pod presenting each of those claims as a
// migration target's does, then ADDs of a pod's one address): first
// without the webhook's
// configuration, then with it, the webhook served in this process as a
// controller replica serves it (testbed.StartAgentWebhook). Its CPU is
// therefore in the "bench" group of cpu_ms_per_op.
func (e *env) webhookScenario(ctx context.Context, sc *ScenarioRun) ([]Result, error) {
	if _, err := testbed.InstallAgentAccess(ctx, e.cp.Config); err != nil {
		return nil, err
	}
	a, err := testbed.StartNodeAgent(ctx, e.bins, filepath.Join(e.dir, "webhook"), e.cp.Config, webhookNode)
	if err != nil {
		return nil, err
	}
	e.agents[webhookNode] = a
	defer e.stopAgent(webhookNode)

	ops := sc.Opts.WebhookOps
	if ops <= 0 {
		ops = webhookOps
	}
	v4, v6 := sc.nets.next()
	v4b, _ := sc.nets.next()
	claimConf := netconf(webhookClaims, a.Socket, fmt.Sprintf(`{"ipRanges":[{"range":%q},{"range":%q}],"prefix_delegation":{"range":"fd00:3200::/40","prefix_length":56},"network_name":%q}`, v4, v6, webhookClaims))
	podConf := netconf(webhookNet, a.Socket, fmt.Sprintf(`{"range":%q,"network_name":%q}`, v4b, webhookNet))

	// The pods of one batch are the only pods of the node while it runs
	// (each batch's are deleted after it): the webhook lists the pods of
	// the caller's node in the claim's namespace for every claim-owned
	// write, so its cost grows with them; webhookOps stays under the
	// kubelet's default of 110 pods a node.
	var live []benchPod
	defer func() { _ = e.deletePods(context.WithoutCancel(ctx), live) }()
	// claimPods makes n claims and a pod on the agent's node presenting
	// each, as KubeVirt's launcher pods do.
	claimName := func(phase string, i int) string { return fmt.Sprintf("%s-vm%d", phase, i) }
	presenting := func(phase string) func(int) map[string]string {
		return func(i int) map[string]string {
			return map[string]string{"k8s.v1.cni.cncf.io/networks": fmt.Sprintf(`[{"name":%q,"interface":"net1","ipam-claim-reference":%q}]`, webhookClaims, claimName(phase, i))}
		}
	}
	claimPods := func(phase string, n int) ([]benchPod, error) {
		names := make([]string, n)
		g, gctx := errgroup.WithContext(ctx)
		g.SetLimit(16)
		for i := range names {
			names[i] = claimName(phase, i)
			g.Go(func() error {
				return e.c.Create(gctx, &ipamclaimsv1alpha1.IPAMClaim{
					ObjectMeta: metav1.ObjectMeta{Namespace: benchNamespace, Name: names[i]},
					Spec:       ipamclaimsv1alpha1.IPAMClaimSpec{Network: webhookClaims, Interface: "net1"},
				})
			})
		}
		if err := g.Wait(); err != nil {
			return nil, fmt.Errorf("creating claims: %w", err)
		}
		ps, err := e.createPods(ctx, "wh-"+phase+"-vm", []string{webhookNode}, n, presenting(phase))
		live = append(live, ps...)
		return ps, err
	}
	// targetPods makes a second pod presenting each claim claimPods made
	// for phase, as a migration target's launcher pod: the claim's status
	// records every item, and the ADD moves ownerPod to it.
	targetPods := func(phase string, n int) ([]benchPod, error) {
		ps, err := e.createPods(ctx, "wh-"+phase+"-target", []string{webhookNode}, n, presenting(phase))
		live = append(live, ps...)
		return ps, err
	}
	plainPods := func(phase string, n int) ([]benchPod, error) {
		ps, err := e.createPods(ctx, "wh-"+phase+"-pod", []string{webhookNode}, n, nil)
		live = append(live, ps...)
		return ps, err
	}
	done := func() error {
		err := e.deletePods(ctx, live)
		live = nil
		return err
	}
	callsOf := func(ps []benchPod, conf []byte, wantIPs int) []call {
		out := make([]call, len(ps))
		for i, p := range ps {
			out[i] = call{pod: p, command: "ADD", conf: conf, wantIPs: wantIPs}
		}
		return out
	}

	// Unmeasured: the agent's first ADDs of each kind (cold connections,
	// page cache).
	wc, err := claimPods("warm", webhookWarmup)
	if err != nil {
		return nil, err
	}
	wp, err := plainPods("warm", webhookWarmup)
	if err != nil {
		return nil, err
	}
	if rr := e.run(ctx, append(callsOf(wc, claimConf, 2), callsOf(wp, podConf, 1)...), 1, false); rr.failures > 0 {
		return nil, fmt.Errorf("webhook: %d warm-up ADDs failed: %s", rr.failures, strings.Join(rr.errs, "; "))
	}
	if err := done(); err != nil {
		return nil, err
	}

	reviews := &reviewCounter{}
	phase := func(on bool) ([]Result, error) {
		tag, label, flag := "off", "without the webhook", 0.0
		if on {
			tag, label, flag = "on", "with the webhook", 1
		}
		var out []Result
		for _, k := range []struct {
			id, name string
			pods     func(string, int) ([]benchPod, error)
			conf     []byte
			wantIPs  int
			perOp    float64
		}{
			{"claim", fmt.Sprintf("ADD claim-bound v4+v6+/56 ×%d sequential, %s", ops, label), claimPods, claimConf, 2, 3},
			{"claim-target", fmt.Sprintf("ADD of the same claims from a second pod each (a migration target) ×%d sequential, %s", ops, label), targetPods, claimConf, 2, 3},
			{"pod", fmt.Sprintf("ADD pod ×%d sequential, %s", ops, label), plainPods, podConf, 1, 1},
		} {
			ps, err := k.pods(tag, ops)
			if err != nil {
				return out, err
			}
			reviews.reset()
			r, err := e.measure(ctx, spec{id: "webhook-" + tag + "-add-" + k.id, name: k.name, command: "ADD",
				nodes: 1, conc: 1, calls: callsOf(ps, k.conf, k.wantIPs), perOp: k.perOp, checkDuplicates: true})
			if err != nil {
				return append(out, r), err
			}
			if r.Failures > 0 {
				return append(out, r), fmt.Errorf("webhook: %s: %d of %d failed: %s", k.name, r.Failures, r.Ops, strings.Join(r.Errors, "; "))
			}
			r.Figures = map[string]float64{
				"webhook":                  flag,
				"pods_on_node":             float64(len(ps)),
				"add_p50_ms":               r.P50Ms,
				"add_p99_ms":               r.P99Ms,
				"add_mean_ms":              r.MeanMs,
				"api_requests_per_add":     round3(r.APIRequestsPerOp),
				"apiserver_cpu_ms_per_add": r.CPUMsPerOp["kube-apiserver"],
				"bench_cpu_ms_per_add":     r.CPUMsPerOp["bench"],
			}
			// The webhook's own count of what it judged: in force in
			// this phase or not, whatever the times say.
			n, denied, judge := reviews.counts()
			r.Figures["webhook_reviews_per_add"] = round3(float64(n) / float64(r.Ops))
			// The webhook's own time per ADD: from a review's arrival to
			// its decision (its live reads and the rules).
			r.Figures["webhook_judge_ms_per_add"] = round3(float64(judge) / float64(time.Millisecond) / float64(r.Ops))
			r.Figures["webhook_denied"] = float64(denied)
			out = append(out, r)
			if err := done(); err != nil {
				return out, err
			}
		}
		return out, nil
	}

	off, err := phase(false)
	if err != nil {
		return off, err
	}
	wh, err := testbed.StartAgentWebhook(ctx, e.cp.Config, filepath.Join(e.dir, "webhook-probe"), slog.New(reviews))
	if err != nil {
		return off, fmt.Errorf("webhook: starting it: %w", err)
	}
	defer func() {
		// The configuration goes before its server, or the agent's
		// covered writes would fail closed in later scenarios.
		vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "tenure-agent-node-restriction"}}
		if err := e.c.Delete(context.WithoutCancel(ctx), vwc); err != nil && !apierrors.IsNotFound(err) {
			e.logf("webhook: removing its configuration: %v", err)
		}
		wh.Stop()
	}()
	on, err := phase(true)
	out := append(off, on...)
	if err != nil {
		return out, err
	}
	// The added time, per kind: the "on" row against the "off" row.
	for i := range on {
		w, wo := &out[len(off)+i], off[i]
		w.Figures["added_p50_ms"] = round3(w.P50Ms - wo.P50Ms)
		w.Figures["added_p99_ms"] = round3(w.P99Ms - wo.P99Ms)
		w.Figures["added_mean_ms"] = round3(w.MeanMs - wo.MeanMs)
		if wo.P50Ms > 0 {
			w.Figures["p50_ratio"] = round3(w.P50Ms / wo.P50Ms)
		}
		w.Notes = fmt.Sprintf("p50 %.1f ms vs %.1f ms without (+%.1f ms, %.2f×); mean +%.1f ms; API server CPU/ADD %.2f vs %.2f ms",
			w.P50Ms, wo.P50Ms, w.Figures["added_p50_ms"], w.Figures["p50_ratio"], w.Figures["added_mean_ms"],
			w.Figures["apiserver_cpu_ms_per_add"], wo.Figures["apiserver_cpu_ms_per_add"])
		e.logf("webhook: %s: %s", w.Name, w.Notes)
	}
	return out, nil
}

// reviewCounter is the webhook's log: it counts the requests the webhook
// judged ("admission" records, one per review) and those it refused,
// and how long it took to judge them (its reads and the decision).
type reviewCounter struct{ n, denied, judgeNs atomic.Int64 }

func (c *reviewCounter) reset() { c.n.Store(0); c.denied.Store(0); c.judgeNs.Store(0) }

func (c *reviewCounter) counts() (n, denied int64, judge time.Duration) {
	return c.n.Load(), c.denied.Load(), time.Duration(c.judgeNs.Load())
}

func (c *reviewCounter) Enabled(context.Context, slog.Level) bool { return true }

func (c *reviewCounter) Handle(_ context.Context, r slog.Record) error {
	if r.Message != "admission" {
		return nil
	}
	c.n.Add(1)
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "allowed" && a.Value.Kind() == slog.KindBool && !a.Value.Bool() {
			c.denied.Add(1)
		}
		if a.Key == "duration" && a.Value.Kind() == slog.KindDuration {
			c.judgeNs.Add(int64(a.Value.Duration()))
		}
		return true
	})
	return nil
}

func (c *reviewCounter) WithAttrs([]slog.Attr) slog.Handler { return c }

func (c *reviewCounter) WithGroup(string) slog.Handler { return c }
