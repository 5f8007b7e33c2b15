// Command tenure-controller gives back what leaked and never what is live:
// it releases IPReservations whose owner is gone (pod deleted or replaced,
// an earlier sandbox of a pod, terminating pods of a fenced node, IPAMClaims
// deleted), deletes sticky StatefulSet claims whose StatefulSet is gone or
// was scaled below their ordinal for --sticky-release-after, writes pool usage to IPPool status, and exports Events and
// Prometheus metrics. Replicas elect a leader with a coordination.k8s.io
// Lease; only the leader acts.
//
//	tenure-controller [--kubeconfig PATH] [flags]   (in-cluster config without --kubeconfig)
//	tenure-controller --once [--dry-run]            (one full sweep, then exit)
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/tenure-ipam/tenure/internal/admission"
	"github.com/tenure-ipam/tenure/internal/controller"
	"github.com/tenure-ipam/tenure/internal/controller/repair"
	"github.com/tenure-ipam/tenure/internal/kube"
)

// defaultGCPercent is GOGC unless the environment sets it. The
// controller's heap is almost all its caches, which only grow with the
// cluster; at Go's default of 100 the heap may reach twice them while a
// start-up decodes every pod and reservation. 50 trades a little CPU for
// a lower peak (docs/performance.md, "The controller at 100,000
// reservations and pods", has the figures).
const defaultGCPercent = 50

func main() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(defaultGCPercent)
	}
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

type flags struct {
	kubeconfig         string
	leaderElect        bool
	leNamespace        string
	leID               string
	leaseDuration      time.Duration
	renewDeadline      time.Duration
	retryPeriod        time.Duration
	sweepInterval      time.Duration
	nodeGrace          time.Duration
	probeInterval      time.Duration
	releaseUnfenced    bool
	stickyReleaseAfter time.Duration
	poolStatusInterval time.Duration
	workers            int
	metricsAddr        string
	healthAddr         string
	once               bool
	dryRun             bool
	webhookAddr        string
	webhookNamespace   string
	webhookService     string
	webhookSecret      string
	webhookConfig      string
	webhookIPs         string
}

func run(args []string, stdout, stderr io.Writer) int {
	var f flags
	fs := flag.NewFlagSet("tenure-controller", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&f.kubeconfig, "kubeconfig", "", "kubeconfig file (in-cluster config when empty)")
	fs.BoolVar(&f.leaderElect, "leader-elect", true, "elect a leader with a coordination.k8s.io Lease; only the leader acts")
	fs.StringVar(&f.leNamespace, "leader-election-namespace", "kube-system", "namespace of the leader Lease")
	fs.StringVar(&f.leID, "leader-election-id", "tenure-controller", "name of the leader Lease")
	fs.DurationVar(&f.leaseDuration, "leader-election-lease-duration", 15*time.Second, "how long non-leaders wait before taking over an unrenewed lease")
	fs.DurationVar(&f.renewDeadline, "leader-election-renew-deadline", 10*time.Second, "how long the leader retries renewing before it gives up (and exits)")
	fs.DurationVar(&f.retryPeriod, "leader-election-retry-period", 2*time.Second, "interval between lease acquire/renew attempts")
	fs.DurationVar(&f.sweepInterval, "sweep-interval", 10*time.Minute, "interval between full sweeps over every reservation (the backstop of the watch-driven release)")
	fs.BoolVar(&f.releaseUnfenced, "release-unfenced", false, "release the addresses of terminating or finished pods on a node NotReady for --node-grace-period that is not fenced; off, they wait for the node to be tainted node.kubernetes.io/out-of-service or deleted (a partitioned node still runs its pods: two hosts may answer for one address)")
	fs.DurationVar(&f.nodeGrace, "node-grace-period", 5*time.Minute, "with --release-unfenced: how long a node must be NotReady before its terminating or finished pods lose their addresses")
	fs.DurationVar(&f.probeInterval, "probe-interval", repair.DefaultProbeInterval, "with --release-unfenced: once the grace period is over, an address is released only when an agent of another Ready node probes it on the wire and hears nothing; while it answers, or no such agent answers, the agents are asked again at this interval")
	fs.DurationVar(&f.stickyReleaseAfter, "sticky-release-after", controller.DefaultStickyReleaseAfter, "how long a sticky StatefulSet pod's ordinal must stay outside its StatefulSet's (scaled below it), with no pod of its name, before its IPAMClaim and addresses are released")
	fs.DurationVar(&f.poolStatusInterval, "pool-status-interval", 5*time.Second, "at most one IPPool status write per pool per interval")
	fs.IntVar(&f.workers, "workers", 8, "reservations reconciled concurrently")
	fs.StringVar(&f.metricsAddr, "metrics-addr", ":9465", "address of the Prometheus /metrics endpoint; \"0\" disables it")
	fs.StringVar(&f.healthAddr, "health-addr", ":9466", "address of /healthz and /readyz; \"0\" disables it")
	fs.BoolVar(&f.once, "once", false, "run one full sweep, print each release (one line each, with its reason) and exit; ignores leader election")
	fs.BoolVar(&f.dryRun, "dry-run", false, "with --once: print what would be released and change nothing")
	fs.StringVar(&f.webhookAddr, "webhook-addr", "0", "address of the agent node-restriction webhook (HTTPS, e.g. :9443); \"0\" disables it")
	fs.StringVar(&f.webhookNamespace, "webhook-namespace", envOr("POD_NAMESPACE", "tenure-system"), "namespace of the webhook's Service and of its certificate Secret")
	fs.StringVar(&f.webhookService, "webhook-service", "tenure-controller-webhook", "the webhook's Service: the serving certificate names it")
	fs.StringVar(&f.webhookSecret, "webhook-secret", "tenure-controller-webhook-tls", "Secret holding the webhook's CA and serving certificate, shared by the replicas")
	fs.StringVar(&f.webhookConfig, "webhook-config", "tenure-agent-node-restriction", "ValidatingWebhookConfiguration whose caBundle is kept")
	fs.StringVar(&f.webhookIPs, "webhook-ip", "", "comma-separated IP addresses the serving certificate names as well (a webhook reached by URL)")
	fs.Usage = func() {
		fmt.Fprint(stderr, "usage: tenure-controller [--kubeconfig PATH] [flags]\n       tenure-controller --once [--dry-run] [flags]\n\nflags:\n")
		fs.PrintDefaults()
	}
	if len(args) > 0 && args[0] == "help" {
		fs.Usage()
		return 0
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "tenure-controller: unexpected argument %q\n\n", fs.Arg(0))
		fs.Usage()
		return 2
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	klog.SetSlogLogger(log)
	ctrllog.SetLogger(logr.FromSlogHandler(log.Handler()))
	if f.dryRun && !f.once {
		log.Error("--dry-run needs --once")
		return 2
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"--sweep-interval", f.sweepInterval}, {"--pool-status-interval", f.poolStatusInterval}, {"--sticky-release-after", f.stickyReleaseAfter},
		{"--leader-election-lease-duration", f.leaseDuration}, {"--leader-election-renew-deadline", f.renewDeadline},
		{"--leader-election-retry-period", f.retryPeriod}, {"--probe-interval", f.probeInterval},
	} {
		if d.v <= 0 {
			log.Error(fmt.Sprintf("%s must be positive, got %s", d.name, d.v))
			return 2
		}
	}
	if f.nodeGrace < 0 {
		log.Error(fmt.Sprintf("--node-grace-period must not be negative, got %s", f.nodeGrace))
		return 2
	}
	if !f.releaseUnfenced {
		fs.Visit(func(fl *flag.Flag) {
			if fl.Name == "node-grace-period" {
				log.Warn("--node-grace-period has no effect without --release-unfenced: the addresses of terminating pods on a NotReady node wait for the node to be fenced (tainted " +
					corev1.TaintNodeOutOfService + ", or deleted)")
			}
		})
	}
	if f.workers < 1 {
		log.Error(fmt.Sprintf("--workers must be at least 1, got %d", f.workers))
		return 2
	}
	cfg, err := kube.RESTConfig(f.kubeconfig)
	if err != nil {
		log.Error("loading API client config", "err", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if f.once {
		return once(ctx, cfg, f, stdout, log)
	}
	return serve(ctx, cfg, f, log)
}

// once is `--once [--dry-run]`: the periodic sweep's code, one pass.
func once(ctx context.Context, cfg *rest.Config, f flags, stdout io.Writer, log *slog.Logger) int {
	c, err := kube.NewClient(cfg)
	if err != nil {
		log.Error("creating client", "err", err)
		return 1
	}
	rel := &controller.Releaser{Live: c, Writer: c, DryRun: f.dryRun, Log: log}
	rel.Policy.NodeGracePeriod, rel.Policy.ReleaseUnfenced, rel.Policy.ProbeInterval = f.nodeGrace, f.releaseUnfenced, f.probeInterval
	if !f.dryRun {
		rel.Events = &controller.SyncEventRecorder{Client: c, Log: log}
	}
	res, err := controller.NewSweeper(c, c, rel).Sweep(ctx)
	verb := "released"
	if f.dryRun {
		verb = "would-release"
	}
	n := 0
	for _, o := range res.Outcomes {
		if !f.dryRun && !o.Released {
			continue
		}
		n++
		r, d := o.Reservation, o.Decision
		fmt.Fprintf(stdout, "%s %s address=%s network=%s owner=%s/%s/%s uid=%s node=%s reason=%s: %s\n",
			verb, o.Name, r.Spec.Address, r.Spec.Network, r.Spec.Owner.Kind, r.Spec.Owner.Namespace, r.Spec.Owner.Name,
			r.Spec.Owner.UID, orDash(r.Spec.Owner.Node), d.Reason, d.Message)
	}
	log.Info("sweep done", "dryRun", f.dryRun, "reservations", res.Reservations, verb, n,
		"keptOnLiveRead", res.Kept, "claimsFinalized", res.ClaimsFinalized, "finalizersAdded", res.FinalizersAdded, "duration", res.Duration)
	if err != nil {
		log.Error("sweep had errors", "err", err)
		return 1
	}
	return 0
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func serve(ctx context.Context, cfg *rest.Config, f flags, log *slog.Logger) int {
	events, shutdownEvents, err := controller.NewEventRecorder(cfg)
	if err != nil {
		log.Error("creating event recorder", "err", err)
		return 1
	}
	defer shutdownEvents()
	o := controller.Options{
		ReleaseUnfenced: f.releaseUnfenced, NodeGracePeriod: f.nodeGrace, ProbeInterval: f.probeInterval, SweepInterval: f.sweepInterval, PoolStatusInterval: f.poolStatusInterval,
		StickyReleaseAfter: f.stickyReleaseAfter, Workers: f.workers, Events: events, Logger: log,
	}
	if f.leaderElect {
		o.LeaderElection = &controller.LeaderElection{Namespace: f.leNamespace, Name: f.leID, Identity: identity(),
			LeaseDuration: f.leaseDuration, RenewDeadline: f.renewDeadline, RetryPeriod: f.retryPeriod}
	}
	c, err := controller.New(cfg, o)
	if err != nil {
		log.Error("creating controller", "err", err)
		return 1
	}
	if f.metricsAddr != "0" && f.metricsAddr != "" {
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(crmetrics.Registry, promhttp.HandlerOpts{}))
		if err := listen(ctx, "metrics", f.metricsAddr, mux, log); err != nil {
			return 1
		}
	}
	if f.healthAddr != "0" && f.healthAddr != "" {
		mux := http.NewServeMux()
		mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
		mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
			if !c.Ready() {
				http.Error(w, "caches not synced", http.StatusServiceUnavailable)
				return
			}
			_, _ = io.WriteString(w, "ok\n")
		})
		if err := listen(ctx, "health", f.healthAddr, mux, log); err != nil {
			return 1
		}
	}
	if f.webhookAddr != "0" && f.webhookAddr != "" {
		if err := serveWebhook(ctx, cfg, f, c.PodBinding, log); err != nil {
			log.Error("starting the webhook", "err", err)
			return 1
		}
	}
	if le := o.LeaderElection; le != nil {
		log.Info("waiting for the leader lease", "lease", le.Namespace+"/"+le.Name, "identity", le.Identity)
	}
	if err := c.Run(ctx); err != nil {
		if o.LeaderElection != nil && ctx.Err() == nil {
			log.Error("lost the leader lease; exiting to restart as a follower", "lease", f.leNamespace+"/"+f.leID, "err", err)
		} else {
			log.Error("controller stopped", "err", err)
		}
		return 1
	}
	return 0
}

// listen serves h on addr until ctx ends; the bound address is logged
// (addr may end in :0).
func listen(ctx context.Context, name, addr string, h http.Handler, log *slog.Logger) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		log.Error("listening", "endpoint", name, "addr", addr, "err", err)
		return err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("serving", "endpoint", name, "err", err)
		}
	}()
	context.AfterFunc(ctx, func() { _ = srv.Close() })
	log.Info("serving", "endpoint", name, "addr", l.Addr().String())
	return nil
}

// identity is this replica's in the leader Lease: the pod's name where
// the Deployment gives it (a pod on the host network has the node's
// hostname, which names no replica), made unique per process.
func identity() string {
	host := os.Getenv("POD_NAME")
	if host == "" {
		host, _ = os.Hostname()
	}
	return host + "_" + string(uuid.NewUUID())
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// webhookCertInterval is how often a replica checks its certificate, the
// Secret and the caBundle (renewal is due weeks ahead; a configuration
// re-applied without caBundle is repaired within it).
const webhookCertInterval = time.Minute

// serveWebhook serves the agent node-restriction webhook (every replica,
// leader or not: it only reads) with the certificate of the shared Secret.
// The first certificate is tried before it returns; renewals (and
// retries) run in the background.
func serveWebhook(ctx context.Context, cfg *rest.Config, f flags, pods func(namespace, name string) (string, string, bool), log *slog.Logger) error {
	c, err := kube.NewClient(cfg)
	if err != nil {
		return err
	}
	svc := f.webhookService
	names := admission.Names{DNS: []string{svc + "." + f.webhookNamespace + ".svc", svc + "." + f.webhookNamespace + ".svc.cluster.local", svc + "." + f.webhookNamespace, svc}}
	for _, s := range strings.Split(f.webhookIPs, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		ip := net.ParseIP(s)
		if ip == nil {
			return fmt.Errorf("--webhook-ip: %q is no IP address", s)
		}
		names.IPs = append(names.IPs, ip)
	}
	certs := &admission.Certs{Client: c, Namespace: f.webhookNamespace, Secret: f.webhookSecret, WebhookConfig: f.webhookConfig, Names: names, Log: log}
	if err := certs.Ensure(ctx); err != nil {
		// Until a certificate is loaded the TLS handshakes fail: the API
		// server tries another replica or, with none, refuses the agent.
		log.Warn("webhook certificate not ready; retrying", "err", err)
		go func() {
			_ = wait.PollUntilContextCancel(ctx, 2*time.Second, false, func(ctx context.Context) (bool, error) {
				err := certs.Ensure(ctx)
				if err != nil {
					log.Warn("webhook certificate not ready", "err", err)
				}
				return err == nil, nil
			})
			certs.Run(ctx, webhookCertInterval)
		}()
	} else {
		go certs.Run(ctx, webhookCertInterval)
	}
	l, err := net.Listen("tcp", f.webhookAddr)
	if err != nil {
		return err
	}
	admission.Serve(ctx, l, &admission.Handler{Reader: c, Log: log, Pods: pods}, certs, log)
	log.Info("serving", "endpoint", "webhook", "addr", l.Addr().String(), "path", admission.Path)
	return nil
}
