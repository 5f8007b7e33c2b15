package controller

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	crsource "sigs.k8s.io/controller-runtime/pkg/source"
)

// queue is a controller's work queue, as its sources get it.
type queue = workqueue.TypedRateLimitingInterface[reconcile.Request]

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
