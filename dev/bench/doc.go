// Package bench measures tenure end to end on a real control plane: a
// kube-apiserver and etcd started for the run, tenure-agent processes posing
// as nodes, the tenure-controller when it is built, and the CNI shim executed
// as a container runtime executes it (a fresh process per call, CNI_*
// environment, the network configuration on stdin).
//
// Every scenario reports its throughput and latency, the API requests and
// writes it cost (from the API server's apiserver_request_total before and
// after), and the raw create rate of the same API server measured right
// after it at the same concurrency, so each figure is also a ratio to what
// the machine can do at all. `tenurectl bench` is the command-line front end;
// docs/performance.md holds the latest results.
//
// The pure parts (percentiles, metrics parsing, the plot, the tables) need
// no control plane and are unit tested; BenchmarkAdd runs a small scenario
// when the control-plane binaries exist.
package bench
