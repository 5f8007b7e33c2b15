//go:build integration

package bench

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/tenure-ipam/tenure/test/controlplane"
	"github.com/tenure-ipam/tenure/test/testbed"
)

// TestNamedScenariosReportTheirFigures runs fanout with three caches and
// full-pool on a /26 for a few seconds, and checks that every figure the
// scenario reports by name is there and says something possible. Speed is for the
// benchmark run, not asserted here.
func TestNamedScenariosReportTheirFigures(t *testing.T) {
	ctx, e := testEnv(t)
	rep := &Report{}
	opts := Options{Scenarios: []string{"fanout", "full-pool"}, Agents: []int{3}, FullPoolDuration: 6 * time.Second, FullPoolBits: 26}
	if err := e.runNamed(ctx, opts, rep); err != nil {
		t.Fatal(err)
	}

	fan := rep.Find("fanout-n3")
	if fan == nil {
		t.Fatalf("no fanout-n3 row in %+v", rep.Scenarios)
	}
	f := fan.Figures
	for _, k := range []string{"agents", "apiserver_cpu_ms_per_add", "cache_lag_p50_ms", "cache_lag_p99_ms", "conflicts_per_add", "add_p50_ms", "add_p99_ms", "failures", "sync_s"} {
		if _, ok := f[k]; !ok {
			t.Errorf("fanout figures lack %s: %v", k, f)
		}
	}
	if f["agents"] != 3 || f["failures"] != 0 || fan.Scenario != "fanout" {
		t.Errorf("fanout: agents %v failures %v scenario %q (errors %v)", f["agents"], f["failures"], fan.Scenario, fan.Errors)
	}
	if !(f["cache_lag_p50_ms"] >= 0 && f["cache_lag_p99_ms"] >= f["cache_lag_p50_ms"] && f["add_p99_ms"] >= f["add_p50_ms"] && f["add_p50_ms"] > 0) {
		t.Errorf("fanout percentiles out of order: %v", f)
	}
	if f["sync_s"] <= 0 || f["conflicts_per_add"] < 0 || f["conflicts_per_add"] > 1 || f["apiserver_cpu_ms_per_add"] < 0 {
		t.Errorf("fanout figures impossible: %v", f)
	}
	// Each new reservation reaches the windows of the other agents working
	// in its block (its creator's node cache holds it, not its window):
	// never more than the two others.
	if w := f["watchers_per_add"]; w < 0 || w > 2 || f["window_rebuilds"] < 0 {
		t.Errorf("fanout: %v caches watching each new reservation, %v window rebuilds", w, f["window_rebuilds"])
	}

	fp := rep.Find("full-pool")
	if fp == nil {
		t.Fatalf("no full-pool row in %+v", rep.Scenarios)
	}
	g := fp.Figures
	for _, k := range []string{"quorum_lists_per_s_per_network", "api_requests_per_failed_add", "failed_add_agent_cpu_ms", "failed_add_p99_ms", "freed_to_waiting_s"} {
		if _, ok := g[k]; !ok {
			t.Errorf("full-pool figures lack %s: %v", k, g)
		}
	}
	if g["failed_adds"] <= 0 {
		t.Errorf("no ADD failed on a full pool: %v", g)
	}
	if g["freed_to_waiting_s"] < 0 {
		t.Errorf("the freed address reached no waiting pod: %v", g)
	}
	// One live list per scope per interval, however many retries: the
	// window is one or two intervals long.
	if maxLists := fp.WallS/5 + 1; g["quorum_lists"] > maxLists {
		t.Errorf("%v live lists in %.1f s, want at most %.0f", g["quorum_lists"], fp.WallS, maxLists)
	}
}

// TestWebhookScenarioReportsTheAddedTime runs the webhook scenario with 10
// ADDs of each kind per phase and checks its rows: the webhook judged the
// second phase's ADDs and not the first's (by its own count), refused
// none, and every figure the scenario reports is there and possible. The
// added time itself is for the benchmark run, not asserted here.
func TestWebhookScenarioReportsTheAddedTime(t *testing.T) {
	if _, err := controlplane.BinDir(); err != nil {
		testbed.SkipUnlessEverything(t, err.Error())
	}
	bins, err := testbed.Build("")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	e, err := startEnv(ctx, testLogWriter{}, bins, controlplane.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.close()
	rep := &Report{}
	if err := e.runNamed(ctx, Options{Scenarios: []string{"webhook"}, WebhookOps: 10}, rep); err != nil {
		t.Fatal(err)
	}
	reviews := map[string]float64{}
	for _, id := range []string{"webhook-off-add-claim", "webhook-off-add-claim-target", "webhook-off-add-pod", "webhook-on-add-claim", "webhook-on-add-claim-target", "webhook-on-add-pod"} {
		r := rep.Find(id)
		if r == nil {
			t.Fatalf("no %s row in %+v", id, rep.Scenarios)
		}
		f := r.Figures
		t.Logf("%s: %v", id, f)
		keys := []string{"webhook", "webhook_judge_ms_per_add", "add_p50_ms", "add_p99_ms", "add_mean_ms", "api_requests_per_add", "apiserver_cpu_ms_per_add", "webhook_reviews_per_add", "webhook_denied"}
		on := strings.HasPrefix(id, "webhook-on-")
		if on {
			keys = append(keys, "added_p50_ms", "added_p99_ms", "added_mean_ms", "p50_ratio")
		}
		for _, k := range keys {
			if _, ok := f[k]; !ok {
				t.Errorf("%s figures lack %s: %v", id, k, f)
			}
		}
		if r.Ops != 10 || r.Failures != 0 || r.Scenario != "webhook" {
			t.Errorf("%s: %d ADDs, %d failed (%v), scenario %q", id, r.Ops, r.Failures, r.Errors, r.Scenario)
		}
		if !(f["add_p50_ms"] > 0 && f["add_p99_ms"] >= f["add_p50_ms"]) {
			t.Errorf("%s percentiles out of order: %v", id, f)
		}
		if on != (f["webhook"] == 1) || f["webhook_denied"] != 0 {
			t.Errorf("%s: webhook %v, %v refusals", id, f["webhook"], f["webhook_denied"])
		}
		reviews[id] = f["webhook_reviews_per_add"]
	}
	// Without its configuration the API server never calls the webhook;
	// with it, a claim's first ADD has its three reservation creates and
	// the claim's status judged, a migration target's ADD the status
	// (ownerPod) alone, and a pod's ADD its one reservation create
	// (reservation-pod-bound). Each measured ADD is paired with one raw
	// create by the bench's own (administrator's) client, which the
	// webhook judges for its shape (reservation-shape): one more each.
	if reviews["webhook-off-add-claim"] != 0 || reviews["webhook-off-add-claim-target"] != 0 || reviews["webhook-off-add-pod"] != 0 ||
		reviews["webhook-on-add-pod"] != 2 || reviews["webhook-on-add-claim"] != 5 || reviews["webhook-on-add-claim-target"] != 2 {
		t.Errorf("webhook reviews per ADD: %v", reviews)
	}
}

// testEnv starts the bench's environment for a test (a control plane of
// its own, tenure's binaries built), closed when the test ends; it skips
// where the control plane's binaries are not built, unless told to run
// everything.
func testEnv(t *testing.T) (context.Context, *env) {
	t.Helper()
	if _, err := controlplane.BinDir(); err != nil {
		testbed.SkipUnlessEverything(t, err.Error())
	}
	bins, err := testbed.Build("")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	t.Cleanup(cancel)
	e, err := startEnv(ctx, testLogWriter{}, bins, controlplane.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.close)
	return ctx, e
}
