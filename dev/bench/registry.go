package bench

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"
)

// A named scenario is one `tenurectl bench --scenario NAME` can run on its
// own. Each lives in its own file and registers itself in one line:
//
//	func init() { registerScenario(Scenario{Name: "my-scenario", Summary: "…", Run: (*env).myScenario}) }
//
// Run returns its rows; a row's Figures carry the figures a script reads by
// name (stable: scripts read them).
type Scenario struct {
	Name    string
	Summary string
	// Needs says what Run expects started before it: the four bench
	// agents (warmed up) and the controller when built. The control plane
	// is always there.
	Needs Needs
	Run   func(e *env, ctx context.Context, sc *ScenarioRun) ([]Result, error)
	// Targets (optional) are the scenario's goals, as measured, from the
	// report once every named scenario ran.
	Targets func(rep *Report) []Target
	// Plots (optional) are SVG files WriteFiles writes, by file name.
	Plots func(rep *Report) map[string]Plot
}

// Needs is what a named scenario wants started before it runs.
type Needs struct {
	Agents     bool // the four bench agents (bench-n1..n4), warmed up
	Controller bool // tenure-controller, when built
	// Node: the real node (root, make node-tools cni-plugins whereabouts
	// image) on a control plane with controllers, tenure rolled out by
	// deploy/; such scenarios run without any other.
	Node bool
}

// ScenarioRun is what a named scenario gets besides the env: the run's
// options, the report so far, and the network allocator.
type ScenarioRun struct {
	Opts Options
	Rep  *Report
	// Last: no scenario runs after this one (it need not clean up).
	Last bool
	nets *netAlloc
}

var scenarios = map[string]Scenario{}

// registerScenario adds a named scenario; called from init.
func registerScenario(s Scenario) {
	if _, dup := scenarios[s.Name]; dup || s.Name == "" || s.Run == nil {
		panic(fmt.Sprintf("bench: bad or duplicate scenario registration %q", s.Name))
	}
	scenarios[s.Name] = s
}

// ScenarioNames lists the registered named scenarios, sorted.
func ScenarioNames() []string {
	names := make([]string, 0, len(scenarios))
	for n := range scenarios {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// checkScenarios rejects names no scenario registered.
func checkScenarios(names []string) error {
	for _, n := range names {
		if _, ok := scenarios[n]; !ok {
			return fmt.Errorf("no scenario %q (have: %s)", n, strings.Join(ScenarioNames(), ", "))
		}
	}
	return nil
}

// runNamed runs the named scenarios in the order given, on an env with only
// the control plane started; what they need is started once, before the
// first that needs it.
func (e *env) runNamed(ctx context.Context, opts Options, rep *Report) error {
	nets := &netAlloc{}
	agentsUp := false
	rep.Controller = "not started (no named scenario needed it)"
	for i, name := range opts.Scenarios {
		s := scenarios[name]
		if s.Needs.Agents && !agentsUp {
			if err := e.startBenchAgents(ctx, "ready"); err != nil {
				return err
			}
			agentsUp = true
		}
		if s.Needs.Controller && e.controllerState == "" {
			e.startController(ctx)
			rep.Controller = e.controllerState
		}
		if s.Needs.Agents && nets.n == 0 {
			if err := e.warmup(ctx, nets); err != nil {
				return fmt.Errorf("warm-up: %w", err)
			}
		}
		e.logf("scenario %s: %s", name, s.Summary)
		rs, err := s.Run(e, ctx, &ScenarioRun{Opts: opts, Rep: rep, Last: i == len(opts.Scenarios)-1, nets: nets})
		for i := range rs {
			if rs[i].Scenario == "" {
				rs[i].Scenario = name
			}
		}
		rep.Scenarios = append(rep.Scenarios, rs...)
		if err != nil {
			return fmt.Errorf("scenario %s: %w", name, err)
		}
	}
	return nil
}

// namedTargets and namedPlots gather the named scenarios' goals and plots.
func namedTargets(names []string, rep *Report) []Target {
	var ts []Target
	for _, n := range names {
		if s := scenarios[n]; s.Targets != nil {
			ts = append(ts, s.Targets(rep)...)
		}
	}
	return ts
}

func namedPlots(names []string, rep *Report) map[string]Plot {
	out := map[string]Plot{}
	for _, n := range names {
		if s := scenarios[n]; s.Plots != nil {
			for file, p := range s.Plots(rep) {
				out[file] = p
			}
		}
	}
	return out
}

// startBenchAgents starts the four bench agents and logs how long each
// took to be ready (what says what ready meant).
func (e *env) startBenchAgents(ctx context.Context, what string) error {
	for _, n := range agentNodes {
		_, took, err := e.startAgent(ctx, n)
		if err != nil {
			return err
		}
		e.logf("agent %s %s in %v", n, what, took.Round(time.Millisecond))
	}
	return nil
}

// ParseAgents parses --agents: a comma-separated list of positive counts.
func ParseAgents(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		var n int
		if _, err := fmt.Sscanf(f, "%d", &n); err != nil || n <= 0 || fmt.Sprint(n) != f {
			return nil, fmt.Errorf("--agents: %q is not a positive count", f)
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("--agents: no counts in %q", s)
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// figureRows returns, per scenario name in order of appearance, the rows
// that carry figures.
func figureRows(rs []Result) (names []string, rows map[string][]Result) {
	rows = map[string][]Result{}
	for _, r := range rs {
		if len(r.Figures) == 0 {
			continue
		}
		if _, seen := rows[r.Scenario]; !seen {
			names = append(names, r.Scenario)
		}
		rows[r.Scenario] = append(rows[r.Scenario], r)
	}
	return names, rows
}

// figureKeys is the union of the rows' figure names, "agents" and
// "reservations" (what a row is a point of) first, the rest sorted.
func figureKeys(rows []Result) []string {
	set := map[string]bool{}
	for _, r := range rows {
		for k := range r.Figures {
			set[k] = true
		}
	}
	var keys []string
	for _, first := range []string{"agents", "reservations"} {
		if set[first] {
			keys = append(keys, first)
			delete(set, first)
		}
	}
	rest := make([]string, 0, len(set))
	for k := range set {
		rest = append(rest, k)
	}
	sort.Strings(rest)
	return append(keys, rest...)
}

// figureTables renders each named scenario's figures as one table: a row
// per result, a column per figure (Markdown when md, else tab-aligned text
// via the caller's tabwriter).
func figureTables(rs []Result, md bool) string {
	var b strings.Builder
	names, rows := figureRows(rs)
	for _, name := range names {
		keys := figureKeys(rows[name])
		head := append([]string{"row"}, keys...)
		if md {
			fmt.Fprintf(&b, "\n%s figures:\n\n| %s |\n|%s\n", name, strings.Join(head, " | "), strings.Repeat("---:|", len(head)))
		} else {
			fmt.Fprintf(&b, "\n%s figures:\n%s\n", name, strings.Join(head, "\t"))
		}
		for _, r := range rows[name] {
			cells := []string{r.ID}
			for _, k := range keys {
				v, ok := r.Figures[k]
				if !ok {
					cells = append(cells, "-")
					continue
				}
				cells = append(cells, trimFloat(v))
			}
			if md {
				fmt.Fprintf(&b, "| %s |\n", strings.Join(cells, " | "))
			} else {
				fmt.Fprintf(&b, "%s\n", strings.Join(cells, "\t"))
			}
		}
	}
	return b.String()
}

// needsNode says whether a named scenario runs on the real node.
func needsNode(names []string) bool {
	n := 0
	for _, name := range names {
		if scenarios[name].Needs.Node {
			n++
		}
	}
	return n > 0
}

// checkNodeMix refuses a real-node scenario named with others: the real
// node runs on a control plane of its own, with controllers.
func checkNodeMix(names []string) error {
	if needsNode(names) && len(names) > 1 {
		return fmt.Errorf("a scenario on the real node runs alone: %s", strings.Join(names, ", "))
	}
	return nil
}
