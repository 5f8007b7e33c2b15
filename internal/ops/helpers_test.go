package ops

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	ipamclaimsv1alpha1 "github.com/tenure-ipam/tenure/api/ipamclaims/v1alpha1"
	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/reservation"
)

var t0 = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

// podRes is an address (or, with a "/", a delegated prefix) of network held
// by pod ns/name with uid, made by an agent on node, as the agent names it.
func podRes(network, item, ns, name, uid, node string) *tenurev1alpha1.IPReservation {
	return newRes(network, item, tenurev1alpha1.ReservationOwner{
		Kind: tenurev1alpha1.OwnerPod, Namespace: ns, Name: name, UID: uid, PodName: name, PodUID: uid,
		ContainerID: "sandbox-" + uid, Interface: "net1", Node: node,
	})
}

// claimRes is item held by IPAMClaim ns/name with uid, made by pod on node.
func claimRes(network, item, ns, name, uid, pod, node string) *tenurev1alpha1.IPReservation {
	return newRes(network, item, tenurev1alpha1.ReservationOwner{
		Kind: tenurev1alpha1.OwnerIPAMClaim, Namespace: ns, Name: name, UID: uid, PodName: pod, PodUID: pod + "-uid",
		ContainerID: "sandbox-" + pod, Interface: "net1", Node: node,
	})
}

func newRes(network, item string, owner tenurev1alpha1.ReservationOwner) *tenurev1alpha1.IPReservation {
	kind := tenurev1alpha1.KindAddress
	if strings.Contains(item, "/") {
		kind = tenurev1alpha1.KindDelegatedPrefix
	}
	p, err := reservation.ParseItem(item)
	if err != nil {
		panic(err)
	}
	r := reservation.New(reservation.Spec{Network: network, Kind: kind, Item: p, Owner: owner})
	r.UID = types.UID("res-" + r.Name)
	r.CreationTimestamp = metav1.NewTime(t0)
	return r
}

// withRange sets spec.range.
func withRange(r *tenurev1alpha1.IPReservation, rng string) *tenurev1alpha1.IPReservation {
	r.Spec.Range = rng
	return r
}

// renamed gives r another name, as a hand-made object could have.
func renamed(r *tenurev1alpha1.IPReservation, name string) *tenurev1alpha1.IPReservation {
	r = r.DeepCopy()
	r.Name = name
	return r
}

func claim(ns, name, uid string, ips []string, prefixes ...string) ipamclaimsv1alpha1.IPAMClaim {
	c := ipamclaimsv1alpha1.IPAMClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(uid)}}
	c.Spec.Network = "vm-net"
	c.Status.IPs = ips
	c.Status.DelegatedPrefixes = prefixes
	return c
}

// summary is "RULE OBJECT" per finding, for comparing.
func summary(fs []Finding) []string {
	out := make([]string, len(fs))
	for i, f := range fs {
		out[i] = string(f.Rule) + " " + f.Object
	}
	slices.Sort(out)
	return out
}

func wantFindings(t *testing.T, what string, got []Finding, want []string, messageHas ...string) {
	t.Helper()
	if want == nil {
		want = []string{}
	}
	slices.Sort(want)
	if g := summary(got); !slices.Equal(g, want) {
		t.Errorf("%s: findings %q, want %q (%+v)", what, g, want, got)
		return
	}
	for _, m := range messageHas {
		if !slices.ContainsFunc(got, func(f Finding) bool { return strings.Contains(f.Message, m) }) {
			t.Errorf("%s: no finding's message contains %q: %+v", what, m, got)
		}
	}
}

func pfx(s string) netip.Prefix { return netip.MustParsePrefix(s) }
