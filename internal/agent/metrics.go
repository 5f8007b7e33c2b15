package agent

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/tenure-ipam/tenure/internal/dataplane"
	"github.com/tenure-ipam/tenure/internal/dhcp6"
	"github.com/tenure-ipam/tenure/internal/store"
)

// agentMetrics is the agent's Prometheus registry: one per Agent, so several
// agents in one process (tests) do not share counters.
type agentMetrics struct {
	registry *prometheus.Registry
	dhcpv6   *prometheus.CounterVec
	// prefixRecordPruned counts claims whose status.delegatedPrefixes the
	// API server dropped (reported once per claim).
	prefixRecordPruned prometheus.Counter
	routeChanges       *prometheus.CounterVec
	switchovers        *prometheus.CounterVec
	switchoverGap      prometheus.Histogram
	// macConflicts is the number of MACs two or more bindings of this node
	// hold on one DHCPv6 interface (none of them is served).
	macConflicts prometheus.Gauge
	// cniRequests and cniDuration count and time every CNI call answered on
	// the socket, from the first byte read to the reply written.
	cniRequests *prometheus.CounterVec
	cniDuration *prometheus.HistogramVec
}

// cniCommands are the commands the shim forwards; anything else is counted
// as CommandOther, so a caller cannot grow the label set.
var cniCommands = []string{"ADD", "DEL", "CHECK", "GC", "STATUS"}

// CommandOther labels a request whose command is none of cniCommands, or
// that could not be decoded.
const CommandOther = "other"

// cniCommandLabel bounds the command label to the known commands.
func cniCommandLabel(cmd string) string {
	for _, c := range cniCommands {
		if c == cmd {
			return c
		}
	}
	return CommandOther
}

func newAgentMetrics() *agentMetrics {
	m := &agentMetrics{
		registry: prometheus.NewRegistry(),
		dhcpv6: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tenure_dhcpv6_messages_total",
			Help: "DHCPv6 messages handled by this node's agent, by the client's message type and what became of it " +
				"(advertise, reply, declined, ignored, malformed, untrustedrelay, nobinding, error, panic; type unknown, outcome undecodable: " +
				"a packet to the server port that is no DHCPv6 message).",
		}, []string{"type", "outcome"}),
		prefixRecordPruned: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tenure_claim_prefix_record_pruned_total",
			Help: "IPAMClaims whose status.delegatedPrefixes the API server dropped on this agent's status write (the IPAMClaim CRD " +
				"has no such field), counted once per claim. The prefix stays reserved and served; install tenure's IPAMClaim CRD to record it.",
		}),
		routeChanges: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tenure_route_changes_total",
			Help: "Prefix routes this node's agent installed or removed (change install, remove), by outcome (ok, error).",
		}, []string{"change", "outcome"}),
		switchovers: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tenure_kubevirt_switchovers_total",
			Help: "VM prefix routes this node installed because of a KubeVirt live migration, by outcome: target " +
				"(this node is the target of a migration that switched over) or back_to_source (this node is the source of one that failed).",
		}, []string{"outcome"}),
		switchoverGap: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "tenure_kubevirt_switchover_route_seconds",
			Help: "Time from the VirtualMachineInstance's switchover signal (status.migrationState.targetNodeDomainReadyTimestamp, " +
				"else endTimestamp; one-second resolution as KubeVirt writes them) to the VM's prefix route installed on this node.",
			Buckets: []float64{0.25, 0.5, 1, 1.5, 2, 3, 5, 10, 30},
		}),
		macConflicts: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tenure_dhcpv6_mac_conflicts",
			Help: "MACs that two or more DHCPv6 bindings of this node (claims, or pods with a delegated prefix) hold on one interface: " +
				"none of those bindings is served until one of them goes (an Event on each pod names them).",
		}),
	}
	m.cniRequests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tenure_cni_requests_total",
		Help: "CNI calls this node's agent answered, by command (ADD, DEL, CHECK, GC, STATUS, other) and the CNI error code " +
			"of the answer (0 for success; 100 for ADD: no free address in the range).",
	}, []string{"command", "code"})
	m.cniDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "tenure_cni_request_duration_seconds",
		Help:    "Time from reading a CNI call on the agent's socket to writing its answer, by command.",
		Buckets: []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30},
	}, []string{"command"})
	m.registry.MustRegister(m.cniRequests, m.cniDuration)
	for _, c := range cniCommands {
		m.cniRequests.WithLabelValues(c, "0")
		m.cniDuration.WithLabelValues(c)
	}
	// A full range is visible at zero from the start, so that the first
	// refused ADD is an increase (a series appearing at 1 is none).
	m.cniRequests.WithLabelValues("ADD", strconv.FormatUint(uint64(CodeRangeFull), 10))
	m.registry.MustRegister(m.dhcpv6, m.prefixRecordPruned, m.routeChanges, m.switchovers, m.switchoverGap, m.macConflicts,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	// The answers a healthy node gives are visible at zero from the start.
	for _, t := range []string{dhcp6.MsgTypeSolicit, dhcp6.MsgTypeRequest, dhcp6.MsgTypeRenew, dhcp6.MsgTypeRebind} {
		for _, o := range []string{dhcp6.OutcomeAdvertise, dhcp6.OutcomeReply, dhcp6.OutcomeNoBinding} {
			if o == dhcp6.OutcomeAdvertise && t != dhcp6.MsgTypeSolicit {
				continue
			}
			m.dhcpv6.WithLabelValues(t, o)
		}
	}
	m.dhcpv6.WithLabelValues(dhcp6.MsgTypeUnknown, dhcp6.OutcomeUndecodable)
	for _, c := range []string{dataplane.RouteInstall, dataplane.RouteRemove} {
		for _, o := range []string{"ok", "error"} {
			m.routeChanges.WithLabelValues(c, o)
		}
	}
	for _, o := range []string{dataplane.SwitchoverTarget, dataplane.SwitchoverBack} {
		m.switchovers.WithLabelValues(o)
	}
	return m
}

// cacheCollectors report the window cache and the node cache of st.
func cacheCollectors(st *store.Store) []prometheus.Collector {
	return []prometheus.Collector{
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "tenure_agent_window_rebuilds_total",
			Help: "Times the agent widened its window of other nodes' reservations (a list of its blocks, then a watch)."},
			func() float64 { return float64(st.Rebuilds()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "tenure_agent_window_reservations",
			Help: "Reservations in the agent's window: other nodes' reservations of the blocks it allocates from and of the networks it found full."},
			func() float64 { return float64(st.WindowLen()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "tenure_agent_node_cache_fresh",
			Help: "1 while the cache of this node's reservations is trusted; 0 from a broken watch until a live list is found whole in it; calls in the first second of that wait for it, later ones read past the cache."},
			func() float64 {
				if st.Fresh() {
					return 1
				}
				return 0
			}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "tenure_agent_calls_awaiting_node_cache",
			Help: "CNI calls waiting now for the node cache to be found whole after its watch broke."},
			func() float64 { return float64(st.Waiting()) }),
	}
}

// requestCollectors report the request budget budget returns when
// collected.
func requestCollectors(budget func() *requestBudget) []prometheus.Collector {
	return []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "tenure_agent_request_bytes_in_flight",
			Help: "Bytes of CNI requests the agent holds now, read and not yet answered (bounded: see tenure_agent_requests_busy_total)."},
			func() float64 { return float64(budget().InFlight()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "tenure_agent_requests_busy_total",
			Help: "CNI requests answered \"try again\" (code 11) because the requests in flight filled the agent's byte budget."},
			func() float64 { return float64(budget().busy.Load()) }),
	}
}

// cniCall records one answered CNI call.
func (m *agentMetrics) cniCall(command string, resp *Response, took time.Duration) {
	cmd := cniCommandLabel(command)
	code := "0"
	if resp != nil && resp.Error != nil {
		code = strconv.FormatUint(uint64(resp.Error.Code), 10)
	}
	m.cniRequests.WithLabelValues(cmd, code).Inc()
	m.cniDuration.WithLabelValues(cmd).Observe(took.Seconds())
}

// apiMetrics count and time the agent's requests to the API server, by
// HTTP method (its writes are POST, PUT, PATCH and DELETE) and status code
// ("error" when no response came back). They wrap the agent's transport,
// so they are the agent's own rather than client-go's process-wide hooks.
type apiMetrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

func newAPIMetrics() *apiMetrics {
	return &apiMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tenure_agent_api_requests_total",
			Help: "Requests this agent sent to the Kubernetes API server, by HTTP method and response code (\"error\": no response).",
		}, []string{"method", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "tenure_agent_api_request_duration_seconds",
			Help: "Time from sending a request to the Kubernetes API server to its response headers, by HTTP method " +
				"(a watch counts until the stream opens).",
			Buckets: []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30},
		}, []string{"method"}),
	}
}

func (m *apiMetrics) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripperFunc(func(r *http.Request) (*http.Response, error) {
		start := time.Now()
		resp, err := rt.RoundTrip(r)
		m.duration.WithLabelValues(r.Method).Observe(time.Since(start).Seconds())
		code := "error"
		if err == nil {
			code = strconv.Itoa(resp.StatusCode)
		}
		m.requests.WithLabelValues(r.Method, code).Inc()
		return resp, err
	})
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// RouteChange implements dataplane.RouteObserver.
func (m *agentMetrics) RouteChange(change string, err error) {
	outcome := "ok"
	if err != nil {
		outcome = "error"
	}
	m.routeChanges.WithLabelValues(change, outcome).Inc()
}

// Switchover implements dataplane.RouteObserver.
func (m *agentMetrics) Switchover(outcome string, gap time.Duration, timed bool) {
	m.switchovers.WithLabelValues(outcome).Inc()
	if timed {
		m.switchoverGap.Observe(gap.Seconds())
	}
}

// MACConflicts implements dataplane.ConflictObserver.
func (m *agentMetrics) MACConflicts(n int) { m.macConflicts.Set(float64(n)) }

// Observe implements dhcp6.Observer.
func (m *agentMetrics) Observe(msgType, outcome string) {
	m.dhcpv6.WithLabelValues(msgType, outcome).Inc()
}

// MetricsHandler serves the agent's registry in the Prometheus format.
func (a *Agent) MetricsHandler() http.Handler {
	return promhttp.HandlerFor(a.metrics.registry, promhttp.HandlerOpts{Registry: a.metrics.registry})
}

// ServeMetrics serves /metrics on l until ctx ends.
func (a *Agent) ServeMetrics(ctx context.Context, l net.Listener) error {
	mux := http.NewServeMux()
	mux.Handle("/metrics", a.MetricsHandler())
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
