package store

import (
	"net/netip"
	"sync"

	"github.com/google/btree"

	"github.com/tenure-ipam/tenure/internal/reservation"
)

// addrRun is a run of consecutive held addresses, lo to hi inclusive.
type addrRun struct{ lo, hi netip.Addr }

func runLess(a, b addrRun) bool { return a.lo.Less(b.lo) }

// addrSet is a set of addresses kept as maximal runs of consecutive ones,
// ordered by first address. A full /16 is one run, so "the first address at
// or after a that is not held" is one lookup however full the range is,
// where probing address by address costs the size of the range.
type addrSet struct {
	runs *btree.BTreeG[addrRun]
	n    int
}

func newAddrSet() *addrSet { return &addrSet{runs: btree.NewG(16, runLess)} }

// runAt is the run holding a.
func (s *addrSet) runAt(a netip.Addr) (addrRun, bool) {
	var r addrRun
	found := false
	s.runs.DescendLessOrEqual(addrRun{lo: a}, func(x addrRun) bool {
		r, found = x, true
		return false
	})
	if !found || r.hi.Less(a) {
		return addrRun{}, false
	}
	return r, true
}

// add inserts a, merging it with the runs it touches; false if held already.
func (s *addrSet) add(a netip.Addr) bool {
	if _, ok := s.runAt(a); ok {
		return false
	}
	lo, hi := a, a
	// Prev and Next are invalid past either end of the family, so runs
	// never merge across the IPv4/IPv6 boundary.
	if p := a.Prev(); p.IsValid() {
		if r, ok := s.runAt(p); ok {
			s.runs.Delete(r)
			lo = r.lo
		}
	}
	if nx := a.Next(); nx.IsValid() {
		if r, ok := s.runs.Get(addrRun{lo: nx}); ok {
			s.runs.Delete(r)
			hi = r.hi
		}
	}
	s.runs.ReplaceOrInsert(addrRun{lo: lo, hi: hi})
	s.n++
	return true
}

// remove deletes a, splitting its run; false if a was not held.
func (s *addrSet) remove(a netip.Addr) bool {
	r, ok := s.runAt(a)
	if !ok {
		return false
	}
	s.runs.Delete(r)
	if r.lo.Less(a) {
		s.runs.ReplaceOrInsert(addrRun{lo: r.lo, hi: a.Prev()})
	}
	if a.Less(r.hi) {
		s.runs.ReplaceOrInsert(addrRun{lo: a.Next(), hi: r.hi})
	}
	s.n--
	return true
}

// nextFree is the first address at or after a not in the set; false when
// every address from a to the end of its family is held.
func (s *addrSet) nextFree(a netip.Addr) (netip.Addr, bool) {
	r, ok := s.runAt(a)
	if !ok {
		return a, true
	}
	nx := r.hi.Next()
	return nx, nx.IsValid()
}

// heldIndex is the addresses a window holds, per scope label.
// Delegated prefixes are not indexed (a delegation pool is searched without it).
type heldIndex struct {
	mu  sync.RWMutex
	per map[string]*addrSet
}

func (x *heldIndex) apply(name string, held bool) {
	p, err := reservation.Parse(name)
	if err != nil || p.IsPrefix {
		return
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.per == nil {
		x.per = map[string]*addrSet{}
	}
	set := x.per[p.ScopeLabel]
	if set == nil {
		if !held {
			return
		}
		set = newAddrSet()
		x.per[p.ScopeLabel] = set
	}
	if held {
		set.add(p.Prefix.Addr())
		return
	}
	set.remove(p.Prefix.Addr())
	if set.n == 0 {
		delete(x.per, p.ScopeLabel)
	}
}

// NextUnheldAddress returns the first address at or after a of which the
// window holds no reservation in the network of that label; false
// when every address from a to the end of a's family is held. It counts
// only what the window has seen: the agent's own unconfirmed writes and
// releases are for TryAssume to decide, as ever.
func (s *Store) NextUnheldAddress(networkLabel string, a netip.Addr) (netip.Addr, bool) {
	held := s.win.Load().held
	held.mu.RLock()
	defer held.mu.RUnlock()
	set := held.per[networkLabel]
	if set == nil {
		return a, true
	}
	return set.nextFree(a)
}
