package agent

import (
	"reflect"
	"sync"
	"testing"

	"github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/config"
)

func netconf(ipam string) []byte {
	return []byte(`{"cniVersion":"1.0.0","name":"net1","type":"macvlan","master":"eth0","ipam":` + ipam + `}`)
}

// countingCache counts the calls of config.Parse behind it.
func countingCache(size int) (*netconfCache, func() int) {
	c := newNetconfCache(size)
	var mu sync.Mutex
	n := 0
	c.parse = func(netconf, flat []byte) (*config.Config, error) {
		mu.Lock()
		n++
		mu.Unlock()
		return config.Parse(netconf, flat)
	}
	return c, func() int { mu.Lock(); defer mu.Unlock(); return n }
}

func TestNetconfCacheParsesEachConfigOnce(t *testing.T) {
	c, parses := countingCache(netconfCacheSize)
	a := netconf(`{"type":"tenure","range":"10.0.0.0/24","gateway":"10.0.0.1"}`)
	b := netconf(`{"type":"tenure","range":"10.0.1.0/24"}`)
	flat := []byte(`{"agent_socket":"/run/t/agent.sock"}`)

	first, err := c.get(a, nil)
	if err != nil {
		t.Fatal(err)
	}
	second, err := c.get(a, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := parses(); got != 1 {
		t.Fatalf("two gets of one config parsed %d times, want 1", got)
	}
	if first == second || !reflect.DeepEqual(first, second) {
		t.Fatalf("second get: %p %+v, want an equal copy of %p %+v", second, second, first, first)
	}
	other, err := c.get(b, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := parses(); got != 2 {
		t.Fatalf("a second config parsed %d times in all, want 2", got)
	}
	if other.Ranges[0].Spec != "10.0.1.0/24" || first.Ranges[0].Spec != "10.0.0.0/24" {
		t.Fatalf("ranges %q and %q, want 10.0.0.0/24 and 10.0.1.0/24", first.Ranges[0].Spec, other.Ranges[0].Spec)
	}
	withFlat, err := c.get(a, flat)
	if err != nil {
		t.Fatal(err)
	}
	if got := parses(); got != 3 || withFlat.AgentSocket != "/run/t/agent.sock" || first.AgentSocket == withFlat.AgentSocket {
		t.Fatalf("the same netconf over a flat file: %d parses, agent socket %q (without %q), want 3 and the flat file's", got, withFlat.AgentSocket, first.AgentSocket)
	}
}

// A bad config is parsed once too: Parse's error is as pure as its config,
// and the kubelet retries a failing ADD.
func TestNetconfCacheKeepsErrors(t *testing.T) {
	c, parses := countingCache(netconfCacheSize)
	bad := netconf(`{"type":"tenure","range":"10.0.0.0/33"}`)
	_, err1 := c.get(bad, nil)
	_, err2 := c.get(bad, nil)
	if err1 == nil || err2 == nil || err1.Error() != err2.Error() {
		t.Fatalf("errors %v, %v: want the same error twice", err1, err2)
	}
	if got := parses(); got != 1 {
		t.Fatalf("parsed %d times, want 1", got)
	}
}

// A pool config is applied to each caller's own copy: a changed IPPool
// gives a changed config, and never reaches the cached one or another
// caller's.
func TestNetconfCachePoolAppliedToACopy(t *testing.T) {
	c, parses := countingCache(netconfCacheSize)
	p := netconf(`{"type":"tenure","pool":"blue"}`)
	spec := func(r string) v1alpha1.IPPoolSpec {
		return v1alpha1.IPPoolSpec{Ranges: []v1alpha1.PoolRange{{Range: r}}}
	}
	older, err := c.get(p, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := older.ApplyPool("blue", spec("10.1.0.0/24")); err != nil {
		t.Fatal(err)
	}
	newer, err := c.get(p, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(newer.Ranges) != 0 {
		t.Fatalf("the cached config has ranges %v after a caller applied its pool", newer.Ranges)
	}
	if err := newer.ApplyPool("blue", spec("10.2.0.0/24")); err != nil {
		t.Fatal(err)
	}
	if older.Ranges[0].Spec != "10.1.0.0/24" || newer.Ranges[0].Spec != "10.2.0.0/24" {
		t.Fatalf("ranges %v and %v, want 10.1.0.0/24 and 10.2.0.0/24", older.Ranges, newer.Ranges)
	}
	if got := parses(); got != 1 {
		t.Fatalf("parsed %d times, want 1", got)
	}
}

// The cache is bounded: a config pushed out is parsed again.
func TestNetconfCacheBounded(t *testing.T) {
	c, parses := countingCache(2)
	a := netconf(`{"type":"tenure","range":"10.0.0.0/24"}`)
	for _, r := range []string{"10.0.1.0/24", "10.0.2.0/24"} {
		if _, err := c.get(a, nil); err != nil {
			t.Fatal(err)
		}
		if _, err := c.get(netconf(`{"type":"tenure","range":"`+r+`"}`), nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.get(netconf(`{"type":"tenure","range":"10.0.1.0/24"}`), nil); err != nil {
		t.Fatal(err)
	}
	// a, 1 (a hit), 2 evicts 1, then 1 again: four parses.
	if got := parses(); got != 4 {
		t.Fatalf("parsed %d times, want 4", got)
	}
}

// Concurrent gets of one config, each changing its copy: the race
// detector's case.
func TestNetconfCacheConcurrent(t *testing.T) {
	c := newNetconfCache(netconfCacheSize)
	p := netconf(`{"type":"tenure","pool":"blue","routes":[{"dst":"0.0.0.0/0"}]}`)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 50 {
				cfg, err := c.get(p, nil)
				if err != nil {
					t.Error(err)
					return
				}
				if err := cfg.ApplyPool("blue", v1alpha1.IPPoolSpec{Ranges: []v1alpha1.PoolRange{{Range: "10.1.0.0/24"}}}); err != nil {
					t.Error(err)
					return
				}
				cfg.Routes[0].MTU++
			}
		})
	}
	wg.Wait()
}

// BenchmarkNetconfCache is the config read of every ADD, DEL and CHECK
// once the network's config is cached: compare BenchmarkParse in
// internal/config.
func BenchmarkNetconfCache(b *testing.B) {
	c := newNetconfCache(netconfCacheSize)
	n := netconf(`{"type":"tenure","gateway":"10.0.0.1","ipRanges":[{"range":"10.0.0.0/24","exclude":["10.0.0.200/29"]},{"range":"fd00::/64"}],
		"routes":[{"dst":"0.0.0.0/0","gw":"10.0.0.1"}],"dns":{"nameservers":["10.96.0.10"]}}`)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.get(n, nil); err != nil {
			b.Fatal(err)
		}
	}
}
