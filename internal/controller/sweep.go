package controller

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	ipamclaimsv1alpha1 "github.com/tenure-ipam/tenure/api/ipamclaims/v1alpha1"
	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/controller/repair"
	"github.com/tenure-ipam/tenure/internal/reservation"
)

// Sweeper is the backstop: one pass of the same decision over full live
// lists of reservations, pods, nodes and claims, each candidate then
// confirmed and released through the Releaser. `tenure-controller --once`
// is one call of Sweep.
type Sweeper struct {
	// Live reads from the API server.
	Live     client.Reader
	Releaser *Releaser
	claims   *claimFinalizer
	// PageSize bounds each list call (default 500).
	PageSize int64
}

// NewSweeper builds a sweeper around a releaser; w writes claim finalizers.
func NewSweeper(live client.Reader, w client.Writer, rel *Releaser) *Sweeper {
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
	snap, all, err := s.snapshot(ctx)
	if err != nil {
		return res, err
	}
	res.Reservations = len(all)
	var errs []error
	now := s.Releaser.now()
	for _, r := range all {
		g, _ := gather(ctx, snap, r, now) // a snapshot never fails
		if d := repair.Decide(r, g.facts, s.Releaser.Policy); !d.Release {
			continue
		}
		out, err := s.Releaser.Release(ctx, r.Name)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		switch {
		case out.Reservation == nil:
		case out.Decision.Release:
			res.Outcomes = append(res.Outcomes, out)
		default:
			res.Kept++
		}
	}
	for _, c := range snap.claims {
		c := c.DeepCopy()
		if c.DeletionTimestamp != nil {
			if !controllerutil.ContainsFinalizer(c, ClaimFinalizer) || s.Releaser.DryRun {
				continue
			}
			if _, err := s.claims.finalize(ctx, c); err != nil {
				errs = append(errs, err)
			} else {
				res.ClaimsFinalized++
			}
			continue
		}
		holds := false
		for _, r := range snap.byOwner[string(c.UID)] {
			holds = holds || r.Spec.Owner.Kind == tenurev1alpha1.OwnerIPAMClaim
		}
		if wrote, err := s.claims.ensure(ctx, c, holds); err != nil {
			if !apierrors.IsConflict(err) { // the claim changed: its reconcile or the next sweep retries
				errs = append(errs, err)
			}
		} else if wrote {
			res.FinalizersAdded++
		}
	}
	res.Duration = time.Since(start)
	// The sweep's lists are garbage now: at 100,000 reservations, hundreds
	// of MiB the runtime would otherwise keep until it scavenges them.
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
func (s *Sweeper) listAll(ctx context.Context, list client.ObjectList, each func()) error {
	cont := ""
	for {
		if err := s.Live.List(ctx, list, client.Limit(s.pageSize()), client.Continue(cont)); err != nil {
			return err
		}
		each()
		if cont = list.GetContinue(); cont == "" {
			return nil
		}
	}
}

// snapshot lists reservations first, then their owners: a reservation is
// only ever created for a pod or claim that already exists, so an owner
// missing from the later lists is a candidate (confirmed live anyway).
func (s *Sweeper) snapshot(ctx context.Context) (*snapshot, []*tenurev1alpha1.IPReservation, error) {
	snap := &snapshot{
		pods:    map[types.NamespacedName]*corev1.Pod{},
		nodes:   map[string]*corev1.Node{},
		claims:  map[types.NamespacedName]*ipamclaimsv1alpha1.IPAMClaim{},
		byOwner: map[string][]*tenurev1alpha1.IPReservation{},
	}
	var all []*tenurev1alpha1.IPReservation
	rl := &tenurev1alpha1.IPReservationList{}
	if err := s.listAll(ctx, rl, func() {
		for i := range rl.Items {
			r := rl.Items[i].DeepCopy()
			_, _ = reservation.Compact(r)
			all = append(all, r)
			snap.byOwner[r.Spec.Owner.UID] = append(snap.byOwner[r.Spec.Owner.UID], r)
		}
	}); err != nil {
		return nil, nil, fmt.Errorf("listing reservations: %w", err)
	}
	pl := &corev1.PodList{}
	if err := s.listAll(ctx, pl, func() {
		for i := range pl.Items {
			p := trimPod(&pl.Items[i])
			snap.pods[types.NamespacedName{Namespace: p.Namespace, Name: p.Name}] = p
		}
	}); err != nil {
		return nil, nil, fmt.Errorf("listing pods: %w", err)
	}
	nl := &corev1.NodeList{}
	if err := s.listAll(ctx, nl, func() {
		for i := range nl.Items {
			n := trimNode(&nl.Items[i])
			snap.nodes[n.Name] = n
		}
	}); err != nil {
		return nil, nil, fmt.Errorf("listing nodes: %w", err)
	}
	cl := &ipamclaimsv1alpha1.IPAMClaimList{}
	if err := s.listAll(ctx, cl, func() {
		for i := range cl.Items {
			c := cl.Items[i].DeepCopy()
			c.ManagedFields = nil
			snap.claims[types.NamespacedName{Namespace: c.Namespace, Name: c.Name}] = c
		}
	}); err != nil {
		return nil, nil, fmt.Errorf("listing IPAMClaims: %w", err)
	}
	return snap, all, nil
}

// trimPod keeps what the decision reads of a pod: identity, deletion,
// node and phase. The controller caches every pod of the cluster, so this
// is most of its memory.
func trimPod(p *corev1.Pod) *corev1.Pod {
	return &corev1.Pod{
		TypeMeta: p.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{
			Name: p.Name, Namespace: p.Namespace, UID: p.UID, ResourceVersion: p.ResourceVersion,
			CreationTimestamp: p.CreationTimestamp, DeletionTimestamp: p.DeletionTimestamp,
		},
		Spec:   corev1.PodSpec{NodeName: p.Spec.NodeName},
		Status: corev1.PodStatus{Phase: p.Status.Phase},
	}
}

// trimNode keeps identity and the Ready condition.
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
	return out
}

// transformTrim is the cache transform for pods and nodes.
func transformTrim(obj any) (any, error) {
	switch o := obj.(type) {
	case *corev1.Pod:
		return trimPod(o), nil
	case *corev1.Node:
		return trimNode(o), nil
	case metav1.Object:
		o.SetManagedFields(nil)
	}
	return obj, nil
}
