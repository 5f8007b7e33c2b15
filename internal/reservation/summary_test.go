package reservation

import (
	"net/netip"
	"net/url"
	"strings"
	"testing"

	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
)

// What New writes in the annotation reads back as the spec's owner (less
// UID, podName and podUID, which the labels and no reader need) and pool,
// whatever characters they hold.
func TestSpecSummaryRoundTrips(t *testing.T) {
	for _, tc := range []struct {
		name string
		spec Spec
	}{
		{"pod", Spec{Network: "san", Kind: tenurev1alpha1.KindAddress, Item: netip.MustParsePrefix("10.0.0.5/32"), Pool: "p1", Range: "10.0.0.0/24",
			Owner: tenurev1alpha1.ReservationOwner{Kind: tenurev1alpha1.OwnerPod, Namespace: "ns", Name: "web-0", UID: "u1", PodName: "web-0", PodUID: "u1",
				ContainerID: strings.Repeat("3f", 32), Interface: "net1", Node: "node-1.example.com"}}},
		{"claim, no node, no pool", Spec{Network: "vm", Kind: tenurev1alpha1.KindDelegatedPrefix, Item: netip.MustParsePrefix("2001:db8::/64"),
			Owner: tenurev1alpha1.ReservationOwner{Kind: tenurev1alpha1.OwnerIPAMClaim, Namespace: "ns", Name: "vm1.net1", UID: "u2"}}},
		{"characters to escape", Spec{Network: "n", Kind: tenurev1alpha1.KindAddress, Item: netip.MustParsePrefix("10.0.0.6/32"), Pool: "a&b=c", Range: "10.0.0.2-10.0.0.9",
			Owner: tenurev1alpha1.ReservationOwner{Kind: tenurev1alpha1.OwnerPod, Namespace: "ns", Name: "p", UID: "u3", ContainerID: "c+d%e f", Interface: "eth 0&x"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := New(tc.spec)
			if r.Labels[LabelSpecSummary] != SpecSummaryV1 {
				t.Fatalf("labels %v: no %s=%s", r.Labels, LabelSpecSummary, SpecSummaryV1)
			}
			got, err := ParseSpecSummary(r.Annotations[AnnotationSpecSummary])
			if err != nil {
				t.Fatalf("ParseSpecSummary(%q): %v", r.Annotations[AnnotationSpecSummary], err)
			}
			want := SpecSummary{Pool: tc.spec.Pool, Owner: tc.spec.Owner, Range: tc.spec.Range}
			want.Owner.UID, want.Owner.PodName, want.Owner.PodUID = "", "", ""
			if got != want {
				t.Fatalf("%q reads back as %+v, want %+v", r.Annotations[AnnotationSpecSummary], got, want)
			}
		})
	}
}

func TestParseSpecSummary(t *testing.T) {
	got, err := ParseSpecSummary("kind=Pod&later=field&name=p")
	if err != nil || got.Owner.Kind != tenurev1alpha1.OwnerPod || got.Owner.Name != "p" {
		t.Fatalf("an unknown key: %+v, %v; want it skipped", got, err)
	}
	if got, err := ParseSpecSummary(""); err != nil || got != (SpecSummary{}) {
		t.Fatalf("empty: %+v, %v", got, err)
	}
	for _, bad := range []string{"kind", "kind=Pod&&name=p", "name=%zz"} {
		if got, err := ParseSpecSummary(bad); err == nil {
			t.Errorf("ParseSpecSummary(%q) = %+v, want an error", bad, got)
		}
	}
}

// A value is written as url.QueryEscape writes it, whether or not it
// needs escaping.
func FuzzSpecSummaryValuesAreQueryEscaped(f *testing.F) {
	for _, s := range []string{"", "pod-1", "a b", "a+b", "a&b=c", "100%", "ns/name", "é", "~._-", "\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		got := EncodeSpecSummary(&tenurev1alpha1.IPReservationSpec{Owner: tenurev1alpha1.ReservationOwner{Name: v}})
		want := ""
		if v != "" {
			want = "name=" + url.QueryEscape(v)
		}
		if got != want {
			t.Errorf("EncodeSpecSummary of name %q = %q, want %q", v, got, want)
		}
	})
}
