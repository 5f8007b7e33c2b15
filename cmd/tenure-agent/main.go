// Command tenure-agent is the node agent: it serves the CNI shim's calls on
// a unix socket from informer caches of the cluster's reservations.
//
//	tenure-agent --node-name NAME --socket PATH [--kubeconfig PATH]
//	             [--metrics-addr ADDR] [--dataplane-netns PATH]
//	tenure-agent install ...   (the DaemonSet's init container)
//	tenure-agent health --socket PATH   (liveness/readiness probe)
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"

	"github.com/tenure-ipam/tenure/internal/agent"
	"github.com/tenure-ipam/tenure/internal/cniwire"
	"github.com/tenure-ipam/tenure/internal/health"
	"github.com/tenure-ipam/tenure/internal/kube"
)

func main() {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case "health":
			os.Exit(runHealth(os.Args[2:]))
		case "install":
			os.Exit(install(os.Args[2:]))
		}
	}
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	fs := flag.NewFlagSet("tenure-agent", flag.ExitOnError)
	node := fs.String("node-name", os.Getenv("NODE_NAME"), "name of the node this agent serves (default $NODE_NAME)")
	socket := fs.String("socket", cniwire.DefaultSocket, "unix socket the CNI shim calls")
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig file (in-cluster config when empty)")
	metricsAddr := fs.String("metrics-addr", "", "address of the Prometheus /metrics endpoint (e.g. :9466); empty disables it")
	dataplaneNetns := fs.String("dataplane-netns", "", "network namespace (path) DHCPv6 is served in and prefix routes are installed in; empty is the agent's own")
	_ = fs.Parse(args)
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if *node == "" {
		log.Error("--node-name (or $NODE_NAME) is required")
		return 2
	}
	cfg, err := kube.RESTConfig(*kubeconfig)
	if err != nil {
		log.Error("loading API client config", "err", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	a, err := agent.NewForConfig(cfg, agent.Options{NodeName: *node, Logger: log,
		Dataplane: agent.DataplaneOptions{Netns: *dataplaneNetns, StateFile: *socket + ".dataplane.json"}})
	if err != nil {
		log.Error("creating agent", "err", err)
		return 1
	}
	defer a.Shutdown()
	if err := a.Start(ctx); err != nil {
		log.Error("starting agent", "err", err)
		return 1
	}
	if *metricsAddr != "" {
		ml, err := net.Listen("tcp", *metricsAddr)
		if err != nil {
			log.Error("listening for metrics", "addr", *metricsAddr, "err", err)
			return 1
		}
		log.Info("serving metrics", "addr", ml.Addr().String())
		go func() {
			if err := a.ServeMetrics(ctx, ml); err != nil {
				log.Error("serving metrics", "err", err)
			}
		}()
	}
	l, err := agent.Listen(*socket)
	if err != nil {
		log.Error("listening", "socket", *socket, "err", err)
		return 1
	}
	log.Info("serving", "node", *node, "socket", *socket)
	if err := a.Serve(ctx, l); err != nil {
		log.Error("serving", "err", err)
		return 1
	}
	return 0
}

func runHealth(args []string) int {
	fs := flag.NewFlagSet("health", flag.ExitOnError)
	socket := fs.String("socket", cniwire.DefaultSocket, "agent socket")
	ready := fs.Bool("ready", false, "check readiness (caches synced), not just liveness")
	_ = fs.Parse(args)
	path := agent.PathHealthz
	if *ready {
		path = agent.PathReadyz
	}
	if err := health.Probe(context.Background(), *socket, path); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}
