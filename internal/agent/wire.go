package agent

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"

	"github.com/tenure-ipam/tenure/internal/addrspace"
	"github.com/tenure-ipam/tenure/internal/allocator"
	"github.com/tenure-ipam/tenure/internal/probe"
	"github.com/tenure-ipam/tenure/internal/reservation"
)

// WireOptions turn on the wire check: an address is handed out only once
// a probe on its network's parent interface found nothing answering for
// it (internal/probe), and addresses about to be handed out are probed
// ahead of time so the ADD does not wait for the probe.
type WireOptions struct {
	// Netns is the network namespace the parent interfaces are in ("":
	// the agent's own, the host's for a hostNetwork DaemonSet).
	Netns string
	// Count and Interval shape one probe (probe.Prober).
	Count    int
	Interval time.Duration
	// Fresh is how long a probe's answer stands: a silent address probed
	// longer ago is probed again before it is handed out, an answering
	// one is skipped until then (DefaultWireFresh when 0).
	Fresh time.Duration
	// Ahead is how many of each network's next candidates are kept
	// probed (0: none, every ADD probes its candidate and waits). A
	// network's ADDs of the last demandWindow add one each, up to
	// maxAhead, and its largest burst's count stands for burstMemory: a
	// burst of ADDs finds its candidates probed or in flight rather than
	// each starting a probe and waiting it out.
	Ahead int
	// Idle: a network no ADD used for this long is no longer probed
	// ahead (DefaultWireIdle when 0).
	Idle time.Duration
}

// Defaults of WireOptions.
const (
	DefaultWireFresh = 10 * time.Second
	DefaultWireAhead = 8
	DefaultWireIdle  = 10 * time.Minute
)

// demandWindow and maxAhead bound the probes ahead of a burst of ADDs:
// the window is about the time a burst's sandboxes reach their ADDs, and
// maxAhead caps the broadcast a node sends for one network. A network
// keeps the widening of its largest burst for burstMemory: bursts come
// in steps (a ReplicaSet scaled, a rollout's waves), and the first ADDs of
// the next find their candidates probed instead of waiting out a probe
// each, as the last ones of a burst did.
const (
	demandWindow = 2 * time.Second
	maxAhead     = 64
	burstMemory  = time.Minute
)

// EventAddressConflict is reservation.EventAddressConflict: the Warning
// Event on a pod whose ADD skipped an address that answered on the wire.
const EventAddressConflict = reservation.EventAddressConflict

// wire answers whether an address may be handed out as far as the segment
// is concerned, from probes it keeps (results) and sends.
type wire struct {
	prober   *probe.Prober
	opts     WireOptions
	log      *slog.Logger
	rec      record.EventRecorder
	upcoming func(ctx context.Context, scope string, space addrspace.Space, n int) []netip.Prefix

	conflicts *prometheus.CounterVec
	probes    *prometheus.CounterVec
	waited    prometheus.Histogram

	mu      sync.Mutex
	results map[wireKey]*wireResult
	nets    map[wireNetKey]*wireNet
	// served is the parent interface of each allocation scope an ADD of
	// this node probed on, the last one used: where the agent probes the
	// addresses of that scope the controller asks about (answer.go).
	served map[string]string
	kick   chan struct{}
	// sem bounds the probes in flight ahead of time.
	sem chan struct{}
	// skipped: networks logged as handed out unprobed.
	skipped sync.Map
}

type wireKey struct {
	iface string
	addr  netip.Addr
}

// wireResult is one probe of one address on one interface.
type wireResult struct {
	done   chan struct{} // closed when the probe has ended
	end    time.Time     // when it ended
	answer *probe.Answer
	err    error
	// handedOut is when an ADD took the address on this result: it is
	// not probed again while it is being configured (an IPv6 host takes a
	// duplicate-address probe for its tentative address as a conflict).
	handedOut time.Time
	// prev is the result a probe ahead of time renews; it stands while
	// fresh, and cancel stops the renewal when an ADD takes it.
	prev   *wireResult
	cancel context.CancelFunc
}

// usable reports whether r is an ended probe's result an ADD may take:
// no error, younger than fresh, not yet handed out.
func (r *wireResult) usable(fresh time.Duration) bool {
	return r != nil && r.ended() && r.err == nil && time.Since(r.end) < fresh && r.handedOut.IsZero()
}

func (r *wireResult) ended() bool {
	select {
	case <-r.done:
		return true
	default:
		return false
	}
}

type wireNetKey struct {
	iface, scope, space string
}

// wireNet is a network an ADD used, kept probed ahead of time.
type wireNet struct {
	iface string
	scope string
	space addrspace.Space
	used  time.Time
	// recent are the uses of the last demandWindow, oldest first.
	recent []time.Time
	// peak is the most uses one demandWindow held within burstMemory,
	// last seen at peakAt.
	peak   int
	peakAt time.Time
}

// ahead is how many of n's next candidates to keep probed at now: base
// and one per use of the last demandWindow, or of the largest burst of
// the last burstMemory, at most maxAhead.
func (n *wireNet) ahead(base int, now time.Time) int {
	i := 0
	for i < len(n.recent) && now.Sub(n.recent[i]) > demandWindow {
		i++
	}
	n.recent = n.recent[i:]
	if now.Sub(n.peakAt) > burstMemory {
		n.peak = 0
	}
	if len(n.recent) >= n.peak {
		n.peak, n.peakAt = len(n.recent), now
	}
	return min(base+n.peak, max(base, maxAhead))
}

func newWire(opts WireOptions, log *slog.Logger, rec record.EventRecorder, upcoming func(context.Context, string, addrspace.Space, int) []netip.Prefix) *wire {
	if opts.Fresh <= 0 {
		opts.Fresh = DefaultWireFresh
	}
	if opts.Idle <= 0 {
		opts.Idle = DefaultWireIdle
	}
	w := &wire{
		// HoldersOnly: the agents of every node on a segment probe the
		// same next candidates ahead of their ADDs, so another host's probe
		// of an address is no holder of it (the API server decides who
		// takes it); only a host that claims it answers.
		prober: &probe.Prober{Netns: opts.Netns, Count: opts.Count, Interval: opts.Interval, HoldersOnly: true},
		opts:   opts, log: log, rec: rec, upcoming: upcoming,
		results: map[wireKey]*wireResult{}, nets: map[wireNetKey]*wireNet{}, served: map[string]string{},
		kick: make(chan struct{}, 1), sem: make(chan struct{}, 16),
		conflicts: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tenure_address_conflicts_total",
			Help: "Addresses an ADD skipped because something answered for them on the wire (an ARP or neighbour probe), by network."}, []string{"network"}),
		probes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tenure_agent_probes_total",
			Help: "Probes of candidate addresses on the wire, by outcome (silent, answered, error, cancelled: a renewal ahead of time an ADD took the fresh result of)."}, []string{"outcome"}),
		waited: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "tenure_agent_probe_wait_seconds",
			Help:    "How long an ADD waited for the wire check of one candidate (0 when a fresh probe made ahead of time answered).",
			Buckets: []float64{0.0001, 0.001, 0.01, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1, 2}}),
	}
	return w
}

// collectors are the wire's metrics, with squattedCollector's.
func (w *wire) collectors() []prometheus.Collector {
	return []prometheus.Collector{w.conflicts, w.probes, w.waited, squattedCollector{w}}
}

var (
	squattedCount = prometheus.NewDesc("tenure_agent_squatted_addresses",
		"Free addresses whose last probe, younger than --probe-fresh, something answered for on the wire.", nil, nil)
	squattedAddress = prometheus.NewDesc("tenure_agent_squatted_address",
		"1 for each free address whose last probe, younger than --probe-fresh, was answered: the interface probed, the address and the MAC that answered (at most maxSquattedSeries of them).",
		[]string{"interface", "address", "mac"}, nil)
)

// maxSquattedSeries bounds tenure_agent_squatted_address's series: a
// segment that answers every probe (proxy ARP, a hostile host) makes
// one per address probed.
const maxSquattedSeries = 64

// squattedCollector reports the addresses whose last answer stands.
type squattedCollector struct{ w *wire }

func (c squattedCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- squattedCount
	ch <- squattedAddress
}

func (c squattedCollector) Collect(ch chan<- prometheus.Metric) {
	w := c.w
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for k, r := range w.results {
		if !r.ended() {
			r = r.prev // a renewal in flight: the result it renews stands
		}
		if r == nil || !r.ended() || r.answer == nil || time.Since(r.end) >= w.opts.Fresh {
			continue
		}
		if n < maxSquattedSeries {
			ch <- prometheus.MustNewConstMetric(squattedAddress, prometheus.GaugeValue, 1, k.iface, k.addr.String(), r.answer.MAC.String())
		}
		n++
	}
	ch <- prometheus.MustNewConstMetric(squattedCount, prometheus.GaugeValue, float64(n))
}

// iface is the interface the wire check of cfg's network probes on, ""
// when it probes none (probe off, or a segment the node cannot reach).
func (w *wire) iface(cfg configProbe) (string, error) {
	switch {
	case !cfg.Probe || cfg.ProbeSkipped != "":
		return "", nil
	case cfg.ProbeInterface != "":
		return cfg.ProbeInterface, nil
	case cfg.ProbeDefaultRoute:
		// As the macvlan and ipvlan plugins choose it: the default
		// route's interface, whatever the family of the address.
		name, err := probe.DefaultRouteInterface(w.opts.Netns, false)
		if err != nil {
			name, err = probe.DefaultRouteInterface(w.opts.Netns, true)
		}
		if err != nil {
			return "", fmt.Errorf("network %s: the plugin attaches to the default route's interface, which the wire check could not find (set ipam.probe_interface, or ipam.probe false): %w", cfg.Name, err)
		}
		return name, nil
	}
	return "", nil
}

// configProbe is what the wire check reads of a network config.
type configProbe struct {
	Name              string
	Probe             bool
	ProbeInterface    string
	ProbeDefaultRoute bool
	ProbeSkipped      string
}

// vet is the allocator.Vet of one ADD's slot: it keeps the network probed
// ahead of time, and records on the pod what it skipped.
func (w *wire) vet(iface, scope string, space addrspace.Space, network string, pod *corev1.Pod) allocator.Vet {
	w.use(iface, scope, space)
	return func(ctx context.Context, item netip.Prefix) (bool, error) {
		// The next candidates are probed while this one is: the ADD
		// after a network's first (or after this one) finds its
		// candidate probed rather than in flight.
		w.kickRefresh()
		start := time.Now()
		ans, err := w.check(ctx, iface, item.Addr())
		w.waited.Observe(time.Since(start).Seconds())
		if err != nil {
			return false, fmt.Errorf("network %s: the wire check could not probe on interface %s (set ipam.probe false for a segment where no probe can work): %w", network, iface, err)
		}
		if ans == nil {
			return true, nil
		}
		w.conflicts.WithLabelValues(network).Inc()
		w.log.Warn("address answers on the wire; skipped", "network", network, "address", item.Addr(), "mac", ans.MAC.String(), "answer", ans.Kind, "interface", iface)
		if w.rec != nil && pod != nil {
			w.rec.AnnotatedEventf(pod, map[string]string{
				reservation.AnnotationConflictNetwork: network, reservation.AnnotationConflictAddress: item.Addr().String(),
				reservation.AnnotationConflictMAC: ans.MAC.String(), reservation.AnnotationConflictInterface: iface,
			}, corev1.EventTypeWarning, EventAddressConflict,
				"address %s of network %s answers on the wire from MAC %s (%s on %s) though no reservation holds it: skipped, and tried again later",
				item.Addr(), network, ans.MAC, ans.Kind, iface)
		}
		return false, nil
	}
}

// check answers whether anything answers for addr on iface: a result of
// an ended probe younger than Fresh, the one of a probe in flight, or a
// new probe's. A silent answer hands the address out: it is not probed
// again for Fresh.
func (w *wire) check(ctx context.Context, iface string, addr netip.Addr) (*probe.Answer, error) {
	k := wireKey{iface, addr}
	for {
		w.mu.Lock()
		r := w.results[k]
		if r != nil && !r.ended() && r.prev.usable(w.opts.Fresh) {
			// A renewal ahead of time is in flight over a fresh result:
			// the result stands. An answer is skipped on it while the
			// renewal finds out whether it still answers; a silent address
			// is handed out, and its renewal stops first (the probes it
			// sent precede the hand-out).
			prev := r.prev
			if prev.answer == nil {
				r.cancel()
				w.results[k] = prev
				prev.handedOut = time.Now()
			}
			w.mu.Unlock()
			return prev.answer, nil
		}
		if r != nil && !r.ended() {
			w.mu.Unlock()
			select {
			case <-r.done:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			continue // its result, read under the lock
		}
		if r == nil || r.err != nil || time.Since(r.end) >= w.opts.Fresh || !r.handedOut.IsZero() {
			r = w.startLocked(k)
			w.mu.Unlock()
			w.run(ctx, k, r)
			w.mu.Lock()
			if r.err != nil {
				w.mu.Unlock()
				return nil, r.err
			}
		}
		if r.answer == nil {
			r.handedOut = time.Now()
		}
		ans := r.answer
		w.mu.Unlock()
		return ans, nil
	}
}

// startLocked records a probe of k in flight; w.mu is held.
func (w *wire) startLocked(k wireKey) *wireResult {
	r := &wireResult{done: make(chan struct{})}
	w.results[k] = r
	return r
}

// run sends the probe of r and records its outcome. A probe whose caller
// gave up ends with that error, and the next check probes again.
func (w *wire) run(ctx context.Context, k wireKey, r *wireResult) {
	ans, err := w.prober.Probe(ctx, k.iface, k.addr)
	outcome := "silent"
	switch {
	case err != nil && ctx.Err() != nil:
		outcome = "cancelled"
	case err != nil:
		outcome = "error"
	case ans != nil:
		outcome = "answered"
	}
	w.probes.WithLabelValues(outcome).Inc()
	w.mu.Lock()
	r.answer, r.err, r.end = ans, err, time.Now()
	close(r.done)
	w.mu.Unlock()
	if err != nil && ctx.Err() == nil {
		w.log.Error("probe failed", "interface", k.iface, "address", k.addr, "err", err)
	}
}

// use records that an ADD used the network, to be kept probed ahead.
func (w *wire) use(iface, scope string, space addrspace.Space) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.served[scope] = iface
	k := wireNetKey{iface, scope, space.String()}
	n := w.nets[k]
	if n == nil {
		n = &wireNet{iface: iface, scope: scope, space: space}
		w.nets[k] = n
	}
	n.used = time.Now()
	n.ahead(0, n.used) // drops the uses out of the window
	if len(n.recent) >= maxAhead {
		n.recent = n.recent[1:] // more count no further
	}
	n.recent = append(n.recent, n.used)
}

func (w *wire) kickRefresh() {
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// runAhead keeps the next candidates of the networks in use probed: on
// every ADD's check and every third of Fresh.
func (w *wire) runAhead(ctx context.Context) {
	if w.opts.Ahead <= 0 {
		return
	}
	t := time.NewTicker(w.opts.Fresh / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-w.kick:
		}
		w.refresh(ctx)
	}
}

// refresh probes each network's upcoming candidates that have no result
// younger than two thirds of Fresh (so an ADD finds one still fresh), and
// forgets results older than Fresh and networks idle for Idle.
func (w *wire) refresh(ctx context.Context) {
	now := time.Now()
	w.mu.Lock()
	type netAhead struct {
		*wireNet
		want int
	}
	var nets []netAhead
	for k, n := range w.nets {
		if now.Sub(n.used) > w.opts.Idle {
			delete(w.nets, k)
			continue
		}
		nets = append(nets, netAhead{n, n.ahead(w.opts.Ahead, now)})
	}
	for k, r := range w.results {
		if r.ended() && now.Sub(r.end) > 2*w.opts.Fresh {
			delete(w.results, k)
		}
	}
	w.mu.Unlock()
	renew := w.opts.Fresh * 2 / 3
	for _, n := range nets {
		for _, item := range w.upcoming(ctx, n.scope, n.space, n.want) {
			k := wireKey{n.iface, item.Addr()}
			w.mu.Lock()
			r := w.results[k]
			if r != nil && (!r.ended() || (!r.handedOut.IsZero() && now.Sub(r.handedOut) < w.opts.Fresh) || (r.err == nil && now.Sub(r.end) < renew)) {
				w.mu.Unlock()
				continue
			}
			prev := r
			r = w.startLocked(k)
			if prev.usable(w.opts.Fresh) {
				r.prev = prev
			}
			pctx, cancel := context.WithCancel(ctx)
			r.cancel = cancel
			w.mu.Unlock()
			select {
			case w.sem <- struct{}{}:
			case <-ctx.Done():
				cancel()
				w.mu.Lock()
				r.err, r.end = ctx.Err(), time.Now()
				close(r.done)
				w.mu.Unlock()
				return
			}
			go func() {
				defer func() { <-w.sem }()
				defer cancel()
				w.run(pctx, k, r)
			}()
		}
	}
}

// noteSkipped logs once per network that its addresses are handed out
// unprobed, and why.
func (w *wire) noteSkipped(network, why string) {
	if _, logged := w.skipped.LoadOrStore(network, true); !logged {
		w.log.Info("network's addresses are handed out without a wire check", "network", network, "why", why)
	}
}

// servedOn is the parent interface an ADD of this node last probed the
// allocation scope on, "" when none did since the agent started.
func (w *wire) servedOn(scope string) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.served[scope]
}
