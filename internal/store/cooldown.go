package store

import (
	"sync"
	"time"

	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/kube"
	"github.com/tenure-ipam/tenure/internal/reservation"
)

// DefaultCooldown is the agent's --release-cooldown default: longer than a
// Linux peer's neighbour entry stays REACHABLE without a confirmation
// (base_reachable_time 30 s, randomised up to 45 s) plus its probe delay
// (5 s), so peers of a deleted pod have forgotten its MAC, and answered
// its connections with nothing, before another pod answers for the
// address.
const DefaultCooldown = 60 * time.Second

// freed is one released address: when this agent saw it go, and whose it
// was (the owner-UID label; the interface when the object was whole).
type freed struct {
	at         time.Time
	owner, ifc string
}

// cooldown is the ledger of released names younger than d: a map for
// the allocator's question and a queue in release order that bounds it
// (each record drops what has cooled since), so a question costs a map
// read and a record an amortised O(1).
type cooldown struct {
	mu    sync.Mutex
	d     time.Duration
	freed map[string]freed
	queue []queued
	now   func() time.Time
}

type queued struct {
	name string
	at   time.Time
}

// SetCooldown sets how long a released address is kept from a different
// owner while others are free; 0 (the default of New) keeps no ledger.
func (s *Store) SetCooldown(d time.Duration) {
	s.cool.mu.Lock()
	defer s.cool.mu.Unlock()
	s.cool.d = max(d, 0)
}

// record notes that name was released, from owner's attachment ifc (""
// when unknown).
func (c *cooldown) record(name, owner, ifc string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.d <= 0 || name == "" {
		return
	}
	now := c.clock()
	c.expireLocked(now)
	if c.freed == nil {
		c.freed = map[string]freed{}
	}
	if f, ok := c.freed[name]; ok {
		// One release, told twice (our delete's reply, then the
		// informer): it cools from the first; the informer's whole
		// object names the owner where the reply did not.
		if f.owner == "" {
			f.owner, f.ifc = owner, ifc
			c.freed[name] = f
		}
		return
	}
	c.freed[name] = freed{at: now, owner: owner, ifc: ifc}
	c.queue = append(c.queue, queued{name: name, at: now})
}

// held forgets name's release: it is held again, and its next release
// cools from then.
func (c *cooldown) held(name string) {
	c.mu.Lock()
	delete(c.freed, name)
	c.mu.Unlock()
}

func (c *cooldown) clock() time.Time {
	if c.now != nil {
		return c.now()
	}
	return time.Now()
}

// expireLocked drops the names released d or longer ago; a queued name
// released again since stays under its later record.
func (c *cooldown) expireLocked(now time.Time) {
	n := 0
	for ; n < len(c.queue) && now.Sub(c.queue[n].at) >= c.d; n++ {
		q := c.queue[n]
		if f, ok := c.freed[q.name]; ok && f.at.Equal(q.at) {
			delete(c.freed, q.name)
		}
	}
	if n > 0 {
		c.queue = append(c.queue[:0], c.queue[n:]...)
	}
}

// Cooling reports whether name was released less than the cooldown ago by
// another owner than o, and when. The same owner (a pod's UID and, where
// both are known, its interface; a claim's UID) takes its address back at
// once: a retried ADD, a claim's pod restarted.
func (s *Store) Cooling(name string, o tenurev1alpha1.ReservationOwner) (releasedAt time.Time, cooling bool) {
	c := &s.cool
	c.mu.Lock()
	defer c.mu.Unlock()
	f, ok := c.freed[name]
	if !ok || c.d <= 0 || c.clock().Sub(f.at) >= c.d {
		return time.Time{}, false
	}
	same := f.owner != "" && f.owner == o.UID && (f.ifc == "" || o.Interface == "" || o.Kind == tenurev1alpha1.OwnerIPAMClaim || f.ifc == o.Interface)
	return f.at, !same
}

// sawFreed records a delete an informer reported: the window's (metadata)
// and the node cache's (whole objects) alike.
func (s *Store) sawFreed(obj any) {
	switch r := kube.DeletedObject(obj).(type) {
	case *tenurev1alpha1.IPReservation:
		s.cool.record(r.Name, r.Spec.Owner.UID, r.Spec.Owner.Interface)
	case *reservation.View:
		s.cool.record(r.Name, r.Owner.UID, "")
	}
}
