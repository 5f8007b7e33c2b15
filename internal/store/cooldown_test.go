package store

import (
	"testing"
	"time"

	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
)

func pod(uid, ifc string) tenurev1alpha1.ReservationOwner {
	return tenurev1alpha1.ReservationOwner{Kind: tenurev1alpha1.OwnerPod, UID: uid, Interface: ifc}
}

// TestWhoMayTakeACoolingAddress: a released name is kept from every owner
// but the one that released it, for the cooldown and no longer.
func TestWhoMayTakeACoolingAddress(t *testing.T) {
	claim := tenurev1alpha1.ReservationOwner{Kind: tenurev1alpha1.OwnerIPAMClaim, UID: "c", Interface: "net2"}
	cases := []struct {
		name       string
		d, after   time.Duration
		owner, ifc string // the release's
		asker      tenurev1alpha1.ReservationOwner
		cooling    bool
	}{
		{"another pod, within the cooldown", time.Minute, 59 * time.Second, "p1", "net1", pod("p2", "net1"), true},
		{"another pod, once cooled", time.Minute, time.Minute, "p1", "net1", pod("p2", "net1"), false},
		{"the same pod and interface", time.Minute, 0, "p1", "net1", pod("p1", "net1"), false},
		{"the same pod, another interface", time.Minute, 0, "p1", "net1", pod("p1", "net2"), true},
		{"the same pod, interface unknown (a window's delete)", time.Minute, 0, "p1", "", pod("p1", "net2"), false},
		{"the same claim, another interface", time.Minute, 0, "c", "net1", claim, false},
		{"an unknown releaser", time.Minute, 0, "", "", pod("p1", "net1"), true},
		{"no cooldown", 0, 0, "p1", "net1", pod("p2", "net1"), false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			now := time.Unix(1000, 0)
			s := &Store{}
			s.cool.now = func() time.Time { return now }
			s.SetCooldown(tc.d)
			s.cool.record("r-a", tc.owner, tc.ifc)
			now = now.Add(tc.after)
			at, cooling := s.Cooling("r-a", tc.asker)
			if cooling != tc.cooling {
				t.Fatalf("Cooling = %v, want %v", cooling, tc.cooling)
			}
			if cooling && !at.Equal(time.Unix(1000, 0)) {
				t.Fatalf("released at %v, want the release's time", at)
			}
		})
	}
}

// TestTheLedgerKeepsOnlyWhatStillCools: each record drops the names that
// have cooled, so the ledger holds the releases of one cooldown.
func TestTheLedgerKeepsOnlyWhatStillCools(t *testing.T) {
	now := time.Unix(1000, 0)
	c := &cooldown{d: time.Minute, now: func() time.Time { return now }}
	c.record("r-old", "p1", "")
	now = now.Add(30 * time.Second)
	c.record("r-mid", "p2", "")
	now = now.Add(31 * time.Second)
	c.record("r-new", "p3", "")
	if _, ok := c.freed["r-old"]; ok {
		t.Fatal("r-old, released 61 s ago, still in the ledger")
	}
	for _, n := range []string{"r-mid", "r-new"} {
		if _, ok := c.freed[n]; !ok {
			t.Fatalf("%s, still cooling, left the ledger", n)
		}
	}
	if len(c.queue) != 2 || c.queue[0].name != "r-mid" || c.queue[1].name != "r-new" {
		t.Fatalf("queue = %v, want r-mid, r-new", c.queue)
	}
}

// TestOneReleaseToldTwiceCoolsFromTheFirst: our delete's reply and the
// informer's report of it are one release; the informer's whole object
// names the owner the reply did not know. Held again, the name's next
// release cools from then.
func TestOneReleaseToldTwiceCoolsFromTheFirst(t *testing.T) {
	now := time.Unix(1000, 0)
	s := &Store{}
	s.cool.now = func() time.Time { return now }
	s.SetCooldown(time.Minute)
	s.cool.record("r-a", "", "")
	now = now.Add(time.Second)
	s.cool.record("r-a", "p1", "net1")
	if at, cooling := s.Cooling("r-a", pod("p1", "net1")); cooling {
		t.Fatalf("p1 kept from its own address (released at %v)", at)
	}
	if at, _ := s.Cooling("r-a", pod("p2", "net1")); !at.Equal(time.Unix(1000, 0)) {
		t.Fatalf("released at %v, want the first report's time", at)
	}
	s.cool.held("r-a")
	now = now.Add(10 * time.Second)
	s.cool.record("r-a", "p2", "net1")
	if at, _ := s.Cooling("r-a", pod("p3", "net1")); !at.Equal(time.Unix(1011, 0)) {
		t.Fatalf("released again at %v, want 1011", at)
	}
}
