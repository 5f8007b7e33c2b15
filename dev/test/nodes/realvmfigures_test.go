package nodes_test

// Without the integration tag: the real VM part's figures and their
// summary are pure, and their test needs no node.

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/tenure-ipam/tenure/dev/bench"
)

// rvmMigration is one migration of the real VM part as
// TENURE_REALVM_OUT records it.
type rvmMigration struct {
	// From and To are node numbers, from 1.
	From   int  `json:"from"`
	To     int  `json:"to"`
	Failed bool `json:"failed"`
	// QEMU's query-migrate figures; zero for a failed migration.
	QEMUTotalMs    int64 `json:"qemu_total_ms"`
	QEMUDowntimeMs int64 `json:"qemu_downtime_ms"`
	// RouteAfterSignalMs is from targetNodeDomainReadyTimestamp seen
	// written until the target node's route to the prefix was seen (its
	// poll's 250 ms granularity included); zero for a failed migration.
	RouteAfterSignalMs int64 `json:"route_after_signal_ms"`
	// TargetEchoReplies are the echo requests the target launcher pod's
	// own kernel answered with the VM's MAC and addresses before its
	// bridge binding.
	TargetEchoReplies rvmEcho    `json:"target_echo_replies"`
	Phases            []rvmPhase `json:"phases"`
}

// rvmEcho counts echo replies per family.
type rvmEcho struct {
	IPv4 int `json:"ipv4"`
	IPv6 int `json:"ipv6"`
}

// rvmPhase is a migration's set-up or migrate phase and each probed
// address's losses in it.
type rvmPhase struct {
	Name   string    `json:"name"`
	Losses []rvmLoss `json:"losses"`
}

type rvmLoss struct {
	// Address names what the address is: IPv4, IA_NA or prefix.
	Address  string  `json:"address"`
	IP       string  `json:"ip"`
	WindowMs float64 `json:"window_ms"`
	Lost     int     `json:"lost"`
}

// rvmRow is one figure's distribution over the successful migrations.
type rvmRow struct {
	Figure             string
	N                  int
	Min, P50, P90, Max float64
}

// rvmDistribution summarizes the successful migrations of ms: QEMU's
// total and downtime, the route's delay after the signal, each phase's
// loss window per address (in the order of the first successful
// migration's) and by how much the prefix's exceeds the IA_NA address's
// (in the migrate phase, tenure's share of the switchover), and the target
// pod's echo replies. Percentiles are nearest-rank (bench.Percentile). No
// successful migration, no rows.
func rvmDistribution(ms []rvmMigration) []rvmRow {
	var ok []rvmMigration
	for _, m := range ms {
		if !m.Failed {
			ok = append(ok, m)
		}
	}
	if len(ok) == 0 {
		return nil
	}
	row := func(figure string, value func(rvmMigration) (float64, bool)) rvmRow {
		var vs []float64
		for _, m := range ok {
			if v, found := value(m); found {
				vs = append(vs, v)
			}
		}
		slices.Sort(vs)
		r := rvmRow{Figure: figure, N: len(vs)}
		if len(vs) > 0 {
			r.Min, r.P50, r.P90, r.Max = vs[0], bench.Percentile(vs, 50), bench.Percentile(vs, 90), vs[len(vs)-1]
		}
		return r
	}
	rows := []rvmRow{
		row("QEMU total (ms)", func(m rvmMigration) (float64, bool) { return float64(m.QEMUTotalMs), true }),
		row("QEMU downtime (ms)", func(m rvmMigration) (float64, bool) { return float64(m.QEMUDowntimeMs), true }),
		row("route on the target after the signal (ms)", func(m rvmMigration) (float64, bool) { return float64(m.RouteAfterSignalMs), true }),
	}
	window := func(m rvmMigration, phase, address string) (float64, bool) {
		for _, mp := range m.Phases {
			if mp.Name != phase {
				continue
			}
			for _, ml := range mp.Losses {
				if ml.Address == address {
					return ml.WindowMs, true
				}
			}
		}
		return 0, false
	}
	for _, p := range ok[0].Phases {
		for _, l := range p.Losses {
			rows = append(rows, row(fmt.Sprintf("%s phase: %s loss window (ms)", p.Name, l.Address), func(m rvmMigration) (float64, bool) {
				return window(m, p.Name, l.Address)
			}))
		}
		rows = append(rows, row(fmt.Sprintf("%s phase: the prefix's window over the IA_NA address's (ms)", p.Name), func(m rvmMigration) (float64, bool) {
			prefix, found := window(m, p.Name, "prefix")
			addr, found2 := window(m, p.Name, "IA_NA")
			return prefix - addr, found && found2
		}))
	}
	// In the set-up phase the target launcher's kernel answers the IA_NA
	// address's probes in the VM's place until its bridge binding: a probe
	// it answered reached no guest. Counted as lost, the IA_NA address's
	// loss is the prefix's, give or take what the route adds.
	lost := func(m rvmMigration, phase, address string) (int, bool) {
		for _, mp := range m.Phases {
			for _, ml := range mp.Losses {
				if mp.Name == phase && ml.Address == address {
					return ml.Lost, true
				}
			}
		}
		return 0, false
	}
	rows = append(rows, row("set-up phase: the prefix's probes lost over the IA_NA address's, lost or answered by the target pod (probes)", func(m rvmMigration) (float64, bool) {
		prefix, found := lost(m, "set-up", "prefix")
		addr, found2 := lost(m, "set-up", "IA_NA")
		return float64(prefix - addr - m.TargetEchoReplies.IPv6), found && found2
	}))
	return append(rows,
		row("echo requests the target pod answered in the VM's place: IPv4", func(m rvmMigration) (float64, bool) { return float64(m.TargetEchoReplies.IPv4), true }),
		row("echo requests the target pod answered in the VM's place: IPv6", func(m rvmMigration) (float64, bool) { return float64(m.TargetEchoReplies.IPv6), true }),
	)
}

// rvmMarkdown renders rows as a markdown table, in whole milliseconds.
func rvmMarkdown(rows []rvmRow) string {
	// A difference of two equal windows can be a hair below zero, which
	// %.0f prints as -0.
	ms := func(v float64) float64 {
		if v = math.Round(v); v == 0 {
			return 0
		}
		return v
	}
	var b strings.Builder
	b.WriteString("| figure | n | min | p50 | p90 | max |\n|---|---|---|---|---|---|\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s | %d | %.0f | %.0f | %.0f | %.0f |\n", r.Figure, r.N, ms(r.Min), ms(r.P50), ms(r.P90), ms(r.Max))
	}
	return b.String()
}

func TestRVMDistribution(t *testing.T) {
	mig := func(failed bool, total, downtime, route int64, v4, v6 int, setup, migrate [3]float64) rvmMigration {
		phase := func(name string, w [3]float64) rvmPhase {
			p := rvmPhase{Name: name}
			for i, a := range []string{"IPv4", "IA_NA", "prefix"} {
				p.Losses = append(p.Losses, rvmLoss{Address: a, IP: fmt.Sprintf("fd00::%d", i+1), WindowMs: w[i], Lost: int(w[i] / 10)})
			}
			return p
		}
		return rvmMigration{From: 1, To: 2, Failed: failed, QEMUTotalMs: total, QEMUDowntimeMs: downtime, RouteAfterSignalMs: route,
			TargetEchoReplies: rvmEcho{IPv4: v4, IPv6: v6},
			Phases:            []rvmPhase{phase("set-up", setup), phase("migrate", migrate)}}
	}
	okA := mig(false, 600, 10, 80, 40, 41, [3]float64{80, 70, 530}, [3]float64{20, 20, 20})
	okB := mig(false, 620, 30, 270, 32, 33, [3]float64{60, 50, 430}, [3]float64{0, 0, 0})
	okC := mig(false, 610, 20, 100, 50, 50, [3]float64{70, 60, 500}, [3]float64{10, 10, 30})
	failed := mig(true, 0, 0, 0, 51, 51, [3]float64{0, 0, 527}, [3]float64{900, 900, 900})

	for _, c := range []struct {
		name string
		ms   []rvmMigration
		want map[string]rvmRow // by figure; the rows not named are not checked
		rows int
	}{
		{"none", nil, nil, 0},
		{"only a failed one", []rvmMigration{failed}, nil, 0},
		{"one", []rvmMigration{okA}, map[string]rvmRow{
			"QEMU downtime (ms)":                                              {N: 1, Min: 10, P50: 10, P90: 10, Max: 10},
			"set-up phase: prefix loss window (ms)":                           {N: 1, Min: 530, P50: 530, P90: 530, Max: 530},
			"migrate phase: IA_NA loss window (ms)":                           {N: 1, Min: 20, P50: 20, P90: 20, Max: 20},
			"route on the target after the signal (ms)":                       {N: 1, Min: 80, P50: 80, P90: 80, Max: 80},
			"set-up phase: the prefix's window over the IA_NA address's (ms)": {N: 1, Min: 460, P50: 460, P90: 460, Max: 460},
			"set-up phase: the prefix's probes lost over the IA_NA address's, lost or answered by the target pod (probes)": {N: 1, Min: 5, P50: 5, P90: 5, Max: 5},
		}, 14},
		// The failed migration's windows (900 ms) and echo replies stay
		// out; p50 of three is the second, p90 the third.
		{"three and a failed one", []rvmMigration{okA, failed, okB, okC}, map[string]rvmRow{
			"QEMU total (ms)":                                                  {N: 3, Min: 600, P50: 610, P90: 620, Max: 620},
			"QEMU downtime (ms)":                                               {N: 3, Min: 10, P50: 20, P90: 30, Max: 30},
			"set-up phase: IPv4 loss window (ms)":                              {N: 3, Min: 60, P50: 70, P90: 80, Max: 80},
			"set-up phase: prefix loss window (ms)":                            {N: 3, Min: 430, P50: 500, P90: 530, Max: 530},
			"migrate phase: IPv4 loss window (ms)":                             {N: 3, Min: 0, P50: 10, P90: 20, Max: 20},
			"migrate phase: prefix loss window (ms)":                           {N: 3, Min: 0, P50: 20, P90: 30, Max: 30},
			"migrate phase: the prefix's window over the IA_NA address's (ms)": {N: 3, Min: 0, P50: 0, P90: 20, Max: 20},
			"echo requests the target pod answered in the VM's place: IPv4":    {N: 3, Min: 32, P50: 40, P90: 50, Max: 50},
			"set-up phase: the prefix's probes lost over the IA_NA address's, lost or answered by the target pod (probes)": {N: 3, Min: -6, P50: 5, P90: 5, Max: 5},
		}, 14},
	} {
		rows := rvmDistribution(c.ms)
		if len(rows) != c.rows {
			t.Errorf("%s: %d rows, want %d: %+v", c.name, len(rows), c.rows, rows)
			continue
		}
		got := map[string]rvmRow{}
		for _, r := range rows {
			got[r.Figure] = r
		}
		for figure, want := range c.want {
			want.Figure = figure
			if got[figure] != want {
				t.Errorf("%s: %q = %+v, want %+v", c.name, figure, got[figure], want)
			}
		}
	}

	// Each phase's rows follow the first successful migration's order of
	// phases and addresses; a migration without a phase adds nothing to
	// its rows.
	short := okB
	short.Phases = short.Phases[:1]
	rows := rvmDistribution([]rvmMigration{okA, short})
	var figures []string
	for _, r := range rows {
		figures = append(figures, r.Figure)
	}
	want := []string{"QEMU total (ms)", "QEMU downtime (ms)", "route on the target after the signal (ms)",
		"set-up phase: IPv4 loss window (ms)", "set-up phase: IA_NA loss window (ms)", "set-up phase: prefix loss window (ms)",
		"set-up phase: the prefix's window over the IA_NA address's (ms)",
		"migrate phase: IPv4 loss window (ms)", "migrate phase: IA_NA loss window (ms)", "migrate phase: prefix loss window (ms)",
		"migrate phase: the prefix's window over the IA_NA address's (ms)",
		"set-up phase: the prefix's probes lost over the IA_NA address's, lost or answered by the target pod (probes)",
		"echo requests the target pod answered in the VM's place: IPv4", "echo requests the target pod answered in the VM's place: IPv6"}
	if !slices.Equal(figures, want) {
		t.Errorf("figures %q, want %q", figures, want)
	}
	for _, r := range rows {
		if r.Figure == "migrate phase: IPv4 loss window (ms)" && (r.N != 1 || r.Max != 20) {
			t.Errorf("a migration without the migrate phase counted in it: %+v", r)
		}
		if r.Figure == "migrate phase: the prefix's window over the IA_NA address's (ms)" && (r.N != 1 || r.Max != 0) {
			t.Errorf("a migration without the migrate phase counted in its prefix's excess: %+v", r)
		}
		if r.Figure == "set-up phase: IPv4 loss window (ms)" && (r.N != 2 || r.Min != 60 || r.Max != 80) {
			t.Errorf("set-up phase: IPv4 = %+v, want 2 migrations, 60 to 80", r)
		}
	}

	md := rvmMarkdown([]rvmRow{{Figure: "QEMU downtime (ms)", N: 3, Min: 10, P50: 20.4, P90: 30, Max: 30},
		{Figure: "excess (ms)", N: 2, Min: -0.3, P50: -0.3, P90: 0.6, Max: 0.6}})
	if want := "| figure | n | min | p50 | p90 | max |\n|---|---|---|---|---|---|\n| QEMU downtime (ms) | 3 | 10 | 20 | 30 | 30 |\n" +
		"| excess (ms) | 2 | 0 | 0 | 1 | 1 |\n"; md != want {
		t.Errorf("markdown %q, want %q", md, want)
	}
}
