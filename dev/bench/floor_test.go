package bench

import (
	"strings"
	"testing"
)

func TestClientFloor(t *testing.T) {
	for _, tc := range []struct {
		name        string
		client, api float64
		want        float64
		ok          bool
	}{
		{"a fifth", 0.5, 2.5, 0.2, true},
		{"client dearer than the server", 3, 2, 1.5, true},
		{"no API server CPU measured", 0.5, 0, 0, false},
		{"no client CPU measured", 0, 2, 0, false},
	} {
		got, ok := clientFloor(Result{RawClientCPUMs: tc.client, RawAPICPUMs: tc.api})
		if ok != tc.ok || got != tc.want {
			t.Errorf("%s: clientFloor(%v, %v) = %v, %v; want %v, %v", tc.name, tc.client, tc.api, got, ok, tc.want, tc.ok)
		}
	}
}

// The floor is a row of its own beside the agent's ratio, which stays the
// target.
func TestEvaluateFloorBesideAgentRatio(t *testing.T) {
	rep := &Report{Scenarios: []Result{{ID: gridID("add", 50, 4), Command: "ADD", Ops: 500, OpsPerS: 100,
		CPUMsPerOp:     map[string]float64{"agent": 1, "kube-apiserver": 4},
		RawClientCPUMs: 0.6, RawAPICPUMs: 3}}}
	var agent, floor *Target
	ts := evaluate(rep)
	for i := range ts {
		switch {
		case strings.HasSuffix(ts[i].Name, "agent CPU per ADD / kube-apiserver CPU per ADD"):
			agent = &ts[i]
		case strings.Contains(ts[i].Name, "floor of the above"):
			floor = &ts[i]
		}
	}
	if agent == nil || agent.Measured != "0.25× (1.00 / 4.00 ms)" || agent.Status != "not met" {
		t.Fatalf("agent ratio row = %+v", agent)
	}
	if floor == nil || floor.Measured != "0.20× (0.60 / 3.00 ms)" || floor.Status != "measured" {
		t.Fatalf("floor row = %+v", floor)
	}
}
