//go:build integration

package e2e

import (
	"context"
	"encoding/json"
	"io/fs"
	"net/http"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/deploy"
	"github.com/tenure-ipam/tenure/internal/kube"
	"github.com/tenure-ipam/tenure/internal/reservation"
	"github.com/tenure-ipam/tenure/test/controlplane"
	"github.com/tenure-ipam/tenure/test/controlplane/cptest"
	"github.com/tenure-ipam/tenure/test/testbed"
)

// agentBehindProxy starts node's agent with its own credential, reaching
// the API server of admin through a fault proxy.
func agentBehindProxy(t *testing.T, ctx context.Context, admin *testbed.FaultProxy, cfg *controlplane.ControlPlane, node string) *testbed.Agent {
	t.Helper()
	c, err := kube.NewClient(cfg.Config)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := testbed.CreateNode(ctx, c, node); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	direct, err := testbed.NodeAgentKubeconfig(ctx, cfg.Config, node, dir)
	if err != nil {
		t.Fatal(err)
	}
	via, err := admin.Kubeconfig(direct, dir)
	if err != nil {
		t.Fatal(err)
	}
	a, err := testbed.StartAgent(ctx, bins, dir, via, node)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Stop)
	return a
}

// heldByPod lists, live, the names of the reservations pod UID holds.
func heldByPod(t *testing.T, ctx context.Context, c client.Client, uid string) []string {
	t.Helper()
	var list tenurev1alpha1.IPReservationList
	if err := c.List(ctx, &list, client.MatchingLabels{reservation.LabelOwnerUID: uid}); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, r := range list.Items {
		names = append(names, r.Name)
	}
	slices.Sort(names)
	return names
}

// withheldCreate is the reservation whose create's answer the proxy kept.
func withheldCreate(t *testing.T, p *testbed.FaultProxy) *tenurev1alpha1.IPReservation {
	t.Helper()
	w := p.Withheld()
	if len(w) != 1 || w[0].Status != http.StatusCreated {
		t.Fatalf("the proxy withheld %d answers (%+v), want one 201 to a create", len(w), w)
	}
	r := &tenurev1alpha1.IPReservation{}
	if err := json.Unmarshal(w[0].Body, r); err != nil {
		t.Fatal(err)
	}
	return r
}

// An ADD whose reservation the API server commits while the answer is lost
// (the proxy forwards the create, then resets the connection) ends with
// that reservation and no other, and the runtime's retry of the same
// container gets the same address:
//   - read back in time: the ADD itself answers the committed address;
//   - not readable in time (the proxy refuses every read of the name
//     longer than the agent settles for) while the agent's watches are
//     broken, so its cache never shows the reservation: the ADD answers
//     code 11, and the retry, once the API server answers reads, gets that
//     address.
func TestAmbiguousCreateRetrySameAddress(t *testing.T) {
	ctx := testContext(t, 4*time.Minute)
	c := apiClient(t)
	proxy, err := testbed.NewFaultProxy(cptest.Current().Config)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.Close)
	const node = "nlost"
	agent := agentBehindProxy(t, ctx, proxy, cptest.Current(), node)
	conf := netconf("lost", agent.Socket, `{"range":"10.81.0.0/24","network_name":"lost"}`)

	t.Run("read back in time", func(t *testing.T) {
		var once atomic.Bool
		proxy.SetDecide(func(r *http.Request) testbed.Fault {
			if testbed.IsCreateOf(r, "ipreservations") && once.CompareAndSwap(false, true) {
				return testbed.ForwardThenReset
			}
			return testbed.Forward
		})
		defer proxy.SetDecide(nil)
		p := newPod(t, ctx, c, "e2e-lost", node, nil)
		first, err := add(ctx, p, conf)
		if err != nil {
			t.Fatalf("ADD whose create's answer was lost: %v", err)
		}
		committed := withheldCreate(t, proxy)
		if got := addrs(first); !slices.Equal(got, []string{committed.Spec.Address}) {
			t.Fatalf("ADD answered %v; the create the API server committed is %s (%s)", got, committed.Name, committed.Spec.Address)
		}
		retry, err := add(ctx, p, conf)
		if err != nil || !slices.Equal(addrs(retry), addrs(first)) {
			t.Fatalf("retry of the same container: %v, %v; want %v", retry, err, addrs(first))
		}
		if got := heldByPod(t, ctx, c, p.uid); !slices.Equal(got, []string{committed.Name}) {
			t.Fatalf("the pod holds %v, want only %s", got, committed.Name)
		}
	})

	// The API server goes away mid-create, so the
	// agent's watches break and cannot reopen for a while, and its cache
	// never shows the committed reservation before the retry.
	t.Run("unsettled while the cache lags, then retried", func(t *testing.T) {
		// One block (a /26) only, which a first ADD has the agent watch:
		// the ADD under test needs no new watch, which the faults refuse.
		conf := netconf("lost-b", agent.Socket, `{"range":"10.81.1.0/26","network_name":"lost-b"}`)
		if _, err := add(ctx, newPod(t, ctx, c, "e2e-lost", node, nil), conf); err != nil {
			t.Fatal(err)
		}
		var created, refusing atomic.Bool
		refusing.Store(true)
		proxy.SetDecide(func(r *http.Request) testbed.Fault {
			if testbed.IsWatch(r) {
				return testbed.Reset
			}
			if testbed.IsCreateOf(r, "ipreservations") && created.CompareAndSwap(false, true) {
				return testbed.ForwardThenReset
			}
			// Reads of one reservation by name, and creates: what settling
			// does. Lists pass.
			byName := strings.Contains(r.URL.Path, "/ipreservations/")
			if created.Load() && refusing.Load() && (byName || testbed.IsCreateOf(r, "ipreservations")) {
				return testbed.Reset
			}
			return testbed.Forward
		})
		defer proxy.SetDecide(nil)
		proxy.BreakWatches()
		before := len(proxy.Withheld())
		p := newPod(t, ctx, c, "e2e-lost", node, nil)
		_, err := add(ctx, p, conf)
		if code := cniCode(err); code != 11 {
			t.Fatalf("ADD whose create could not be settled: %v, want CNI code 11", err)
		}
		w := proxy.Withheld()[before:]
		if len(w) != 1 {
			t.Fatalf("withheld %+v", w)
		}
		committed := &tenurev1alpha1.IPReservation{}
		if err := json.Unmarshal(w[0].Body, committed); err != nil {
			t.Fatal(err)
		}
		refusing.Store(false)
		retry, err := add(ctx, p, conf)
		if err != nil {
			t.Fatalf("retry of the same container: %v", err)
		}
		if got := addrs(retry); !slices.Equal(got, []string{committed.Spec.Address}) {
			t.Fatalf("retry answered %v; the committed create is %s (%s)", got, committed.Name, committed.Spec.Address)
		}
		if got := heldByPod(t, ctx, c, p.uid); !slices.Equal(got, []string{committed.Name}) {
			t.Fatalf("the pod holds %v, want only %s", got, committed.Name)
		}
	})
}

// A DEL right after kube-apiserver was killed (-9) and restarted, while the
// agent's cache has not caught up (its watches cannot reconnect: the proxy
// in front of the API server refuses them), and a reservation of the
// attachment exists that the cache never saw: DEL releases both of the
// attachment's reservations or answers code 11; whenever it answers
// success, the API server holds nothing of the attachment.
func TestDelAfterAPIServerRestart(t *testing.T) {
	ctx := testContext(t, 6*time.Minute)
	cp := ownControlPlane(t, ctx)
	c, err := kube.NewClient(cp.Config)
	if err != nil {
		t.Fatal(err)
	}
	proxy, err := testbed.NewFaultProxy(cp.Config)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.Close)
	const node = "nrestart"
	agent := agentBehindProxy(t, ctx, proxy, cp, node)
	conf := netconf("restart", agent.Socket, `{"range":"10.82.0.0/24","network_name":"restart"}`)
	p := newPod(t, ctx, c, "e2e-restart", node, nil)
	first, err := add(ctx, p, conf)
	if err != nil {
		t.Fatal(err)
	}

	proxy.SetDecide(func(r *http.Request) testbed.Fault {
		if r.URL.Query().Get("watch") == "true" {
			return testbed.Reset
		}
		return testbed.Forward
	})
	if err := cp.Crash(ctx, "kube-apiserver"); err != nil {
		t.Fatal(err)
	}
	// The attachment's second reservation, as a create committed just
	// before the crash whose event the agent never got.
	item := netip.MustParsePrefix("10.82.0.200/32")
	lost := reservation.New(reservation.Spec{Network: "restart", Kind: tenurev1alpha1.KindAddress, Item: item, Range: "10.82.0.0/24", CNINetwork: "restart",
		Owner: tenurev1alpha1.ReservationOwner{Kind: tenurev1alpha1.OwnerPod, Namespace: p.ns, Name: p.name, UID: p.uid, PodName: p.name, PodUID: p.uid,
			ContainerID: p.containerID, Interface: "net1", Node: node}})
	if err := c.Create(ctx, lost); err != nil {
		t.Fatal(err)
	}
	held := heldByPod(t, ctx, c, p.uid)
	if len(held) != 2 || !slices.Contains(held, lost.Name) {
		t.Fatalf("before DEL the pod holds %v, want %s (answered %v) and %s", held, "its first", addrs(first), lost.Name)
	}

	refused := 0
	for {
		err := del(ctx, p, conf)
		if err == nil {
			break
		}
		if cniCode(err) != 11 || ctx.Err() != nil {
			t.Fatalf("DEL: %v, want success or CNI code 11", err)
		}
		refused++
		if left := heldByPod(t, ctx, c, p.uid); len(left) == 0 {
			t.Logf("DEL answered 11 with nothing left: the runtime's next DEL succeeds")
		}
		time.Sleep(200 * time.Millisecond)
	}
	if left := heldByPod(t, ctx, c, p.uid); len(left) != 0 {
		t.Fatalf("DEL answered success while the API server holds %v for the attachment", left)
	}
	t.Logf("DEL answered success after %d retryable refusals", refused)
}

// ownControlPlane starts a control plane of the test's own (one it may
// restart, or one with apiserverArgs), with tenure's CRDs and the agents'
// access, and stops it when the test ends.
func ownControlPlane(t *testing.T, ctx context.Context, apiserverArgs ...string) *controlplane.ControlPlane {
	t.Helper()
	cp, err := controlplane.Start(ctx, controlplane.Options{Dir: filepath.Join(t.TempDir(), "cp"), APIServerArgs: apiserverArgs})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cp.Stop() })
	crds, err := fs.Sub(deploy.CRDs, "crds")
	if err != nil {
		t.Fatal(err)
	}
	if err := controlplane.InstallCRDs(ctx, cp.Config, crds); err != nil {
		t.Fatal(err)
	}
	if _, err := testbed.InstallAgentAccess(ctx, cp.Config); err != nil {
		t.Fatal(err)
	}
	return cp
}
