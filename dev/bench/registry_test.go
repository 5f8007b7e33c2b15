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

func TestFanoutTargetsReadTheCurve(t *testing.T) {
	row := func(n, cpu, conflicts float64) Result {
		return Result{ID: "fanout", Scenario: "fanout", Figures: map[string]float64{"agents": n, "apiserver_cpu_ms_per_add": cpu, "conflicts_per_add": conflicts}}
	}
	rep := &Report{Scenarios: []Result{row(100, 8, 0.01), row(10, 5, 0), row(300, 30, 0.02),
		{ID: "fanout-n1000", Scenario: "fanout", Notes: "12 of 1000 caches synced", Figures: map[string]float64{"agents": 1000, "sync_s": -1}}}}
	got := map[string]Target{}
	for _, tg := range fanoutTargets(rep) {
		got[tg.Name] = tg
	}
	if tg := got["fanout: API server CPU per ADD, N=300 vs N=10"]; tg.Status != "not met" || !strings.Contains(tg.Measured, "6.00×") {
		t.Errorf("CPU ratio target %+v, want not met at 6.00× (the unsynced N=1000 row is no point of the curve)", tg)
	}
	if tg := got["fanout: N=1000"]; tg.Status != "not met" || !strings.Contains(tg.Measured, "12 of 1000") {
		t.Errorf("stopped round target %+v", tg)
	}
	if tg := got["fanout: conflicts per ADD"]; tg.Status != "met" || !strings.Contains(tg.Measured, "0.020 (N=300)") {
		t.Errorf("conflicts target %+v", tg)
	}
	if p := fanoutPlots(rep)["fanout-cpu.svg"]; len(p.Series) == 0 || len(p.Series[0].Points) != 3 {
		t.Errorf("CPU plot %+v, want 3 points per series", p.Series)
	}
}
