package store

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"sync"
	"testing"
)

func addrs(ss ...string) []netip.Addr {
	out := make([]netip.Addr, len(ss))
	for i, s := range ss {
		out[i] = netip.MustParseAddr(s)
	}
	return out
}

// runsOf lists the set's runs as "lo-hi".
func runsOf(s *addrSet) []string {
	var out []string
	s.runs.Ascend(func(r addrRun) bool {
		out = append(out, r.lo.String()+"-"+r.hi.String())
		return true
	})
	return out
}

func TestAddrSetKeepsMaximalRuns(t *testing.T) {
	for _, tc := range []struct {
		name     string
		add, del []string
		runs     []string
		n        int
	}{
		{name: "one", add: []string{"10.0.0.1"}, runs: []string{"10.0.0.1-10.0.0.1"}, n: 1},
		{name: "merge after", add: []string{"10.0.0.1", "10.0.0.2"}, runs: []string{"10.0.0.1-10.0.0.2"}, n: 2},
		{name: "merge before", add: []string{"10.0.0.2", "10.0.0.1"}, runs: []string{"10.0.0.1-10.0.0.2"}, n: 2},
		{name: "bridge two runs", add: []string{"10.0.0.1", "10.0.0.3", "10.0.0.2"}, runs: []string{"10.0.0.1-10.0.0.3"}, n: 3},
		{name: "gap stays", add: []string{"10.0.0.1", "10.0.0.3"}, runs: []string{"10.0.0.1-10.0.0.1", "10.0.0.3-10.0.0.3"}, n: 2},
		{name: "duplicate add", add: []string{"10.0.0.1", "10.0.0.1"}, runs: []string{"10.0.0.1-10.0.0.1"}, n: 1},
		{name: "split middle", add: []string{"10.0.0.1", "10.0.0.2", "10.0.0.3"}, del: []string{"10.0.0.2"}, runs: []string{"10.0.0.1-10.0.0.1", "10.0.0.3-10.0.0.3"}, n: 2},
		{name: "trim start", add: []string{"10.0.0.1", "10.0.0.2"}, del: []string{"10.0.0.1"}, runs: []string{"10.0.0.2-10.0.0.2"}, n: 1},
		{name: "trim end", add: []string{"10.0.0.1", "10.0.0.2"}, del: []string{"10.0.0.2"}, runs: []string{"10.0.0.1-10.0.0.1"}, n: 1},
		{name: "remove absent", add: []string{"10.0.0.1"}, del: []string{"10.0.0.9"}, runs: []string{"10.0.0.1-10.0.0.1"}, n: 1},
		{name: "remove last", add: []string{"10.0.0.1"}, del: []string{"10.0.0.1"}, n: 0},
		{name: "IPv4 top does not join IPv6", add: []string{"255.255.255.255", "::"}, runs: []string{"255.255.255.255-255.255.255.255", "::-::"}, n: 2},
		{name: "IPv6 across a group", add: []string{"fd00::ffff", "fd00::1:0"}, runs: []string{"fd00::ffff-fd00::1:0"}, n: 2},
		{name: "bottom of IPv4", add: []string{"0.0.0.0", "0.0.0.1"}, runs: []string{"0.0.0.0-0.0.0.1"}, n: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newAddrSet()
			for _, a := range addrs(tc.add...) {
				s.add(a)
			}
			for _, a := range addrs(tc.del...) {
				s.remove(a)
			}
			if got := runsOf(s); fmt.Sprint(got) != fmt.Sprint(tc.runs) || s.n != tc.n {
				t.Errorf("runs %v n %d, want %v n %d", got, s.n, tc.runs, tc.n)
			}
		})
	}
}

func TestAddrSetNextFree(t *testing.T) {
	s := newAddrSet()
	for _, a := range addrs("10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.5", "255.255.255.254", "255.255.255.255", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff") {
		s.add(a)
	}
	for _, tc := range []struct {
		from, want string
		ok         bool
	}{
		{from: "10.0.0.0", want: "10.0.0.0", ok: true},
		{from: "10.0.0.1", want: "10.0.0.4", ok: true},
		{from: "10.0.0.3", want: "10.0.0.4", ok: true},
		{from: "10.0.0.5", want: "10.0.0.6", ok: true},
		{from: "255.255.255.254", ok: false},
		{from: "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", ok: false},
		{from: "fd00::", want: "fd00::", ok: true},
	} {
		got, ok := s.nextFree(netip.MustParseAddr(tc.from))
		if ok != tc.ok || (ok && got.String() != tc.want) {
			t.Errorf("nextFree(%s) = %v %v, want %s %v", tc.from, got, ok, tc.want, tc.ok)
		}
	}
}

// TestAddrSetMatchesAMap: random adds and removes over a small range agree
// with a plain set, address by address.
func TestAddrSetMatchesAMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	s := newAddrSet()
	ref := map[netip.Addr]bool{}
	base := netip.MustParseAddr("10.9.0.0").As4()
	at := func(i int) netip.Addr { b := base; b[3] = byte(i); return netip.AddrFrom4(b) }
	for step := 0; step < 5000; step++ {
		a := at(rng.IntN(256))
		if rng.IntN(3) == 0 {
			s.remove(a)
			delete(ref, a)
		} else {
			s.add(a)
			ref[a] = true
		}
		if s.n != len(ref) {
			t.Fatalf("step %d: n %d, want %d", step, s.n, len(ref))
		}
	}
	for i := 0; i < 256; i++ {
		want := i
		for want < 256 && ref[at(want)] {
			want++
		}
		got, ok := s.nextFree(at(i))
		if want == 256 {
			if !ok || got != netip.MustParseAddr("10.9.1.0") {
				t.Errorf("nextFree(%v) = %v %v, want 10.9.1.0", at(i), got, ok)
			}
			continue
		}
		if !ok || got != at(want) {
			t.Errorf("nextFree(%v) = %v %v, want %v", at(i), got, ok, at(want))
		}
	}
	prev := netip.Addr{}
	s.runs.Ascend(func(r addrRun) bool {
		if r.hi.Less(r.lo) || (prev.IsValid() && !prev.Next().Less(r.lo)) {
			t.Errorf("run %v-%v overlaps or touches the previous one ending %v", r.lo, r.hi, prev)
		}
		prev = r.hi
		return true
	})
}

// heldAddresses is the number of addresses of one network the window
// holds.
func heldAddresses(s *Store, networkLabel string) int {
	held := s.win.Load().held
	held.mu.RLock()
	defer held.mu.RUnlock()
	if set := held.per[networkLabel]; set != nil {
		return set.n
	}
	return 0
}

// TestHeldIndexPerNetworkConcurrent: the informer's goroutine applies
// events while allocations read (run with -race).
func TestHeldIndexPerNetworkConcurrent(t *testing.T) {
	s := &Store{}
	s.win.Store(&window{held: &heldIndex{}})
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 500; i++ {
				s.win.Load().held.apply(fmt.Sprintf("net%d.10.0.%d.%d", w, i/250, i%250), true)
				s.NextUnheldAddress(fmt.Sprintf("net%d", (w+1)%4), netip.MustParseAddr("10.0.0.0"))
			}
		}()
	}
	wg.Wait()
	for w := 0; w < 4; w++ {
		label := fmt.Sprintf("net%d", w)
		if n := heldAddresses(s, label); n != 500 {
			t.Errorf("%s holds %d, want 500", label, n)
		}
		if a, ok := s.NextUnheldAddress(label, netip.MustParseAddr("10.0.0.0")); !ok || a != netip.MustParseAddr("10.0.0.250") {
			t.Errorf("%s: first unheld %v %v, want 10.0.0.250 (10.0.0.0-249 and 10.0.1.0-249 held)", label, a, ok)
		}
	}
	// Prefix names are not indexed; deleting the last address drops the network.
	s.win.Load().held.apply("net0.pd.2001-0db8-0000-0100-0000-0000-0000-0000.56", true)
	for i := 0; i < 500; i++ {
		s.win.Load().held.apply(fmt.Sprintf("net0.10.0.%d.%d", i/250, i%250), false)
	}
	if n := heldAddresses(s, "net0"); n != 0 {
		t.Errorf("net0 holds %d after every delete", n)
	}
}
