package agent

import (
	"errors"
	"io"
	"sync/atomic"

	"golang.org/x/sync/semaphore"

	"github.com/tenure-ipam/tenure/internal/cniwire"
)

// The request bytes the agent holds at once, across all connections. A
// request's bytes stay charged from the moment they are read until its
// answer is computed (the decoded request lives that long), so the agent's
// memory for requests is a multiple of these, whatever arrives. A request
// that would pass them is answered "try again" (CNI code 11) at once.
//
// Each connection's first headBytes come from a pool of their own, so
// ordinary calls (a network config is a few KiB) keep being served while
// large ones fill the rest: a node's burst of pod starts is not turned away
// by one oversized config.
const (
	headBytes     = 64 << 10
	headPoolBytes = 8 << 20
	// tailPoolBytes lets one request of the wire's largest size through
	// at a time.
	tailPoolBytes = cniwire.MaxMessage
	// readChunk is the most one read charges ahead of what it gets.
	readChunk = 64 << 10
)

// errBusy: the request budget has no room for more of this request.
var errBusy = errors.New("the agent's request budget is spent")

// requestBudget bounds the bytes of requests in flight.
type requestBudget struct {
	head, tail *semaphore.Weighted
	headSize   int64 // charged to head per connection
	limit      int64 // head's and tail's capacity together

	inFlight, peak atomic.Int64
	busy           atomic.Int64 // requests refused for lack of room
}

func newRequestBudget(headSize, headPool, tailPool int64) *requestBudget {
	return &requestBudget{
		head: semaphore.NewWeighted(headPool), tail: semaphore.NewWeighted(tailPool),
		headSize: headSize, limit: headPool + tailPool,
	}
}

// InFlight is the bytes charged now; Peak the most ever charged at once.
func (b *requestBudget) InFlight() int64 { return b.inFlight.Load() }
func (b *requestBudget) Peak() int64     { return b.peak.Load() }

func (b *requestBudget) add(n int64) {
	v := b.inFlight.Add(n)
	for {
		p := b.peak.Load()
		if v <= p || b.peak.CompareAndSwap(p, v) {
			return
		}
	}
}

// charge is one connection's share of the budget.
type charge struct {
	b          *requestBudget
	head, tail int64
}

// take charges n more bytes, or nothing and false when there is no room.
func (c *charge) take(n int64) bool {
	h := min(n, c.b.headSize-c.head)
	if h > 0 && !c.b.head.TryAcquire(h) {
		return false
	}
	if t := n - max(h, 0); t > 0 {
		if !c.b.tail.TryAcquire(t) {
			if h > 0 {
				c.b.head.Release(h)
			}
			return false
		}
		c.tail += t
	}
	c.head += max(h, 0)
	c.b.add(n)
	return true
}

// give returns the last n bytes charged, tail first.
func (c *charge) give(n int64) {
	// Counted out before the room is freed, as take counts in after it
	// is taken: the count never holds more than the pools lend.
	c.b.add(-n)
	t := min(n, c.tail)
	if t > 0 {
		c.b.tail.Release(t)
		c.tail -= t
	}
	if h := n - t; h > 0 {
		c.b.head.Release(h)
		c.head -= h
	}
}

// release returns everything charged.
func (c *charge) release() { c.give(c.head + c.tail) }

// chargedReader reads r, charging every byte before it is read.
type chargedReader struct {
	r io.Reader
	c *charge
}

func (cr *chargedReader) Read(p []byte) (int, error) {
	if len(p) > readChunk {
		p = p[:readChunk]
	}
	if len(p) == 0 {
		return 0, nil
	}
	if !cr.c.take(int64(len(p))) {
		return 0, errBusy
	}
	n, err := cr.r.Read(p)
	cr.c.give(int64(len(p) - n))
	return n, err
}
