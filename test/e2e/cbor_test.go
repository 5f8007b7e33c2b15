//go:build integration

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/deploy"
	"github.com/tenure-ipam/tenure/internal/kube"
	"github.com/tenure-ipam/tenure/internal/reservation"
	"github.com/tenure-ipam/tenure/test/controlplane"
	"github.com/tenure-ipam/tenure/test/controlplane/cptest"
	"github.com/tenure-ipam/tenure/test/testbed"
)

// cborControlPlane is a control plane of the test's own whose API server
// serves custom resources as CBOR (its alpha gate on), with tenure's CRDs
// and the agents' access.
func cborControlPlane(t *testing.T, ctx context.Context) *controlplane.ControlPlane {
	t.Helper()
	return ownControlPlane(t, ctx, "--feature-gates=CBORServingAndStorage=true")
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

// wireLog records the media types of every request and answer.
type wireLog struct {
	mu    sync.Mutex
	lines []string // "METHOD path: sent TYPE, got TYPE"
}

func (w *wireLog) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(r *http.Request) (*http.Response, error) {
		resp, err := rt.RoundTrip(r)
		got := ""
		if resp != nil {
			got = resp.Header.Get("Content-Type")
		}
		w.mu.Lock()
		w.lines = append(w.lines, r.Method+" "+r.URL.Path+"?watch="+r.URL.Query().Get("watch")+": sent "+r.Header.Get("Content-Type")+", got "+got)
		w.mu.Unlock()
		return resp, err
	})
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// take returns the lines recorded since the last take.
func (w *wireLog) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.lines
	w.lines = nil
	return out
}

// cborTestReservation is the reservation of addr on network cbor-wire,
// as the agent would write it.
func cborTestReservation(addr string) *tenurev1alpha1.IPReservation {
	return reservation.New(reservation.Spec{Network: "cbor-wire", Kind: tenurev1alpha1.KindAddress, Item: netip.PrefixFrom(netip.MustParseAddr(addr), 32),
		Range: "10.84.0.0/24", Owner: tenurev1alpha1.ReservationOwner{Kind: tenurev1alpha1.OwnerPod, Namespace: "ns", Name: "p", UID: "uid-cbor-wire", PodName: "p", PodUID: "uid-cbor-wire"}})
}

// The client WithCBOR gives writes and reads IPReservations in CBOR on an
// API server that serves them so (ServesCBOR says yes): the create's body
// and answer, the list, the watch's events and the delete. On one that
// does not (ServesCBOR says no), the same client's first create is refused
// with 415 and writes nothing, and every call after it is JSON and works.
func TestReservationsInCBORWhereServedAndJSONWhereNot(t *testing.T) {
	ctx := testContext(t, 4*time.Minute)
	kube.AllowCBOR()
	served := cborControlPlane(t, ctx)
	for _, tc := range []struct {
		name   string
		cfg    *rest.Config
		served bool
	}{{"served", served.Config, true}, {"not served", cptest.Current().Config, false}} {
		t.Run(tc.name, func(t *testing.T) {
			wire := &wireLog{}
			cfg := rest.CopyConfig(tc.cfg)
			cfg.Wrap(wire.wrap)
			ok, err := kube.ServesCBOR(ctx, cfg)
			if err != nil || ok != tc.served {
				t.Fatalf("ServesCBOR = %v, %v; want %v", ok, err, tc.served)
			}
			c, err := kube.NewClient(cfg)
			if err != nil {
				t.Fatal(err)
			}
			cc, err := kube.WithCBOR(c, cfg)
			if err != nil {
				t.Fatal(err)
			}
			wire.take()
			want := "application/cbor"
			if !tc.served {
				want = "application/json"
				first := cborTestReservation("10.84.0.6")
				if err := cc.Create(ctx, first); !apierrors.IsUnsupportedMediaType(err) {
					t.Fatalf("first create in CBOR on a server without it: %v, want 415", err)
				}
				if err := c.Get(ctx, types.NamespacedName{Name: first.Name}, &tenurev1alpha1.IPReservation{}); !apierrors.IsNotFound(err) {
					t.Fatalf("the refused create's object: %v, want NotFound", err)
				}
				wire.take()
			}
			w, err := cc.Watch(ctx, &tenurev1alpha1.IPReservationList{}, client.MatchingLabels{reservation.LabelNetwork: reservation.ScopeLabel("cbor-wire")})
			if err != nil {
				t.Fatal(err)
			}
			defer w.Stop()
			r := cborTestReservation("10.84.0.7")
			if err := cc.Create(ctx, r); err != nil {
				t.Fatalf("create: %v", err)
			}
			if r.UID == "" || r.Spec.Address != "10.84.0.7" || r.Spec.Owner.UID != "uid-cbor-wire" {
				t.Fatalf("create answered %+v", r)
			}
			ev := nextEvent(t, w)
			if got, ok := ev.Object.(*tenurev1alpha1.IPReservation); ev.Type != watch.Added || !ok || got.Name != r.Name || got.Spec.Owner.UID != "uid-cbor-wire" {
				t.Fatalf("watch event %s %#v, want Added %s", ev.Type, ev.Object, r.Name)
			}
			var list tenurev1alpha1.IPReservationList
			if err := cc.List(ctx, &list, client.MatchingLabels{reservation.LabelNetwork: reservation.ScopeLabel("cbor-wire")}); err != nil {
				t.Fatal(err)
			}
			if len(list.Items) != 1 || list.Items[0].Name != r.Name {
				t.Fatalf("list: %d items, want %s only", len(list.Items), r.Name)
			}
			uid := r.UID
			if err := cc.Delete(ctx, &tenurev1alpha1.IPReservation{ObjectMeta: metav1.ObjectMeta{Name: r.Name}}, client.Preconditions{UID: &uid}); err != nil {
				t.Fatalf("delete: %v", err)
			}
			if ev := nextEvent(t, w); ev.Type != watch.Deleted {
				t.Fatalf("watch event %s after the delete, want Deleted", ev.Type)
			}
			lines := wire.take()
			if err := c.Get(ctx, types.NamespacedName{Name: r.Name}, &tenurev1alpha1.IPReservation{}); !apierrors.IsNotFound(err) {
				t.Fatalf("after the delete: %v, want NotFound", err)
			}
			if len(lines) != 4 {
				t.Fatalf("requests %q, want watch, create, list, delete", lines)
			}
			for _, l := range lines {
				_, got, _ := strings.Cut(l, ", got ")
				_, sent, _ := strings.Cut(l, ": sent ")
				sent, _, _ = strings.Cut(sent, ", got")
				if !strings.HasPrefix(got, want) {
					t.Errorf("%s: answer not in %s", l, want)
				}
				if (strings.HasPrefix(l, "POST") || strings.HasPrefix(l, "DELETE")) && sent != want {
					t.Errorf("%s: request body not in %s", l, want)
				}
			}
		})
	}
}

func nextEvent(t *testing.T, w watch.Interface) watch.Event {
	t.Helper()
	select {
	case ev, ok := <-w.ResultChan():
		if !ok {
			t.Fatal("watch closed")
		}
		return ev
	case <-time.After(30 * time.Second):
		t.Fatal("no watch event in 30s")
	}
	return watch.Event{}
}

// The agent with --api-encoding auto speaks CBOR to an API server that
// serves it and JSON to one that does not, and with the default
// --api-encoding JSON; its IPReservation creates, deletes and watches are
// made by the REST client of the encoding (the User-Agent the API
// server's audit log records), the JSON ones by kube.WithJSON's. An ADD
// and its DEL work on each, leaving the pod's reservation and then none.
func TestAgentOnServersWithAndWithoutCBOR(t *testing.T) {
	ctx := testContext(t, 5*time.Minute)
	served, servedAudit := auditedControlPlane(t, ctx, "--feature-gates=CBORServingAndStorage=true")
	notServed, notServedAudit := auditedControlPlane(t, ctx)
	for _, tc := range []struct {
		name  string
		cp    *controlplane.ControlPlane
		audit string
		args  []string
		log   string
		ua    string
	}{
		{"served", served, servedAudit, []string{"--api-encoding", "auto"}, "reservations in CBOR", "ipreservations/cbor"},
		{"not served", notServed, notServedAudit, []string{"--api-encoding", "auto"}, "reservations in JSON", "ipreservations/json"},
		{"json by default", notServed, notServedAudit, nil, "", "ipreservations/json"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			auditFrom := fileSize(t, tc.audit)
			node := "ncbor-" + strings.ReplaceAll(tc.name, " ", "-")
			c, err := kube.NewClient(tc.cp.Config)
			if err != nil {
				t.Fatal(err)
			}
			a, err := testbed.StartNodeAgent(ctx, bins, t.TempDir(), tc.cp.Config, node, tc.args...)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(a.Stop)
			if log, _ := os.ReadFile(a.Log); !strings.Contains(string(log), tc.log) {
				t.Fatalf("agent log without %q:\n%s", tc.log, log)
			}
			conf := netconf("cbor", a.Socket, `{"range":"10.85.0.0/24","network_name":"cbor"}`)
			p := newPod(t, ctx, c, "e2e-cbor", node, nil)
			res, err := add(ctx, p, conf)
			if err != nil {
				t.Fatalf("ADD: %v", err)
			}
			if len(res.IPs) != 1 || !(&net.IPNet{IP: net.IPv4(10, 85, 0, 0), Mask: net.CIDRMask(24, 32)}).Contains(res.IPs[0].Address.IP) {
				t.Fatalf("ADD answered %v, want one address of 10.85.0.0/24", res.IPs)
			}
			addr := netip.MustParseAddr(res.IPs[0].Address.IP.String())
			want := reservation.Name(reservation.Scope("cbor", "10.85.0.0/24", true), tenurev1alpha1.KindAddress, netip.PrefixFrom(addr, 32))
			if held := heldByPod(t, ctx, c, p.uid); len(held) != 1 || held[0] != want {
				t.Fatalf("the pod holds %v, want %s", held, want)
			}
			if err := del(ctx, p, conf); err != nil {
				t.Fatalf("DEL: %v", err)
			}
			if held := heldByPod(t, ctx, c, p.uid); len(held) != 0 {
				t.Fatalf("after DEL the pod holds %v, want none", held)
			}
			checkAgentReservationRequests(t, tc.audit, auditFrom, tc.ua)
		})
	}
}

const reservationAuditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
  resources:
  - group: ipam.tenure.dev
    resources: ["ipreservations"]
- level: None
`

// auditedControlPlane is ownControlPlane with an audit log of every
// IPReservation request, whose path it returns.
func auditedControlPlane(t *testing.T, ctx context.Context, apiserverArgs ...string) (*controlplane.ControlPlane, string) {
	t.Helper()
	dir := t.TempDir()
	policy := filepath.Join(dir, "audit-policy.yaml")
	if err := os.WriteFile(policy, []byte(reservationAuditPolicy), 0o644); err != nil {
		t.Fatal(err)
	}
	log := filepath.Join(dir, "audit.log")
	cp := ownControlPlane(t, ctx, append([]string{"--audit-policy-file=" + policy, "--audit-log-path=" + log, "--audit-log-mode=blocking"}, apiserverArgs...)...)
	return cp, log
}

func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// checkAgentReservationRequests reads the audit log from offset: the
// agent's IPReservation creates and deletes (there must be some) all
// carry ua in their User-Agent, and so does at least one of its watches
// (the node cache's). The agent's metadata-only reads of IPReservations
// go through controller-runtime's client, without it.
func checkAgentReservationRequests(t *testing.T, path string, offset int64, ua string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var writes, watches int
	for _, line := range bytes.Split(data[offset:], []byte("\n")) {
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		var ev struct {
			Verb      string `json:"verb"`
			UserAgent string `json:"userAgent"`
			ObjectRef struct {
				Resource string `json:"resource"`
			} `json:"objectRef"`
		}
		if err := json.Unmarshal(line, &ev); err != nil {
			t.Fatalf("audit log line %q: %v", line, err)
		}
		if ev.ObjectRef.Resource != "ipreservations" || !strings.HasPrefix(ev.UserAgent, "tenure-agent/") {
			continue
		}
		switch ev.Verb {
		case "create", "delete":
			writes++
			if !strings.Contains(ev.UserAgent, ua) {
				t.Errorf("the agent's %s of an IPReservation came from %q, want %q", ev.Verb, ev.UserAgent, ua)
			}
		case "watch":
			if strings.Contains(ev.UserAgent, ua) {
				watches++
			}
		}
	}
	if writes < 2 || watches == 0 {
		t.Errorf("audit log: %d IPReservation creates and deletes of the agent, %d watches by %q; want its ADD's and DEL's writes and the node cache's watch", writes, watches, ua)
	}
}
