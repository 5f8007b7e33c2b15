package controller

import (
	"github.com/prometheus/client_golang/prometheus"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/tenure-ipam/tenure/internal/controller/repair"
	"github.com/tenure-ipam/tenure/internal/controller/sticky"
)

// Metrics are registered in controller-runtime's registry, which
// tenure-controller serves on --metrics-addr; importing controller-runtime's
// metrics package registers client-go's workqueue, REST client and
// leader-election metrics there too.
var (
	reservationsGauge = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "tenure_reservations",
		Help: "Reservations by IPPool (\"\" for ranges written inline in the IPAM config) and state: allocated (addresses), delegated (prefixes), free (a declared pool's capacity minus its allocated addresses). Exported by the leader.",
	}, []string{"pool", "state"})
	releasesTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tenure_releases_total",
		Help: "Reservations released by this process because their owner is gone, by reason.",
	}, []string{"reason"})
	stickyReleasesTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tenure_sticky_claims_released_total",
		Help: "Sticky StatefulSet IPAMClaims deleted by this process, by reason (StatefulSetGone, ScaledDown); their reservations are then released as ClaimDeleted or ClaimGone.",
	}, []string{"reason"})
	sweepDuration = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "tenure_sweep_duration_seconds",
		Help:    "Duration of full sweeps over every reservation.",
		Buckets: prometheus.ExponentialBuckets(0.01, 2, 14),
	})
	lastSweepSuccess = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "tenure_last_sweep_success_timestamp_seconds",
		Help: "Unix time at which the last full sweep completed without error.",
	})
	fenceWaitGauge = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "tenure_reservations_waiting_for_fence",
		Help: "Reservations of terminating or terminal pods kept because their node is not Ready and not fenced (tainted node.kubernetes.io/out-of-service, or deleted). Exported by the leader.",
	})
	answeringGauge = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "tenure_reservations_answering",
		Help: "Reservations that a NodeNotReady release (--release-unfenced) would give back, kept because an agent of another node heard their address answer on the wire. Exported by the leader.",
	})
	leaderGauge = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "tenure_controller_leader",
		Help: "1 while this replica holds the leader lease and acts, else 0.",
	})
)

func init() {
	crmetrics.Registry.MustRegister(reservationsGauge, releasesTotal, stickyReleasesTotal, sweepDuration, lastSweepSuccess, fenceWaitGauge, answeringGauge, leaderGauge)
}

// initMetrics makes every release reason visible at zero, so a replica that
// never released anything shows zeros rather than nothing.
func initMetrics() {
	for _, r := range repair.Reasons {
		releasesTotal.WithLabelValues(string(r))
	}
	for _, r := range sticky.Reasons {
		stickyReleasesTotal.WithLabelValues(string(r))
	}
}
