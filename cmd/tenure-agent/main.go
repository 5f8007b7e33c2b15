// Command tenure-agent is the node agent: it serves the CNI shim's calls on
// a unix socket from informer caches of the cluster's reservations.
//
//	tenure-agent --node-name NAME --socket PATH [--kubeconfig PATH]
//	             [--metrics-addr ADDR] [--dataplane-netns PATH]
//	             [--probe=false] [--probe-count N] [--probe-interval D]
//	             [--probe-fresh D] [--probe-ahead N]
//	tenure-agent install ...   (the DaemonSet's init container)
//	tenure-agent health --socket PATH   (liveness/readiness probe)
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"syscall"
	"time"

	"github.com/tenure-ipam/tenure/internal/agent"
	"github.com/tenure-ipam/tenure/internal/cniwire"
	"github.com/tenure-ipam/tenure/internal/health"
	"github.com/tenure-ipam/tenure/internal/kube"
	"github.com/tenure-ipam/tenure/internal/probe"
	"github.com/tenure-ipam/tenure/internal/store"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

// The values --api-encoding still accepts, so that a DaemonSet that sets
// it keeps starting: reservations travel in JSON through client-go's own
// serializer whichever is given (docs/design.md, "One view of a
// reservation").
const (
	apiEncodingJSON = "json"
	apiEncodingAuto = "auto"
)

const usageText = `usage: tenure-agent [flags]                           serve the CNI shim's calls
       tenure-agent install [flags]                   install the CNI shim on the host (the DaemonSet's init container)
       tenure-agent health [--socket PATH] [--ready]  probe a running agent

flags:
`

// run executes the command line args (without the program name) and returns
// the exit code: 2 for a command line it does not understand, which never
// starts an agent.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		switch args[0] {
		case "health":
			return runHealth(args[1:], stderr)
		case "install":
			return install(args[1:], stderr)
		case "help":
			fs, _ := agentFlags(stderr)
			fs.Usage()
			return 0
		}
	}
	return serve(args, stderr)
}

type agentOptions struct {
	node, socket, kubeconfig, metricsAddr, dataplaneNetns, apiEncoding string

	probe                     bool
	probeCount, probeAhead    int
	probeInterval, probeFresh time.Duration

	releaseCooldown time.Duration
}

// agentFlags is the flag set of the agent itself; its usage lists the
// subcommands too.
func agentFlags(stderr io.Writer) (*flag.FlagSet, *agentOptions) {
	var o agentOptions
	fs := flag.NewFlagSet("tenure-agent", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, usageText)
		fs.PrintDefaults()
	}
	fs.StringVar(&o.node, "node-name", os.Getenv("NODE_NAME"), "name of the node this agent serves (default $NODE_NAME)")
	fs.StringVar(&o.socket, "socket", cniwire.DefaultSocket, "unix socket the CNI shim calls")
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig file (in-cluster config when empty)")
	fs.StringVar(&o.metricsAddr, "metrics-addr", "", "address of the Prometheus /metrics endpoint (e.g. :9466); empty disables it")
	fs.StringVar(&o.apiEncoding, "api-encoding", apiEncodingJSON, "deprecated, no effect: reservations go to and from the API server in JSON; json or auto")
	fs.StringVar(&o.dataplaneNetns, "dataplane-netns", "", "network namespace (path) DHCPv6 is served in, prefix routes are installed in and addresses are probed in; empty is the agent's own")
	fs.BoolVar(&o.probe, "probe", true, "hand out an address only once an ARP or neighbour probe on the network's parent interface found nothing answering for it (a network opts out with ipam.probe false)")
	fs.IntVar(&o.probeCount, "probe-count", probe.DefaultCount, "probes sent per address")
	fs.DurationVar(&o.probeInterval, "probe-interval", probe.DefaultInterval, "time between probes of an address, and waited after the last")
	fs.DurationVar(&o.probeFresh, "probe-fresh", agent.DefaultWireFresh, "how long a probe's answer stands (a silent address probed longer ago is probed again before it is handed out)")
	fs.IntVar(&o.probeAhead, "probe-ahead", agent.DefaultWireAhead, "candidate addresses of each network in use kept probed ahead of the ADDs")
	fs.DurationVar(&o.releaseCooldown, "release-cooldown", store.DefaultCooldown, "how long an address released on a network is kept from a different pod or claim while other addresses are free (when none is, the one released longest ago goes first); 0 turns it off")
	return fs, &o
}

// parse parses args with fs and refuses positional arguments, which it
// names positional ("command" for the agent's own flags: a misspelt
// subcommand, tenure-agent helth, must not start an agent). It returns the
// exit code when the command is to stop here.
func parse(fs *flag.FlagSet, args []string, positional string, stderr io.Writer) (code int, stop bool) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0, true
		}
		return 2, true
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "%s: unknown %s %q\n\n", fs.Name(), positional, fs.Arg(0))
		fs.Usage()
		return 2, true
	}
	return 0, false
}

func serve(args []string, stderr io.Writer) int {
	fs, o := agentFlags(stderr)
	if code, stop := parse(fs, args, "command", stderr); stop {
		return code
	}
	if os.Getenv("GOMAXPROCS") == "" {
		// One P: a CNI call costs the agent little CPU and spends most of
		// its time waiting on the API server; a second P buys spinning
		// threads and wakeups across them, more CPU per call on a busy
		// node (docs/performance.md, "One P, GOGC 400"), and no node's pods
		// need more than a core of it. $GOMAXPROCS overrides.
		runtime.GOMAXPROCS(1)
	}
	if os.Getenv("GOGC") == "" {
		// Collect once the heap has grown by four times what is live, not
		// by once: the live heap (the node's reservations and pods) is
		// small beside the agent's memory target and every call allocates
		// its request and response anew, so at the default the agent marks
		// its heap often, a share of its CPU per call (docs/performance.md,
		// "One P, GOGC 400"). $GOGC overrides.
		debug.SetGCPercent(400)
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	if o.node == "" {
		log.Error("--node-name (or $NODE_NAME) is required")
		return 2
	}
	switch o.apiEncoding {
	case apiEncodingJSON:
	case apiEncodingAuto:
		log.Warn("--api-encoding auto is deprecated and has no effect: reservations go in JSON")
	default:
		log.Error("--api-encoding", "err", fmt.Errorf("api encoding %q: want %q or %q", o.apiEncoding, apiEncodingAuto, apiEncodingJSON))
		return 2
	}
	if o.releaseCooldown < 0 {
		log.Error("--release-cooldown must not be negative", "value", o.releaseCooldown.String())
		return 2
	}
	cooldown := o.releaseCooldown
	if cooldown == 0 {
		cooldown = agent.NoCooldown
	}
	cfg, err := kube.RESTConfig(o.kubeconfig)
	if err != nil {
		log.Error("loading API client config", "err", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	opts := agent.Options{NodeName: o.node, Logger: log, ReleaseCooldown: cooldown,
		Dataplane: agent.DataplaneOptions{Netns: o.dataplaneNetns, StateFile: o.socket + ".dataplane.json"}}
	if o.probe {
		if o.probeCount < 1 || o.probeInterval <= 0 || o.probeFresh <= 0 || o.probeAhead < 0 {
			log.Error("--probe-count, --probe-interval and --probe-fresh must be positive, --probe-ahead not negative",
				"probe-count", o.probeCount, "probe-interval", o.probeInterval, "probe-fresh", o.probeFresh, "probe-ahead", o.probeAhead)
			return 2
		}
		opts.Wire = &agent.WireOptions{Netns: o.dataplaneNetns, Count: o.probeCount, Interval: o.probeInterval, Fresh: o.probeFresh, Ahead: o.probeAhead}
	}
	a, err := agent.NewForConfig(cfg, opts)
	if err != nil {
		log.Error("creating agent", "err", err)
		return 1
	}
	defer a.Shutdown()
	if err := a.Start(ctx); err != nil {
		log.Error("starting agent", "err", err)
		return 1
	}
	if o.metricsAddr != "" {
		ml, err := net.Listen("tcp", o.metricsAddr)
		if err != nil {
			log.Error("listening for metrics", "addr", o.metricsAddr, "err", err)
			return 1
		}
		log.Info("serving metrics", "addr", ml.Addr().String())
		go func() {
			if err := a.ServeMetrics(ctx, ml); err != nil {
				log.Error("serving metrics", "err", err)
			}
		}()
	}
	l, err := agent.Listen(o.socket)
	if err != nil {
		log.Error("listening", "socket", o.socket, "err", err)
		return 1
	}
	log.Info("serving", "node", o.node, "socket", o.socket)
	if err := a.Serve(ctx, l); err != nil {
		log.Error("serving", "err", err)
		return 1
	}
	return 0
}

func runHealth(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("tenure-agent health", flag.ContinueOnError)
	fs.SetOutput(stderr)
	socket := fs.String("socket", cniwire.DefaultSocket, "agent socket")
	ready := fs.Bool("ready", false, "check readiness (caches synced), not just liveness")
	if code, stop := parse(fs, args, "argument", stderr); stop {
		return code
	}
	path := agent.PathHealthz
	if *ready {
		path = agent.PathReadyz
	}
	if err := health.Probe(context.Background(), *socket, path); err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	return 0
}
