// Package controller is tenure's cluster controller: it gives back every
// reservation whose owner is gone (pod deleted, node lost with its pods
// terminating, IPAMClaim deleted, an earlier sandbox of a pod that never got
// its DEL), and never one that is live; it writes pool usage to IPPool
// status, and exports Events and metrics.
//
// Shape, after Kubernetes' ipallocator repair controller and
// cluster-api's in-cluster IPAM provider: controller-runtime controllers,
// one level-triggered, idempotent Reconcile per kind (reservations by
// name, claims' finalizer, sticky claims), fed by informers on
// IPReservations, Pods, Nodes, IPAMClaims and StatefulSets, which keep of
// reservations and pods only what the rules read (entries.go); a periodic
// full sweep over those caches as a backstop; one pure decision (package
// repair) used everywhere; and one release path (Releaser) that decides
// again on live reads before a delete carrying the reservation's UID and
// resourceVersion. A cache only ever nominates candidates; it never
// decides a release.
//
// controller-runtime's manager runs it: the caches on every replica (a new
// leader acts at once); the controllers, the sweep and the pool status
// writer only while this replica holds the leader Lease. Metrics go to
// controller-runtime's registry, which carries client-go's workqueue, REST
// client and leader-election metrics and the controllers' own.
package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	crcontroller "sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	crsource "sigs.k8s.io/controller-runtime/pkg/source"

	ipamclaimsv1alpha1 "github.com/tenure-ipam/tenure/api/ipamclaims/v1alpha1"
	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/claims"
	"github.com/tenure-ipam/tenure/internal/controller/repair"
	"github.com/tenure-ipam/tenure/internal/controller/sticky"
	"github.com/tenure-ipam/tenure/internal/kube"
	"github.com/tenure-ipam/tenure/internal/reservation"
)

// Field indexes on the reservation cache.
const (
	indexOwnerUID = reservation.OwnerIndex
	indexNode     = "spec.owner.node"
)

// Options configure the controller.
type Options struct {
	// ReleaseUnfenced releases the addresses of terminating pods on a node
	// NotReady for NodeGracePeriod that is not fenced (repair.Policy).
	ReleaseUnfenced bool
	// NodeGracePeriod: how long a node is NotReady before ReleaseUnfenced
	// releases the addresses of its terminating pods.
	NodeGracePeriod time.Duration
	// ProbeInterval: how long a request to other nodes' agents to probe an
	// address stands before they are asked again (repair.Policy).
	ProbeInterval time.Duration
	// SweepInterval between full sweeps; the first runs when the replica
	// starts leading.
	SweepInterval time.Duration
	// PoolStatusInterval bounds how often pool status is written.
	PoolStatusInterval time.Duration
	// StickyReleaseAfter is how long a sticky StatefulSet pod's ordinal
	// must stay outside its StatefulSet's before its claim is released;
	// zero or less is DefaultStickyReleaseAfter.
	StickyReleaseAfter time.Duration
	// Workers reconcile reservations concurrently.
	Workers int
	// LeaderElection, when set, makes the replica act only while it holds
	// that Lease; nil acts at once.
	LeaderElection *LeaderElection
	Events         EventRecorder
	Logger         *slog.Logger
}

// LeaderElection names the leader Lease and its timing.
type LeaderElection struct {
	Namespace, Name string
	// Identity of this replica in the Lease; unique per process.
	Identity                                  string
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
}

// Controller is the watch-driven release, the sweep and the pool status.
type Controller struct {
	opts  Options
	log   *slog.Logger
	mgr   manager.Manager
	cache cache.Cache
	// reservations: the informers of the reservations whose metadata
	// describes them (protobuf) and of the older ones (whole, JSON).
	reservations []toolscache.SharedIndexInformer
	idx          *index // the reservation and pod informers' stores
	live         client.Client
	rel          *Releaser
	cf           *claimFinalizer
	sweeper      *Sweeper
	pools        *poolStatus
	sticky       *stickyReleaser
	fence        *fenceWaits
	answers      *wireAnswers
	probes       *probeSet

	// resQ is the reservation controller's queue, which the sweep hands
	// what to look at again; set once that controller starts.
	resQ      atomic.Pointer[workqueue.TypedRateLimitingInterface[reconcile.Request]]
	resQReady chan struct{}
	resQOnce  sync.Once

	synced   atomic.Bool
	syncedCh chan struct{}
}

// New builds the controller on cfg: a live client, a manager whose cache
// trims pods and nodes to what the decision reads, the reservation
// informers and the three controllers. Run runs it.
func New(cfg *rest.Config, o Options) (*Controller, error) {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Workers <= 0 {
		o.Workers = 8
	}
	if o.PoolStatusInterval <= 0 {
		o.PoolStatusInterval = 5 * time.Second
	}
	if o.SweepInterval <= 0 {
		o.SweepInterval = 10 * time.Minute
	}
	if o.StickyReleaseAfter <= 0 {
		o.StickyReleaseAfter = DefaultStickyReleaseAfter
	}
	live, err := kube.NewClient(cfg)
	if err != nil {
		return nil, err
	}
	mopts := manager.Options{
		Scheme: kube.Scheme,
		Logger: logr.FromSlogHandler(o.Logger.Handler()),
		Cache: cache.Options{
			DefaultTransform: cache.TransformStripManagedFields(),
			ByObject: map[client.Object]cache.ByObject{
				&corev1.Pod{}:         {Transform: transformEntries},
				&corev1.Node{}:        {Transform: transformTrim},
				&appsv1.StatefulSet{}: {Transform: trimStatefulSet},
			},
		},
		// The command serves the metrics and health endpoints.
		Metrics: metricsserver.Options{BindAddress: "0"},
		// On shutdown the leader stops acting before it releases the
		// Lease, however long that takes: two replicas never act at once.
		GracefulShutdownTimeout: ptr.To(time.Duration(-1)),
		// A controller waits for its sources however long the reservation
		// informers take to list a large cluster.
		Controller: config.Controller{CacheSyncTimeout: 24 * time.Hour},
	}
	if le := o.LeaderElection; le != nil {
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return nil, err
		}
		mopts.LeaderElection, mopts.LeaderElectionID, mopts.LeaderElectionNamespace = true, le.Name, le.Namespace
		mopts.LeaderElectionResourceLockInterface = &resourcelock.LeaseLock{
			LeaseMeta:  metav1.ObjectMeta{Namespace: le.Namespace, Name: le.Name},
			Client:     cs.CoordinationV1(),
			LockConfig: resourcelock.ResourceLockConfig{Identity: le.Identity},
		}
		mopts.LeaseDuration, mopts.RenewDeadline, mopts.RetryPeriod = &le.LeaseDuration, &le.RenewDeadline, &le.RetryPeriod
		mopts.LeaderElectionReleaseOnCancel = true
	}
	mgr, err := manager.New(cfg, mopts)
	if err != nil {
		return nil, err
	}
	c := &Controller{opts: o, log: o.Logger, mgr: mgr, cache: mgr.GetCache(), live: live, reservations: reservationInformers(live),
		resQReady: make(chan struct{}), syncedCh: make(chan struct{})}
	c.fence = newFenceWaits(o.Events, o.Logger)
	c.answers = newWireAnswers(o.Events, o.Logger)
	c.probes = newProbeSet()
	c.rel = &Releaser{Live: live, Writer: live, Events: o.Events, Log: o.Logger,
		Observe: func(r *tenurev1alpha1.IPReservation, d repair.Decision) {
			c.fence.observe(r, d)
			c.answers.observe(r, d)
		},
		AskWire: true, Probed: c.probes.get,
		Policy: repair.Policy{ReleaseUnfenced: o.ReleaseUnfenced, NodeGracePeriod: o.NodeGracePeriod, ProbeInterval: o.ProbeInterval}}
	c.cf = &claimFinalizer{live: live, writer: live, rel: c.rel, cached: func(_ context.Context, uid string) []string {
		return c.idx.names(indexOwnerUID, uid)
	}}
	c.sweeper = &Sweeper{Live: live, Releaser: c.rel, claims: c.cf, view: c.cachedSnapshot, recheck: c.requeue}
	c.pools = &poolStatus{counts: &reservationCounts{}, cache: c.cache, writer: live, interval: o.PoolStatusInterval, log: o.Logger}
	c.sticky = &stickyReleaser{cache: c.cache, live: live, writer: live, policy: sticky.Policy{ReleaseAfter: o.StickyReleaseAfter},
		events: o.Events, log: o.Logger, now: time.Now, cachedPod: func(ns, name string) bool { return c.idx.pod(ns, name).Exists }}
	if err := c.setup(context.Background()); err != nil {
		return nil, err
	}
	initMetrics()
	leaderGauge.Set(0)
	return c, nil
}

// reservationInformers are the reservations' informers, outside the
// manager's cache, which keeps one informer per type: reservations that
// carry the spec summary are watched as metadata, which travels as
// protobuf, where a whole custom resource travels as JSON, whose decoding
// would be most of the start-up's CPU (docs/performance.md, "The
// controller at 100,000 reservations and pods"); those made before the
// summary existed are watched whole. The label selects
// each set server-side, so every object is in exactly one of them.
func reservationInformers(c client.WithWatch) []toolscache.SharedIndexInformer {
	summarized, whole := summarySelectors()
	meta := kube.NewInformer(c, func() client.ObjectList { return reservation.NewMetadataList() }, &metav1.PartialObjectMetadata{}, resIndexers, summarized)
	old := kube.NewInformer(c, func() client.ObjectList { return &tenurev1alpha1.IPReservationList{} }, &tenurev1alpha1.IPReservation{},
		resIndexers, whole)
	for _, inf := range []toolscache.SharedIndexInformer{meta, old} {
		_ = inf.SetTransform(transformEntries)
	}
	return []toolscache.SharedIndexInformer{meta, old}
}

// summarySelectors select the reservations that carry the spec summary
// (reservation.LabelSpecSummary) and those that do not.
func summarySelectors() (summarized, whole client.MatchingLabelsSelector) {
	is, _ := labels.NewRequirement(reservation.LabelSpecSummary, selection.Equals, []string{reservation.SpecSummaryV1})
	not, _ := labels.NewRequirement(reservation.LabelSpecSummary, selection.NotEquals, []string{reservation.SpecSummaryV1})
	return client.MatchingLabelsSelector{Selector: labels.NewSelector().Add(*is)},
		client.MatchingLabelsSelector{Selector: labels.NewSelector().Add(*not)}
}

// Ready reports whether the caches have synced.
func (c *Controller) Ready() bool { return c.synced.Load() }

// PodBinding is the UID and node of the pod namespace/name as the pod
// cache holds it (every replica's, leader or not); ok is false when the
// cache has no such pod bound to a node. A pod's UID and node never change
// once bound, so what it says of a UID stays true of that UID.
func (c *Controller) PodBinding(namespace, name string) (uid, node string, ok bool) {
	if c.idx == nil || c.idx.pods == nil {
		return "", "", false
	}
	f := c.idx.pod(namespace, name)
	return f.UID, f.NodeName, f.Exists && f.UID != "" && f.NodeName != ""
}

// Run runs the caches, and while leading the controllers, the sweep and
// the pool status writer, until ctx ends. A replica that loses the Lease
// returns an error (to exit and restart as a follower).
func (c *Controller) Run(ctx context.Context) error { return c.mgr.Start(ctx) }

// setup creates, before the manager starts, every informer the
// controllers read, so that each replica keeps them synced before it
// leads; registers the indexes and the pool status's handlers; and
// builds the controllers.
func (c *Controller) setup(ctx context.Context) error {
	var pods cache.Informer
	objs := []client.Object{&corev1.Pod{}, &corev1.Node{}, &ipamclaimsv1alpha1.IPAMClaim{}, &appsv1.StatefulSet{}, &tenurev1alpha1.IPPool{}}
	// The IPProbe CRD is new: a cluster upgraded with `helm upgrade`,
	// which installs no new CRD, does not serve it until the operator
	// applies deploy/crds. The controller then asks no agent to probe
	// (a NodeNotReady release waits for the fence) rather than fail.
	askWire := true
	if _, err := c.mgr.GetRESTMapper().RESTMapping(schema.GroupKind{Group: tenurev1alpha1.GroupVersion.Group, Kind: "IPProbe"}, tenurev1alpha1.GroupVersion.Version); err != nil {
		if !meta.IsNoMatchError(err) {
			return fmt.Errorf("is the IPProbe CRD served: %w", err)
		}
		askWire = false
		c.log.Warn("the API server does not serve IPProbes (apply deploy/crds): a NodeNotReady release (--release-unfenced) asks no agent to probe the address, and waits for the node to be fenced")
	} else {
		objs = append(objs, &tenurev1alpha1.IPProbe{})
	}
	c.rel.AskWire = askWire
	for _, obj := range objs {
		inf, err := c.cache.GetInformer(ctx, obj)
		if err != nil {
			return fmt.Errorf("informer for %T: %w", obj, err)
		}
		switch obj.(type) {
		case *corev1.Pod:
			pods = inf
		case *tenurev1alpha1.IPPool:
			if _, err := inf.AddEventHandler(c.pools.dirtyHandler()); err != nil {
				return err
			}
		case *tenurev1alpha1.IPProbe:
			if _, err := inf.AddEventHandler(c.probes.handler()); err != nil {
				return err
			}
		}
	}
	podIndexer, ok := pods.(toolscache.SharedIndexInformer)
	if !ok {
		return fmt.Errorf("informer for pods is a %T, not a SharedIndexInformer", pods)
	}
	c.idx = &index{pods: podIndexer.GetIndexer()}
	for _, inf := range c.reservations {
		c.idx.reservations = append(c.idx.reservations, inf.GetIndexer())
		forget := toolscache.ResourceEventHandlerFuncs{DeleteFunc: func(obj any) {
			if e, ok := unwrapEntry[*resEntry](obj); ok {
				c.fence.forget(e.name)
				c.answers.forget(e.name)
			}
		}}
		for _, h := range []toolscache.ResourceEventHandler{c.pools.dirtyHandler(), c.pools.counts.Handler(), forget} {
			if _, err := inf.AddEventHandler(h); err != nil {
				return err
			}
		}
	}
	if err := watchRangeUsage(c.reservations, c.cache, c.log); err != nil {
		return err
	}
	if err := c.indexSticky(ctx); err != nil {
		return err
	}
	if err := c.mgr.Add(everyReplica(c.runReservationInformers)); err != nil {
		return err
	}
	reservations := informerSource{name: "ipreservations", informers: eventInformers(c.reservations)}
	podSource := informerSource{name: "pods", informers: []eventInformer{pods}}
	rb := builder.ControllerManagedBy(c.mgr).Named("ipreservation_release").
		WithOptions(crcontroller.Options{MaxConcurrentReconciles: c.opts.Workers}).
		WatchesRawSource(reservations.with(c.reservationEvents, c.setResQ)).
		WatchesRawSource(podSource.with(c.podEvents, nil)).
		Watches(&corev1.Node{}, c.nodeEvents()).
		Watches(&ipamclaimsv1alpha1.IPAMClaim{}, c.claimReservationEvents())
	if askWire {
		// An IPProbe is named as its reservation: an agent's answer
		// decides it again.
		rb = rb.Watches(&tenurev1alpha1.IPProbe{}, &handler.EnqueueRequestForObject{})
	}
	err := rb.Complete(reconcile.Func(c.reconcileReservation))
	if err != nil {
		return err
	}
	err = builder.ControllerManagedBy(c.mgr).Named("ipamclaim_finalizer").
		For(&ipamclaimsv1alpha1.IPAMClaim{}).
		WithOptions(crcontroller.Options{MaxConcurrentReconciles: 2}).
		WatchesRawSource(reservations.with(c.reservationClaimEvents, nil)).
		Complete(reconcile.Func(c.reconcileClaim))
	if err != nil {
		return err
	}
	err = builder.ControllerManagedBy(c.mgr).Named("sticky_claim_release").
		For(&ipamclaimsv1alpha1.IPAMClaim{}, builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool {
			return o.GetLabels()[claims.LabelSticky] == "true"
		}))).
		Watches(&appsv1.StatefulSet{}, handler.EnqueueRequestsFromMapFunc(c.stickyClaimsOf(indexStickyStatefulSet))).
		WatchesRawSource(podSource.with(c.stickyPodEvents, nil)).
		WatchesRawSource(every(c.opts.SweepInterval, c.enqueueAllSticky)).
		Complete(reconcile.Func(c.reconcileSticky))
	if err != nil {
		return err
	}
	return c.mgr.Add(manager.RunnableFunc(c.lead))
}

// runReservationInformers runs the reservation informers on every replica
// and marks the controller ready once they and the manager's cache have
// synced.
func (c *Controller) runReservationInformers(ctx context.Context) error {
	synced := make([]toolscache.InformerSynced, len(c.reservations))
	for i, inf := range c.reservations {
		go inf.RunWithContext(ctx)
		synced[i] = inf.HasSynced
	}
	if !c.cache.WaitForCacheSync(ctx) || !toolscache.WaitForCacheSync(ctx.Done(), synced...) {
		return nil
	}
	c.synced.Store(true)
	close(c.syncedCh)
	c.log.Info("caches synced")
	<-ctx.Done()
	return nil
}

// lead runs, while leading, the sweep (first pass at once) and the pool
// status writer; the controllers run beside it.
func (c *Controller) lead(ctx context.Context) error {
	// Level-triggered: start from everything, as a fresh informer would.
	// Claims and sticky claims are each reconciled once as their
	// controller starts. For reservations that is the first sweep, which
	// makes the same nomination from the same caches and hands the queue
	// what the clock may change and what failed, so the reservation
	// source skips the informers' initial list: reconciling every name as
	// well would do all of that twice at once (docs/performance.md, "The
	// controller at 100,000 reservations and pods").
	for _, ready := range []chan struct{}{c.syncedCh, c.resQReady} {
		select {
		case <-ctx.Done():
			return nil
		case <-ready:
		}
	}
	c.log.Info("leading: acting")
	leaderGauge.Set(1)
	defer leaderGauge.Set(0)
	var wg sync.WaitGroup
	wg.Go(func() { _ = c.sweeper.Run(ctx, c.opts.SweepInterval, c.log) })
	wg.Go(func() { _ = c.pools.Start(ctx) })
	wg.Wait()
	return nil
}

// Run sweeps now and then every interval until ctx ends.
func (s *Sweeper) Run(ctx context.Context, interval time.Duration, log *slog.Logger) error {
	for {
		res, err := s.Sweep(ctx)
		if ctx.Err() != nil {
			return nil
		}
		released := 0
		for _, o := range res.Outcomes {
			if o.Released {
				released++
			}
		}
		if err != nil {
			log.Info("sweep finished with errors", "reservations", res.Reservations, "released", released, "err", err)
		} else if released > 0 || res.Kept > 0 || res.ClaimsFinalized > 0 {
			log.Info("sweep", "reservations", res.Reservations, "released", released, "keptOnLiveRead", res.Kept,
				"claimsFinalized", res.ClaimsFinalized, "duration", res.Duration)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(interval):
		}
	}
}

// cachedSnapshot is the running controller's sweep view: the caches.
func (c *Controller) cachedSnapshot(ctx context.Context) (*snapshot, error) {
	snap := &snapshot{idx: c.idx, nodes: map[string]*corev1.Node{}, claims: map[types.NamespacedName]*ipamclaimsv1alpha1.IPAMClaim{}}
	nodes := &corev1.NodeList{}
	if err := c.cache.List(ctx, nodes); err != nil {
		return nil, err
	}
	for i := range nodes.Items {
		snap.nodes[nodes.Items[i].Name] = &nodes.Items[i]
	}
	claims := &ipamclaimsv1alpha1.IPAMClaimList{}
	if err := c.cache.List(ctx, claims); err != nil {
		return nil, err
	}
	for i := range claims.Items {
		cl := &claims.Items[i]
		snap.claims[types.NamespacedName{Namespace: cl.Namespace, Name: cl.Name}] = cl
	}
	return snap, nil
}

// queue is a controller's work queue, as its sources get it.
type queue = workqueue.TypedRateLimitingInterface[reconcile.Request]

func (c *Controller) setResQ(q queue) {
	c.resQOnce.Do(func() {
		c.resQ.Store(&q)
		close(c.resQReady)
	})
}

// requeue hands a reservation to the reservation controller: after the
// given time, or at once (0).
func (c *Controller) requeue(name string, after time.Duration) {
	q := c.resQ.Load()
	if q == nil {
		return
	}
	req := reconcile.Request{NamespacedName: types.NamespacedName{Name: name}}
	if after > 0 {
		(*q).AddAfter(req, after)
	} else {
		(*q).Add(req)
	}
}

func enqueue(q queue, names ...string) {
	for _, n := range names {
		q.Add(reconcile.Request{NamespacedName: types.NamespacedName{Name: n}})
	}
}

func (c *Controller) byIndex(index, key string) []string {
	if key == "" {
		return nil
	}
	return c.idx.names(index, key)
}

// reservationEvents: a reservation's changes reconcile it, and its
// creation its siblings (same owner UID): a new sandbox's reservation is
// what makes an earlier sandbox's reservation an orphan.
func (c *Controller) reservationEvents(q queue) toolscache.ResourceEventHandler {
	return toolscache.ResourceEventHandlerDetailedFuncs{
		AddFunc: func(obj any, isInInitialList bool) {
			// The initial list is the first sweep's (see lead).
			if e, ok := obj.(*resEntry); ok && !isInInitialList {
				enqueue(q, e.name)
				if e.owner.kind == tenurev1alpha1.OwnerPod {
					enqueue(q, c.byIndex(indexOwnerUID, e.owner.uid)...)
				}
			}
		},
		UpdateFunc: func(_, obj any) {
			if e, ok := obj.(*resEntry); ok {
				enqueue(q, e.name)
			}
		},
	}
}

// reservationClaimEvents: claim-owned reservations nominate their claim
// for the finalizer.
func (c *Controller) reservationClaimEvents(q queue) toolscache.ResourceEventHandler {
	claimOf := func(obj any) {
		if e, ok := unwrapEntry[*resEntry](obj); ok && e.owner.kind == tenurev1alpha1.OwnerIPAMClaim {
			q.Add(reconcile.Request{NamespacedName: types.NamespacedName{Namespace: e.owner.namespace, Name: e.owner.name}})
		}
	}
	return toolscache.ResourceEventHandlerDetailedFuncs{
		AddFunc: func(obj any, isInInitialList bool) {
			if !isInInitialList { // every claim is reconciled as the controller starts
				claimOf(obj)
			}
		},
		UpdateFunc: func(_, obj any) { claimOf(obj) },
		DeleteFunc: claimOf,
	}
}

// podEvents reconcile a pod's reservations when it is deleted, starts
// terminating or reaches a terminal phase.
func (c *Controller) podEvents(q queue) toolscache.ResourceEventHandler {
	return toolscache.ResourceEventHandlerFuncs{
		UpdateFunc: func(oldObj, obj any) {
			o, ok1 := oldObj.(*podEntry)
			n, ok2 := obj.(*podEntry)
			if ok1 && ok2 && ((!o.fact.Terminating && n.fact.Terminating) || (!o.fact.Terminal && n.fact.Terminal)) {
				enqueue(q, c.byIndex(indexOwnerUID, n.fact.UID)...)
			}
		},
		DeleteFunc: func(obj any) {
			if p, ok := unwrapEntry[*podEntry](obj); ok {
				enqueue(q, c.byIndex(indexOwnerUID, p.fact.UID)...)
			}
		},
	}
}

// nodeEvents reconcile the reservations made on a node when it is deleted,
// its readiness changes or it is fenced (the out-of-service taint comes or
// goes): a fenced node's addresses are released at once, not at the next
// sweep.
func (c *Controller) nodeEvents() handler.EventHandler {
	state := func(o client.Object) (ready, outOfService bool) {
		n, ok := o.(*corev1.Node)
		if !ok {
			return false, false
		}
		f := repair.NodeFactOf(n)
		return f.Ready, f.OutOfService
	}
	return handler.Funcs{
		UpdateFunc: func(_ context.Context, e event.UpdateEvent, q queue) {
			r0, oos0 := state(e.ObjectOld)
			r1, oos1 := state(e.ObjectNew)
			if r0 != r1 || oos0 != oos1 {
				enqueue(q, c.byIndex(indexNode, e.ObjectNew.GetName())...)
			}
		},
		DeleteFunc: func(_ context.Context, e event.DeleteEvent, q queue) {
			enqueue(q, c.byIndex(indexNode, e.Object.GetName())...)
		},
	}
}

// claimReservationEvents reconcile a claim's reservations when it is
// deleted or starts terminating with nothing else holding it, and when
// its status changes.
func (c *Controller) claimReservationEvents() handler.EventHandler {
	return handler.Funcs{
		UpdateFunc: func(_ context.Context, e event.UpdateEvent, q queue) {
			o, ok1 := e.ObjectOld.(*ipamclaimsv1alpha1.IPAMClaim)
			n, ok2 := e.ObjectNew.(*ipamclaimsv1alpha1.IPAMClaim)
			if !ok1 || !ok2 {
				return
			}
			// Its reservations are released once nothing but tenure's
			// finalizer holds it (claims.Held).
			if n.DeletionTimestamp != nil && !claims.Held(n) && (o.DeletionTimestamp == nil || claims.Held(o)) {
				enqueue(q, c.byIndex(indexOwnerUID, string(n.UID))...)
			}
			// What the status records decides which of two items of one
			// slot is surplus (DuplicateAttachment).
			if !slices.Equal(o.Status.IPs, n.Status.IPs) || !slices.Equal(o.Status.DelegatedPrefixes, n.Status.DelegatedPrefixes) {
				enqueue(q, c.byIndex(indexOwnerUID, string(n.UID))...)
			}
		},
		DeleteFunc: func(_ context.Context, e event.DeleteEvent, q queue) {
			enqueue(q, c.byIndex(indexOwnerUID, string(e.Object.GetUID()))...)
		},
	}
}

// reconcileReservation nominates from the cache and releases through the
// Releaser, which decides again on live reads.
func (c *Controller) reconcileReservation(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	e := c.idx.reservation(req.Name)
	if e == nil {
		c.fence.forget(req.Name)
		c.answers.forget(req.Name)
		// A probe whose reservation is gone: its owner reference lets the
		// garbage collector delete it as well.
		return reconcile.Result{}, c.rel.retireProbe(ctx, req.Name, nil)
	}
	after, _, err := nominate(ctx, cachedSource{idx: c.idx, cache: c.cache}, c.rel, e.reservation(), e.opaque, c.log)
	return reconcile.Result{RequeueAfter: after}, err
}

// nominate decides on src (a cache) whether r looks like an orphan, and if
// so hands it to the Releaser, which decides again on live reads; so does
// an opaque entry (see resEntry), one whose siblings src cannot tell, and
// one whose decision needs what only the live reads give (AskLive).
// It returns when to look again and the Releaser's outcome, if it was
// called.
func nominate(ctx context.Context, src source, rel *Releaser, r *tenurev1alpha1.IPReservation, opaque bool, log *slog.Logger) (time.Duration, *Outcome, error) {
	why := "the cache does not know its spec"
	if !opaque {
		g, err := gather(ctx, src, r, rel.now())
		switch {
		case errors.Is(err, errOpaque):
			why = "the cache does not know a sibling's spec"
		case err != nil:
			return 0, nil, err
		default:
			d := repair.Decide(r, g.facts, rel.Policy)
			if !d.Release && !d.AskLive {
				rel.observe(r, d)
				rel.settleCached(ctx, r, d)
				return d.RecheckAfter, nil, nil
			}
			why = d.Message
		}
	}
	out, err := rel.Release(ctx, r.Name)
	if err != nil {
		return 0, &out, err
	}
	if out.Reservation != nil && !out.Released && !rel.DryRun {
		log.Info("the cache nominated a reservation that the live read keeps", "reservation", r.Name,
			"cache", why, "live", out.Decision.Message)
		return out.Decision.RecheckAfter, &out, nil
	}
	return 0, &out, nil
}

// reconcileClaim adds the finalizer to a claim that holds something and
// honours it on deletion.
func (c *Controller) reconcileClaim(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	cl := &ipamclaimsv1alpha1.IPAMClaim{}
	if err := c.cache.Get(ctx, req.NamespacedName, cl); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	cl = cl.DeepCopy()
	if cl.DeletionTimestamp != nil {
		_, _, err := c.cf.finalize(ctx, cl)
		return reconcile.Result{}, err
	}
	_, err := c.cf.ensure(ctx, cl, c.idx.holds(string(cl.UID)))
	return reconcile.Result{}, err
}

// reconcileSticky decides and acts on one sticky claim.
func (c *Controller) reconcileSticky(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	after, err := c.sticky.reconcile(ctx, req.NamespacedName)
	return reconcile.Result{RequeueAfter: after}, err
}

// everyReplica is a manager runnable that runs whether or not the replica
// leads.
type everyReplica func(context.Context) error

func (f everyReplica) Start(ctx context.Context) error { return f(ctx) }
func (everyReplica) NeedLeaderElection() bool          { return false }

// eventInformer is what a source needs of an informer: the reservation
// informers and the manager cache's alike.
type eventInformer interface {
	AddEventHandler(toolscache.ResourceEventHandler) (toolscache.ResourceEventHandlerRegistration, error)
	RemoveEventHandler(toolscache.ResourceEventHandlerRegistration) error
	HasSynced() bool
}

func eventInformers(infs []toolscache.SharedIndexInformer) []eventInformer {
	out := make([]eventInformer, len(infs))
	for i, inf := range infs {
		out[i] = inf
	}
	return out
}

// informerSource is a controller's source on informers whose objects are
// entries (entries.go), which controller-runtime's own sources cannot
// hand to an event handler (they require a client.Object): handler turns
// the informers' events into requests on the controller's queue.
type informerSource struct {
	name      string
	informers []eventInformer
	handler   func(queue) toolscache.ResourceEventHandler
	// started, when set, is told the queue as the source starts.
	started func(queue)
}

func (s informerSource) with(h func(queue) toolscache.ResourceEventHandler, started func(queue)) informerSource {
	s.handler, s.started = h, started
	return s
}

func (s informerSource) String() string { return s.name }

// Start registers the handler until ctx ends.
func (s informerSource) Start(ctx context.Context, q queue) error {
	h := s.handler(q)
	for _, inf := range s.informers {
		reg, err := inf.AddEventHandler(h)
		if err != nil {
			return err
		}
		context.AfterFunc(ctx, func() { _ = inf.RemoveEventHandler(reg) })
	}
	if s.started != nil {
		s.started(q)
	}
	return nil
}

// WaitForSync returns once the informers have synced.
func (s informerSource) WaitForSync(ctx context.Context) error {
	synced := make([]toolscache.InformerSynced, len(s.informers))
	for i, inf := range s.informers {
		synced[i] = inf.HasSynced
	}
	if !toolscache.WaitForCacheSync(ctx.Done(), synced...) {
		return fmt.Errorf("%s did not sync: %w", s.name, context.Cause(ctx))
	}
	return nil
}

// every is a source that calls f every interval: the sweep's backstop for
// a controller whose objects no sweep covers.
func every(interval time.Duration, f func(context.Context, queue)) crsource.Func {
	return func(ctx context.Context, q queue) error {
		go func() {
			t := time.NewTicker(interval)
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
					f(ctx, q)
				}
			}
		}()
		return nil
	}
}
