package bench

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// Result is one scenario's row. These JSON names are stable, scripts
// read them: (name, ops, ops_per_s, p50_ms, p90_ms, p99_ms, failures,
// api_requests_per_op, api_writes_per_op, raw_create_per_s) are stable.
type Result struct {
	ID          string `json:"id"`
	Name        string `json:"name"`
	Command     string `json:"command,omitempty"` // ADD, DEL, or "" for non-CNI rows
	Nodes       int    `json:"nodes,omitempty"`
	Concurrency int    `json:"concurrency,omitempty"`

	Ops      int     `json:"ops"`
	WallS    float64 `json:"wall_s"`
	OpsPerS  float64 `json:"ops_per_s"`
	P50Ms    float64 `json:"p50_ms"`
	P90Ms    float64 `json:"p90_ms"`
	P99Ms    float64 `json:"p99_ms"`
	MeanMs   float64 `json:"mean_ms"`
	MaxMs    float64 `json:"max_ms"`
	Failures int     `json:"failures"`
	// Duplicates counts addresses handed to two attachments at once (also
	// counted in Failures).
	Duplicates int      `json:"duplicates,omitempty"`
	Errors     []string `json:"errors,omitempty"` // a sample

	// API cost, from apiserver_request_total around the scenario.
	APIRequestsPerOp float64 `json:"api_requests_per_op"`
	APIWritesPerOp   float64 `json:"api_writes_per_op"`
	// AddressesPerOp is the number of reservations (addresses and
	// prefixes) one call holds; writes per address = writes per op / this.
	AddressesPerOp      float64            `json:"addresses_per_op,omitempty"`
	APIWritesPerAddress float64            `json:"api_writes_per_address,omitempty"`
	APIRequests         float64            `json:"api_requests"`
	APIWrites           float64            `json:"api_writes"`
	APIByVerbResource   map[string]float64 `json:"api_by_verb_resource,omitempty"`
	APIByCode           map[string]float64 `json:"api_by_code,omitempty"`
	APIErrors           map[string]float64 `json:"api_errors,omitempty"` // "VERB resource CODE": n, codes >= 400

	// The API server's own limit in the same run: as many plain creates of
	// IPReservations as the scenario's ops, at its concurrency, right after it.
	RawCreatePerS float64 `json:"raw_create_per_s"`
	RawCreateP50  float64 `json:"raw_create_p50_ms,omitempty"`
	RawDeletePerS float64 `json:"raw_delete_per_s,omitempty"`
	// CPU (ms) per raw create of the creating client (the bench process)
	// and of the API server: their ratio is the floor of any API client's
	// CPU per create against the API server's (clientFloor).
	RawClientCPUMs float64 `json:"raw_client_cpu_ms,omitempty"`
	RawAPICPUMs    float64 `json:"raw_apiserver_cpu_ms,omitempty"`
	// Ratio is ops_per_s / raw_create_per_s.
	Ratio float64 `json:"ratio"`

	// Shim CPU (user+system of the child, from wait4's rusage) per call.
	ShimCPUMsMean float64 `json:"shim_cpu_ms_mean,omitempty"`
	ShimCPUMsP99  float64 `json:"shim_cpu_ms_p99,omitempty"`

	// CPU per call by process group (shim, agent, controller,
	// kube-apiserver, etcd, bench = this driver, other = the rest of the
	// machine), in ms, and how busy the machine was during the calls.
	CPUMsPerOp     map[string]float64 `json:"cpu_ms_per_op,omitempty"`
	MachineBusyPct float64            `json:"machine_busy_pct,omitempty"`
	// MachineStolenPct is the share of the machine's time the hypervisor
	// ran something else during the calls (steal): the CPU per call of a
	// row with much of it was taken on a slower machine.
	MachineStolenPct float64 `json:"machine_stolen_pct,omitempty"`

	// Scale rows.
	SyncS       float64 `json:"sync_s,omitempty"`
	RSSMiB      float64 `json:"rss_mib,omitempty"`
	HWMMiB      float64 `json:"rss_peak_mib,omitempty"`
	SweepS      float64 `json:"sweep_s,omitempty"`
	P50VsEmpty  float64 `json:"p50_vs_empty,omitempty"`
	Reservation int     `json:"reservations_in_cluster,omitempty"`

	Notes string `json:"notes,omitempty"`

	// Binary and Round: in a run with a baseline (Options.BaselineBin),
	// which binaries made the row ("baseline" or "new") and in which of
	// their rounds.
	Binary string `json:"binary,omitempty"`
	Round  int    `json:"round,omitempty"`

	// Scenario is the named scenario (--scenario) the row belongs to.
	Scenario string `json:"scenario,omitempty"`
	// Figures are a named scenario's figures, by name (scripts read them
	// by name: keep them stable).
	Figures map[string]float64 `json:"figures,omitempty"`

	shimCPU []float64 // per call, ms
	// fill: the reservations a scenario made straight through the API
	// and left in place (full-pool run last), by name to UID.
	fill map[string]types.UID
}

// Machine describes where the run happened.
type Machine struct {
	NumCPU        int     `json:"nproc"`
	MemTotalMiB   int     `json:"mem_total_mib"`
	CPUModel      string  `json:"cpu_model,omitempty"`
	Kernel        string  `json:"kernel,omitempty"`
	GoVersion     string  `json:"go_version"`
	LoadAvgStart  float64 `json:"loadavg1_start"`
	LoadAvgEnd    float64 `json:"loadavg1_end"`
	BusyStartNote string  `json:"busy_note,omitempty"`
}

// Target is one performance target (targets.go), as measured.
type Target struct {
	Name     string `json:"name"`
	Want     string `json:"want"`
	Measured string `json:"measured"`
	// Status is "met", "not met" or "n/a".
	Status string `json:"status"`
}

// ShimFacts are the shim's size and CPU per call over the whole run.
type ShimFacts struct {
	Binary      string  `json:"binary"`
	BinaryBytes int64   `json:"binary_bytes"`
	Stripped    bool    `json:"stripped"`
	Calls       int     `json:"calls"`
	CPUMsMean   float64 `json:"cpu_ms_mean"`
	CPUMsP50    float64 `json:"cpu_ms_p50"`
	CPUMsP99    float64 `json:"cpu_ms_p99"`
	// TrueCPUMs is the CPU of executing /bin/true the same way, measured
	// in the same run: the floor any exec'd plugin pays on this machine
	// at this load.
	TrueCPUMs float64 `json:"true_exec_cpu_ms,omitempty"`
	// Minor page faults per call, the shim's and /bin/true's: on a VM
	// where a fault is expensive they are most of an exec's CPU.
	MinorFaultsPerCall float64 `json:"minor_faults_per_call,omitempty"`
	TrueMinorFaults    float64 `json:"true_exec_minor_faults,omitempty"`
	// EmptyGo*: executing a Go program whose main does nothing, built as
	// the shim is: the floor for a plugin written in Go (0 when no Go
	// toolchain was found to build it).
	EmptyGoCPUMs       float64 `json:"empty_go_exec_cpu_ms,omitempty"`
	EmptyGoMinorFaults float64 `json:"empty_go_exec_minor_faults,omitempty"`
	// Paired*: one shim call in pairEvery of the run and its twin, an
	// empty Go program that waits on a socket, exec'd at the same moment
	// and released when that shim exits: the like-for-like floor
	// (paired.go). PairedRatio is the paired shims' mean CPU over the
	// twins'.
	PairedCalls     int     `json:"paired_calls,omitempty"`
	PairedShimCPUMs float64 `json:"paired_shim_cpu_ms,omitempty"`
	PairedTwinCPUMs float64 `json:"paired_waiting_empty_go_cpu_ms,omitempty"`
	PairedRatio     float64 `json:"paired_ratio,omitempty"`
}

// floors says what executing /bin/true and an empty Go program cost.
func (f ShimFacts) floors() string {
	s := fmt.Sprintf("/bin/true: %.2f ms, %.0f faults", f.TrueCPUMs, f.TrueMinorFaults)
	if f.EmptyGoCPUMs > 0 {
		s += fmt.Sprintf("; an empty Go program: %.2f ms, %.0f faults", f.EmptyGoCPUMs, f.EmptyGoMinorFaults)
	}
	if f.PairedCalls > 0 {
		s += fmt.Sprintf("; %d calls exec'd beside a waiting empty Go twin: %.2f ms, the twin %.2f ms", f.PairedCalls, f.PairedShimCPUMs, f.PairedTwinCPUMs)
	}
	return s
}

// Report is a whole run.
type Report struct {
	Command      string    `json:"command"`
	Mode         string    `json:"mode"` // quick or full
	Started      time.Time `json:"started"`
	DurationS    float64   `json:"duration_s"`
	Machine      Machine   `json:"machine"`
	APIServer    string    `json:"apiserver"`
	Controller   string    `json:"controller"` // "running", "not built", or why not
	Scenarios    []Result  `json:"scenarios"`
	Shim         ShimFacts `json:"shim"`
	Targets      []Target  `json:"targets"`
	Observations []string  `json:"observations,omitempty"`

	plots map[string]Plot // the named scenarios' plots, by file name
}

// Find returns the row with id, or nil.
func (r *Report) Find(id string) *Result {
	for i := range r.Scenarios {
		if r.Scenarios[i].ID == id && r.Scenarios[i].Binary != binaryBaseline {
			return &r.Scenarios[i]
		}
	}
	return nil
}

// figuresOnly: a row of figures alone (a summary or ratios), shown in its
// scenario's figure table only.
func (r Result) figuresOnly() bool { return r.Ops == 0 && len(r.Figures) > 0 }

// tableHeader is the one table's columns, in order.
var tableHeader = []string{"scenario", "ops", "wall s", "ops/s", "p50 ms", "p90 ms", "p99 ms", "failures", "API req/op", "API writes/op", "raw_create_per_s", "ratio", "notes"}

func (r Result) cells() []string {
	dash := func(ok bool, s string) string {
		if !ok {
			return "-"
		}
		return s
	}
	lat := r.P50Ms > 0 || r.P99Ms > 0
	api := r.APIRequests > 0 || r.APIWrites > 0 || r.Command != ""
	return []string{
		r.Name,
		fmt.Sprint(r.Ops),
		f2(r.WallS),
		dash(r.OpsPerS > 0, f1(r.OpsPerS)),
		dash(lat, f1(r.P50Ms)),
		dash(lat, f1(r.P90Ms)),
		dash(lat, f1(r.P99Ms)),
		fmt.Sprint(r.Failures),
		dash(api, f2(r.APIRequestsPerOp)),
		dash(api, f2(r.APIWritesPerOp)),
		dash(r.RawCreatePerS > 0, f0(r.RawCreatePerS)),
		dash(r.Ratio > 0, fmt.Sprintf("%.0f %%", 100*r.Ratio)),
		r.Notes,
	}
}

func f0(v float64) string { return fmt.Sprintf("%.0f", v) }
func f1(v float64) string { return fmt.Sprintf("%.1f", v) }
func f2(v float64) string { return fmt.Sprintf("%.2f", v) }

// WriteTable prints the one table, then the targets, for a terminal.
func (r *Report) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(tableHeader, "\t"))
	for _, s := range r.Scenarios {
		if s.figuresOnly() {
			continue
		}
		fmt.Fprintln(tw, strings.Join(s.cells(), "\t"))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if ft := figureTables(r.Scenarios, false); ft != "" {
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprint(tw, ft)
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if r.Shim.Calls > 0 {
		fmt.Fprintf(w, "\nshim: %s, %.1f MB%s; CPU per call mean %.2f ms, p99 %.2f ms, %.0f minor faults, over %d calls (exec of %s)\n",
			r.Shim.Binary, float64(r.Shim.BinaryBytes)/1e6, strippedWord(r.Shim.Stripped), r.Shim.CPUMsMean, r.Shim.CPUMsP99, r.Shim.MinorFaultsPerCall, r.Shim.Calls, r.Shim.floors())
	}
	fmt.Fprintf(w, "machine: %d CPUs, %d MiB, load average %.2f at start, %.2f at end; controller: %s\n",
		r.Machine.NumCPU, r.Machine.MemTotalMiB, r.Machine.LoadAvgStart, r.Machine.LoadAvgEnd, r.Controller)
	fmt.Fprintln(w, "\ntargets:")
	for _, t := range r.Targets {
		fmt.Fprintf(w, "  [%s] %s: want %s, measured %s\n", t.Status, t.Name, t.Want, t.Measured)
	}
	for _, o := range r.Observations {
		fmt.Fprintf(w, "note: %s\n", o)
	}
	return nil
}

func strippedWord(s bool) string {
	if s {
		return " (stripped)"
	}
	return " (NOT stripped: build with -ldflags '-s -w')"
}

// Markdown renders the table and the targets as Markdown.
func (r *Report) Markdown() []byte {
	var b bytes.Buffer
	mdRow := func(cells []string) {
		for i := range cells {
			cells[i] = strings.ReplaceAll(cells[i], "|", `\|`)
		}
		b.WriteString("| " + strings.Join(cells, " | ") + " |\n")
	}
	mdRow(append([]string(nil), tableHeader...))
	sep := make([]string, len(tableHeader))
	for i := range sep {
		sep[i] = "---"
		if i > 0 && i < len(sep)-1 {
			sep[i] = "---:"
		}
	}
	mdRow(sep)
	for _, s := range r.Scenarios {
		if s.figuresOnly() {
			continue
		}
		mdRow(s.cells())
	}
	b.WriteString(figureTables(r.Scenarios, true))
	if r.Shim.Calls > 0 {
		fmt.Fprintf(&b, "\nShim: `%s`, %d bytes (%.1f MB)%s; CPU per call (user+system of the child) mean %.2f ms, p50 %.2f ms, p99 %.2f ms, %.0f minor page faults, over %d calls; executed the same way here, %s.\n",
			r.Shim.Binary, r.Shim.BinaryBytes, float64(r.Shim.BinaryBytes)/1e6, strippedWord(r.Shim.Stripped), r.Shim.CPUMsMean, r.Shim.CPUMsP50, r.Shim.CPUMsP99, r.Shim.MinorFaultsPerCall, r.Shim.Calls, r.Shim.floors())
	}
	fmt.Fprintf(&b, "\nMachine: %d CPUs (%s), %d MiB memory, kernel %s, %s; 1-minute load average %.2f at start, %.2f at end. Controller: %s. API server: %s. Run took %.0f s.\n",
		r.Machine.NumCPU, r.Machine.CPUModel, r.Machine.MemTotalMiB, r.Machine.Kernel, r.Machine.GoVersion, r.Machine.LoadAvgStart, r.Machine.LoadAvgEnd, r.Controller, r.APIServer, r.DurationS)
	b.WriteString("\n| target | want | measured | status |\n|---|---|---|---|\n")
	for _, t := range r.Targets {
		mdRow([]string{t.Name, t.Want, t.Measured, t.Status})
	}
	if len(r.Observations) > 0 {
		b.WriteString("\n")
		for _, o := range r.Observations {
			b.WriteString("- " + o + "\n")
		}
	}
	return b.Bytes()
}

// LatencyPlot is p50/p90/p99 ADD latency against concurrency, one colour
// per node count, one dash style per percentile.
func (r *Report) LatencyPlot() Plot {
	colors := map[int]string{1: "#1f77b4", 4: "#d62728"}
	dashes := []struct {
		name string
		dash string
		get  func(Result) float64
	}{
		{"p50", "", func(x Result) float64 { return x.P50Ms }},
		{"p90", "8 4", func(x Result) float64 { return x.P90Ms }},
		{"p99", "2 3", func(x Result) float64 { return x.P99Ms }},
	}
	var series []Series
	for _, nodes := range []int{1, 4} {
		for _, d := range dashes {
			s := Series{Label: fmt.Sprintf("%s, %d node%s", d.name, nodes, plural(nodes)), Color: colors[nodes], Dashed: d.dash}
			for _, c := range gridConcurrency {
				if x := r.Find(gridID("add", c, nodes)); x != nil && x.Ops > 0 {
					s.Points = append(s.Points, Point{X: float64(c), Y: d.get(*x)})
				}
			}
			if len(s.Points) > 0 {
				series = append(series, s)
			}
		}
	}
	return Plot{
		Title:  fmt.Sprintf("tenure CNI ADD latency, %d ADDs per point (shim exec to result)", gridOps),
		XLabel: "concurrent ADDs",
		YLabel: "latency (ms)",
		Series: series,
		HLines: []HLine{{Y: targetP99Ms, Label: fmt.Sprintf("p99 target %.0f ms (c50, 4 nodes)", targetP99Ms)}},
		Note: fmt.Sprintf("%s · %d CPUs · load %.1f→%.1f · %s", r.Command, r.Machine.NumCPU, r.Machine.LoadAvgStart, r.Machine.LoadAvgEnd,
			r.Started.UTC().Format("2006-01-02 15:04 UTC")),
	}
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// WriteFiles writes results.json, results.md, adds-latency.svg (when the
// grid ran) and the named scenarios' plots to dir.
func (r *Report) WriteFiles(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	js, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	files := map[string][]byte{
		"results.json": append(js, '\n'),
		"results.md":   r.Markdown(),
	}
	if lp := r.LatencyPlot(); len(lp.Series) > 0 {
		files["adds-latency.svg"] = lp.SVG()
	}
	for name, p := range r.plots {
		files[name] = p.SVG()
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// finish fills the derived per-op figures of a row.
func (r *Result) finish(cost APICost, per float64) {
	if r.Ops > 0 {
		r.APIRequests, r.APIWrites = cost.Requests, cost.Writes
		r.APIRequestsPerOp = cost.Requests / float64(r.Ops)
		r.APIWritesPerOp = cost.Writes / float64(r.Ops)
		r.APIByVerbResource, r.APIByCode = cost.ByVerbResource, cost.ByCode
		if len(cost.Errors) > 0 {
			r.APIErrors = cost.Errors
		}
	}
	if per > 0 {
		r.AddressesPerOp = per
		r.APIWritesPerAddress = r.APIWritesPerOp / per
	}
	if r.RawCreatePerS > 0 && r.OpsPerS > 0 {
		r.Ratio = r.OpsPerS / r.RawCreatePerS
	}
	if len(r.shimCPU) > 0 {
		s := SummarizeMs(r.shimCPU)
		r.ShimCPUMsMean, r.ShimCPUMsP99 = round3(s.Mean), round3(s.P99)
	}
	r.WallS = round3(r.WallS)
	r.OpsPerS = round3(r.OpsPerS)
	r.APIRequestsPerOp = round3(r.APIRequestsPerOp)
	r.APIWritesPerOp = round3(r.APIWritesPerOp)
	r.APIWritesPerAddress = round3(r.APIWritesPerAddress)
	r.RawCreatePerS = round3(r.RawCreatePerS)
	r.Ratio = round3(r.Ratio)
}

func round3(v float64) float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return 0
	}
	return math.Round(v*1000) / 1000
}
