package dataplane

import (
	"context"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/tenure-ipam/tenure/internal/config"
)

// countingSource records when each reconcile read the pods.
type countingSource struct {
	fakeSource
	mu    sync.Mutex
	reads []time.Time
}

func (c *countingSource) Pods() []*corev1.Pod {
	c.mu.Lock()
	c.reads = append(c.reads, time.Now())
	c.mu.Unlock()
	return c.fakeSource.Pods()
}

func (c *countingSource) readsSince(t time.Time) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, r := range c.reads {
		if !r.Before(t) {
			n++
		}
	}
	return n
}

// waitRead polls until a reconcile read the pods at or after t.
func (c *countingSource) waitRead(t *testing.T, after time.Time) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for c.readsSince(after) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no reconcile after %v", after)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// runCounted runs a Service whose resync is an hour away over a source
// that counts the reconciles, until the test ends.
func runCounted(t *testing.T) (*Service, *countingSource) {
	t.Helper()
	src := &countingSource{}
	s, err := New(Options{Source: src, Logger: quietLogger(), Resync: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return s, src
}

// A lone Trigger reconciles; a burst of Triggers is folded into at most
// one reconcile per triggerSpacing, and the last one of the burst is
// still followed by a reconcile that sees what it announced.
func TestTriggersOfABurstFoldIntoSpacedReconciles(t *testing.T) {
	s, src := runCounted(t)
	src.waitRead(t, time.Time{}) // the first reconcile, at start
	// A network served (on an interface this host lacks: no server
	// starts), so that a Trigger has something to reconcile.
	learn(t, s, "vms/san", "san", &config.DHCPv6{Enabled: true, Interfaces: []string{"tnt-absent0"}, PreferredLifetime: time.Hour, ValidLifetime: time.Hour})

	lone := time.Now()
	s.Trigger()
	src.waitRead(t, lone)

	time.Sleep(2 * triggerSpacing) // quiet again: the burst's first Trigger is not held back by the lone one's reconcile
	begin := time.Now()
	var last time.Time
	for time.Since(begin) < 5*triggerSpacing {
		last = time.Now()
		s.Trigger()
		time.Sleep(time.Millisecond)
	}
	src.waitRead(t, last)
	took := time.Since(begin)
	if n, most := src.readsSince(begin), int(took/triggerSpacing)+2; n > most {
		t.Errorf("%d reconciles for a burst of Triggers over %v, want at most %d (one per %v)", n, took, most, triggerSpacing)
	}
}

// On a node where no network is served and nothing is in place, a
// Trigger (every pod event of a storm, whatever the pods' IPAM) costs no
// pass over the pods; once a network is served it does again, and so does
// the first after the last network stops being served (its servers and
// routes to take away).
func TestTriggersWhileNoNetworkIsServedReconcileNothing(t *testing.T) {
	s, src := runCounted(t)
	src.waitRead(t, time.Time{}) // the first reconcile, at start: it finds nothing in place

	// A reconcile follows a lone Trigger at once when there is work, so
	// three spacings of Triggers would have shown one.
	idle := time.Now()
	for time.Since(idle) < 3*triggerSpacing {
		s.Trigger()
		time.Sleep(5 * time.Millisecond)
	}
	served := time.Now()
	learn(t, s, "vms/san", "san", &config.DHCPv6{Enabled: true, Interfaces: []string{"tnt-absent0"}, PreferredLifetime: time.Hour, ValidLifetime: time.Hour})
	s.Trigger()
	src.waitRead(t, served)
	if n := src.readsSince(idle) - src.readsSince(served); n != 0 {
		t.Errorf("%d reconciles for Triggers while no network was served, want 0", n)
	}

	unserved := time.Now()
	learn(t, s, "vms/san", "san", nil)
	s.Trigger()
	src.waitRead(t, unserved)
}
