package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	watchtools "k8s.io/client-go/tools/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"

	"github.com/tenure-ipam/tenure/dev/devnode"
	"github.com/tenure-ipam/tenure/dev/localnode"
	"github.com/tenure-ipam/tenure/internal/kube"
	"github.com/tenure-ipam/tenure/test/controlplane"
	"github.com/tenure-ipam/tenure/test/testbed"
)

func init() {
	registerScenario(Scenario{Name: "pod-start", Summary: "real pods on the real node, one Multus macvlan attachment each, host-local, tenure (probing and not) and whereabouts, and with --baseline-bin an older build's tenure, alternating wave by wave, then a storm each: creation to Ready and to network-status, and the IPAM plugin's own ADD time",
		Needs: Needs{Node: true}, Run: (*env).podStartScenario, Targets: podStartTargets})
}

// The IPAMs compared, in the order of the first round; each later round
// starts one further on, so that none always follows the same one.
// ipamProbeOff is tenure's agent on a network with `"probe": false` (its
// ADD without the wire check); ipamBefore, run only with
// PodStartOptions.BaselineBin, is an older build's shim and agent beside
// this build's on the same node.
var podStartIPAMs = []string{"host-local", "tenure", ipamProbeOff, "whereabouts", ipamBefore}

const (
	ipamProbeOff = "tenure-probe-off"
	ipamBefore   = "tenure-before"
)

// podStartIPAMsFor are the IPAMs a run with opts compares, in
// podStartIPAMs' order.
func podStartIPAMsFor(opts PodStartOptions) []string {
	var out []string
	for _, ipam := range podStartIPAMs {
		if ipam != ipamBefore || opts.BaselineBin != "" {
			out = append(out, ipam)
		}
	}
	return out
}

// ipamLabel is how rows name an IPAM.
func ipamLabel(ipam string) string {
	switch ipam {
	case ipamProbeOff:
		return "tenure, probe off"
	case ipamBefore:
		return "tenure before"
	}
	return ipam
}

// Defaults of PodStartOptions: what the targets are stated for.
const (
	podStartPods = 30 // per IPAM, in waves
	podStartWave = 10
	// Times the waves' pods are run, the IPAMs' order rotating on: one
	// wave's Ready p50 moves from the next with the host's speed, the IPAM
	// aside, by more than the targets' margin, so three waves per IPAM
	// cannot resolve a target; eighteen bring the ratio's standard error
	// well below it (docs/performance.md, "One wave's p50 moves a tenth").
	podStartSets  = 6
	podStartStorm = 50 // per IPAM, at once
	// Storms per IPAM, the IPAMs' order rotating storm by storm: the p99
	// of one storm of 50 is its slowest pod or two, and whatever the
	// node still does after the storm before it (sandboxes torn down,
	// images' and snapshots' garbage) falls on whichever IPAM comes next.
	podStartStorms = 3

	podStartNamespace = "pod-start"
	podStartMaster    = "tnps0" // the macvlan master, a veth whose peer stays on the host
)

// PodStartOptions size the pod-start scenario.
type PodStartOptions struct {
	// Pods per IPAM created in waves of Wave pods at once (30 and 10 when
	// 0). The waves alternate IPAMs.
	Pods, Wave int
	// Sets is how many times the Pods are run in waves (6 when 0); the
	// waves' figures pool their pods.
	Sets int
	// Storm pods per IPAM created at once after the waves (50 when 0; -1
	// for no storm).
	Storm int
	// Storms is how many storms each IPAM gets, the IPAMs' order rotating
	// storm by storm (3 when 0); the storm's figures pool their pods.
	Storms int
	// Nodes is how many real nodes the pods spread over, pod by pod (1
	// when 0; up to devnode.MaxNodes, a devnode.Cluster when more than 1).
	Nodes int
	// BaselineBin, when set, is a directory with an older build's tenure
	// and tenure-agent (make build of the old tree): its agent runs beside
	// this build's on every node (podStartBeforeAgent) and its shim serves
	// the IPAM ipamBefore.
	BaselineBin string
}

func (o PodStartOptions) withDefaults() PodStartOptions {
	if o.Pods == 0 {
		o.Pods = podStartPods
	}
	if o.Wave == 0 {
		o.Wave = podStartWave
	}
	if o.Sets == 0 {
		o.Sets = podStartSets
	}
	if o.Storm == 0 {
		o.Storm = podStartStorm
	}
	if o.Storms == 0 {
		o.Storms = podStartStorms
	}
	if o.Nodes == 0 {
		o.Nodes = 1
	}
	return o
}

// Validate names the field and value that cannot be run.
func (o PodStartOptions) Validate() error {
	switch {
	case o.Pods < 0:
		return fmt.Errorf("pod-start pods: %d is negative", o.Pods)
	case o.Wave < 0:
		return fmt.Errorf("pod-start wave: %d is negative", o.Wave)
	case o.Storm < -1:
		return fmt.Errorf("pod-start storm: %d is below -1 (no storm)", o.Storm)
	case o.Sets < 0 || o.Sets > 20:
		return fmt.Errorf("pod-start sets: %d: from 1 to 20 sets of waves", o.Sets)
	case o.Storms < 0 || o.Storms > 10:
		return fmt.Errorf("pod-start storms: %d: from 1 to 10 storms per IPAM", o.Storms)
	case o.Nodes < 0 || o.Nodes > devnode.MaxNodes:
		return fmt.Errorf("pod-start nodes: %d: from 1 to %d on this machine", o.Nodes, devnode.MaxNodes)
	case o.Pods > 250 || o.Wave > 100 || o.Storm > 100:
		return fmt.Errorf("pod-start: pods %d, wave %d, storm %d: a node runs 110 pods and each network is a /24", o.Pods, o.Wave, o.Storm)
	}
	if o.BaselineBin != "" {
		if _, err := baselineBinaries(o.BaselineBin, testbed.Binaries{}); err != nil {
			return err
		}
	}
	return nil
}

func (e *env) podStartScenario(ctx context.Context, sc *ScenarioRun) ([]Result, error) {
	return PodStart(ctx, PodStartCluster{Config: e.cp.Config, Kubeconfig: e.cp.KubeconfigPath, NodeKubeconfig: e.nodeKubeconfig,
		Node: e.node, Nodes: e.nodes, Dir: e.dir}, sc.Opts.PodStart, e.log)
}

// PodStartCluster is the cluster PodStart runs on: a control plane with
// controllers and the real node with tenure rolled out (localnode.Start).
type PodStartCluster struct {
	Config     *rest.Config
	Kubeconfig string // the admin kubeconfig's file
	// NodeKubeconfig is the admin kubeconfig as the nodes reach the API
	// server, for whereabouts; Kubeconfig when empty (a node on the host).
	NodeKubeconfig string
	// Node is the node the pods run on, or Nodes the nodes they spread
	// over, pod by pod.
	Node  *devnode.Node
	Nodes []*devnode.Node
	Dir   string // scratch: the timer, its log, host-local's state
}

// podSample is what one IPAM's pods of one phase showed.
type podSample struct {
	ready, netStatus []float64 // ms from the create call
	// batchReadyP50 is each batch's own Ready p50 (ms): how far one batch
	// moves from the next, the IPAM aside, sets what a ratio resolves.
	batchReadyP50   []float64
	addWall, addCPU []float64 // the timer's ADD lines, ms
	notReady        int
	addFailures     int // ADDs the plugin answered with an error (retried by the kubelet)
	// cpu is the CPU (ms) by process group from each batch's creates to
	// its last pod Ready, summed over the batches (cpuByGroup).
	cpu map[string]float64
	// api is the API server's requests in the same spans, summed.
	api RequestCounts
	// reruns counts the batches run again, the hypervisor having taken
	// the machine from under them.
	reruns int
}

// add pools batch b into s.
func (s *podSample) add(b *podSample) {
	s.ready, s.netStatus = append(s.ready, b.ready...), append(s.netStatus, b.netStatus...)
	s.batchReadyP50 = append(s.batchReadyP50, b.batchReadyP50...)
	s.addWall, s.addCPU = append(s.addWall, b.addWall...), append(s.addCPU, b.addCPU...)
	s.notReady, s.addFailures = s.notReady+b.notReady, s.addFailures+b.addFailures
	for g, ms := range b.cpu {
		s.cpu[g] += ms
	}
	for k, v := range b.api {
		s.api[k] += v
	}
}

// runAgain says whether a batch, its attempt-th run (0 the first), is
// run again: one during which the hypervisor took more than stolenLimit
// of the machine measured the host, not the node, whichever its IPAM. One
// with a pod not Ready or an ADD that failed is kept: no failure is
// discarded.
func runAgain(b *podSample, stolen float64, attempt int) bool {
	return stolen > stolenLimit && attempt < rerunsPerBatch && b.notReady == 0 && b.addFailures == 0
}

// againNote names a batch's rerun in its log line.
func againNote(attempt int) string {
	if attempt == 0 {
		return ""
	}
	return fmt.Sprintf(" (run %d)", attempt+1)
}

// PodStart runs the pod-start scenario on cl: for each IPAM a macvlan
// network of its own on one master, opts.Pods pods per IPAM in waves of
// opts.Wave (IPAMs alternating wave by wave), opts.Sets times over, then
// opts.Storms storms of opts.Storm pods per IPAM at once (IPAMs alternating
// storm by storm). Each batch is deleted, and its DELs seen, before the
// next; one the hypervisor took the machine from under is run again
// (runAgain).
//
// Times are taken by this process: creation is the moment the pod's Create
// call is made, Ready and network-status are the moments a watch event
// first shows the Ready condition True or Multus' annotation. The API
// server's own timestamps have whole seconds only. The IPAM plugin's ADD
// time is the timer's (ipamtimer.go): fork to exit of the real plugin as
// the main plugin execs it, and the plugin's CPU.
func PodStart(ctx context.Context, cl PodStartCluster, opts PodStartOptions, log io.Writer) ([]Result, error) {
	opts = opts.withDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	logf := func(format string, args ...any) { fmt.Fprintf(log, "bench: pod-start: "+format+"\n", args...) }
	cfg := rest.CopyConfig(cl.Config)
	cfg.QPS, cfg.Burst = 1000, 1000 // a storm's creates are not spaced by the client
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		return nil, err
	}
	nodes := cl.Nodes
	if len(nodes) == 0 {
		nodes = []*devnode.Node{cl.Node}
	}
	nodeKubeconfig := cl.NodeKubeconfig
	if nodeKubeconfig == "" {
		nodeKubeconfig = cl.Kubeconfig
	}
	dir, err := os.MkdirTemp(cl.Dir, "pod-start-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	undo, err := podStartPlugins(ctx, cfg, dir, nodes)
	defer undo()
	if err != nil {
		return nil, err
	}
	ipams := podStartIPAMsFor(opts)
	if opts.BaselineBin != "" {
		undoBefore, err := podStartBeforeAgent(ctx, c, nodes, opts.BaselineBin)
		defer undoBefore()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", ipamBefore, err)
		}
		logf("%s: the agent and shim of %s run beside this build's (DaemonSet %s/%s, socket %s)", ipamBefore, opts.BaselineBin, localnode.Namespace, beforeDaemonSet, beforeSocket)
	}
	for _, n := range nodes {
		removeMaster, err := podStartMasterOn(n)
		defer removeMaster()
		if err != nil {
			return nil, err
		}
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: podStartNamespace}}
	if err := c.Create(ctx, ns); err != nil {
		return nil, err
	}
	defer func() {
		_ = c.Delete(context.WithoutCancel(ctx), ns)
	}()
	timerLog, err := podStartNetworks(ctx, c, dir, nodeKubeconfig, ipams)
	if err != nil {
		return nil, err
	}

	obs, err := watchPods(ctx, cs, podStartNamespace)
	if err != nil {
		return nil, err
	}
	defer obs.stop()

	r := &podStartRun{
		c: c, cs: cs, obs: obs, nodes: nodes, timerLog: timerLog, logf: logf,
		samples:     map[string]*podSample{},
		quiet:       1.0, // the warm-up's batches wait one window; see settle
		probeBudget: probeRunBudget,
	}
	if err := r.warmUp(ctx, ipams); err != nil {
		return nil, err
	}
	if err := r.settleIdle(ctx); err != nil {
		return nil, err
	}
	rounds, err := r.waves(ctx, opts, ipams)
	if err != nil {
		return podStartRows(r.samples), err
	}
	if err := r.storms(ctx, opts, ipams, rounds); err != nil {
		return podStartRows(r.samples), err
	}
	return podStartRows(r.samples), nil
}

// podStartNetworks writes whereabouts' flat configuration into dir and
// creates one macvlan NetworkAttachmentDefinition per IPAM, each through
// the timer, and returns the timer's log.
func podStartNetworks(ctx context.Context, c client.Client, dir, nodeKubeconfig string, ipams []string) (string, error) {
	timerLog := filepath.Join(dir, "ipam.log")
	flat := filepath.Join(dir, "whereabouts.conf")
	if err := os.WriteFile(flat, fmt.Appendf(nil, `{"datastore":"kubernetes","kubernetes":{"kubeconfig":%q}}`, nodeKubeconfig), 0o600); err != nil {
		return "", err
	}
	ipamConf := map[string]string{
		"host-local":  fmt.Sprintf(`"ranges":[[{"subnet":"10.211.0.0/24"}]],"dataDir":%q`, filepath.Join(dir, "host-local")),
		"tenure":      `"range":"10.212.0.0/24","network_name":"pod-start-tenure"`,
		"whereabouts": fmt.Sprintf(`"range":"10.213.0.0/24","configuration_path":%q,"kubernetes":{"kubeconfig":%q}`, flat, nodeKubeconfig),
		ipamProbeOff:  `"range":"10.214.0.0/24","network_name":"pod-start-tenure-probe-off","probe":false`,
		ipamBefore:    fmt.Sprintf(`"range":"10.215.0.0/24","network_name":"pod-start-tenure-before","agent_socket":%q`, beforeSocket),
	}
	for _, ipam := range ipams {
		// The probe-off and before networks are tenure's type (its agent
		// refuses another); the before one runs the older shim, installed
		// under its own name.
		typ, bin := ipam, ""
		switch ipam {
		case ipamProbeOff:
			typ = "tenure"
		case ipamBefore:
			typ, bin = "tenure", fmt.Sprintf(`"timed_bin":%q,`, filepath.Join(devnode.HostCNIBinDir, beforeShimType))
		}
		conf := fmt.Sprintf(`{"cniVersion":"1.0.0","name":"ps-%s","type":"macvlan","master":%q,"mode":"bridge",
			"ipam":{"type":%q,"timed_type":%q,"timed_name":%q,%s"timed_log":%q,%s}}`, ipam, podStartMaster, ipamTimerType, typ, ipam, bin, timerLog, ipamConf[ipam])
		obj, err := localnode.NAD(podStartNamespace, "ps-"+ipam, conf)
		if err != nil {
			return "", err
		}
		if err := c.Create(ctx, obj); err != nil {
			return "", err
		}
	}
	return timerLog, nil
}

// podStartRun is what one run of the scenario carries from batch to batch.
type podStartRun struct {
	c        client.Client
	cs       kubernetes.Interface
	obs      *podObserver
	nodes    []*devnode.Node
	timerLog string
	logf     func(format string, args ...any)

	samples     map[string]*podSample // "phase/ipam"
	logOff      int64                 // how far timerLog has been read
	quiet       float64               // the busy share a batch waits for; see settle
	probeBudget time.Duration         // what is left of probeRunBudget
}

// warmUp runs one pod per IPAM first, unmeasured: the first ADD on a
// network pays for cold caches and page cache, which is no IPAM's steady
// cost.
func (r *podStartRun) warmUp(ctx context.Context, ipams []string) error {
	for _, ipam := range ipams {
		if err := r.batch(ctx, "warmup", ipam, 0, 1); err != nil {
			return fmt.Errorf("warm-up: %w", err)
		}
		delete(r.samples, "warmup/"+ipam)
	}
	return nil
}

// settleIdle sets how quiet a settled machine is from what the idle node
// keeps busy (its control plane, the kubelet's housekeeping).
func (r *podStartRun) settleIdle(ctx context.Context) error {
	idle := 1.0
	for range settleIdleWindows {
		_, share, err := settle(ctx, machineBusy, settleWindow, 0, 0)
		if err != nil {
			return err
		}
		idle = min(idle, share)
	}
	r.quiet = idle + settleMargin
	r.logf("the idle node keeps the machine %.0f %% busy; each batch waits for at most %.0f %% (up to %v)", idle*100, r.quiet*100, settleDeadline)
	return nil
}

// waves runs opts.Pods pods per IPAM in waves of opts.Wave, opts.Sets
// times over, the IPAMs alternating wave by wave, and returns the number
// of rounds it ran.
func (r *podStartRun) waves(ctx context.Context, opts PodStartOptions, ipams []string) (int, error) {
	perSet := 0
	if opts.Wave > 0 {
		perSet = (opts.Pods + opts.Wave - 1) / opts.Wave
	}
	rounds := perSet * opts.Sets
	for round := range rounds {
		n := min(opts.Wave, opts.Pods-(round%perSet)*opts.Wave)
		for i := range ipams {
			if err := r.batch(ctx, "waves", ipams[(round+i)%len(ipams)], round, n); err != nil {
				return rounds, err
			}
		}
	}
	return rounds, nil
}

// storms runs opts.Storms storms of opts.Storm pods per IPAM at once, the
// IPAMs' order rotating on from where the waves' rounds left it.
func (r *podStartRun) storms(ctx context.Context, opts PodStartOptions, ipams []string, rounds int) error {
	if opts.Storm <= 0 {
		return nil
	}
	for round := range opts.Storms {
		for i := range ipams {
			if err := r.batch(ctx, "storm", ipams[(rounds+round+i)%len(ipams)], round, opts.Storm); err != nil {
				return err
			}
		}
	}
	return nil
}

// batch runs one batch of n pods through ipam until the hypervisor leaves
// it alone (runAgain) and adds what it measured to the samples.
func (r *podStartRun) batch(ctx context.Context, phase, ipam string, round, n int) error {
	key := phase + "/" + ipam
	if r.samples[key] == nil {
		r.samples[key] = &podSample{cpu: map[string]float64{}, api: RequestCounts{}}
	}
	for attempt := 0; ; attempt++ {
		b, stolen, err := r.try(ctx, phase, ipam, round, attempt, n)
		if err != nil {
			return err
		}
		if phase != "warmup" && runAgain(b, stolen, attempt) { // the warm-up measures nothing
			r.logf("%s %s round %d: the hypervisor took %.1f %% of the machine (more than %.0f %%): run again", phase, ipam, round, stolen*100, stolenLimit*100)
			r.samples[key].reruns++
			continue
		}
		r.samples[key].add(b)
		return nil
	}
}

// try runs one batch and returns what it measured, and the share of the
// machine's time the hypervisor took meanwhile.
func (r *podStartRun) try(ctx context.Context, phase, ipam string, round, attempt, n int) (*podSample, float64, error) {
	s := &podSample{}
	names := podStartNames(phase, ipam, round, attempt, n)
	settled, share, err := r.awaitMachine(ctx, phase, ipam, round)
	if err != nil {
		return nil, 0, err
	}
	apiBefore, err := apiRequests(ctx, r.cs)
	if err != nil {
		return nil, 0, fmt.Errorf("the API server's request counts: %w", err)
	}
	begin, cpuBefore := time.Now(), sampleMachineCPU()
	if err := r.createPods(ctx, ipam, names); err != nil {
		return nil, 0, err
	}
	timeout := 3 * time.Minute
	if phase == "storm" {
		timeout = 6 * time.Minute
	}
	notReady := r.obs.waitReady(ctx, names, timeout)
	cpuAfter := sampleMachineCPU()
	cpu := cpuByGroup(cpuBefore, cpuAfter)
	stolen := stolenShare(cpuAfter.steal-cpuBefore.steal, cpuAfter.total-cpuBefore.total)
	apiAfter, err := apiRequests(ctx, r.cs)
	if err != nil {
		return nil, 0, fmt.Errorf("the API server's request counts: %w", err)
	}
	api := apiAfter.Sub(apiBefore)
	s.cpu, s.api = cpu, api
	ready, st := r.obs.times(names)
	s.ready, s.netStatus = append(s.ready, ready...), append(s.netStatus, st...)
	rs, sts := SummarizeMs(ready), SummarizeMs(st)
	if len(ready) > 0 {
		s.batchReadyP50 = append(s.batchReadyP50, rs.P50)
	}
	s.notReady += len(notReady)
	added, err := r.readADDs(s, ipam)
	if err != nil {
		return nil, 0, err
	}
	apiReqs, _ := splitWatchEvents(Cost(api).ByVerbResource)
	// The slowest pod of each batch is logged: a pooled p99 is the
	// second-slowest of a few hundred pods, so it is one batch's.
	r.logf("%s %s round %d%s: %d pods, Ready p50 %.0f ms, slowest %.0f ms, network-status slowest %.0f ms, in %v%s (after %v for the machine to settle, %.0f %% busy; %.1f %% stolen); CPU ms per pod: %s; API requests per pod: %s",
		phase, ipam, round, againNote(attempt), n, rs.P50, rs.Max, sts.Max, time.Since(begin).Round(time.Millisecond), notReadyNote(notReady), settled.Round(time.Millisecond), share*100, stolen*100,
		cpuNote(cpu, n), FormatBreakdown(nonWatch(apiReqs), float64(n)))
	r.logStragglers(ctx, phase, ipam, round, r.obs.readyTimes(names), rs.P50)
	if err := r.clear(ctx, phase, ipam, round, added); err != nil {
		return nil, 0, err
	}
	return s, stolen, nil
}

// logStragglers logs, for each pod of a batch that reached Ready far
// behind the batch's p50 (stragglers), its Events: a phase's p99 is its
// second or third slowest pod, and a straggler's Events say which step
// held it (a sandbox retried, an image, the CNI chain) while the node's
// logs are gone with the run.
func (r *podStartRun) logStragglers(ctx context.Context, phase, ipam string, round int, ready map[string]float64, p50 float64) {
	for _, name := range stragglers(ready, p50) {
		evs, err := r.cs.CoreV1().Events(podStartNamespace).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
		if err != nil {
			r.logf("%s %s round %d: straggler %s (Ready at %.0f ms): its Events: %v", phase, ipam, round, name, ready[name], err)
			continue
		}
		slices.SortFunc(evs.Items, func(a, b corev1.Event) int { return a.FirstTimestamp.Compare(b.FirstTimestamp.Time) })
		var seen []string
		for _, e := range evs.Items {
			seen = append(seen, fmt.Sprintf("%s %s x%d: %s", e.FirstTimestamp.Format("15:04:05"), e.Reason, max(e.Count, 1), e.Message))
		}
		r.logf("%s %s round %d: straggler %s, Ready at %.0f ms (batch p50 %.0f ms); its Events: %s", phase, ipam, round, name, ready[name], p50, strings.Join(seen, " | "))
		// The node's own logs name the step the Events cannot: the
		// kubelet's sandbox retries, containerd's CNI call, Multus'
		// delegate and status write, each with its time.
		for _, n := range r.nodes {
			for _, prog := range []string{"kubelet", "containerd", "multus"} {
				for _, l := range n.LogLines(prog, name, stragglerLogLines) {
					r.logf("%s %s round %d: straggler %s: %s %s: %s", phase, ipam, round, name, n.Name, prog, l)
				}
			}
		}
	}
}

// stragglerLogLines is how many of a straggler's lines of each node log
// the bench keeps.
const stragglerLogLines = 40

// stragglers are the pods of ready (Ready ms by name) that took at least
// half as long again as the batch's p50 and 2 s more than it, slowest
// first.
func stragglers(ready map[string]float64, p50 float64) []string {
	var out []string
	for name, ms := range ready {
		if ms >= 1.5*p50 && ms >= p50+2000 {
			out = append(out, name)
		}
	}
	slices.SortFunc(out, func(a, b string) int { return cmp.Compare(ready[b], ready[a]) })
	return out
}

// podStartNames names a batch's n pods; a batch run again gets new names.
func podStartNames(phase, ipam string, round, attempt, n int) []string {
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("%s-%s-r%d-%d", phase, ipam, round, i)
		if attempt > 0 {
			names[i] = fmt.Sprintf("%s-%s-r%d-again%d-%d", phase, ipam, round, attempt, i)
		}
	}
	return names
}

// awaitMachine waits until the machine has settled and, for a measured
// batch, until the hypervisor gives it back (awaitHost, within what is
// left of the run's probe budget). It returns how long the machine took
// to settle and its busy share then.
func (r *podStartRun) awaitMachine(ctx context.Context, phase, ipam string, round int) (time.Duration, float64, error) {
	settled, share, err := settle(ctx, machineBusy, settleWindow, r.quiet, settleDeadline)
	if err != nil {
		return 0, 0, err
	}
	if phase != "warmup" {
		waited, stolen, err := awaitHost(ctx, probeSteal, probeWindow, probePause, min(probeDeadline, r.probeBudget))
		if err != nil {
			return 0, 0, err
		}
		r.probeBudget = max(r.probeBudget-waited, 0)
		if waited > 0 {
			r.logf("%s %s round %d: waited %v for the hypervisor to give the machine back (%.1f %% stolen under load at the last probe)", phase, ipam, round, waited.Round(time.Second), stolen*100)
		}
	}
	return settled, share, nil
}

// createPods creates the batch's pods at once, on the nodes in turn.
func (r *podStartRun) createPods(ctx context.Context, ipam string, names []string) error {
	var wg sync.WaitGroup
	errs := make([]error, len(names))
	for i, name := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := localnode.Pod(podStartNamespace, name, "ps-"+ipam)
			p.Spec.NodeSelector = map[string]string{corev1.LabelHostname: r.nodes[i%len(r.nodes)].Name}
			r.obs.created(name)
			errs[i] = r.c.Create(ctx, p)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// readADDs adds the ADDs the timer logged since the last read to s and
// returns the containers of those that succeeded. An ADD through another
// IPAM means batches overlap.
func (r *podStartRun) readADDs(s *podSample, ipam string) (map[string]bool, error) {
	lines, off, err := readIPAMTimings(r.timerLog, r.logOff)
	if err != nil {
		return nil, err
	}
	r.logOff = off
	added := map[string]bool{}
	for _, l := range lines {
		if l.Command != "ADD" {
			continue
		}
		if l.IPAM != ipam {
			return nil, fmt.Errorf("an ADD through %s during a %s batch: batches overlap", l.IPAM, ipam)
		}
		s.addWall, s.addCPU = append(s.addWall, l.WallMs), append(s.addCPU, l.CPUMs)
		if l.Exit != 0 {
			s.addFailures++
		} else {
			added[l.Container] = true
		}
	}
	return added, nil
}

// clear deletes the batch's pods and waits until they are gone and a DEL
// of each container in added is logged: the next batch starts on a node
// that has finished this one.
func (r *podStartRun) clear(ctx context.Context, phase, ipam string, round int, added map[string]bool) error {
	if err := r.c.DeleteAllOf(ctx, &corev1.Pod{}, client.InNamespace(podStartNamespace)); err != nil {
		return err
	}
	if err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		var list corev1.PodList
		if err := r.c.List(ctx, &list, client.InNamespace(podStartNamespace)); err != nil {
			return false, nil
		}
		if len(list.Items) > 0 {
			return false, nil
		}
		lines, off, err := readIPAMTimings(r.timerLog, r.logOff)
		if err != nil {
			return false, err
		}
		r.logOff = off
		for _, l := range lines {
			if l.Command == "DEL" {
				delete(added, l.Container)
			}
		}
		return len(added) == 0, nil
	}); err != nil {
		return fmt.Errorf("%s %s round %d: pods not gone or %d DELs not seen: %w", phase, ipam, round, len(added), err)
	}
	return nil
}

// A batch starts once the machine has settled: its busy share over
// settleWindow at most settleMargin above the idle node's (the quietest of
// settleIdleWindows after the warm-up), or after settleDeadline. What a
// batch leaves behind (the kernel's release of its network namespaces, the
// runtime's removal of its containers, etcd's compaction) then runs
// before the next batch rather than inside it, whichever IPAM comes next.
const (
	settleWindow      = time.Second
	settleIdleWindows = 5
	settleMargin      = 0.10
	settleDeadline    = 30 * time.Second
)

// A batch during which the hypervisor ran something else for more than
// stolenLimit of the machine's time (steal in /proc/stat) is run again, at
// most rerunsPerBatch times: such a batch's pods start slower for reasons
// no IPAM has, and most batches lose far less (docs/performance.md, "One
// wave's p50 moves a tenth").
const (
	stolenLimit    = 0.05
	rerunsPerBatch = 3
)

// Steal shows only while the machine has work: an idle vCPU has nothing
// for the hypervisor to take, so settling cannot see a burst of it, and a
// batch run again right after a stolen one lands in the same burst (they
// last a minute or two here). Before a batch, every CPU is kept busy for
// probeWindow and the share stolen read; while it is over stolenLimit the
// batch waits probePause and probes again, up to probeDeadline (and
// probeRunBudget over the run).
const (
	probeWindow   = 500 * time.Millisecond
	probePause    = 5 * time.Second
	probeDeadline = 3 * time.Minute
	// probeRunBudget bounds the waiting of one run, all its batches
	// together: a host busy for longer is measured as it is.
	probeRunBudget = 6 * time.Minute
)

// awaitHost probes (probe keeps the machine busy for window and returns
// the share of it stolen) until a probe finds at most stolenLimit or
// deadline has passed, pausing between probes; it returns how long it
// waited beyond the first probe and the last probe's share.
func awaitHost(ctx context.Context, probe func(window time.Duration) float64, window, pause, deadline time.Duration) (time.Duration, float64, error) {
	var since time.Time // the end of the first probe
	for {
		stolen := probe(window)
		var waited time.Duration
		if since.IsZero() {
			since = time.Now()
		} else {
			waited = time.Since(since)
		}
		if stolen <= stolenLimit || waited >= deadline {
			return waited, stolen, nil
		}
		select {
		case <-ctx.Done():
			return waited, stolen, ctx.Err()
		case <-time.After(pause):
		}
	}
}

// probeSteal keeps every CPU busy for window and returns the share of
// the machine's time the hypervisor took meanwhile.
func probeSteal(window time.Duration) float64 {
	_, t0, s0 := readMachineCPU()
	stop := time.Now().Add(window)
	var wg sync.WaitGroup
	for range runtime.NumCPU() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(stop) {
			}
		}()
	}
	wg.Wait()
	_, t1, s1 := readMachineCPU()
	return stolenShare(s1-s0, t1-t0)
}

// settle waits until the machine's busy share over one window is at most
// quiet, or deadline has passed (0: after one window), and returns how
// long it waited and the last window's share. sample reads the machine's
// busy and total CPU time.
func settle(ctx context.Context, sample func() (busy, total float64), window time.Duration, quiet float64, deadline time.Duration) (time.Duration, float64, error) {
	start := time.Now()
	t := time.NewTicker(window)
	defer t.Stop()
	b0, t0 := sample()
	for {
		select {
		case <-ctx.Done():
			return time.Since(start), 0, ctx.Err()
		case <-t.C:
		}
		b1, t1 := sample()
		share := 0.0
		if t1 > t0 {
			share = (b1 - b0) / (t1 - t0)
		}
		if share <= quiet || time.Since(start) >= deadline {
			return time.Since(start), share, nil
		}
		b0, t0 = b1, t1
	}
}

// machineBusy reads the machine's busy and total CPU time (ms); time the
// hypervisor took (steal) counts as busy, the machine not being the
// node's then either.
func machineBusy() (busy, total float64) {
	busy, total, steal := readMachineCPU()
	return busy + steal, total
}

// apiRequests reads the API server's request counters
// (apiserver_request_total and the watch events sent).
func apiRequests(ctx context.Context, cs kubernetes.Interface) (RequestCounts, error) {
	b, err := cs.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, err
	}
	return ParseRequestCounts(string(b))
}

// cpuNote lists the groups' CPU per pod, the machine's first and then
// the most first.
func cpuNote(cpu map[string]float64, pods int) string {
	gs := make([]string, 0, len(cpu))
	for g := range cpu {
		if g != "machine busy" {
			gs = append(gs, g)
		}
	}
	sort.Slice(gs, func(i, j int) bool { return cpu[gs[i]] > cpu[gs[j]] })
	var b strings.Builder
	fmt.Fprintf(&b, "machine busy %.1f", cpu["machine busy"]/float64(pods))
	for _, g := range gs {
		fmt.Fprintf(&b, ", %s %.1f", g, cpu[g]/float64(pods))
	}
	return b.String()
}

// cpuFigure is the figure of a group's CPU per pod.
func cpuFigure(group string) string {
	return "cpu_per_pod_ms_" + strings.NewReplacer(" ", "_", "-", "_").Replace(group)
}

func notReadyNote(names []string) string {
	if len(names) == 0 {
		return ""
	}
	return fmt.Sprintf(", %d not Ready: %v", len(names), names)
}

// podStartPlugins puts the timer and whereabouts into each node's CNI
// directory (tenure's shim is there, installed by the DaemonSet) and
// whereabouts' CRDs into the cluster; undo removes the files.
func podStartPlugins(ctx context.Context, cfg *rest.Config, dir string, nodes []*devnode.Node) (undo func(), err error) {
	var made []string
	undo = func() {
		for _, p := range made {
			_ = os.Remove(p)
		}
	}
	for _, n := range nodes {
		if _, err := os.Stat(filepath.Join(n.HostPath(devnode.HostCNIBinDir), "tenure")); err != nil {
			return undo, fmt.Errorf("tenure's shim is not installed on node %s: %w", n.Name, err)
		}
	}
	cache, err := controlplane.CacheDir()
	if err != nil {
		return undo, err
	}
	wa, _ := filepath.Glob(filepath.Join(cache, "whereabouts-*", "whereabouts"))
	if len(wa) == 0 {
		return undo, fmt.Errorf("no whereabouts in %s: make whereabouts builds it", cache)
	}
	waDir := filepath.Dir(wa[len(wa)-1])
	if err := controlplane.InstallCRDs(ctx, cfg, os.DirFS(filepath.Join(waDir, "crds"))); err != nil {
		return undo, err
	}
	timer, err := buildIPAMTimer(dir)
	if err != nil {
		return undo, err
	}
	for _, n := range nodes {
		for name, target := range map[string]string{ipamTimerType: timer, "whereabouts": filepath.Join(waDir, "whereabouts")} {
			p := filepath.Join(n.HostPath(devnode.HostCNIBinDir), name)
			if err := os.Symlink(target, p); err != nil {
				return undo, err
			}
			made = append(made, p)
		}
	}
	return undo, nil
}

// podStartMasterOn makes the macvlan master, a veth pair, in node's
// network namespace (the host's for a node on the host); remove deletes it.
func podStartMasterOn(node *devnode.Node) (remove func(), err error) {
	h := &netlink.Handle{}
	if p := node.Netns(); p != "" {
		ns, err := netns.GetFromPath(p)
		if err != nil {
			return func() {}, err
		}
		defer ns.Close()
		if h, err = netlink.NewHandleAt(ns); err != nil {
			return func() {}, err
		}
	}
	del := func() {
		for _, name := range []string{podStartMaster, podStartMaster + "p"} {
			if l, err := h.LinkByName(name); err == nil {
				_ = h.LinkDel(l)
			}
		}
	}
	remove = func() {
		del()
		h.Close()
	}
	// A run killed before its cleanup leaves the pair behind: the names
	// are the bench's own, so what holds them is such a leftover.
	del()
	master := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: podStartMaster}, PeerName: podStartMaster + "p"}
	if err := h.LinkAdd(master); err != nil {
		return remove, fmt.Errorf("the macvlan master %s on node %s: %w", podStartMaster, node.Name, err)
	}
	return remove, h.LinkSetUp(master)
}

// podObserver records, from one watch on the namespace, when each pod
// first showed Multus' network-status annotation and the Ready condition.
type podObserver struct {
	mu                        sync.Mutex
	createdAt, statusAt, rdAt map[string]time.Time
	changed                   chan struct{}
	stop                      func()
}

func watchPods(ctx context.Context, cs kubernetes.Interface, ns string) (*podObserver, error) {
	list, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	wctx, cancel := context.WithCancel(ctx)
	rw, err := watchtools.NewRetryWatcherWithContext(wctx, list.ResourceVersion, &cache.ListWatch{
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return cs.CoreV1().Pods(ns).Watch(ctx, o)
		},
	})
	if err != nil {
		cancel()
		return nil, err
	}
	o := &podObserver{createdAt: map[string]time.Time{}, statusAt: map[string]time.Time{}, rdAt: map[string]time.Time{}, changed: make(chan struct{}, 1)}
	done := make(chan struct{})
	o.stop = func() { cancel(); rw.Stop(); <-done }
	go func() {
		defer close(done)
		for ev := range rw.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			now := time.Now()
			o.mu.Lock()
			if _, seen := o.statusAt[p.Name]; !seen && p.Annotations[nadv1.NetworkStatusAnnot] != "" {
				o.statusAt[p.Name] = now
			}
			if _, seen := o.rdAt[p.Name]; !seen && podReady(p) {
				o.rdAt[p.Name] = now
			}
			o.mu.Unlock()
			select {
			case o.changed <- struct{}{}:
			default:
			}
		}
	}()
	return o, nil
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func (o *podObserver) created(name string) {
	o.mu.Lock()
	o.createdAt[name] = time.Now()
	o.mu.Unlock()
}

// waitReady waits until every pod of names was seen Ready, or timeout; it
// returns those that were not.
func (o *podObserver) waitReady(ctx context.Context, names []string, timeout time.Duration) []string {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		var missing []string
		o.mu.Lock()
		for _, n := range names {
			if _, ok := o.rdAt[n]; !ok {
				missing = append(missing, n)
			}
		}
		o.mu.Unlock()
		if len(missing) == 0 {
			return nil
		}
		select {
		case <-o.changed:
		case <-deadline.C:
			return missing
		case <-ctx.Done():
			return missing
		}
	}
}

// times are the milliseconds from create to Ready and to network-status
// of the pods of names that got there.
// readyTimes are the ms from creation to Ready of names' pods that got
// Ready, by name.
func (o *podObserver) readyTimes(names []string) map[string]float64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := map[string]float64{}
	for _, n := range names {
		if t, ok := o.rdAt[n]; ok {
			out[n] = float64(t.Sub(o.createdAt[n])) / 1e6
		}
	}
	return out
}

func (o *podObserver) times(names []string) (ready, status []float64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, n := range names {
		c := o.createdAt[n]
		if t, ok := o.rdAt[n]; ok {
			ready = append(ready, float64(t.Sub(c))/1e6)
		}
		if t, ok := o.statusAt[n]; ok {
			status = append(status, float64(t.Sub(c))/1e6)
		}
	}
	return ready, status
}

// podStartRows makes a row per phase and IPAM, and per phase the ratios of
// tenure against each other IPAM.
func podStartRows(samples map[string]*podSample) []Result {
	var rows []Result
	stats := map[string]map[string]float64{}
	keys := make([]string, 0, len(samples))
	for k := range samples {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return podStartOrder(keys[i]) < podStartOrder(keys[j]) })
	for _, k := range keys {
		s := samples[k]
		rd, st, aw, ac := SummarizeMs(s.ready), SummarizeMs(s.netStatus), SummarizeMs(s.addWall), SummarizeMs(s.addCPU)
		f := map[string]float64{
			"pods": float64(len(s.ready) + s.notReady), "not_ready": float64(s.notReady),
			"ready_p50_ms": round3(rd.P50), "ready_p90_ms": round3(rd.P90), "ready_p99_ms": round3(rd.P99),
			"netstatus_p50_ms": round3(st.P50), "netstatus_p90_ms": round3(st.P90), "netstatus_p99_ms": round3(st.P99),
			"ipam_adds": float64(aw.N), "ipam_add_failures": float64(s.addFailures),
			"ipam_add_p50_ms": round3(aw.P50), "ipam_add_p90_ms": round3(aw.P90), "ipam_add_p99_ms": round3(aw.P99),
			// The slowest of each: a pod's p99 is the second or third
			// slowest of a phase, and whether the IPAM's ADD was the pod's
			// slowest step shows only beside its own slowest.
			"ready_max_ms": round3(rd.Max), "netstatus_max_ms": round3(st.Max), "ipam_add_max_ms": round3(aw.Max),
			"ipam_add_cpu_ms_mean": round3(ac.Mean),
		}
		if s.reruns > 0 {
			f["batches_rerun"] = float64(s.reruns)
		}
		if cv, ok := spread(s.batchReadyP50); ok {
			f["batches"], f["ready_p50_batch_cv"] = float64(len(s.batchReadyP50)), round3(cv)
		}
		if pods := len(s.ready) + s.notReady; pods > 0 {
			for g, ms := range s.cpu {
				f[cpuFigure(g)] = round3(ms / float64(pods))
			}
			c := Cost(s.api)
			f["api_requests_per_pod"], f["api_writes_per_pod"] = round3(c.Requests/float64(pods)), round3(c.Writes/float64(pods))
		}
		stats[k] = f
		phase, ipam := splitKey(k)
		rows = append(rows, Result{ID: "pod-start-" + phase + "-" + ipam, Name: fmt.Sprintf("pod start, %s, %s", phase, ipamLabel(ipam)),
			Ops: int(f["pods"]), Failures: s.notReady, P50Ms: f["ready_p50_ms"], P90Ms: f["ready_p90_ms"], P99Ms: f["ready_p99_ms"], Figures: f})
	}
	for _, phase := range []string{"waves", "storm"} {
		for _, pair := range podStartRatios {
			t, o := stats[phase+"/"+pair[0]], stats[phase+"/"+pair[1]]
			if t == nil || o == nil {
				continue
			}
			f := map[string]float64{}
			for _, m := range []string{"ready_p50_ms", "ready_p90_ms", "ready_p99_ms", "netstatus_p50_ms", "netstatus_p90_ms", "netstatus_p99_ms", "ipam_add_p50_ms", "ipam_add_p99_ms", "ipam_add_cpu_ms_mean", cpuFigure("machine busy"), "api_requests_per_pod"} {
				// A figure of no pods (none Ready, no ADD timed) is 0: no
				// ratio, rather than one that meets any target.
				if t[m] > 0 && o[m] > 0 {
					f[m] = round3(t[m] / o[m])
				}
			}
			// The ratio's standard error, as if each IPAM's p50 were the
			// mean of its batches' p50s: what the batches' spread lets
			// one run resolve.
			if t["batches"] > 0 && o["batches"] > 0 {
				ct, co := t["ready_p50_batch_cv"], o["ready_p50_batch_cv"]
				f["ready_p50_ms_stderr"] = round3(f["ready_p50_ms"] * math.Sqrt(ct*ct/t["batches"]+co*co/o["batches"]))
			}
			// Between two builds or settings of tenure the difference is
			// what one adds to the other's ADD and pod start: with probing
			// against without, the ADD latency probing adds.
			if pair[1] == ipamProbeOff || pair[1] == ipamBefore {
				for _, m := range []string{"ipam_add_p50_ms", "ipam_add_p99_ms", "ready_p50_ms", "ready_p99_ms"} {
					if t[m] > 0 && o[m] > 0 {
						f[m+"_added"] = round3(t[m] - o[m])
					}
				}
			}
			rows = append(rows, Result{ID: "pod-start-" + phase + "-" + pair[0] + "/" + pair[1],
				Name: fmt.Sprintf("pod start, %s, %s / %s (ratios)", phase, ipamLabel(pair[0]), ipamLabel(pair[1])), Figures: f})
		}
	}
	return rows
}

// podStartRatios are the pairs whose ratios are rows (the first's figures
// over the second's): tenure against each other IPAM, the probe-off and
// before IPAMs against host-local as tenure is, and tenure against its own
// probe-off and before.
var podStartRatios = [][2]string{
	{"tenure", "host-local"}, {"tenure", "whereabouts"},
	{ipamProbeOff, "host-local"}, {ipamBefore, "host-local"},
	{"tenure", ipamProbeOff}, {"tenure", ipamBefore},
}

// spread is the coefficient of variation (sample standard deviation over
// the mean) of xs, when there are two or more.
func spread(xs []float64) (float64, bool) {
	if len(xs) < 2 {
		return 0, false
	}
	var sum float64
	for _, x := range xs {
		sum += x
	}
	mean := sum / float64(len(xs))
	if mean <= 0 {
		return 0, false
	}
	var ss float64
	for _, x := range xs {
		ss += (x - mean) * (x - mean)
	}
	return math.Sqrt(ss/float64(len(xs)-1)) / mean, true
}

func splitKey(k string) (phase, ipam string) {
	for i := range k {
		if k[i] == '/' {
			return k[:i], k[i+1:]
		}
	}
	return k, ""
}

func podStartOrder(k string) int {
	phase, ipam := splitKey(k)
	n := 0
	if phase == "storm" {
		n = 10
	}
	for i, x := range podStartIPAMs {
		if x == ipam {
			return n + i
		}
	}
	return n + 9
}

// The pod-start targets, ratios within one run.
const (
	targetWavesReadyP50 = 1.05
	targetWavesP99      = 1.10
	targetStormReadyP99 = 1.15
)

func podStartTargets(rep *Report) []Target {
	var ts []Target
	ratio := func(id, fig string) (float64, bool) {
		r := rep.Find(id)
		if r == nil {
			return 0, false
		}
		v, ok := r.Figures[fig]
		return v, ok
	}
	check := func(name, id, fig string, limit float64) {
		v, ok := ratio(id, fig)
		if !ok {
			ts = append(ts, Target{Name: name, Want: fmt.Sprintf("≤ %.2f×", limit), Measured: "not run", Status: "n/a"})
			return
		}
		measured := fmt.Sprintf("%.2f×", v)
		if se, ok := ratio(id, fig+"_stderr"); ok {
			measured += fmt.Sprintf(" (± %.2f from batch to batch)", se)
		}
		ts = append(ts, Target{Name: name, Want: fmt.Sprintf("≤ %.2f×", limit), Measured: measured, Status: status(v <= limit)})
	}
	const wh, sh = "pod-start-waves-tenure/host-local", "pod-start-storm-tenure/host-local"
	check("pod start (to Ready) p50, waves, tenure / host-local", wh, "ready_p50_ms", targetWavesReadyP50)
	check("pod start p99, waves, tenure / host-local", wh, "ready_p99_ms", targetWavesP99)
	check("network-status p99, waves, tenure / host-local", wh, "netstatus_p99_ms", targetWavesP99)
	check("pod start p99, storm, tenure / host-local", sh, "ready_p99_ms", targetStormReadyP99)
	for _, id := range []string{"pod-start-waves-tenure/whereabouts", "pod-start-storm-tenure/whereabouts"} {
		if v, ok := ratio(id, "ready_p50_ms"); ok {
			ts = append(ts, Target{Name: "pod start p50, " + id[len("pod-start-"):], Want: "recorded", Measured: fmt.Sprintf("%.2f×", v), Status: "measured"})
		}
	}
	// tenure with probing off and the older build, against host-local by
	// the same figures as the targets above; recorded, since the targets
	// are this build's with its defaults.
	for _, ipam := range []string{ipamProbeOff, ipamBefore} {
		for _, m := range []struct{ phase, fig, label string }{
			{"waves", "ready_p50_ms", "pod start (to Ready) p50"}, {"waves", "ready_p99_ms", "pod start p99"},
			{"waves", "netstatus_p99_ms", "network-status p99"}, {"storm", "ready_p99_ms", "pod start p99"},
		} {
			id := "pod-start-" + m.phase + "-" + ipam + "/host-local"
			if v, ok := ratio(id, m.fig); ok {
				ts = append(ts, Target{Name: fmt.Sprintf("%s, %s, %s / host-local", m.label, m.phase, ipamLabel(ipam)), Want: "recorded", Measured: fmt.Sprintf("%.2f×", v), Status: "measured"})
			}
		}
	}
	// The ADD time (the IPAM timer's) that probing adds, and that this
	// build adds to the older one's.
	for _, ipam := range []string{ipamProbeOff, ipamBefore} {
		what := "added by probing"
		if ipam == ipamBefore {
			what = "added since " + ipamLabel(ipam)
		}
		for _, phase := range []string{"waves", "storm"} {
			id := "pod-start-" + phase + "-tenure/" + ipam
			p50, ok50 := ratio(id, "ipam_add_p50_ms_added")
			p99, ok99 := ratio(id, "ipam_add_p99_ms_added")
			if ok50 && ok99 {
				ts = append(ts, Target{Name: fmt.Sprintf("IPAM ADD time %s, %s, p50 / p99", what, phase), Want: "recorded",
					Measured: fmt.Sprintf("%+.1f / %+.1f ms", p50, p99), Status: "measured"})
			}
		}
	}
	for _, r := range rep.Scenarios {
		if r.Scenario == "pod-start" && r.Figures["not_ready"] > 0 {
			ts = append(ts, Target{Name: r.Name + ": every pod Ready", Want: "0 not Ready", Measured: fmt.Sprintf("%.0f not Ready", r.Figures["not_ready"]), Status: "not met"})
		}
	}
	return ts
}

// runOnNode runs a real-node scenario: a control plane with controllers,
// the real node with tenure's image (make image) rolled out by deploy/, and
// nothing of the other scenarios' set-up (its fake nodes would draw the
// DaemonSet's pods).
func runOnNode(ctx context.Context, opts Options, bins testbed.Binaries, rep *Report) (*Report, error) {
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("the real node needs root (containerd, the kubelet, network namespaces)")
	}
	rep.Mode = "scenarios " + strings.Join(opts.Scenarios, ",")
	e := &env{log: opts.Log, bins: bins, agents: map[string]*testbed.Agent{}}
	dir, err := os.MkdirTemp("", "tbench-node-")
	if err != nil {
		return nil, err
	}
	e.dir = dir
	defer e.close()
	begin := time.Now()
	nodes := opts.PodStart.withDefaults().Nodes
	nodeDir := filepath.Join(dir, "node")
	cpOpts := controlplane.Options{Controllers: true}
	if nodes > 1 {
		cpOpts.Nodes = localnode.NodeAccess(nodeDir)
	}
	if e.cp, err = controlplane.Start(ctx, cpOpts); err != nil {
		return nil, err
	}
	if e.c, err = kube.NewClient(e.cp.Config); err != nil {
		return nil, err
	}
	img := filepath.Join(bins.Dir, "tenure-image.tar")
	if nodes > 1 {
		if err := e.startCluster(ctx, nodeDir, img, nodes); err != nil {
			return nil, err
		}
	} else {
		if err := os.Mkdir(nodeDir, 0o755); err != nil {
			return nil, err
		}
		if e.node, err = localnode.Start(ctx, e.cp, localnode.Options{Dir: nodeDir, Image: img}); err != nil {
			return nil, fmt.Errorf("the real node: %w", err)
		}
	}
	e.logf("control plane and %d real node(s) with tenure rolled out in %v", nodes, time.Since(begin).Round(time.Millisecond))
	rep.Controller = "deploy/'s Deployment on the real node"
	if cs, err := kubernetes.NewForConfig(e.cp.Config); err == nil {
		if v, err := cs.Discovery().ServerVersion(); err == nil {
			rep.APIServer = "kube-apiserver " + v.GitVersion
		}
	}
	for _, name := range opts.Scenarios {
		s := scenarios[name]
		e.logf("scenario %s: %s", name, s.Summary)
		rs, err := s.Run(e, ctx, &ScenarioRun{Opts: opts, Rep: rep, Last: true, nets: &netAlloc{}})
		for i := range rs {
			rs[i].Scenario = name
		}
		rep.Scenarios = append(rep.Scenarios, rs...)
		if err != nil {
			rep.Targets = namedTargets(opts.Scenarios, rep)
			return rep, fmt.Errorf("scenario %s: %w", name, err)
		}
	}
	rep.Machine.LoadAvgEnd = loadAvg()
	rep.DurationS = round3(time.Since(rep.Started).Seconds())
	rep.Targets = namedTargets(opts.Scenarios, rep)
	rep.plots = namedPlots(opts.Scenarios, rep)
	return rep, nil
}

// startCluster starts n real nodes in namespaces of their own
// (localnode.StartCluster, as tenurectl dev up --node --nodes N does), and
// the admin kubeconfig as they reach the API server.
func (e *env) startCluster(ctx context.Context, dir, img string, n int) error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	cl, err := localnode.StartCluster(ctx, e.cp, localnode.ClusterOptions{Dir: dir, Nodes: n, Image: img,
		ProxyCommand: []string{exe, "dev", "fabric-proxy"}})
	if err != nil {
		return fmt.Errorf("the real nodes: %w", err)
	}
	e.cluster, e.nodes = cl, cl.Nodes
	kc, err := clientcmd.LoadFromFile(e.cp.KubeconfigPath)
	if err != nil {
		return err
	}
	for _, c := range kc.Clusters {
		c.Server = "https://" + net.JoinHostPort(devnode.FabricAPIServer, strconv.Itoa(devnode.FabricAPIServerPort))
	}
	e.nodeKubeconfig = filepath.Join(e.dir, "nodes.kubeconfig")
	return clientcmd.WriteToFile(*kc, e.nodeKubeconfig)
}
