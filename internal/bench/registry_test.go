package bench

import (
	"reflect"
	"strings"
	"testing"
)

func TestParseAgents(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []int
		bad  bool
	}{
		{in: "10,100,300,1000", want: []int{10, 100, 300, 1000}},
		{in: "300, 10,10", want: []int{10, 300}},
		{in: "3", want: []int{3}},
		{in: "", bad: true},
		{in: "0", bad: true},
		{in: "-1", bad: true},
		{in: "10,x", bad: true},
		{in: "1e3", bad: true},
	} {
		got, err := ParseAgents(tc.in)
		if tc.bad {
			if err == nil {
				t.Errorf("ParseAgents(%q) = %v, want an error", tc.in, got)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("ParseAgents(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
}

func TestCheckScenariosNamesTheRegisteredOnes(t *testing.T) {
	err := checkScenarios([]string{"no-such-scenario"})
	if err == nil {
		t.Fatal("an unknown scenario name was accepted")
	}
	for _, n := range ScenarioNames() {
		if !strings.Contains(err.Error(), n) {
			t.Errorf("error %q does not list registered scenario %q", err, n)
		}
		if checkScenarios([]string{n}) != nil {
			t.Errorf("registered scenario %q refused", n)
		}
	}
}

func TestFigureTablesOneTablePerScenario(t *testing.T) {
	rs := []Result{
		{ID: "add-c50-n4"},
		{ID: "fanout-n10", Scenario: "fanout", Figures: map[string]float64{"agents": 10, "cache_lag_p99_ms": 12.5}},
		{ID: "fanout-n100", Scenario: "fanout", Figures: map[string]float64{"agents": 100, "cache_lag_p99_ms": 40}},
		{ID: "full-pool", Scenario: "full-pool", Figures: map[string]float64{"freed_to_waiting_s": 0.25}},
	}
	md := figureTables(rs, true)
	for _, want := range []string{
		"fanout figures:", "| row | agents | cache_lag_p99_ms |", "| fanout-n10 | 10 | 12.5 |", "| fanout-n100 | 100 | 40 |",
		"full-pool figures:", "| full-pool | 0.25 |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("figure tables lack %q:\n%s", want, md)
		}
	}
	if strings.Contains(md, "add-c50-n4") {
		t.Errorf("a row without figures got a figure table:\n%s", md)
	}
}
