package bench

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/tenure-ipam/tenure/test/testbed"
)

// requestMetric is the API server's counter of finished requests.
const requestMetric = "apiserver_request_total"

// watchEventMetric counts the events the API server sent to watchers, by
// resource; ParseRequestCounts keeps them under the verb watchEvents.
const (
	watchEventMetric = "apiserver_watch_events_total"
	watchEvents      = "WATCHEVENTS"
)

// RequestKey is one series of apiserver_request_total, reduced to the
// labels the bench attributes cost by.
type RequestKey struct {
	Verb        string
	Group       string
	Resource    string
	Subresource string
	Code        string
}

// RequestCounts maps each series to its counter value.
type RequestCounts map[RequestKey]float64

// ParseRequestCounts reads the apiserver_request_total series out of a
// Prometheus text exposition (the API server's /metrics).
func ParseRequestCounts(text string) (RequestCounts, error) {
	m, err := testbed.ParseMetrics(text)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", requestMetric, err)
	}
	out := RequestCounts{}
	for _, s := range m.Samples(requestMetric) {
		l := s.Labels
		k := RequestKey{Verb: l["verb"], Group: l["group"], Resource: l["resource"], Subresource: l["subresource"], Code: l["code"]}
		out[k] += s.Value // series differing only in labels we drop are summed
	}
	for _, s := range m.Samples(watchEventMetric) {
		res := s.Labels["resource"]
		if res == "" {
			res = strings.ToLower(s.Labels["kind"]) // before the label was renamed
		}
		out[RequestKey{Verb: watchEvents, Group: s.Labels["group"], Resource: res}] += s.Value
	}
	return out, nil
}

// Sub returns c - before for every series, dropping series that did not
// change. A series missing from before counts from zero.
func (c RequestCounts) Sub(before RequestCounts) RequestCounts {
	out := RequestCounts{}
	for k, v := range c {
		if d := v - before[k]; d != 0 {
			out[k] = d
		}
	}
	return out
}

// IsWatch reports whether a verb is a long-running watch, which the cost
// figures leave out (one watch serves a whole run; it is no per-call cost),
// or the events sent on watches (watchEvents).
func IsWatch(verb string) bool {
	switch strings.ToUpper(verb) {
	case "WATCH", "WATCHLIST", watchEvents:
		return true
	}
	return false
}

// IsWrite reports whether a verb changes state. The API server labels
// requests with HTTP-ish verbs (POST, PUT, PATCH, DELETE, APPLY,
// DELETECOLLECTION); CREATE and UPDATE are accepted for robustness.
func IsWrite(verb string) bool {
	switch strings.ToUpper(verb) {
	case "POST", "CREATE", "PUT", "UPDATE", "PATCH", "APPLY", "DELETE", "DELETECOLLECTION":
		return true
	}
	return false
}

// APICost is what a scenario cost the API server.
type APICost struct {
	// Requests counts every resource request except watches.
	Requests float64
	// Writes counts creates, updates, patches and deletes.
	Writes float64
	// ByVerbResource breaks Requests down by "VERB resource[/subresource]"
	// (watches included, under their own verb, for completeness).
	ByVerbResource map[string]float64
	// ByCode counts non-watch requests by HTTP code ("409": conflicts and
	// AlreadyExists).
	ByCode map[string]float64
	// Errors counts non-watch requests answered with a code of 400 or more
	// by "VERB resource[/subresource] CODE".
	Errors map[string]float64
}

// splitWatchEvents splits a breakdown (APICost.ByVerbResource) into its
// requests and the events sent on watches, the latter by resource.
func splitWatchEvents(m map[string]float64) (requests, events map[string]float64) {
	requests, events = map[string]float64{}, map[string]float64{}
	for k, v := range m {
		if verb, res, _ := strings.Cut(k, " "); verb == watchEvents {
			events[res] = v
		} else {
			requests[k] = v
		}
	}
	return requests, events
}

// Cost summarises a difference of counters. Non-resource requests (GET
// /metrics, /readyz and such, which have no resource label) are not
// counted: the bench's own metric scrapes are among them.
func Cost(d RequestCounts) APICost {
	c := APICost{ByVerbResource: map[string]float64{}, ByCode: map[string]float64{}, Errors: map[string]float64{}}
	for k, v := range d {
		if k.Resource == "" {
			continue
		}
		name := strings.ToUpper(k.Verb) + " " + k.Resource
		if k.Subresource != "" {
			name += "/" + k.Subresource
		}
		c.ByVerbResource[name] += v
		if IsWatch(k.Verb) {
			continue
		}
		c.Requests += v
		c.ByCode[k.Code] += v
		if code, err := strconv.Atoi(k.Code); err == nil && code >= 400 {
			c.Errors[name+" "+k.Code] += v
		}
		if IsWrite(k.Verb) {
			c.Writes += v
		}
	}
	return c
}

// FormatBreakdown renders a breakdown as "VERB resource: n" items, largest
// first, each divided by per (per-op figures when per > 1).
func FormatBreakdown(m map[string]float64, per float64) string {
	type kv struct {
		k string
		v float64
	}
	var items []kv
	for k, v := range m {
		items = append(items, kv{k, v})
	}
	sort.Slice(items, func(i, j int) bool {
		if items[i].v != items[j].v {
			return items[i].v > items[j].v
		}
		return items[i].k < items[j].k
	})
	if per <= 0 {
		per = 1
	}
	parts := make([]string, len(items))
	for i, it := range items {
		parts[i] = fmt.Sprintf("%s: %s", it.k, trimFloat(it.v/per))
	}
	return strings.Join(parts, ", ")
}

func trimFloat(v float64) string {
	s := strconv.FormatFloat(v, 'f', 3, 64)
	s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	if s == "" || s == "-" {
		return "0"
	}
	return s
}
