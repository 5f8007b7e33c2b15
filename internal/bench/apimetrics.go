package bench

import (
	"bufio"
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// requestMetric is the API server's counter of finished requests.
const requestMetric = "apiserver_request_total"

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
// Prometheus text exposition (the API server's /metrics). Other metrics are
// skipped; a malformed apiserver_request_total line is an error.
func ParseRequestCounts(text string) (RequestCounts, error) {
	out := RequestCounts{}
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 0, 64*1024), 4*1024*1024)
	line := 0
	for sc.Scan() {
		line++
		s := sc.Text()
		if !strings.HasPrefix(s, requestMetric) {
			continue
		}
		rest := s[len(requestMetric):]
		if rest == "" || (rest[0] != '{' && rest[0] != ' ') {
			continue // another metric sharing the prefix
		}
		labels := map[string]string{}
		if rest[0] == '{' {
			var err error
			labels, rest, err = parseLabels(rest)
			if err != nil {
				return nil, fmt.Errorf("%s line %d: %v", requestMetric, line, err)
			}
		}
		fields := strings.Fields(rest)
		if len(fields) < 1 || len(fields) > 2 {
			return nil, fmt.Errorf("%s line %d: want a value (and an optional timestamp) after the labels, got %q", requestMetric, line, rest)
		}
		v, err := strconv.ParseFloat(fields[0], 64)
		if err != nil {
			return nil, fmt.Errorf("%s line %d: value %q: %v", requestMetric, line, fields[0], err)
		}
		k := RequestKey{Verb: labels["verb"], Group: labels["group"], Resource: labels["resource"], Subresource: labels["subresource"], Code: labels["code"]}
		out[k] += v // series differing only in labels we drop are summed
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

// parseLabels reads `{a="x",b="y"}` at the start of s and returns the labels
// and what follows the closing brace.
func parseLabels(s string) (map[string]string, string, error) {
	labels := map[string]string{}
	i := 1 // past '{'
	for {
		for i < len(s) && (s[i] == ' ' || s[i] == ',') {
			i++
		}
		if i >= len(s) {
			return nil, "", fmt.Errorf("unterminated label set")
		}
		if s[i] == '}' {
			return labels, s[i+1:], nil
		}
		eq := strings.IndexByte(s[i:], '=')
		if eq < 0 {
			return nil, "", fmt.Errorf("label without '=' at %q", s[i:])
		}
		name := strings.TrimSpace(s[i : i+eq])
		i += eq + 1
		if i >= len(s) || s[i] != '"' {
			return nil, "", fmt.Errorf("label %s: value is not quoted", name)
		}
		i++
		var b strings.Builder
		closed := false
		for i < len(s) {
			c := s[i]
			i++
			if c == '"' {
				closed = true
				break
			}
			if c == '\\' && i < len(s) {
				switch e := s[i]; e {
				case 'n':
					b.WriteByte('\n')
				case '\\', '"':
					b.WriteByte(e)
				default:
					b.WriteByte('\\')
					b.WriteByte(e)
				}
				i++
				continue
			}
			b.WriteByte(c)
		}
		if !closed {
			return nil, "", fmt.Errorf("label %s: unterminated value", name)
		}
		labels[name] = b.String()
	}
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
// figures leave out (one watch serves a whole run; it is no per-call cost).
func IsWatch(verb string) bool {
	switch strings.ToUpper(verb) {
	case "WATCH", "WATCHLIST":
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
