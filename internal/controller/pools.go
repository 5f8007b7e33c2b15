package controller

import (
	"context"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/config"
	"github.com/tenure-ipam/tenure/internal/reservation"
)

// ConditionSpecValid is the IPPool condition saying whether its spec
// builds (capacity can only be reported for a valid spec).
const ConditionSpecValid = "SpecValid"

// PoolCapacity is the number of assignable addresses over all ranges of a
// pool spec, computed by the same code the agent allocates with; a spec
// whose ranges or selectors the agent would refuse is an error naming the
// field.
func PoolCapacity(name string, spec tenurev1alpha1.IPPoolSpec) (int64, error) {
	c := &config.Config{}
	if err := c.ApplyPool(name, spec); err != nil {
		return 0, err
	}
	if err := config.CheckSelectors(name, spec); err != nil {
		return 0, err
	}
	var total uint64
	for _, r := range c.Ranges {
		n := r.Capacity()
		if total+n < total {
			total = math.MaxUint64
			break
		}
		total += n
	}
	if total > math.MaxInt64 {
		return math.MaxInt64, nil
	}
	return int64(total), nil
}

// usage counts the reservations of one pool.
type usage struct{ addresses, prefixes int64 }

// reservationCounts is the number of reservations per pool and kind, kept
// from the reservation informer's events: a status pass then costs the
// number of pools, not a copy of every reservation, which costs the leader
// CPU per allocation in proportion to the cluster's reservations while
// allocations go on (docs/performance.md). A relist replays as
// adds, updates and deletes, so the counts follow the cache exactly.
type reservationCounts struct {
	mu sync.Mutex
	n  map[string]usage
}

func (c *reservationCounts) add(obj any, delta int64) {
	e, ok := unwrapEntry[*reservation.View](obj)
	if !ok {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]usage{}
	}
	u := c.n[e.Pool]
	if e.Kind == tenurev1alpha1.KindDelegatedPrefix {
		u.prefixes += delta
	} else {
		u.addresses += delta
	}
	if u == (usage{}) {
		delete(c.n, e.Pool)
	} else {
		c.n[e.Pool] = u
	}
}

// Handler keeps the counts; register it on the reservation informer.
func (c *reservationCounts) Handler() toolscache.ResourceEventHandler {
	return toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { c.add(obj, 1) },
		UpdateFunc: func(old, obj any) { c.add(old, -1); c.add(obj, 1) },
		DeleteFunc: func(obj any) { c.add(obj, -1) },
	}
}

func (c *reservationCounts) snapshot() map[string]*usage {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]*usage, len(c.n))
	for pool, u := range c.n {
		out[pool] = &u
	}
	return out
}

// poolStatus writes pool usage to IPPool status and the tenure_reservations
// gauge from the informer cache, in batches: at most once per interval,
// only when a reservation or pool event happened since the last pass, and
// only for pools whose numbers changed. An allocation never causes a write
// of its own.
type poolStatus struct {
	counts   *reservationCounts
	cache    client.Reader
	writer   client.Client
	interval time.Duration
	log      *slog.Logger
	dirty    atomic.Bool
}

func (p *poolStatus) markDirty() { p.dirty.Store(true) }

// dirtyHandler marks the status to write on any event of the informer.
func (p *poolStatus) dirtyHandler() toolscache.ResourceEventHandler {
	return toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { p.markDirty() },
		UpdateFunc: func(any, any) { p.markDirty() },
		DeleteFunc: func(any) { p.markDirty() },
	}
}

// Start runs until ctx ends; it runs on the leader only.
func (p *poolStatus) Start(ctx context.Context) error {
	p.dirty.Store(true)
	t := time.NewTicker(p.interval)
	defer t.Stop()
	defer reservationsGauge.Reset()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if !p.dirty.Swap(false) {
			continue
		}
		if err := p.update(ctx); err != nil {
			p.dirty.Store(true)
			p.log.Info("pool status not updated; retrying", "err", err)
		}
	}
}

func (p *poolStatus) update(ctx context.Context) error {
	used := p.counts.snapshot()
	pl := &tenurev1alpha1.IPPoolList{}
	if err := p.cache.List(ctx, pl); err != nil {
		return err
	}
	reservationsGauge.Reset()
	var firstErr error
	declared := map[string]bool{}
	for i := range pl.Items {
		pool := &pl.Items[i]
		declared[pool.Name] = true
		u := used[pool.Name]
		if u == nil {
			u = &usage{}
		}
		free, err := p.write(ctx, pool, *u)
		if err != nil && firstErr == nil {
			firstErr = err
		}
		reservationsGauge.WithLabelValues(pool.Name, "free").Set(float64(free))
	}
	for name, u := range used {
		reservationsGauge.WithLabelValues(name, "allocated").Set(float64(u.addresses))
		reservationsGauge.WithLabelValues(name, "delegated").Set(float64(u.prefixes))
	}
	for name := range declared {
		if used[name] == nil {
			reservationsGauge.WithLabelValues(name, "allocated").Set(0)
			reservationsGauge.WithLabelValues(name, "delegated").Set(0)
		}
	}
	return firstErr
}

// write patches one pool's status when its numbers changed; it returns
// the free count.
func (p *poolStatus) write(ctx context.Context, pool *tenurev1alpha1.IPPool, u usage) (int64, error) {
	capacity, specErr := PoolCapacity(pool.Name, pool.Spec)
	st := pool.Status.DeepCopy()
	st.Capacity = capacity
	st.Allocated = u.addresses
	st.Free = max(capacity-u.addresses, 0)
	st.DelegatedPrefixes = u.prefixes
	cond := metav1.Condition{Type: ConditionSpecValid, Status: metav1.ConditionTrue, Reason: "Valid",
		Message: "the ranges build", ObservedGeneration: pool.Generation}
	if specErr != nil {
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, "InvalidSpec", specErr.Error()
	}
	condChanged := meta.SetStatusCondition(&st.Conditions, cond)
	old := pool.Status
	if !condChanged && old.Capacity == st.Capacity && old.Allocated == st.Allocated && old.Free == st.Free &&
		old.DelegatedPrefixes == st.DelegatedPrefixes && old.LastUpdated != nil {
		return st.Free, nil
	}
	now := metav1.Now()
	st.LastUpdated = &now
	updated := pool.DeepCopy()
	updated.Status = *st
	// An update (the cached resourceVersion makes it conditional; a
	// conflict is retried on the next tick) of the status subresource only.
	err := p.writer.Status().Update(ctx, updated)
	if apierrors.IsNotFound(err) {
		err = nil
	}
	return st.Free, err
}
