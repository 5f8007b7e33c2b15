package testbed

import (
	"fmt"
	"strconv"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Sample is one series of a scrape: its labels and its value.
type Sample struct {
	Labels map[string]string
	Value  float64
}

// Metrics is a parsed /metrics scrape, by metric family name.
type Metrics map[string]*dto.MetricFamily

// ParseMetrics reads a Prometheus text exposition (what a /metrics endpoint
// serves without an Accept header, or with text/plain).
func ParseMetrics(text string) (Metrics, error) {
	// UTF-8 names: whatever a current Prometheus server would accept.
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		return nil, err
	}
	return Metrics(mfs), nil
}

// Samples returns the samples named name as they appear on the wire: the
// series of a counter, gauge or untyped metric, or a histogram's or a
// summary's name_count or name_sum series.
func (m Metrics) Samples(name string) []Sample {
	var out []Sample
	add := func(pm *dto.Metric, v float64) {
		labels := make(map[string]string, len(pm.GetLabel()))
		for _, l := range pm.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		out = append(out, Sample{Labels: labels, Value: v})
	}
	if mf := m[name]; mf != nil {
		for _, pm := range mf.GetMetric() {
			switch mf.GetType() {
			case dto.MetricType_COUNTER:
				add(pm, pm.GetCounter().GetValue())
			case dto.MetricType_GAUGE:
				add(pm, pm.GetGauge().GetValue())
			case dto.MetricType_UNTYPED:
				add(pm, pm.GetUntyped().GetValue())
			}
		}
		if out != nil {
			return out
		}
	}
	for _, suffix := range []string{"_count", "_sum"} {
		base, ok := strings.CutSuffix(name, suffix)
		mf := m[base]
		if !ok || mf == nil {
			continue
		}
		for _, pm := range mf.GetMetric() {
			switch {
			case mf.GetType() == dto.MetricType_HISTOGRAM && suffix == "_count":
				add(pm, float64(pm.GetHistogram().GetSampleCount()))
			case mf.GetType() == dto.MetricType_HISTOGRAM:
				add(pm, pm.GetHistogram().GetSampleSum())
			case mf.GetType() == dto.MetricType_SUMMARY && suffix == "_count":
				add(pm, float64(pm.GetSummary().GetSampleCount()))
			case mf.GetType() == dto.MetricType_SUMMARY:
				add(pm, pm.GetSummary().GetSampleSum())
			}
		}
	}
	return out
}

// Sum adds up the samples named name whose labels include every one of
// labels, each written as in the exposition: `reason="PodGone"`. found is
// false when no sample matched.
func (m Metrics) Sum(name string, labels ...string) (sum float64, found bool) {
	want := make(map[string]string, len(labels))
	for _, l := range labels {
		k, quoted, ok := strings.Cut(l, "=")
		v, err := strconv.Unquote(quoted)
		if !ok || err != nil {
			panic(fmt.Sprintf("testbed: label matcher %q is not name=\"value\"", l))
		}
		want[k] = v
	}
samples:
	for _, s := range m.Samples(name) {
		for k, v := range want {
			if s.Labels[k] != v {
				continue samples
			}
		}
		sum += s.Value
		found = true
	}
	return sum, found
}
