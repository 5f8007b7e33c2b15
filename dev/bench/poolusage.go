package bench

import (
	"context"
	"fmt"
)

func init() {
	registerScenario(Scenario{Name: "pool-usage", Summary: "ADD ×40 one at a time into a /20 that is 0, 50, 90 and 99 % reserved: what a nearly full range costs an ADD",
		Needs: Needs{Agents: true, Controller: true}, Targets: usageTargets,
		Run: func(e *env, ctx context.Context, sc *ScenarioRun) ([]Result, error) {
			return e.usageScenario(ctx, sc.nets)
		}})
}

// usageTargets is the goal of the pool-usage rows (the full bench's too).
func usageTargets(rep *Report) []Target {
	const un = "ADD latency at 99 % pool usage vs 0 %"
	u0, u99 := rep.Find("add-usage-0"), rep.Find("add-usage-99")
	if u0 == nil || u99 == nil || u0.P50Ms <= 0 {
		return []Target{{Name: un, Want: fmt.Sprintf("within %.0f× (p50)", targetUsageRatio), Measured: "not run", Status: "n/a"}}
	}
	ratio := u99.P50Ms / u0.P50Ms
	return []Target{{Name: un, Want: fmt.Sprintf("within %.0f× (p50)", targetUsageRatio),
		Measured: fmt.Sprintf("p50 %.2f× (%.1f vs %.1f ms); p99 %.2f×", ratio, u99.P50Ms, u0.P50Ms, u99.P99Ms/max(u0.P99Ms, 1e-9)),
		Status:   status(ratio <= targetUsageRatio)}}
}
