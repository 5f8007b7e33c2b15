//go:build integration

package bench

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tenure-ipam/tenure/internal/reservation"
)

// TestFullPoolAnswersFromTheCaches runs the full-pool scenario on a /20
// (4,093 reservations made straight through the API, the last address
// taken by a pod's ADD) with 100 pods retrying ADD for 30 s, agents and
// controller started on the full pool. A full pool answers from the
// caches: every ADD that did not get the freed address is answered "range
// is full" (none times out or fails otherwise), the live lists of the
// network stay at one per interval however many ADDs retry, and the API
// requests stay under one per failed ADD. The fill is still there
// afterwards, each reservation with the UID it was made with: nothing
// (the controller included) took the full pool for something to repair.
func TestFullPoolAnswersFromTheCaches(t *testing.T) {
	ctx, e := testEnv(t)
	rep := &Report{}
	opts := Options{Scenarios: []string{"full-pool"}, FullPoolDuration: 30 * time.Second, FullPoolBits: 20}
	if err := e.runNamed(ctx, opts, rep); err != nil {
		t.Fatal(err)
	}
	fp := rep.Find("full-pool")
	if fp == nil {
		t.Fatalf("no full-pool row in %+v", rep.Scenarios)
	}
	g := fp.Figures
	t.Logf("full-pool on a /20: %s; API %s", fp.Notes, FormatBreakdown(fp.APIByVerbResource, 1))

	if g["full_answers"] <= 0 || g["other_failures"] != 0 || g["full_answers"] != g["failed_adds"] {
		t.Errorf("%v ADDs answered \"range is full\", %v failed otherwise (want every failed ADD answered full): %v", g["full_answers"], g["other_failures"], fp.Errors)
	}
	if g["freed_to_waiting_s"] < 0 {
		t.Errorf("the freed address reached no waiting pod: %v", g)
	}
	if v := g["quorum_lists_per_s_per_network"]; v > targetLiveListsPerS {
		t.Errorf("%v live lists of reservations per second per network (%v in all), want at most %v", v, g["quorum_lists"], targetLiveListsPerS)
	}
	if v := g["api_requests_per_failed_add"]; v > 1 {
		t.Errorf("%v API requests per failed ADD, want at most 1: %s", v, FormatBreakdown(fp.APIByVerbResource, g["failed_adds"]))
	}

	// The winner's DEL freed the address it got: what the network holds
	// is the fill, reservation for reservation.
	if len(fp.fill) != 4093 {
		t.Fatalf("the fill has %d reservations, want 4093 (a /20's usable addresses but the holder's)", len(fp.fill))
	}
	list := reservation.NewMetadataList()
	if err := e.c.List(ctx, list, client.MatchingLabels{reservation.LabelNetwork: reservation.ScopeLabel(fullPoolNetwork)}); err != nil {
		t.Fatal(err)
	}
	have := make(map[string]types.UID, len(list.Items))
	for _, m := range list.Items {
		have[m.Name] = m.UID
	}
	var missing, extra []string
	for name, uid := range fp.fill {
		if have[name] != uid {
			missing = append(missing, name)
		}
	}
	for name := range have {
		if _, ok := fp.fill[name]; !ok {
			extra = append(extra, name)
		}
	}
	if len(missing) > 0 || len(extra) > 0 {
		t.Errorf("the network holds %d reservations: %d of the fill gone or re-made (first %v), %d not of the fill (first %v)",
			len(have), len(missing), first(missing, 5), len(extra), first(extra, 5))
	}
}

func first(s []string, n int) []string { return s[:min(n, len(s))] }
