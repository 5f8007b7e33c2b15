package agent

import (
	"context"
	"errors"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/tenure-ipam/tenure/internal/dhcp6"
)

// agentMetrics is the agent's Prometheus registry: one per Agent, so several
// agents in one process (tests) do not share counters.
type agentMetrics struct {
	registry *prometheus.Registry
	dhcpv6   *prometheus.CounterVec
	// prefixRecordPruned counts claims whose status.delegatedPrefixes the
	// API server dropped (reported once per claim).
	prefixRecordPruned prometheus.Counter
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
	}
	m.registry.MustRegister(m.dhcpv6, m.prefixRecordPruned,
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
	return m
}

// Observe implements dhcp6.Observer.
func (m *agentMetrics) Observe(msgType, outcome string) {
	m.dhcpv6.WithLabelValues(msgType, outcome).Inc()
}

// MetricsHandler serves the agent's registry in the Prometheus format.
func (a *Agent) MetricsHandler() http.Handler {
	return promhttp.HandlerFor(a.dataplane.metrics.registry, promhttp.HandlerOpts{Registry: a.dataplane.metrics.registry})
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
