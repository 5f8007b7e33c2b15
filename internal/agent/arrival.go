package agent

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// Arrival order of CNI calls. A runtime gives up on an ADD the agent has
// not answered (a paused or overloaded agent) and sends the DEL of the same
// attachment; both then wait on the socket, and once the agent runs again
// their goroutines race for the attachment's lock. An ADD that ran after
// that DEL would reserve for a sandbox the runtime has already torn down,
// and nothing would ever DEL it again. So an ADD that arrived before a DEL
// of its attachment, and was not done when the DEL ran, is abandoned: the
// runtime stopped waiting for it long ago.
//
// Arrival is the order in which the socket accepted the connections (the
// kernel's accept queue is FIFO), or, through the plain Go API, the order
// of the calls to Handle.

// arrivalKey carries a call's arrival number in its context.
type arrivalKey struct{}

// withArrival numbers a call as it arrives.
func (r *arrivals) withArrival(ctx context.Context) context.Context {
	if _, ok := ctx.Value(arrivalKey{}).(uint64); ok {
		return ctx
	}
	return context.WithValue(ctx, arrivalKey{}, r.next.Add(1))
}

func arrivalOf(ctx context.Context) uint64 {
	n, _ := ctx.Value(arrivalKey{}).(uint64)
	return n
}

// delTombstoneTTL is how long a DEL is remembered: far longer than any
// call waits for an attachment's lock.
const delTombstoneTTL = 10 * time.Minute

type arrivals struct {
	next atomic.Uint64
	mu   sync.Mutex
	// deleted holds, per attachment, the arrival number of its last DEL.
	deleted map[string]tombstone
}

type tombstone struct {
	arrival uint64
	at      time.Time
}

// deletedAfter reports whether a DEL of key that arrived after arrival has
// run. Called with the attachment's lock held.
func (r *arrivals) deletedAfter(key string, arrival uint64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	t, ok := r.deleted[key]
	return ok && arrival != 0 && t.arrival > arrival
}

// recordDel remembers a DEL of key. Called with the attachment's lock held.
func (r *arrivals) recordDel(key string, arrival uint64, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.deleted == nil {
		r.deleted = map[string]tombstone{}
	}
	for k, t := range r.deleted {
		if now.Sub(t.at) > delTombstoneTTL {
			delete(r.deleted, k)
		}
	}
	if t, ok := r.deleted[key]; !ok || arrival > t.arrival {
		r.deleted[key] = tombstone{arrival: arrival, at: now}
	}
}
