package bench

import (
	"strings"
	"testing"
)

const metricsBefore = `# HELP apiserver_request_total [STABLE] Counter of apiserver requests broken out for each verb, dry run value, group, version, resource, scope, component, and HTTP response code.
# TYPE apiserver_request_total counter
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="",verb="GET",version="v1"} 10
apiserver_request_total{code="201",component="apiserver",dry_run="",group="ipam.tenure.dev",resource="ipreservations",scope="resource",subresource="",verb="POST",version="v1alpha1"} 100
apiserver_request_total{code="200",component="apiserver",dry_run="",group="ipam.tenure.dev",resource="ipreservations",scope="cluster",subresource="",verb="WATCH",version="v1alpha1"} 4
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="",scope="",subresource="/metrics",verb="GET",version=""} 3
apiserver_request_total_other{code="200"} 99
# HELP apiserver_request_duration_seconds whatever
apiserver_request_duration_seconds_bucket{verb="GET",le="0.005"} 12
`

const metricsAfter = `apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="",verb="GET",version="v1"} 12
apiserver_request_total{code="201",component="apiserver",dry_run="",group="ipam.tenure.dev",resource="ipreservations",scope="resource",subresource="",verb="POST",version="v1alpha1"} 600
apiserver_request_total{code="409",component="apiserver",dry_run="",group="ipam.tenure.dev",resource="ipreservations",scope="resource",subresource="",verb="POST",version="v1alpha1"} 5
apiserver_request_total{code="200",component="apiserver",dry_run="",group="ipam.tenure.dev",resource="ipreservations",scope="cluster",subresource="",verb="WATCH",version="v1alpha1"} 8
apiserver_request_total{code="200",component="apiserver",dry_run="",group="k8s.cni.cncf.io",resource="ipamclaims",scope="resource",subresource="status",verb="PUT",version="v1alpha1"} 7
apiserver_request_total{code="200",component="apiserver",dry_run="",group="ipam.tenure.dev",resource="ipreservations",scope="resource",subresource="",verb="DELETE",version="v1alpha1"} 1
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="",scope="",subresource="/metrics",verb="GET",version=""} 9
apiserver_request_total{code="200",component="apiserver",dry_run="",group="ipam.tenure.dev",resource="ipreservations",scope="cluster",subresource="",verb="LIST",version="v1alpha1"} 1e+00 1700000000000
`

func TestParseRequestCountsAndCost(t *testing.T) {
	before, err := ParseRequestCounts(metricsBefore)
	if err != nil {
		t.Fatal(err)
	}
	if len(before) != 4 {
		t.Fatalf("parsed %d series, want 4 (other metrics skipped): %v", len(before), before)
	}
	post := RequestKey{Verb: "POST", Group: "ipam.tenure.dev", Resource: "ipreservations", Code: "201"}
	if before[post] != 100 {
		t.Fatalf("POST ipreservations = %v, want 100", before[post])
	}
	after, err := ParseRequestCounts(metricsAfter)
	if err != nil {
		t.Fatal(err)
	}
	c := Cost(after.Sub(before))
	// GET pods 2, POST 500 + 5 (409), PUT status 7, DELETE 1, LIST 1; the
	// watches and /metrics are not requests.
	if c.Requests != 2+505+7+1+1 {
		t.Fatalf("requests %v, want %v; breakdown %v", c.Requests, 2+505+7+1+1, c.ByVerbResource)
	}
	if c.Writes != 505+7+1 {
		t.Fatalf("writes %v, want %v", c.Writes, 505+7+1)
	}
	if c.ByVerbResource["POST ipreservations"] != 505 || c.ByVerbResource["PUT ipamclaims/status"] != 7 || c.ByVerbResource["WATCH ipreservations"] != 4 {
		t.Fatalf("breakdown %v", c.ByVerbResource)
	}
	if c.Errors["POST ipreservations 409"] != 5 || len(c.Errors) != 1 {
		t.Fatalf("errors %v", c.Errors)
	}
	if c.ByCode["409"] != 5 {
		t.Fatalf("by code %v", c.ByCode)
	}
	if _, ok := c.ByVerbResource["GET "]; ok {
		t.Fatal("non-resource requests must not be counted")
	}
	got := FormatBreakdown(map[string]float64{"POST ipreservations": 500, "GET pods": 2, "PUT x/status": 2}, 500)
	if want := "POST ipreservations: 1, GET pods: 0.004, PUT x/status: 0.004"; got != want {
		t.Fatalf("FormatBreakdown = %q, want %q", got, want)
	}
}

func TestParseRequestCountsEscapes(t *testing.T) {
	text := `apiserver_request_total{verb="GET",resource="we\"ird\\x",code="200"} 3` + "\n"
	m, err := ParseRequestCounts(text)
	if err != nil {
		t.Fatal(err)
	}
	if m[RequestKey{Verb: "GET", Resource: `we"ird\x`, Code: "200"}] != 3 {
		t.Fatalf("parsed %v", m)
	}
}

func TestParseRequestCountsRejectsMalformed(t *testing.T) {
	for _, bad := range []string{
		`apiserver_request_total{verb="GET" 3`,
		`apiserver_request_total{verb=GET} 3`,
		`apiserver_request_total{verb="GET"} three`,
		`apiserver_request_total{verb="GET"}`,
	} {
		if _, err := ParseRequestCounts(bad + "\n"); err == nil || !strings.Contains(err.Error(), requestMetric) {
			t.Errorf("%q: err %v, want an error naming the metric", bad, err)
		}
	}
}

func TestVerbClasses(t *testing.T) {
	for _, v := range []string{"POST", "PUT", "PATCH", "DELETE", "APPLY", "DELETECOLLECTION", "create", "update"} {
		if !IsWrite(v) {
			t.Errorf("%s must be a write", v)
		}
	}
	for _, v := range []string{"GET", "LIST", "WATCH", "WATCHLIST", "CONNECT"} {
		if IsWrite(v) {
			t.Errorf("%s must not be a write", v)
		}
	}
	if !IsWatch("WATCH") || !IsWatch("watchlist") || IsWatch("LIST") {
		t.Error("watch classification")
	}
}

// The events the API server sent on watches are counted by resource, kept
// apart from requests, under either label the metric has had.
func TestWatchEventsAreCountedApartFromRequests(t *testing.T) {
	before, err := ParseRequestCounts(`apiserver_watch_events_total{group="ipam.tenure.dev",resource="ipreservations",version="v1alpha1"} 10
apiserver_watch_events_total{group="",kind="Pod",version="v1"} 3
apiserver_request_total{code="201",component="apiserver",dry_run="",group="ipam.tenure.dev",resource="ipreservations",scope="resource",subresource="",verb="POST",version="v1alpha1"} 100
`)
	if err != nil {
		t.Fatal(err)
	}
	after, err := ParseRequestCounts(`apiserver_watch_events_total{group="ipam.tenure.dev",resource="ipreservations",version="v1alpha1"} 30
apiserver_watch_events_total{group="",kind="Pod",version="v1"} 4
apiserver_request_total{code="201",component="apiserver",dry_run="",group="ipam.tenure.dev",resource="ipreservations",scope="resource",subresource="",verb="POST",version="v1alpha1"} 110
`)
	if err != nil {
		t.Fatal(err)
	}
	c := Cost(after.Sub(before))
	if c.Requests != 10 {
		t.Fatalf("requests %v, want the 10 POSTs alone", c.Requests)
	}
	requests, events := splitWatchEvents(c.ByVerbResource)
	if len(requests) != 1 || requests["POST ipreservations"] != 10 {
		t.Fatalf("requests %v, want POST ipreservations: 10", requests)
	}
	if len(events) != 2 || events["ipreservations"] != 20 || events["pod"] != 1 {
		t.Fatalf("watch events %v, want ipreservations: 20, pod: 1", events)
	}
}
