package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/netip"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/kube"
	"github.com/tenure-ipam/tenure/internal/probe"
)

// answerer answers the controller's IPProbes: before it releases, as
// NodeNotReady, an address whose node may still run the pod, the
// controller asks the agents of other nodes whether anything answers for
// it on the wire. An agent answers a request of an allocation scope its
// node's ADDs probed on (wire.servedOn), for an address made on another
// node, once per request (metadata.generation), with a probe sent after it
// read the request. It writes only its own node's entry of the status
// (server-side apply, a field manager per node), and nothing else.
type answerer struct {
	node  string
	wire  *wire
	c     client.Client
	log   *slog.Logger
	inf   cache.SharedIndexInformer
	queue workqueue.TypedRateLimitingInterface[string]
	// probe is wire.prober.Probe, or a test's.
	probe func(ctx context.Context, iface string, addr netip.Addr) (*probe.Answer, error)
	now   func() time.Time
}

// answerWorkers probe at once: each probe waits up to its budget (450 ms).
const answerWorkers = 4

func newAnswerer(node string, w *wire, c client.WithWatch, log *slog.Logger) *answerer {
	// The agents of every node that served the network answer a request
	// at the same moment: each one's probe is no holder of the address.
	holders := *w.prober
	holders.HoldersOnly = true
	a := &answerer{node: node, wire: w, c: c, log: log, probe: holders.Probe, now: time.Now,
		inf:   kube.NewInformer(c, func() client.ObjectList { return &tenurev1alpha1.IPProbeList{} }, &tenurev1alpha1.IPProbe{}, nil),
		queue: workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]())}
	add := func(obj any) {
		if p, ok := obj.(*tenurev1alpha1.IPProbe); ok {
			a.queue.Add(p.Name)
		}
	}
	_, _ = a.inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: add, UpdateFunc: func(_, obj any) { add(obj) }})
	return a
}

// run answers until ctx ends. Where the API server does not serve
// IPProbes (a cluster upgraded without applying deploy/crds), there is
// nothing to answer: it logs so and returns.
func (a *answerer) run(ctx context.Context) {
	gk := schema.GroupKind{Group: tenurev1alpha1.GroupVersion.Group, Kind: "IPProbe"}
	if _, err := a.c.RESTMapper().RESTMapping(gk, tenurev1alpha1.GroupVersion.Version); meta.IsNoMatchError(err) {
		a.log.Info("the API server does not serve IPProbes (apply deploy/crds): this agent answers no probe request")
		return
	}
	go a.inf.RunWithContext(ctx)
	context.AfterFunc(ctx, a.queue.ShutDown)
	if !cache.WaitForCacheSync(ctx.Done(), a.inf.HasSynced) {
		return
	}
	for range answerWorkers {
		go func() {
			for {
				name, stop := a.queue.Get()
				if stop {
					return
				}
				if err := a.answer(ctx, name); err != nil && ctx.Err() == nil {
					a.log.Warn("answering a probe request", "ipprobe", name, "err", err)
					a.queue.AddRateLimited(name)
				} else {
					a.queue.Forget(name)
				}
				a.queue.Done(name)
			}
		}()
	}
}

// answer probes for the request called name, if it is this node's to
// answer, and writes the answer.
func (a *answerer) answer(ctx context.Context, name string) error {
	obj, ok, err := a.inf.GetStore().GetByKey(name)
	if err != nil || !ok {
		return err
	}
	p, ok := obj.(*tenurev1alpha1.IPProbe)
	if !ok {
		return nil
	}
	iface, addr, ok := a.due(p)
	if !ok {
		return nil
	}
	ans := a.probeOnce(ctx, p, iface, addr)
	return a.write(ctx, p, ans)
}

// due says whether this node answers p, and where and what it probes: a
// request it has not answered yet, about an address made on another node,
// of an allocation scope whose parent interface it knows.
func (a *answerer) due(p *tenurev1alpha1.IPProbe) (string, netip.Addr, bool) {
	if p.DeletionTimestamp != nil || p.Spec.Node == a.node {
		return "", netip.Addr{}, false
	}
	for _, e := range p.Status.Answers {
		if e.Node == a.node && e.ObservedGeneration >= p.Generation {
			return "", netip.Addr{}, false
		}
	}
	iface := a.wire.servedOn(p.Spec.Network)
	if iface == "" {
		return "", netip.Addr{}, false
	}
	addr, err := netip.ParseAddr(p.Spec.Address)
	if err != nil {
		return "", netip.Addr{}, false
	}
	return iface, addr, true
}

// probeOnce probes addr on iface for p's current request.
func (a *answerer) probeOnce(ctx context.Context, p *tenurev1alpha1.IPProbe, iface string, addr netip.Addr) tenurev1alpha1.IPProbeAnswer {
	ans, err := a.probe(ctx, iface, addr)
	out := tenurev1alpha1.IPProbeAnswer{Node: a.node, ObservedGeneration: p.Generation, ProbedAt: metav1.NewTime(a.now()), Interface: iface}
	switch {
	case err != nil:
		out.Result, out.Message = tenurev1alpha1.ProbeFailed, truncate(err.Error(), 1024)
	case ans != nil:
		out.Result, out.MAC, out.Kind = tenurev1alpha1.ProbeAnswered, ans.MAC.String(), ans.Kind
	default:
		out.Result = tenurev1alpha1.ProbeSilent
	}
	a.log.Info("answered a probe request", "ipprobe", p.Name, "address", addr, "network", p.Spec.Network, "interface", iface,
		"result", out.Result, "mac", out.MAC, "generation", p.Generation)
	return out
}

// answerFieldManager is this node's field manager of IPProbe status: one
// per node, so one node's apply never drops another's entry.
func (a *answerer) answerFieldManager() string { return "tenure-agent/" + a.node }

// write applies this node's entry of p's status: for p itself (its UID),
// so an answer never lands on a request made after it was deleted.
func (a *answerer) write(ctx context.Context, p *tenurev1alpha1.IPProbe, ans tenurev1alpha1.IPProbeAnswer) error {
	body, err := json.Marshal(map[string]any{
		"apiVersion": tenurev1alpha1.GroupVersion.String(), "kind": "IPProbe",
		"metadata": map[string]any{"name": p.Name, "uid": p.UID},
		"status":   map[string]any{"answers": []tenurev1alpha1.IPProbeAnswer{ans}},
	})
	if err != nil {
		return err
	}
	target := &tenurev1alpha1.IPProbe{ObjectMeta: metav1.ObjectMeta{Name: p.Name}}
	if err := a.c.Status().Patch(ctx, target, client.RawPatch(types.ApplyPatchType, body),
		client.FieldOwner(a.answerFieldManager()), client.ForceOwnership); err != nil {
		return fmt.Errorf("writing node %s's answer to IPProbe %s: %w", a.node, p.Name, err)
	}
	return nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}
