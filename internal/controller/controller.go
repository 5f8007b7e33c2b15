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
//
// Files: the manager wiring in controller.go; each reconciler type with its
// event handlers and SetupWithManager in its own file
// (reservation_controller.go, claim_controller.go, sticky_controller.go);
// the sources that hand informer events to a controller's queue in
// source.go; the reservation informers outside the manager's cache in
// informers.go.
package controller

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	ipamclaimsv1alpha1 "github.com/tenure-ipam/tenure/api/ipamclaims/v1alpha1"
	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
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
			if e, ok := unwrapEntry[*reservation.View](obj); ok {
				c.fence.forget(e.Name)
				c.answers.forget(e.Name)
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
	if err := (&reservationReconciler{c}).SetupWithManager(c.mgr, reservations, podSource, askWire); err != nil {
		return err
	}
	if err := (&claimReconciler{c}).SetupWithManager(c.mgr, reservations); err != nil {
		return err
	}
	if err := (&stickyReconciler{c}).SetupWithManager(c.mgr, podSource); err != nil {
		return err
	}
	return c.mgr.Add(manager.RunnableFunc(c.lead))
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
