// Package controller is tenure's cluster controller: it gives back every
// reservation whose owner is gone (pod deleted, node lost with its pods
// terminating, IPAMClaim deleted, an earlier sandbox of a pod that never got
// its DEL), and never one that is live; it writes pool usage to IPPool
// status, and exports Events and metrics.
//
// Shape, after Kubernetes' ipallocator repair controller and
// controller-runtime's examples: level-triggered, idempotent reconcilers
// keyed by reservation name and by claim, fed by informers on
// IPReservations, Pods, Nodes and IPAMClaims, which keep of reservations
// and pods only what the rules read (entries.go); a periodic full sweep
// over those caches as a backstop; one pure decision (package repair) used
// everywhere; and one release path (Releaser) that decides again on live
// reads before a delete carrying the reservation's UID and resourceVersion.
// A cache only ever nominates candidates; it never decides a release.
//
// The caches run on every replica (a new leader acts at once); the queues'
// workers, the sweep and the pool status writer run only while Lead runs,
// which the command calls when it holds the leader Lease.
//
// Built from client-go's leaderelection and workqueue and
// controller-runtime's informer cache rather than controller-runtime's
// manager: the manager (and its controller package) pull in modules the
// module does not require (fsnotify for certwatcher, gomodules.xyz/jsonpatch
// for webhooks), and what it would add here is small: a Lease elector, a
// metrics and a health endpoint, and queue workers. Metrics still go to
// controller-runtime's registry, which carries client-go's workqueue, REST
// client and leader-election metrics.
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

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

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
	// NodeGracePeriod: how long a node is NotReady before terminating pods
	// on it lose their addresses.
	NodeGracePeriod time.Duration
	// SweepInterval between full sweeps; the first runs when Lead starts.
	SweepInterval time.Duration
	// PoolStatusInterval bounds how often pool status is written.
	PoolStatusInterval time.Duration
	// StickyReleaseAfter is how long a sticky StatefulSet pod's ordinal
	// must stay outside its StatefulSet's before its claim is released;
	// zero or less is DefaultStickyReleaseAfter.
	StickyReleaseAfter time.Duration
	// Workers reconcile reservations concurrently.
	Workers int
	Events  EventRecorder
	Logger  *slog.Logger
}

// Controller is the watch-driven release, the sweep and the pool status.
type Controller struct {
	opts  Options
	log   *slog.Logger
	cache cache.Cache
	// reservations: the informers of the reservations whose metadata
	// describes them (protobuf) and of the older ones (whole, JSON).
	reservations []toolscache.SharedIndexInformer
	idx          *index // the reservation and pod informers' stores, set by Start
	live         client.Client
	rel          *Releaser
	cf           *claimFinalizer
	sweeper      *Sweeper
	pools        *poolStatus
	sticky       *stickyReleaser

	resQ    workqueue.TypedRateLimitingInterface[string]
	claimQ  workqueue.TypedRateLimitingInterface[types.NamespacedName]
	stickyQ workqueue.TypedRateLimitingInterface[types.NamespacedName]

	leading atomic.Bool
	synced  atomic.Bool
}

// New builds the controller on cfg: a live client and an informer cache
// (pods and nodes trimmed to what the decision reads). Call Start, then
// Lead while holding the lease.
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
	ch, err := cache.New(cfg, cache.Options{
		Scheme:           kube.Scheme,
		DefaultTransform: cache.TransformStripManagedFields(),
		ByObject: map[client.Object]cache.ByObject{
			&corev1.Pod{}:         {Transform: transformEntries},
			&corev1.Node{}:        {Transform: transformTrim},
			&appsv1.StatefulSet{}: {Transform: trimStatefulSet},
		},
	})
	if err != nil {
		return nil, err
	}
	c := &Controller{opts: o, log: o.Logger, cache: ch, live: live, reservations: reservationInformers(live)}
	c.rel = &Releaser{Live: live, Writer: live, Events: o.Events, Policy: repair.Policy{NodeGracePeriod: o.NodeGracePeriod}, Log: o.Logger}
	c.cf = &claimFinalizer{live: live, writer: live, rel: c.rel, cached: func(_ context.Context, uid string) []string {
		return c.idx.names(indexOwnerUID, uid)
	}}
	c.sweeper = &Sweeper{Live: live, Releaser: c.rel, claims: c.cf, view: c.cachedSnapshot, recheck: func(name string, after time.Duration) {
		if after > 0 {
			c.resQ.AddAfter(name, after)
		} else {
			c.resQ.Add(name)
		}
	}}
	c.pools = &poolStatus{counts: &reservationCounts{}, cache: ch, writer: live, interval: o.PoolStatusInterval, log: o.Logger}
	c.sticky = &stickyReleaser{cache: ch, live: live, writer: live, policy: sticky.Policy{ReleaseAfter: o.StickyReleaseAfter},
		events: o.Events, log: o.Logger, now: time.Now, cachedPod: func(ns, name string) bool { return c.idx.pod(ns, name).Exists }}
	c.resQ = workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "ipreservation_release"})
	c.claimQ = workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[types.NamespacedName](),
		workqueue.TypedRateLimitingQueueConfig[types.NamespacedName]{Name: "ipamclaim_finalizer"})
	c.stickyQ = workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[types.NamespacedName](),
		workqueue.TypedRateLimitingQueueConfig[types.NamespacedName]{Name: "sticky_claim_release"})
	initMetrics()
	leaderGauge.Set(0)
	return c, nil
}

// reservationInformers are the reservations' informers, outside the
// informer cache, which keeps one informer per type: reservations that
// carry the spec summary are watched as metadata, which travels as
// protobuf, where a whole custom resource travels as JSON (at 100,000
// reservations decoding them whole was most of the start-up's CPU); those
// made before the summary existed are watched whole. The label selects
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

// Start registers indexes and event handlers, starts the caches and waits
// for them to sync. The caches run until ctx ends.
func (c *Controller) Start(ctx context.Context) error {
	idx, err := c.entryIndex(ctx)
	if err != nil {
		return err
	}
	c.idx = idx
	if err := c.indexSticky(ctx); err != nil {
		return err
	}
	for _, inf := range c.reservations {
		for _, h := range []toolscache.ResourceEventHandler{c.reservationHandler(), c.pools.counts.Handler()} {
			if _, err := inf.AddEventHandler(h); err != nil {
				return err
			}
		}
	}
	handlers := []objectHandler{
		{&corev1.Pod{}, c.podHandler()},
		{&corev1.Node{}, c.nodeHandler()},
		{&ipamclaimsv1alpha1.IPAMClaim{}, c.claimHandler()},
		{&tenurev1alpha1.IPPool{}, toolscache.ResourceEventHandlerFuncs{
			AddFunc:    func(any) { c.pools.markDirty() },
			UpdateFunc: func(any, any) { c.pools.markDirty() },
			DeleteFunc: func(any) { c.pools.markDirty() },
		}},
	}
	handlers = append(handlers, c.stickyHandlers()...)
	for _, h := range handlers {
		inf, err := c.cache.GetInformer(ctx, h.obj)
		if err != nil {
			return fmt.Errorf("informer for %T: %w", h.obj, err)
		}
		if _, err := inf.AddEventHandler(h.h); err != nil {
			return err
		}
	}
	synced := make([]toolscache.InformerSynced, len(c.reservations))
	for i, inf := range c.reservations {
		go inf.RunWithContext(ctx)
		synced[i] = inf.HasSynced
	}
	go func() {
		if err := c.cache.Start(ctx); err != nil {
			c.log.Error("cache stopped", "err", err)
		}
	}()
	if !c.cache.WaitForCacheSync(ctx) || !toolscache.WaitForCacheSync(ctx.Done(), synced...) {
		return fmt.Errorf("caches did not sync: %w", ctx.Err())
	}
	c.synced.Store(true)
	c.log.Info("caches synced")
	return nil
}

// entryIndex returns the reservation and pod informers' stores, which
// hold entries (see entries.go).
func (c *Controller) entryIndex(ctx context.Context) (*index, error) {
	inf, err := c.cache.GetInformer(ctx, &corev1.Pod{})
	if err != nil {
		return nil, fmt.Errorf("informer for pods: %w", err)
	}
	pods, ok := inf.(toolscache.SharedIndexInformer)
	if !ok {
		return nil, fmt.Errorf("informer for pods is a %T, not a SharedIndexInformer", inf)
	}
	idx := &index{pods: pods.GetIndexer()}
	for _, r := range c.reservations {
		idx.reservations = append(idx.reservations, r.GetIndexer())
	}
	return idx, nil
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

// objectHandler is an event handler for the informer of obj's type.
type objectHandler struct {
	obj client.Object
	h   toolscache.ResourceEventHandler
}

// Lead acts until ctx ends: reservation and claim workers, the sweep
// (first pass at once) and the pool status writer. Call it only while
// holding the leader lease, once per process.
func (c *Controller) Lead(ctx context.Context) {
	c.log.Info("leading: acting")
	leaderGauge.Set(1)
	defer leaderGauge.Set(0)
	c.leading.Store(true)
	defer c.leading.Store(false)
	// Level-triggered: start from everything, as a fresh informer would.
	// For reservations that is the first sweep, which starts at once and
	// makes the same nomination from the same caches; it hands the queue
	// what the clock may change and what failed. (Enqueueing every name as
	// well did all of that twice at once: at 100,000 reservations half the
	// start-up's CPU and most of its garbage.)
	claims := &ipamclaimsv1alpha1.IPAMClaimList{}
	if err := c.cache.List(ctx, claims); err == nil {
		for _, cl := range claims.Items {
			c.claimQ.Add(types.NamespacedName{Namespace: cl.Namespace, Name: cl.Name})
		}
	}
	c.enqueueAllSticky(ctx)
	var wg sync.WaitGroup
	for range c.opts.Workers {
		wg.Go(func() { work(ctx, c.resQ, c.reconcileReservation, c.log) })
	}
	for range 2 {
		wg.Go(func() { work(ctx, c.claimQ, c.reconcileClaim, c.log) })
	}
	wg.Go(func() { work(ctx, c.stickyQ, c.sticky.reconcile, c.log) })
	wg.Go(func() { _ = c.sweeper.Run(ctx, c.opts.SweepInterval, c.log) })
	// The sweep's backstop for sticky claims: look at each again.
	wg.Go(func() {
		t := time.NewTicker(c.opts.SweepInterval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				c.enqueueAllSticky(ctx)
			}
		}
	})
	wg.Go(func() { _ = c.pools.Start(ctx) })
	<-ctx.Done()
	c.resQ.ShutDown()
	c.claimQ.ShutDown()
	c.stickyQ.ShutDown()
	wg.Wait()
}

// work runs one queue worker: errors are retried with the queue's
// rate-limited backoff, a positive RequeueAfter re-adds later.
func work[K comparable](ctx context.Context, q workqueue.TypedRateLimitingInterface[K], reconcile func(context.Context, K) (time.Duration, error), log *slog.Logger) {
	for {
		key, shutdown := q.Get()
		if shutdown {
			return
		}
		after, err := reconcile(ctx, key)
		switch {
		case err != nil && ctx.Err() == nil:
			log.Info("reconcile failed; retrying", "key", key, "err", err)
			q.AddRateLimited(key)
		case after > 0:
			q.Forget(key)
			q.AddAfter(key, after)
		default:
			q.Forget(key)
		}
		q.Done(key)
	}
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

// enqueue adds reservation names, only while leading (Lead starts from a
// full list anyway).
func (c *Controller) enqueue(ns ...string) {
	if !c.leading.Load() {
		return
	}
	for _, n := range ns {
		c.resQ.Add(n)
	}
}

func (c *Controller) byIndex(index, key string) []string {
	if !c.leading.Load() || key == "" {
		return nil
	}
	return c.idx.names(index, key)
}

// reservationHandler enqueues the reservation, and on creation its
// siblings (same owner UID): a new sandbox's reservation is what makes an
// earlier sandbox's reservation an orphan. Claim-owned reservations also
// nominate their claim for the finalizer.
func (c *Controller) reservationHandler() toolscache.ResourceEventHandler {
	claimOf := func(e *resEntry) {
		if e.owner.kind == tenurev1alpha1.OwnerIPAMClaim && c.leading.Load() {
			c.claimQ.Add(types.NamespacedName{Namespace: e.owner.namespace, Name: e.owner.name})
		}
	}
	return toolscache.ResourceEventHandlerDetailedFuncs{
		AddFunc: func(obj any, isInInitialList bool) {
			c.pools.markDirty()
			e, ok := obj.(*resEntry)
			if !ok {
				return
			}
			c.enqueue(e.name)
			// Siblings matter only for a reservation made while we watch; at
			// start-up every reservation is enqueued once anyway, and
			// enqueueing each one's siblings would cost O(n x siblings).
			if e.owner.kind == tenurev1alpha1.OwnerPod && !isInInitialList {
				c.enqueue(c.byIndex(indexOwnerUID, e.owner.uid)...)
			}
			claimOf(e)
		},
		UpdateFunc: func(_, obj any) {
			c.pools.markDirty()
			if e, ok := obj.(*resEntry); ok {
				c.enqueue(e.name)
				claimOf(e)
			}
		},
		DeleteFunc: func(obj any) {
			c.pools.markDirty()
			if e, ok := unwrapEntry[*resEntry](obj); ok {
				claimOf(e)
			}
		},
	}
}

// podHandler enqueues a pod's reservations when it is deleted, starts
// terminating or reaches a terminal phase.
func (c *Controller) podHandler() toolscache.ResourceEventHandler {
	return toolscache.ResourceEventHandlerFuncs{
		UpdateFunc: func(oldObj, obj any) {
			o, ok1 := oldObj.(*podEntry)
			n, ok2 := obj.(*podEntry)
			if ok1 && ok2 && ((!o.fact.Terminating && n.fact.Terminating) || (!o.fact.Terminal && n.fact.Terminal)) {
				c.enqueue(c.byIndex(indexOwnerUID, n.fact.UID)...)
			}
		},
		DeleteFunc: func(obj any) {
			if p, ok := unwrapEntry[*podEntry](obj); ok {
				c.enqueue(c.byIndex(indexOwnerUID, p.fact.UID)...)
			}
		},
	}
}

// nodeHandler enqueues the reservations made on a node when it is deleted
// or its readiness changes.
func (c *Controller) nodeHandler() toolscache.ResourceEventHandler {
	ready := func(n *corev1.Node) bool { return repair.NodeFactOf(n).Ready }
	return toolscache.ResourceEventHandlerFuncs{
		UpdateFunc: func(oldObj, obj any) {
			o, ok1 := oldObj.(*corev1.Node)
			n, ok2 := obj.(*corev1.Node)
			if ok1 && ok2 && ready(o) != ready(n) {
				c.enqueue(c.byIndex(indexNode, n.Name)...)
			}
		},
		DeleteFunc: func(obj any) {
			if n, ok := kube.DeletedObject(obj).(*corev1.Node); ok {
				c.enqueue(c.byIndex(indexNode, n.Name)...)
			}
		},
	}
}

// claimHandler nominates a claim for the finalizer, and its reservations
// when it is deleted or starts terminating with nothing else holding it.
func (c *Controller) claimHandler() toolscache.ResourceEventHandler {
	key := func(cl *ipamclaimsv1alpha1.IPAMClaim) {
		if c.leading.Load() {
			c.claimQ.Add(types.NamespacedName{Namespace: cl.Namespace, Name: cl.Name})
		}
	}
	return toolscache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if cl, ok := obj.(*ipamclaimsv1alpha1.IPAMClaim); ok {
				key(cl)
			}
		},
		UpdateFunc: func(oldObj, obj any) {
			o, ok1 := oldObj.(*ipamclaimsv1alpha1.IPAMClaim)
			n, ok2 := obj.(*ipamclaimsv1alpha1.IPAMClaim)
			if !ok1 || !ok2 {
				return
			}
			key(n)
			// Its reservations are released once nothing but tenure's
			// finalizer holds it (claims.Held).
			if n.DeletionTimestamp != nil && !claims.Held(n) && (o.DeletionTimestamp == nil || claims.Held(o)) {
				c.enqueue(c.byIndex(indexOwnerUID, string(n.UID))...)
			}
			// What the status records decides which of two items of one
			// slot is surplus (DuplicateAttachment).
			if !slices.Equal(o.Status.IPs, n.Status.IPs) || !slices.Equal(o.Status.DelegatedPrefixes, n.Status.DelegatedPrefixes) {
				c.enqueue(c.byIndex(indexOwnerUID, string(n.UID))...)
			}
		},
		DeleteFunc: func(obj any) {
			if cl, ok := kube.DeletedObject(obj).(*ipamclaimsv1alpha1.IPAMClaim); ok {
				c.enqueue(c.byIndex(indexOwnerUID, string(cl.UID))...)
			}
		},
	}
}

// reconcileReservation nominates from the cache and releases through the
// Releaser, which decides again on live reads.
func (c *Controller) reconcileReservation(ctx context.Context, name string) (time.Duration, error) {
	e := c.idx.reservation(name)
	if e == nil {
		return 0, nil
	}
	after, _, err := nominate(ctx, cachedSource{idx: c.idx, cache: c.cache}, c.rel, e.reservation(), e.opaque, c.log)
	return after, err
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
func (c *Controller) reconcileClaim(ctx context.Context, key types.NamespacedName) (time.Duration, error) {
	cl := &ipamclaimsv1alpha1.IPAMClaim{}
	if err := c.cache.Get(ctx, key, cl); err != nil {
		return 0, client.IgnoreNotFound(err)
	}
	cl = cl.DeepCopy()
	if cl.DeletionTimestamp != nil {
		_, _, err := c.cf.finalize(ctx, cl)
		return 0, err
	}
	_, err := c.cf.ensure(ctx, cl, c.idx.holds(string(cl.UID)))
	return 0, err
}
