//go:build integration

package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/reservation"
	"github.com/tenure-ipam/tenure/test/controlplane/cptest"
	"github.com/tenure-ipam/tenure/test/testbed"
)

// ctl is a tenure-controller process with its metrics and health endpoints.
type ctl struct {
	*testbed.Process
	metrics, health string // base URLs
}

// ctlStart starts tenure-controller against the test control plane with its
// own Lease (lease), waits until its caches have synced, and stops it when
// the test ends (its log is printed if the test failed). The renew deadline
// is long enough that a machine busy with the other test packages does not
// cost the leader its Lease; failover in these tests is a graceful stop,
// which releases the Lease at once.
func ctlStart(t *testing.T, ctx context.Context, lease string, extra ...string) *ctl {
	t.Helper()
	if bins.Controller == "" {
		t.Fatal("tenure-controller was not built")
	}
	maddr, haddr := testbed.FreeLoopbackAddr(t), testbed.FreeLoopbackAddr(t)
	args := append([]string{
		"--kubeconfig", cptest.Current().KubeconfigPath,
		"--metrics-addr", maddr, "--health-addr", haddr,
		"--leader-election-id", lease,
		"--leader-election-lease-duration", "10s", "--leader-election-renew-deadline", "8s", "--leader-election-retry-period", "250ms",
		"--pool-status-interval", "500ms",
	}, extra...)
	log := filepath.Join(t.TempDir(), "controller.log")
	p, err := testbed.StartProcess("controller-"+lease, bins.Controller, log, args...)
	if err != nil {
		t.Fatal(err)
	}
	c := &ctl{Process: p, metrics: "http://" + maddr, health: "http://" + haddr}
	t.Cleanup(func() {
		p.Stop()
		if t.Failed() {
			b, _ := os.ReadFile(log)
			if len(b) > 20000 {
				b = b[len(b)-20000:]
			}
			t.Logf("%s log:\n%s", p.Name, b)
		}
	})
	ctlPoll(t, ctx, "controller ready", func() (bool, error) {
		if !p.Running() {
			b, _ := os.ReadFile(log)
			return false, fmt.Errorf("controller exited: %v\n%s", p.Wait(), b)
		}
		resp, err := http.Get(c.health + "/readyz")
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	return c
}

// scrape returns the /metrics text.
func (c *ctl) scrape() (string, error) {
	resp, err := http.Get(c.metrics + "/metrics")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// metric sums the samples of one metric whose labels include want
// (label="value" strings). Found is false when no sample matched.
func (c *ctl) metric(t *testing.T, name string, want ...string) (sum float64, found bool) {
	t.Helper()
	text, err := c.scrape()
	if err != nil {
		t.Fatalf("scraping %s: %v", c.Name, err)
	}
	m, err := testbed.ParseMetrics(text)
	if err != nil {
		t.Fatalf("parsing the metrics of %s: %v", c.Name, err)
	}
	return m.Sum(name, want...)
}

func (c *ctl) leading(t *testing.T) bool {
	v, _ := c.metric(t, "tenure_controller_leader")
	return v == 1
}

func (c *ctl) waitLeading(t *testing.T, ctx context.Context) {
	t.Helper()
	ctlPoll(t, ctx, c.Name+" leading", func() (bool, error) { return c.leading(t), nil })
}

// waitSweepAfter waits until a full sweep has completed after since.
func (c *ctl) waitSweepAfter(t *testing.T, ctx context.Context, since time.Time) {
	t.Helper()
	ctlPoll(t, ctx, "a full sweep after "+since.Format(time.RFC3339Nano), func() (bool, error) {
		v, _ := c.metric(t, "tenure_last_sweep_success_timestamp_seconds")
		return v > float64(since.UnixNano())/1e9, nil
	})
}

// ctlPoll polls cond every 50 ms until it holds, fails or ctx ends.
func ctlPoll(t *testing.T, ctx context.Context, what string, cond func() (bool, error)) {
	t.Helper()
	if err := wait.PollUntilContextCancel(ctx, 50*time.Millisecond, true, func(context.Context) (bool, error) {
		return cond()
	}); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

// ctlReservation creates a reservation directly, as the agent would have
// (same name derivation and labels).
func ctlReservation(t *testing.T, ctx context.Context, c client.Client, network, item string, owner tenurev1alpha1.ReservationOwner) *tenurev1alpha1.IPReservation {
	t.Helper()
	spec := reservation.Spec{Network: network, Kind: tenurev1alpha1.KindAddress, Owner: owner}
	if strings.Contains(item, "/") {
		spec.Kind, spec.Item = tenurev1alpha1.KindDelegatedPrefix, netip.MustParsePrefix(item)
	} else {
		addr := netip.MustParseAddr(item)
		spec.Item = netip.PrefixFrom(addr, addr.BitLen())
	}
	r := reservation.New(spec)
	if err := c.Create(ctx, r); err != nil {
		t.Fatal(err)
	}
	return r
}

// ghostOwner is a pod owner whose pod never existed.
func ghostOwner(ns string, i int) tenurev1alpha1.ReservationOwner {
	uid := fmt.Sprintf("00000000-0000-4000-8000-%012d", time.Now().UnixNano()%1e12+int64(i))
	return tenurev1alpha1.ReservationOwner{Kind: tenurev1alpha1.OwnerPod, Namespace: ns, Name: fmt.Sprintf("ghost-%d", i), UID: uid,
		PodName: fmt.Sprintf("ghost-%d", i), PodUID: uid, ContainerID: "ghost-sandbox-" + strconv.Itoa(i), Interface: "net1", Node: "ghost-node"}
}

// present maps the reservation names of a network that exist now to their UIDs.
func present(t *testing.T, ctx context.Context, network string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, r := range reservationsOf(t, ctx, network) {
		out[r.Name] = string(r.UID)
	}
	return out
}

func reservationName(network, addr string) string {
	return reservation.AddressName(network, netip.MustParseAddr(addr))
}
