package reservation

import (
	"hash/fnv"
	"net/netip"
	"strconv"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"

	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
)

func TestBlock(t *testing.T) {
	for _, tc := range []struct{ item, block string }{
		{"10.0.0.5/32", "10.0.0.0/26"},
		{"10.0.0.63/32", "10.0.0.0/26"},
		{"10.0.0.64/32", "10.0.0.64/26"},
		{"::ffff:10.0.0.70/128", "10.0.0.64/26"},
		{"2001:db8::1/128", "2001:db8::/122"},
		{"2001:db8::41/128", "2001:db8::40/122"},
		{"2001:db8:0:100::/56", "2001:db8::/50"},
		{"2001:db8:ff00:c100::/56", "2001:db8:ff00:c000::/50"},
		{"10.1.2.0/24", "10.1.0.0/18"},
		{"2000::/4", "::/0"},
	} {
		if got := Block(netip.MustParsePrefix(tc.item)); got != netip.MustParsePrefix(tc.block) {
			t.Errorf("Block(%s) = %s, want %s", tc.item, got, tc.block)
		}
	}
}

// TestBlockLabelOfObjectAndName: New labels an object with the block its
// name says, which is what a store computes from a name alone; items of
// one block share it, and the networks, kinds and neighbouring blocks do
// not.
func TestBlockLabelOfObjectAndName(t *testing.T) {
	obj := func(network string, kind tenurev1alpha1.ReservationKind, item string) map[string]string {
		r := New(Spec{Network: network, Kind: kind, Item: netip.MustParsePrefix(item), Owner: tenurev1alpha1.ReservationOwner{UID: "u"}})
		fromName, ok := BlockOfName(r.Name)
		if !ok || fromName != r.Labels[LabelBlock] {
			t.Errorf("%s: label %q, from name %q %v", r.Name, r.Labels[LabelBlock], fromName, ok)
		}
		if errs := validation.IsValidLabelValue(r.Labels[LabelBlock]); len(errs) > 0 {
			t.Errorf("%s: label %q: %v", r.Name, r.Labels[LabelBlock], errs)
		}
		return r.Labels
	}
	long := "a-network-name-that-is-long-enough-to-need-a-hash-as-its-label/10.0.0.0/8"
	a := obj("san", tenurev1alpha1.KindAddress, "10.0.0.5/32")[LabelBlock]
	for _, tc := range []struct {
		network string
		kind    tenurev1alpha1.ReservationKind
		item    string
		same    bool
	}{
		{"san", tenurev1alpha1.KindAddress, "10.0.0.60/32", true},
		{"san", tenurev1alpha1.KindAddress, "10.0.0.64/32", false},
		{"vlan", tenurev1alpha1.KindAddress, "10.0.0.5/32", false},
		{long, tenurev1alpha1.KindAddress, "10.0.0.5/32", false},
		{"san", tenurev1alpha1.KindAddress, "2001:db8::5/128", false},
		{"san", tenurev1alpha1.KindDelegatedPrefix, "2001:db8:0:100::/56", false},
	} {
		if got := obj(tc.network, tc.kind, tc.item)[LabelBlock]; (got == a) != tc.same {
			t.Errorf("%s %s %s: block %q vs 10.0.0.5's %q, same want %v", tc.network, tc.kind, tc.item, got, a, tc.same)
		}
	}
}

// Labels already on reservations in a cluster must not change with an
// upgrade: a block label is "b" and base 36 of FNV-1a over the scope
// label, the kind and the block, as hash/fnv computes it.
func TestBlockLabelsAreFNV1aOfScopeKindAndBlock(t *testing.T) {
	for _, tc := range []struct {
		scope string
		pd    bool
		item  string
		want  string
	}{
		{"vm-net", false, "10.0.0.5/32", "b3i8apra92e63b"},
		{"vm-net", true, "2001:db8:0:100::/56", "b3luju11m45cgd"},
	} {
		if got := BlockLabel(tc.scope, tc.pd, netip.MustParsePrefix(tc.item)); got != tc.want {
			t.Errorf("BlockLabel(%q, %v, %s) = %q, want %q (the label reservations already carry)", tc.scope, tc.pd, tc.item, got, tc.want)
		}
	}
	ref := func(scope string, pd bool, item netip.Prefix) string {
		h := fnv.New64a()
		h.Write([]byte(scope))
		if pd {
			h.Write([]byte("|pd|"))
		} else {
			h.Write([]byte("|ip|"))
		}
		h.Write([]byte(Block(item).String()))
		return "b" + strconv.FormatUint(h.Sum64(), 36)
	}
	for _, scope := range []string{"", "a", "vm-net", "storage--1x2y3z", strings.Repeat("n", 63)} {
		for _, item := range []string{"0.0.0.0/32", "10.1.2.3/32", "255.255.255.255/32", "::ffff:10.0.0.70/128", "2001:db8::1/128", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff/128", "2001:db8:0:100::/56", "::/0"} {
			p := netip.MustParsePrefix(item)
			for _, pd := range []bool{false, true} {
				if got, want := BlockLabel(scope, pd, p), ref(scope, pd, p); got != want {
					t.Errorf("BlockLabel(%q, %v, %s) = %q, hash/fnv gives %q", scope, pd, item, got, want)
				}
			}
		}
	}
}
