package agent

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"runtime/debug"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/openapi"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipamclaimsv1alpha1 "github.com/tenure-ipam/tenure/api/ipamclaims/v1alpha1"
	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/allocator"
	"github.com/tenure-ipam/tenure/internal/kube"
	"github.com/tenure-ipam/tenure/internal/kubevirt"
	"github.com/tenure-ipam/tenure/internal/store"
)

// Options configure an Agent.
type Options struct {
	// NodeName is the node this agent serves; reservations record it.
	NodeName string
	// Client reads and writes the API; its List and Watch feed every
	// informer of the agent. NewForConfig builds it from a rest.Config;
	// tests pass a fake (test/kubefake).
	Client client.WithWatch
	// Recorder records Events on pods and claims; nil records none.
	Recorder record.EventRecorder
	Logger   *slog.Logger
	// PodWait is how long an ADD waits for its pod to reach the cache
	// before reading it from the API server.
	PodWait time.Duration
	// Dataplane configures the DHCPv6 service and prefix routes.
	Dataplane DataplaneOptions
	// Wire turns on the wire check (WireOptions); nil hands addresses out
	// without probing them.
	Wire *WireOptions
	// ReleaseCooldown is how long an address released on the network is
	// kept from a different owner while others are free (the glossary's
	// cooldown): 0 is store.DefaultCooldown, NoCooldown none.
	ReleaseCooldown time.Duration
	// OpenAPI reads the API server's OpenAPI v3 documents: an ADD whose
	// config lists pools first makes sure the IPPool CRD has the selector
	// fields (kube.PoolSchema). NewForConfig sets it; nil refuses every
	// pools list.
	OpenAPI openapi.ClientWithContext
}

// NoCooldown as Options.ReleaseCooldown turns the cooldown off.
const NoCooldown time.Duration = -1

// Agent serves CNI calls for one node. It holds the caches its parts read
// and the parts its entry points and Start use; New wires them (the
// package doc maps them).
type Agent struct {
	node string
	log  *slog.Logger
	// shutdown stops what NewForConfig started beside the agent.
	shutdown func()
	// started: Start has returned, caches synced and start-up garbage freed.
	started atomic.Bool

	// The caches: the window cache and node cache, the informers, and
	// KubeVirt's VirtualMachineInstances while they are served.
	store  *store.Store
	pods   cache.SharedIndexInformer
	claims cache.SharedIndexInformer
	pools  cache.SharedIndexInformer
	vmis   *kubevirt.Watcher

	// arrivals orders calls of one attachment as they reached the agent.
	arrivals arrivals
	// The CNI verbs Handle dispatches to.
	add    *addVerb
	del    *delVerb
	check  *checkVerb
	gc     *gcVerb
	status *statusVerb
	// reservations reads what an attachment holds for the verbs.
	reservations *attachmentReservations

	server    *socketServer
	metrics   *agentMetrics
	dataplane *agentDataplane
	holdings  *claimHoldings
	follower  *ownerFollower
	// wire probes candidates on the segment before they are handed out;
	// answers answers the controller's requests to probe an address
	// before a NodeNotReady release. Both nil when off.
	wire    *wire
	answers *answerer
}

// NewForConfig builds an agent talking to the API server of cfg, with an
// Event recorder of its own; Shutdown stops the recorder.
func NewForConfig(cfg *rest.Config, opts Options) (*Agent, error) {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	// The API server's warnings are the agent's to read (a status write
	// whose field the CRD drops) or to log, not controller-runtime's
	// logger's, which the agent does not set up.
	cfg = rest.CopyConfig(cfg)
	cfg.WarningHandler = nil
	cfg.WarningHandlerWithContext = &warningHandler{log: opts.Logger, logged: map[string]bool{}}
	api := newAPIMetrics()
	cfg.Wrap(api.wrap)
	c, err := kube.NewClient(cfg)
	if err != nil {
		return nil, err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	events := record.NewBroadcaster()
	events.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: cs.CoreV1().Events("")})
	opts.Client = c
	opts.OpenAPI = openapi.ToClientWithContext(cs.Discovery().OpenAPIV3())
	opts.Recorder = events.NewRecorder(kube.Scheme, corev1.EventSource{Component: "tenure-agent", Host: opts.NodeName})
	a, err := New(opts)
	if err != nil {
		events.Shutdown()
		return nil, err
	}
	a.shutdown = events.Shutdown
	a.metrics.registry.MustRegister(api.requests, api.duration)
	return a, nil
}

// New builds an agent on opts.Client; Start runs it.
func New(opts Options) (*Agent, error) {
	if opts.NodeName == "" {
		return nil, fmt.Errorf("node name is required")
	}
	if opts.Client == nil {
		return nil, fmt.Errorf("an API client is required")
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.PodWait == 0 {
		opts.PodWait = time.Second
	}
	c, node, log, rec := opts.Client, opts.NodeName, opts.Logger, opts.Recorder
	a := &Agent{node: node, log: log, shutdown: func() {}}

	// The caches.
	a.store = store.New(c, node)
	switch {
	case opts.ReleaseCooldown == 0:
		a.store.SetCooldown(store.DefaultCooldown)
	case opts.ReleaseCooldown > 0:
		a.store.SetCooldown(opts.ReleaseCooldown)
	}
	alloc := &allocator.Factory{Store: a.store, Writer: c, Live: c, Node: node}
	a.pods = kube.NewInformer(c, func() client.ObjectList { return &corev1.PodList{} }, &corev1.Pod{}, nil,
		client.MatchingFieldsSelector{Selector: fields.OneTermEqualSelector("spec.nodeName", node)})
	a.claims = kube.NewInformer(c, func() client.ObjectList { return &ipamclaimsv1alpha1.IPAMClaimList{} }, &ipamclaimsv1alpha1.IPAMClaim{}, nil)
	a.pools = kube.NewInformer(c, func() client.ObjectList { return &tenurev1alpha1.IPPoolList{} }, &tenurev1alpha1.IPPool{}, nil)
	a.vmis = kubevirt.NewWatcher(c, log, func() {
		a.dataplane.svc.Trigger()
		a.follower.trigger()
	})

	// The parts every verb or path reads through.
	calls := &callReader{node: node, podWait: opts.PodWait, client: c, pods: a.pods, pools: a.pools, netconfs: newNetconfCache(netconfCacheSize)}
	a.reservations = &attachmentReservations{node: node, log: log, store: a.store, client: c, alloc: alloc, freshWait: freshWait}
	chooser := &poolChooser{node: node, log: log, client: c}
	if opts.OpenAPI != nil {
		chooser.schema = kube.NewPoolSchema(opts.OpenAPI)
	}
	a.metrics = newAgentMetrics()
	a.server = &socketServer{log: log, handle: a.Handle, ready: a.Ready, arrivals: &a.arrivals,
		requests: newRequestBudget(headBytes, headPoolBytes, tailPoolBytes), metrics: a.metrics}

	// The dataplane, the claims' holdings it reads, the VMI follower and
	// the claim status recorder.
	a.holdings = newClaimHoldings(a.store.ClaimHolds, claimOwnedCached(a.store.ByOwnerUID), nil)
	src := informerSource{node: node, pods: a.pods, claims: a.claims, store: a.store, holdings: a.holdings.get, vmis: a.vmis}
	var err error
	if a.dataplane, err = newDataplane(opts.Dataplane, src, a.metrics, log, rec); err != nil {
		return nil, err
	}
	a.holdings.changed = a.dataplane.svc.Trigger
	a.follower = newOwnerFollower(node, log, c, rec, a.vmis, src.Pods, src.Claim)
	claimStatus := &statusRecorder{client: c, log: log, recorder: rec, pruned: a.metrics.prefixRecordPruned, vmRunsElsewhere: a.follower.vmRunsElsewhere}

	// The wire check, and the allocators it vets.
	if opts.Wire != nil {
		a.wire = newWire(*opts.Wire, log, rec, alloc.Upcoming)
		a.metrics.registry.MustRegister(a.wire.collectors()...)
		a.answers = newAnswerer(node, a.wire, c, log)
	}
	allocs := &allocators{alloc: alloc, wire: a.wire}

	// The claim path and the verbs.
	cp := &claimPath{node: node, log: log, client: c, claims: a.claims, store: a.store, alloc: alloc, recorder: rec,
		pools: chooser, nextAllocator: allocs.nextAllocator, learn: a.holdings.learnHeld,
		status: claimStatus, vmiLookup: a.follower.vmiLookup}
	locks := &keyedMutex{}
	a.add = &addVerb{node: node, log: log, recorder: rec, alloc: alloc, locks: locks, arrivals: &a.arrivals,
		prepare: calls.prepare, holds: a.reservations, dataplane: a.dataplane, claims: cp,
		pools: chooser, nextAllocator: allocs.nextAllocator}
	a.del = &delVerb{store: a.store, alloc: alloc, locks: locks, arrivals: &a.arrivals, holds: a.reservations, detached: a.dataplane.Detached}
	a.check = &checkVerb{store: a.store, prepare: calls.prepare, holds: a.reservations, claims: cp}
	a.gc = &gcVerb{node: node, log: log, store: a.store, alloc: alloc, locks: locks}
	a.status = &statusVerb{client: c, ready: a.Ready}

	a.metrics.registry.MustRegister(cacheCollectors(a.store)...)
	a.metrics.registry.MustRegister(requestCollectors(func() *requestBudget { return a.server.requests })...)
	if err := onEveryEvent(a.follower.trigger, a.pods, a.claims); err != nil {
		return nil, err
	}
	return a, nil
}

// Start runs the informers and returns once they have synced.
func (a *Agent) Start(ctx context.Context) error {
	go a.store.Run(ctx)
	// Not waited for: until KubeVirt's API is seen served, claims follow
	// their status.ownerPod as without KubeVirt.
	go a.vmis.Run(ctx)
	for _, inf := range []cache.SharedIndexInformer{a.pods, a.claims, a.pools} {
		go inf.RunWithContext(ctx)
	}
	if err := a.store.WaitForSync(ctx); err != nil {
		return err
	}
	if !cache.WaitForCacheSync(ctx.Done(), a.pods.HasSynced, a.claims.HasSynced, a.pools.HasSynced) {
		return fmt.Errorf("caches did not sync: %w", ctx.Err())
	}
	a.holdings.run(ctx)
	go a.dataplane.Run(ctx)
	go a.follower.run(ctx)
	if a.wire != nil {
		go a.wire.runAhead(ctx)
		go a.answers.run(ctx)
	}
	// The initial list's decoding garbage is several times the cache itself
	// in a large cluster; hand it back now rather than at the GC's leisure.
	debug.FreeOSMemory()
	a.started.Store(true)
	a.log.Info("caches synced", "node", a.node, "reservations", len(a.store.NodeReservations()), "window", a.store.WindowLen())
	return nil
}

// Ready reports whether every cache has synced.
func (a *Agent) Ready() bool {
	return a.started.Load() && a.store.HasSynced() && a.pods.HasSynced() && a.claims.HasSynced() && a.pools.HasSynced()
}

// Serve answers CNI calls and the health probes on l until ctx ends.
func (a *Agent) Serve(ctx context.Context, l net.Listener) error { return a.server.serve(ctx, l) }

// Shutdown stops the Event broadcaster NewForConfig started.
func (a *Agent) Shutdown() { a.shutdown() }

// Store exposes the window cache and node cache (for status and tests).
func (a *Agent) Store() *store.Store { return a.store }
