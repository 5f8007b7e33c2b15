package controller

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	ipamclaimsv1alpha1 "github.com/tenure-ipam/tenure/api/ipamclaims/v1alpha1"
	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/controller/repair"
	"github.com/tenure-ipam/tenure/internal/reservation"
)

// Sweeper is the backstop: one pass of the same decision over every
// reservation, each candidate then confirmed and released through the
// Releaser. A running controller's sweep nominates from its caches, which
// its informers keep complete (a missed watch event ends in a relist);
// `tenure-controller --once`, which has no caches, is one call of Sweep
// over paged live lists.
type Sweeper struct {
	// Live reads from the API server.
	Live     client.Reader
	Releaser *Releaser
	claims   *claimFinalizer
	// PageSize bounds each list call (default 500).
	PageSize int64
	// view, when set, gives the snapshot to sweep instead of live lists.
	view func(ctx context.Context) (*snapshot, error)
	// recheck, when set, hands a reservation to the running controller's
	// queue: after the given time when the answer may change by the clock
	// alone (a node's grace period), at once (0) when its release failed,
	// to be retried with the queue's backoff.
	recheck func(name string, after time.Duration)
}

func (s *Sweeper) requeue(name string, after time.Duration) {
	if s.recheck != nil {
		s.recheck(name, after)
	}
}

// NewSweeper builds a sweeper around a releaser; w writes claim finalizers
// and conditions.
func NewSweeper(live client.Reader, w ClaimWriter, rel *Releaser) *Sweeper {
	return &Sweeper{Live: live, Releaser: rel, claims: &claimFinalizer{live: live, writer: w, rel: rel}}
}

// SweepResult reports one sweep.
type SweepResult struct {
	Reservations int
	// Outcomes of the candidates, as confirmed live: Decision.Release says
	// it is (or, with DryRun, would be) released; Released that it was.
	Outcomes []Outcome
	// Kept counts candidates of the lists that the live reads kept.
	Kept int
	// ClaimsFinalized counts deleting claims whose finalizer was removed.
	ClaimsFinalized int
	// FinalizersAdded counts claims that got the finalizer.
	FinalizersAdded int
	Duration        time.Duration
}

// Sweep runs one full pass. Errors on single items do not stop it; they are
// joined into the returned error.
func (s *Sweeper) Sweep(ctx context.Context) (SweepResult, error) {
	start := time.Now()
	var res SweepResult
	view := s.view
	if view == nil {
		view = s.snapshot
	}
	snap, err := view(ctx)
	if err != nil {
		return res, err
	}
	entries := snap.idx.list()
	// An owner's reservations side by side: each is judged with its
	// siblings read off the list, where asking the index for them costs
	// the bucket's worth of lookups each (docs/performance.md, "Siblings
	// off the list").
	slices.SortFunc(entries, func(a, b *reservation.View) int {
		return cmp.Or(strings.Compare(a.Owner.UID, b.Owner.UID), strings.Compare(a.Name, b.Name))
	})
	res.Reservations = len(entries)
	var errs []error
	now := s.Releaser.now()
	var r tenurev1alpha1.IPReservation // reused: Decide keeps nothing of it
	var candidates []string
	for i := 0; i < len(entries); i += len(snap.owner) {
		uid := entries[i].Owner.UID
		n := 1
		for i+n < len(entries) && entries[i+n].Owner.UID == uid {
			n++
		}
		snap.owner = entries[i : i+n]
		for _, e := range snap.owner {
			// An opaque entry, one with an opaque sibling (the only error
			// of a snapshot), or one only live facts decide (AskLive), goes
			// to the live reads as a candidate.
			if !e.Opaque {
				if g, err := gather(ctx, snap, e.Into(&r), now); err == nil {
					if d := repair.Decide(&r, g.facts, s.Releaser.Policy); !d.Release && !d.AskLive {
						s.Releaser.observe(&r, d)
						s.Releaser.settleCached(ctx, &r, d)
						if d.RecheckAfter > 0 {
							s.requeue(e.Name, d.RecheckAfter)
						}
						continue
					}
				}
			}
			candidates = append(candidates, e.Name)
		}
	}
	snap.owner = nil
	// In name order, as the API server lists them: --once prints its
	// candidates in this order.
	slices.Sort(candidates)
	for _, name := range candidates {
		out, err := s.Releaser.Release(ctx, name)
		if err != nil {
			errs = append(errs, err)
			s.requeue(name, 0)
			continue
		}
		switch {
		case out.Reservation == nil:
		case out.Decision.Release:
			res.Outcomes = append(res.Outcomes, out)
		default:
			res.Kept++
			if out.Decision.RecheckAfter > 0 {
				s.requeue(name, out.Decision.RecheckAfter)
			}
		}
	}
	entries = nil
	for _, c := range snap.claims {
		c := c.DeepCopy()
		if c.DeletionTimestamp != nil {
			if !controllerutil.ContainsFinalizer(c, ClaimFinalizer) || s.Releaser.DryRun {
				continue
			}
			if _, done, err := s.claims.finalize(ctx, c); err != nil {
				errs = append(errs, err)
			} else if done {
				res.ClaimsFinalized++
			}
			continue
		}
		if wrote, err := s.claims.ensure(ctx, c, snap.idx.holds(string(c.UID))); err != nil {
			if !apierrors.IsConflict(err) { // the claim changed: its reconcile or the next sweep retries
				errs = append(errs, err)
			}
		} else if wrote {
			res.FinalizersAdded++
		}
	}
	res.Duration = time.Since(start)
	// What the sweep listed (all of the index for --once) is garbage now,
	// in proportion to the cluster's reservations, which the runtime would
	// otherwise keep until it scavenges it.
	debug.FreeOSMemory()
	sweepDuration.Observe(res.Duration.Seconds())
	if len(errs) == 0 {
		lastSweepSuccess.SetToCurrentTime()
	}
	return res, errors.Join(errs...)
}

func (s *Sweeper) pageSize() int64 {
	if s.PageSize > 0 {
		return s.PageSize
	}
	return 500
}

// listAll pages through a list; each is called after every page.
func (s *Sweeper) listAll(ctx context.Context, list client.ObjectList, each func() error, opts ...client.ListOption) error {
	cont := ""
	for {
		if err := s.Live.List(ctx, list, append([]client.ListOption{client.Limit(s.pageSize()), client.Continue(cont)}, opts...)...); err != nil {
			return err
		}
		if err := each(); err != nil {
			return err
		}
		if cont = list.GetContinue(); cont == "" {
			return nil
		}
	}
}

// snapshot lists reservations first, then their owners: a reservation is
// only ever created for a pod or claim that already exists, so an owner
// missing from the later lists is a candidate (confirmed live anyway).
// Each page is reduced to the entries a running controller caches as it
// arrives, so a sweep holds no more than that.
func (s *Sweeper) snapshot(ctx context.Context) (*snapshot, error) {
	snap := &snapshot{
		idx:    newIndex(),
		nodes:  map[string]*corev1.Node{},
		claims: map[types.NamespacedName]*ipamclaimsv1alpha1.IPAMClaim{},
	}
	// As the running controller watches them: as metadata those that carry
	// the spec summary, whole the older ones.
	summarized, whole := summarySelectors()
	for _, l := range []struct {
		list client.ObjectList
		sel  client.ListOption
	}{{reservation.NewMetadataList(), summarized}, {&tenurev1alpha1.IPReservationList{}, whole}} {
		if err := s.listAll(ctx, l.list, func() error {
			return meta.EachListItem(l.list, func(obj runtime.Object) error {
				e, _ := transformEntries(obj)
				return snap.idx.add(e.(*reservation.View))
			})
		}, l.sel); err != nil {
			return nil, fmt.Errorf("listing reservations: %w", err)
		}
	}
	pl := &corev1.PodList{}
	if err := s.listAll(ctx, pl, func() error {
		for i := range pl.Items {
			if err := snap.idx.pods.Add(podEntryOf(&pl.Items[i])); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		return nil, fmt.Errorf("listing pods: %w", err)
	}
	nl := &corev1.NodeList{}
	if err := s.listAll(ctx, nl, func() error {
		for i := range nl.Items {
			n := trimNode(&nl.Items[i])
			snap.nodes[n.Name] = n
		}
		return nil
	}); err != nil {
		return nil, fmt.Errorf("listing nodes: %w", err)
	}
	cl := &ipamclaimsv1alpha1.IPAMClaimList{}
	if err := s.listAll(ctx, cl, func() error {
		for i := range cl.Items {
			c := cl.Items[i].DeepCopy()
			c.ManagedFields = nil
			snap.claims[types.NamespacedName{Namespace: c.Namespace, Name: c.Name}] = c
		}
		return nil
	}); err != nil {
		return nil, fmt.Errorf("listing IPAMClaims: %w", err)
	}
	return snap, nil
}

// trimNode keeps identity, the Ready condition and the out-of-service
// taint: what repair.NodeFactOf reads.
func trimNode(n *corev1.Node) *corev1.Node {
	out := &corev1.Node{
		TypeMeta: n.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{
			Name: n.Name, UID: n.UID, ResourceVersion: n.ResourceVersion,
			CreationTimestamp: n.CreationTimestamp, DeletionTimestamp: n.DeletionTimestamp,
		},
	}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			out.Status.Conditions = []corev1.NodeCondition{c}
		}
	}
	for _, t := range n.Spec.Taints {
		if t.Key == corev1.TaintNodeOutOfService {
			out.Spec.Taints = append(out.Spec.Taints, t)
		}
	}
	return out
}

// transformTrim is the cache transform for nodes.
func transformTrim(obj any) (any, error) {
	switch o := obj.(type) {
	case *corev1.Node:
		return trimNode(o), nil
	case metav1.Object:
		o.SetManagedFields(nil)
	}
	return obj, nil
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
