//go:build integration

package node_test

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/tenure-ipam/tenure/dev/bench"
	"github.com/tenure-ipam/tenure/dev/nodetest"
)

// The pod-start benchmark, small: three pods per IPAM in a wave, two sets
// of waves, and two storms of three, host-local, tenure and whereabouts
// alternating on the real node. Every pod must be Ready with Multus'
// network-status, every IPAM's ADDs timed, the machine's CPU and the API
// requests per pod read, and the ratios of tenure to the others computed
// with how far they move batch to batch; the figures themselves are
// logged, not judged (three pods say nothing of p99).
func TestPodStartBenchRunsEveryIPAMOnTheRealNode(t *testing.T) {
	// Each batch the hypervisor takes the machine from under is run again,
	// up to three times: room for that.
	ctx := nodetest.Context(t, 15*time.Minute)
	rows, err := bench.PodStart(ctx, bench.PodStartCluster{Config: cp.Config, Kubeconfig: cp.KubeconfigPath, Node: node, Dir: t.TempDir()},
		bench.PodStartOptions{Pods: 3, Wave: 3, Sets: 2, Storm: 3, Storms: 2}, testLog{t})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bench.Result{}
	for _, r := range rows {
		got[r.ID] = r
		t.Logf("%s: %v", r.ID, r.Figures)
	}
	for phase, pods := range map[string]float64{"waves": 6, "storm": 6} {
		for _, ipam := range []string{"host-local", "tenure", "whereabouts"} {
			r, ok := got["pod-start-"+phase+"-"+ipam]
			if !ok {
				t.Errorf("no row for %s %s", phase, ipam)
				continue
			}
			f := r.Figures
			if f["pods"] != pods || f["not_ready"] != 0 || f["batches"] != 2 {
				t.Errorf("%s %s: %v pods in %v batches, %v not Ready; want %v Ready in 2", phase, ipam, f["pods"], f["batches"], f["not_ready"], pods)
			}
			// At least one ADD per pod went through this IPAM and was timed.
			if f["ipam_adds"]-f["ipam_add_failures"] < pods || f["ipam_add_p50_ms"] <= 0 {
				t.Errorf("%s %s: %v ADDs timed (%v failed), p50 %v ms", phase, ipam, f["ipam_adds"], f["ipam_add_failures"], f["ipam_add_p50_ms"])
			}
			if f["ready_p50_ms"] <= 0 || f["netstatus_p50_ms"] <= 0 || f["netstatus_p50_ms"] > f["ready_p50_ms"] {
				t.Errorf("%s %s: Ready p50 %v ms, network-status p50 %v ms", phase, ipam, f["ready_p50_ms"], f["netstatus_p50_ms"])
			}
			// The node's own processes ran for these pods, within what the
			// machine was busy.
			if f["api_requests_per_pod"] < 1 { // the pod's create at least
				t.Errorf("%s %s: %v API requests per pod", phase, ipam, f["api_requests_per_pod"])
			}
			busy := f["cpu_per_pod_ms_machine_busy"]
			for _, g := range []string{"kubelet", "containerd", "kube_apiserver"} {
				if v := f["cpu_per_pod_ms_"+g]; v <= 0 || v > busy {
					t.Errorf("%s %s: %s %v ms CPU per pod, the machine busy %v ms per pod", phase, ipam, g, v, busy)
				}
			}
		}
		for _, other := range []string{"host-local", "whereabouts"} {
			r, ok := got["pod-start-"+phase+"-tenure/"+other]
			if _, spread := r.Figures["ready_p50_ms_stderr"]; !ok || r.Figures["ready_p50_ms"] <= 0 || r.Figures["ipam_add_p50_ms"] <= 0 || !spread {
				t.Errorf("%s: no ratio tenure/%s: %v", phase, other, r.Figures)
			}
		}
	}
	// What the scenario put on the host is gone again.
	for _, p := range []string{"/opt/cni/bin/whereabouts", "/opt/cni/bin/tenure-bench-ipam-timer"} {
		if _, err := os.Lstat(p); err == nil {
			t.Errorf("%s left on the node", p)
		}
	}
	// The pods' reservations are released with them.
	if left := kc.Reservations(ctx, t, "pod-start"); len(left) > 0 {
		t.Errorf("reservations left: %v", left)
	}
}

type testLog struct{ t *testing.T }

func (l testLog) Write(p []byte) (int, error) {
	l.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
