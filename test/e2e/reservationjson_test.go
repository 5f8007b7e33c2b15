//go:build integration

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/addrspace"
	"github.com/tenure-ipam/tenure/internal/allocator"
	"github.com/tenure-ipam/tenure/internal/config"
	"github.com/tenure-ipam/tenure/internal/kube"
	"github.com/tenure-ipam/tenure/internal/reservation"
	"github.com/tenure-ipam/tenure/internal/store"
	"github.com/tenure-ipam/tenure/test/controlplane/cptest"
)

// bodyLog records, for each request, its method, path, User-Agent and
// media types, and the answer's body as the client read it.
type bodyLog struct {
	mu    sync.Mutex
	calls []*loggedCall
}

type loggedCall struct {
	method, path, watch, userAgent, accept, sent, got string
	mu                                                sync.Mutex
	body                                              bytes.Buffer
}

func (c *loggedCall) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.body.Write(p)
}

func (c *loggedCall) bytes() []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	return bytes.Clone(c.body.Bytes())
}

func (l *bodyLog) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(r *http.Request) (*http.Response, error) {
		resp, err := rt.RoundTrip(r)
		c := &loggedCall{method: r.Method, path: r.URL.Path, watch: r.URL.Query().Get("watch"), userAgent: r.Header.Get("User-Agent"), accept: r.Header.Get("Accept"), sent: r.Header.Get("Content-Type")}
		if resp != nil {
			c.got = resp.Header.Get("Content-Type")
			resp.Body = struct {
				io.Reader
				io.Closer
			}{io.TeeReader(resp.Body, c), resp.Body}
		}
		l.mu.Lock()
		l.calls = append(l.calls, c)
		l.mu.Unlock()
		return resp, err
	})
}

func (l *bodyLog) all() []*loggedCall {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.calls)
}

// Reservations made as the agent makes them (the allocator on the node
// store, both on kube.WithJSON's client) read back through that client,
// by its list, its watch (initial events, a bookmark, a delete) and the
// store's informer, are what controller-runtime's client reads for the
// same objects, field for field; every IPReservation request of that
// client is JSON both ways and made by its REST client (its User-Agent).
// With TENURE_RESERVATION_JSON_CORPUS set, the API server's answers are
// written there as seeds for FuzzReservationJSONDecode.
func TestReservationsInOnePassJSONAsControllerRuntimeReadsThem(t *testing.T) {
	ctx := testContext(t, 3*time.Minute)
	wire := &bodyLog{}
	cfg := rest.CopyConfig(cptest.Current().Config)
	cfg.Wrap(wire.wrap)
	c, err := kube.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	jc, err := kube.WithJSON(c, cfg)
	if err != nil {
		t.Fatal(err)
	}
	const node, network = "ncodec", "codec-wire"
	st := store.New(jc, node)
	runCtx, stopStore := context.WithCancel(ctx)
	defer stopStore()
	go st.Run(runCtx)
	if err := st.WaitForSync(ctx); err != nil {
		t.Fatal(err)
	}
	conf, err := config.Parse([]byte(`{"cniVersion":"1.1.0","name":"codec","ipam":{"type":"tenure","range":"10.86.0.0/24","network_name":"`+network+`"}}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	f := &allocator.Factory{Store: st, Writer: jc, Live: jc, Node: node}
	alloc := f.For(network, addrspace.AddressSpace{Range: conf.Ranges[0]})
	made := map[string]*tenurev1alpha1.IPReservation{}
	for i := range 3 {
		uid := fmt.Sprintf("uid-codec-%d", i)
		r, err := alloc.AllocateNext(ctx, allocator.Template{CNINetwork: "codec", Owner: tenurev1alpha1.ReservationOwner{
			Kind: tenurev1alpha1.OwnerPod, Namespace: "e2e-codec", Name: fmt.Sprintf("p<%d>&q", i), UID: uid, PodName: fmt.Sprintf("p<%d>&q", i), PodUID: uid,
			ContainerID: strings.Repeat(fmt.Sprint(i), 64), Interface: "net1", Node: node}})
		if err != nil {
			t.Fatalf("allocating %d: %v", i, err)
		}
		if r.UID == "" || r.ResourceVersion == "" || r.Spec.Owner.UID != uid || len(r.ManagedFields) == 0 {
			t.Fatalf("create answered %+v", r)
		}
		made[r.Name] = r
	}
	sel := client.MatchingLabels{reservation.LabelNetwork: reservation.ScopeLabel(network)}

	// What controller-runtime's client reads is the reference.
	var ref tenurev1alpha1.IPReservationList
	if err := apiClient(t).List(ctx, &ref, sel); err != nil {
		t.Fatal(err)
	}
	want := map[string]tenurev1alpha1.IPReservation{}
	for _, r := range ref.Items {
		want[r.Name] = r
	}
	if !sameNames(want, made) {
		t.Fatalf("controller-runtime lists %v, want %v", codecKeys(want), codecKeys(made))
	}
	// same compares all of metadata and spec (resourceVersion, UID,
	// labels, annotations, managed fields, timestamps).
	same := func(what string, got tenurev1alpha1.IPReservation) {
		t.Helper()
		w, ok := want[got.Name]
		if !ok {
			t.Errorf("%s: %s, which controller-runtime does not list", what, got.Name)
			return
		}
		if !reflect.DeepEqual(got.ObjectMeta, w.ObjectMeta) || !reflect.DeepEqual(got.Spec, w.Spec) {
			t.Errorf("%s %s differs from controller-runtime's:\ngot  %+v %+v\nwant %+v %+v", what, got.Name, got.ObjectMeta, got.Spec, w.ObjectMeta, w.Spec)
		}
	}
	for _, r := range made {
		same("create's answer", *r)
	}
	// The node cache keeps what the agent reads of a reservation (the
	// store drops the rest).
	if err := codecWait(ctx, func() bool {
		for name := range made {
			if _, ok := st.Get(name); !ok {
				return false
			}
		}
		return true
	}); err != nil {
		t.Fatalf("the node cache never held %v: %v", codecKeys(made), err)
	}
	for name := range made {
		got, _ := st.Get(name)
		if w := want[name]; got.UID != w.UID || got.ResourceVersion != w.ResourceVersion || !reflect.DeepEqual(got.Spec, w.Spec) {
			t.Errorf("node cache holds %s as %+v %+v, controller-runtime reads %+v %+v", name, got.ObjectMeta, got.Spec, w.ObjectMeta, w.Spec)
		}
	}

	var list tenurev1alpha1.IPReservationList
	if err := jc.List(ctx, &list, sel); err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != len(want) {
		t.Fatalf("list: %d items, want %v", len(list.Items), codecKeys(want))
	}
	for _, r := range list.Items {
		same("list item", r)
	}
	if list.ResourceVersion == "" {
		t.Error("list without a resourceVersion")
	}

	// A watch streaming its initial events: each object, then the
	// bookmark that ends them.
	w, err := jc.Watch(ctx, &tenurev1alpha1.IPReservationList{}, sel, &client.ListOptions{Raw: &metav1.ListOptions{
		SendInitialEvents: ptr.To(true), ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan, AllowWatchBookmarks: true}})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	seen := map[string]bool{}
	for {
		ev := nextEvent(t, w)
		r, ok := ev.Object.(*tenurev1alpha1.IPReservation)
		if !ok {
			t.Fatalf("watch event %s of %T", ev.Type, ev.Object)
		}
		if ev.Type == watch.Bookmark {
			if r.Annotations[metav1.InitialEventsAnnotationKey] != "true" || r.ResourceVersion == "" {
				t.Fatalf("bookmark %+v, want the end of the initial events", r.ObjectMeta)
			}
			break
		}
		if ev.Type != watch.Added {
			t.Fatalf("initial event %s, want ADDED", ev.Type)
		}
		same("initial event", *r)
		seen[r.Name] = true
	}
	if len(seen) != len(want) {
		t.Fatalf("initial events of %v, want %v", codecKeys(seen), codecKeys(want))
	}
	var gone *tenurev1alpha1.IPReservation
	for _, r := range made {
		gone = r
		break
	}
	if err := f.Release(ctx, gone); err != nil {
		t.Fatalf("release %s: %v", gone.Name, err)
	}
	ev := nextEvent(t, w)
	if r, ok := ev.Object.(*tenurev1alpha1.IPReservation); ev.Type != watch.Deleted || !ok || r.Name != gone.Name || r.UID != gone.UID {
		t.Fatalf("watch event %s %#v after the release, want Deleted %s", ev.Type, ev.Object, gone.Name)
	} else {
		// Deleting raised the resourceVersion; the rest is as it was.
		if r.ResourceVersion == want[r.Name].ResourceVersion {
			t.Errorf("delete event of %s at the resourceVersion it was created at", r.Name)
		}
		r.ResourceVersion = want[r.Name].ResourceVersion
		same("delete event", *r)
	}
	w.Stop()
	for name := range made {
		if name != gone.Name {
			r := made[name]
			if err := f.Release(ctx, r); err != nil {
				t.Fatalf("release %s: %v", name, err)
			}
		}
	}
	stopStore()

	n := 0
	for _, call := range wire.all() {
		if !strings.HasSuffix(call.path, "/ipreservations") && !strings.Contains(call.path, "/ipreservations/") {
			continue
		}
		if strings.Contains(call.accept, "as=PartialObjectMetadata") {
			continue // the store's window reads metadata only, through c
		}
		n++
		if !strings.Contains(call.userAgent, "ipreservations/json") {
			t.Errorf("%s %s (watch=%s) made by %q, not WithJSON's REST client", call.method, call.path, call.watch, call.userAgent)
		}
		if !strings.HasPrefix(call.got, "application/json") || (call.method == http.MethodPost && call.sent != "application/json") {
			t.Errorf("%s %s: sent %q, got %q; want JSON", call.method, call.path, call.sent, call.got)
		}
	}
	if n < 2*len(made)+3 {
		t.Errorf("%d IPReservation requests went through the wrapped transport, want the creates, releases, list and watches", n)
	}
	if dir := os.Getenv("TENURE_RESERVATION_JSON_CORPUS"); dir != "" {
		writeCorpus(t, dir, wire.all())
	}
}

// writeCorpus writes each IPReservation answer (each line of a watch) as
// a seed of FuzzReservationJSONDecode.
func writeCorpus(t *testing.T, dir string, calls []*loggedCall) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for i, call := range calls {
		if !strings.Contains(call.path, "/ipreservations") {
			continue
		}
		for j, frame := range bytes.Split(call.bytes(), []byte("\n")) {
			if len(bytes.TrimSpace(frame)) == 0 {
				continue
			}
			name := filepath.Join(dir, fmt.Sprintf("server-%s-%d-%d", strings.ToLower(call.method), i, j))
			if err := os.WriteFile(name, fmt.Appendf(nil, "go test fuzz v1\n[]byte(%q)\n", frame), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func sameNames[A, B any](a map[string]A, b map[string]B) bool {
	if len(a) != len(b) {
		return false
	}
	for k := range a {
		if _, ok := b[k]; !ok {
			return false
		}
	}
	return true
}

func codecKeys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// wait polls cond until it holds or ctx ends.
func codecWait(ctx context.Context, cond func() bool) error {
	for !cond() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil
}
