//go:build integration

package e2e

import (
	"errors"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/yaml"

	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/ops"
	"github.com/tenure-ipam/tenure/internal/reservation"
)

// TestReserveKeepsAddressesFromFiftyADDs: an administrator sets ten
// addresses of a network aside with a reason; 50 ADDs into the network
// get none of them; get, who and pools show them with the reason; setting
// aside an address a pod holds is refused naming the pod, and sets nothing
// aside; no agent may create or delete one; release gives them back.
func TestReserveKeepsAddressesFromFiftyADDs(t *testing.T) {
	ctx := testContext(t, 3*time.Minute)
	c := apiClient(t)
	agents := startAgents(t, ctx, "rsv-1")
	createPool(t, ctx, c, "e2e-setaside", tenurev1alpha1.IPPoolSpec{Ranges: []tenurev1alpha1.PoolRange{{Range: "10.83.0.0/26"}}, NetworkName: "setaside"})
	conf := netconf("setaside", agents["rsv-1"].Socket, `{"pool":"e2e-setaside"}`)
	admin := ops.New(c)
	const reason = "router and storage heads"

	// The object in YAML: a dry run writes nothing and prints the List an
	// administrator applies later, as kubectl apply -f would send it.
	dry, err := admin.Reserve(ctx, "setaside", "10.83.0.62", ops.SetAsideOptions{Reason: "storage head", DryRun: true})
	if err != nil || len(dry.Items) != 1 || len(setAsideIn(t, "setaside")) != 0 {
		t.Fatalf("dry run: %+v %v, set aside now %v", dry, err, setAsideIn(t, "setaside"))
	}
	manifest, err := yaml.Marshal(dry)
	if err != nil {
		t.Fatal(err)
	}
	var applied struct {
		Kind  string                         `json:"kind"`
		Items []tenurev1alpha1.IPReservation `json:"items"`
	}
	if err := yaml.Unmarshal(manifest, &applied); err != nil || applied.Kind != "List" || len(applied.Items) != 1 {
		t.Fatalf("dry run YAML %s: %v", manifest, err)
	}
	if err := c.Create(ctx, &applied.Items[0]); err != nil {
		t.Fatalf("creating the dry run's object:\n%s\n%v", manifest, err)
	}
	who62, err := admin.Who(ctx, "10.83.0.62")
	if err != nil || len(who62.Reservations) != 1 || who62.Reservations[0].Reason != "storage head" {
		t.Fatalf("who 10.83.0.62 after applying the YAML: %+v %v", who62, err)
	}
	if _, err := admin.ReleaseSetAside(ctx, "setaside", "10.83.0.62-10.83.0.62"); err != nil {
		t.Fatal(err)
	}

	set, err := admin.Reserve(ctx, "setaside", "10.83.0.1-10.83.0.10", ops.SetAsideOptions{Reason: reason})
	if err != nil {
		t.Fatal(err)
	}
	var setAside []string
	for _, r := range set.Items {
		setAside = append(setAside, r.Spec.Address)
		if r.Spec.Owner.Kind != tenurev1alpha1.OwnerAdministrator || r.Annotations[reservation.AnnotationReason] != reason || r.UID == "" {
			t.Fatalf("set aside %s: owner %+v annotations %v uid %q", r.Name, r.Spec.Owner, r.Annotations, r.UID)
		}
	}
	if want := []string{"10.83.0.1", "10.83.0.10", "10.83.0.2", "10.83.0.3", "10.83.0.4", "10.83.0.5", "10.83.0.6", "10.83.0.7", "10.83.0.8", "10.83.0.9"}; !slices.Equal(sorted(setAside), want) {
		t.Fatalf("set aside %v, want %v", setAside, want)
	}
	uids := map[string]string{}
	for _, r := range set.Items {
		uids[r.Name] = string(r.UID)
	}

	// 50 ADDs: none gets an address set aside (52 are left).
	first := netip.MustParseAddr("10.83.0.1")
	last := netip.MustParseAddr("10.83.0.10")
	var pods []pod
	for range 50 {
		p := newPod(t, ctx, c, "e2e-setaside", "rsv-1", nil)
		r, err := add(ctx, p, conf)
		if err != nil {
			t.Fatalf("ADD %d: %v", len(pods), err)
		}
		a := netip.MustParseAddr(addrs(r)[0])
		if !a.Less(first) && !last.Less(a) {
			t.Fatalf("ADD %d got %s, which is set aside", len(pods), a)
		}
		pods = append(pods, p)
	}

	// get, who and pools show them with the reason.
	got, err := admin.Get(ctx, "setaside")
	if err != nil {
		t.Fatal(err)
	}
	shown := 0
	for _, v := range got.Reservations {
		if v.Owner.Kind == tenurev1alpha1.OwnerAdministrator {
			shown++
			if v.Reason != reason {
				t.Errorf("get: %s reason %q", v.Address, v.Reason)
			}
		}
	}
	if shown != 10 || len(got.Reservations) != 60 {
		t.Errorf("get shows %d set aside of %d reservations, want 10 of 60", shown, len(got.Reservations))
	}
	who, err := admin.Who(ctx, "10.83.0.3")
	if err != nil {
		t.Fatal(err)
	}
	if len(who.Reservations) != 1 || who.Reservations[0].Reason != reason {
		t.Errorf("who 10.83.0.3: %+v", who.Reservations)
	}
	pools, err := admin.Pools(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if i := slices.IndexFunc(pools.Rows, func(r ops.PoolRow) bool { return r.Pool == "e2e-setaside" }); i < 0 ||
		pools.Rows[i].SetAside != 10 || !slices.Equal(pools.Rows[i].SetAsideReasons, []string{reason}) || pools.Rows[i].Allocated != 60 {
		t.Errorf("pools: %+v", pools.Rows)
	}

	// Setting aside the whole network, held addresses among them: refused
	// naming a holder, nothing more set aside.
	held := reservedItems(ownedBy(t, ctx, pods[7].uid))[0]
	_, err = admin.Reserve(ctx, "setaside", "10.83.0.0/26", ops.SetAsideOptions{Reason: "renumbering"})
	var he *ops.HeldError
	if !errors.As(err, &he) || !strings.Contains(err.Error(), held+" is held by Pod e2e-setaside/"+pods[7].name+" (uid "+pods[7].uid+")") ||
		!strings.Contains(err.Error(), "10.83.0.1 is set aside already by ") {
		t.Fatalf("setting aside held addresses: %v", err)
	}
	if now := setAsideIn(t, "setaside"); !maps.Equal(now, uids) {
		t.Fatalf("after the refusal the set-aside reservations are %v, want %v", now, uids)
	}
	// Bad input names the argument and changes nothing.
	for _, tc := range []struct{ network, addrs, reason, want string }{
		{"setaside", "10.83.0.70", reason, `ADDR|RANGE "10.83.0.70": no range of network setaside hands out 10.83.0.70`},
		{"setaside", "10.83.0.9-10.83.0.1", reason, `ADDR|RANGE "10.83.0.9-10.83.0.1": the last address comes before the first`},
		{"setaside", "10.83.0.62", "", `--reason "": is required`},
		{"nowhere", "10.83.0.62", reason, `NETWORK "nowhere": no IPPool or NetworkAttachmentDefinition configures a range`},
	} {
		if _, err := admin.Reserve(ctx, tc.network, tc.addrs, ops.SetAsideOptions{Reason: tc.reason}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("reserve %s %s: %v, want %q", tc.network, tc.addrs, err, tc.want)
		}
	}
	if now := setAsideIn(t, "setaside"); !maps.Equal(now, uids) {
		t.Fatalf("after bad input the set-aside reservations are %v, want %v", now, uids)
	}

	// No agent may create one, or give one back.
	agent := newNodeAgent(t, ctx, "rsv-2")
	forged := reservation.New(reservation.Spec{Network: "setaside", Kind: tenurev1alpha1.KindAddress, Item: netip.MustParsePrefix("10.83.0.62/32"),
		Owner: tenurev1alpha1.ReservationOwner{Kind: tenurev1alpha1.OwnerAdministrator, Name: "system:node:rsv-2", UID: "forged"}})
	// Without a node (an Administrator owner has none) the node rule
	// refuses it first; the set-aside rule holds for any other.
	err = agent.c.Create(ctx, forged)
	if !apierrors.IsForbidden(err) || !(strings.Contains(err.Error(), "[reservation-create-own-node]") || strings.Contains(err.Error(), "[reservation-set-aside]")) {
		t.Errorf("an agent creating an address set aside: %v, want it refused", err)
	}
	victim := set.Items[0].DeepCopy()
	err = agent.c.Delete(ctx, victim)
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "[reservation-set-aside]") {
		t.Errorf("an agent deleting an address set aside: %v, want it refused", err)
	}
	if now := setAsideIn(t, "setaside"); !maps.Equal(now, uids) {
		t.Fatalf("after the agent's writes the set-aside reservations are %v, want %v", now, uids)
	}

	// release gives them back, one, then the rest of the range: the next
	// ADDs take the two addresses never set aside, then the ten.
	if rel, err := admin.Release(ctx, "10.83.0.1", ops.ReleaseOptions{Network: "setaside"}); err != nil || rel.OwnerAlive {
		t.Fatalf("release 10.83.0.1: %+v %v", rel, err)
	}
	back, err := admin.ReleaseSetAside(ctx, "setaside", "10.83.0.1-10.83.0.10")
	if err != nil || len(back.Released) != 9 {
		t.Fatalf("release 10.83.0.1-10.83.0.10: %+v %v", back, err)
	}
	if now := setAsideIn(t, "setaside"); len(now) != 0 {
		t.Fatalf("after release: %v still set aside", now)
	}
	var again []string
	for range 12 {
		p := newPod(t, ctx, c, "e2e-setaside", "rsv-1", nil)
		r, err := add(ctx, p, conf)
		if err != nil {
			t.Fatalf("ADD after the release: %v", err)
		}
		again = append(again, addrs(r)[0])
	}
	if !containsAll(again, setAside) {
		t.Fatalf("the 12 ADDs after the release got %v, want the ten given back among them", again)
	}
}

func containsAll(have, want []string) bool {
	for _, w := range want {
		if !slices.Contains(have, w) {
			return false
		}
	}
	return true
}

// setAsideIn maps the names of a scope's set-aside reservations to their
// UIDs.
func setAsideIn(t *testing.T, network string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, r := range reservationsOf(t, t.Context(), network) {
		if r.Spec.Owner.Kind == tenurev1alpha1.OwnerAdministrator {
			out[r.Name] = string(r.UID)
		}
	}
	return out
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}
