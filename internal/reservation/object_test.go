package reservation

import (
	"net/netip"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
)

func TestNewDerivesNameLabelsAndAddress(t *testing.T) {
	owner := tenurev1alpha1.ReservationOwner{Kind: tenurev1alpha1.OwnerPod, Namespace: "ns", Name: "p", UID: "o1", Node: "n1"}
	for _, tc := range []struct {
		name       string
		spec       Spec
		wantName   string
		wantAddr   string
		wantLabels map[string]string
	}{
		{"IPv4 address", Spec{Network: "san", Kind: tenurev1alpha1.KindAddress, Item: netip.MustParsePrefix("10.0.0.5/32"), Owner: owner},
			"san.10.0.0.5", "10.0.0.5", map[string]string{LabelNetwork: "san", LabelOwnerUID: "o1", LabelNode: "n1", LabelBlock: BlockLabel("san", false, netip.MustParsePrefix("10.0.0.0/32"))}},
		{"IPv6 address", Spec{Network: "vm-net", Kind: tenurev1alpha1.KindAddress, Item: netip.MustParsePrefix("2001:db8::1/128"), Owner: owner},
			"vm-net.2001-0db8-0000-0000-0000-0000-0000-0001", "2001:db8::1", map[string]string{LabelNetwork: "vm-net", LabelOwnerUID: "o1", LabelNode: "n1", LabelBlock: BlockLabel("vm-net", false, netip.MustParsePrefix("2001:db8::3f/128"))}},
		{"delegated prefix, unmasked input", Spec{Network: "vm-net", Kind: tenurev1alpha1.KindDelegatedPrefix, Item: netip.MustParsePrefix("2001:db8:0:100::1/56"), Owner: owner},
			"vm-net.pd.2001-0db8-0000-0100-0000-0000-0000-0000.56", "2001:db8:0:100::/56", map[string]string{LabelNetwork: "vm-net", LabelOwnerUID: "o1", LabelNode: "n1", LabelBlock: BlockLabel("vm-net", true, netip.MustParsePrefix("2001:db8::/56"))}},
		{"no node: no node label", Spec{Network: "a/b", Kind: tenurev1alpha1.KindAddress, Item: netip.MustParsePrefix("10.0.0.1/32"), Owner: tenurev1alpha1.ReservationOwner{UID: "o2"}},
			AddressName("a/b", netip.MustParseAddr("10.0.0.1")), "10.0.0.1", map[string]string{LabelNetwork: ScopeLabel("a/b"), LabelOwnerUID: "o2", LabelBlock: BlockLabel(ScopeLabel("a/b"), false, netip.MustParsePrefix("10.0.0.1/32"))}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := New(tc.spec)
			tc.wantLabels[LabelSpecSummary] = SpecSummaryV1 // summary_test.go checks its annotation
			if r.Name != tc.wantName || r.Spec.Address != tc.wantAddr || r.Spec.Network != tc.spec.Network || r.Spec.Kind != tc.spec.Kind {
				t.Fatalf("New = %s %+v, want name %s address %s", r.Name, r.Spec, tc.wantName, tc.wantAddr)
			}
			if len(r.Labels) != len(tc.wantLabels) {
				t.Fatalf("labels %v, want %v", r.Labels, tc.wantLabels)
			}
			for k, v := range tc.wantLabels {
				if r.Labels[k] != v {
					t.Fatalf("labels %v, want %v", r.Labels, tc.wantLabels)
				}
			}
			if r.APIVersion != tenurev1alpha1.GroupVersion.String() || r.Kind != "IPReservation" {
				t.Fatalf("type meta %+v", r.TypeMeta)
			}
			back, err := ParseItem(r.Spec.Address)
			if err != nil || Name(r.Spec.Network, r.Spec.Kind, back) != r.Name {
				t.Fatalf("ParseItem(%q) = %v, %v: does not name the object back", r.Spec.Address, back, err)
			}
			p, err := Parse(r.Name)
			if err != nil || p.ScopeLabel != r.Labels[LabelNetwork] || p.IsPrefix != (tc.spec.Kind == tenurev1alpha1.KindDelegatedPrefix) {
				t.Fatalf("Parse(%s) = %+v, %v", r.Name, p, err)
			}
		})
	}
}

func TestCompactKeepsWhatCachesRead(t *testing.T) {
	r := &tenurev1alpha1.IPReservation{ObjectMeta: metav1.ObjectMeta{Name: "san.10.0.0.5", UID: "u1", ResourceVersion: "9",
		Labels:          map[string]string{LabelNode: "n1", LabelOwnerUID: "o1", LabelNetwork: "san"},
		Annotations:     map[string]string{"a": "b"},
		ManagedFields:   []metav1.ManagedFieldsEntry{{Manager: "m"}},
		OwnerReferences: []metav1.OwnerReference{{Name: "x"}}},
		Spec: tenurev1alpha1.IPReservationSpec{Network: "san", Kind: tenurev1alpha1.KindAddress, Address: "10.0.0.5", Range: "10.0.0.0/29",
			Owner: tenurev1alpha1.ReservationOwner{Kind: tenurev1alpha1.OwnerPod, Namespace: "ns", Name: "p", UID: "o1", ContainerID: "c1", Interface: "net1", Node: "n1"}}}
	want := r.Spec
	out, err := Compact(r)
	if err != nil || out != r {
		t.Fatalf("Compact: %v", err)
	}
	if r.Annotations != nil || r.ManagedFields != nil || r.OwnerReferences != nil || len(r.Labels) != 1 || r.Labels[LabelNode] != "n1" {
		t.Fatalf("metadata after compaction: %+v", r.ObjectMeta)
	}
	if r.Spec != want || r.Name != "san.10.0.0.5" || r.UID != "u1" || r.ResourceVersion != "9" {
		t.Fatalf("compaction changed what caches read: %+v %+v", r.ObjectMeta, r.Spec)
	}
	// A pod's reservation carrying the annotation keeps nothing; an address
	// set aside keeps its reason, and only that.
	podWithReason := &tenurev1alpha1.IPReservation{ObjectMeta: metav1.ObjectMeta{Name: "p", Annotations: map[string]string{AnnotationReason: "x"}},
		Spec: tenurev1alpha1.IPReservationSpec{Owner: tenurev1alpha1.ReservationOwner{Kind: tenurev1alpha1.OwnerPod}}}
	if _, _ = Compact(podWithReason); podWithReason.Annotations != nil {
		t.Fatalf("a pod's reservation kept annotations %v", podWithReason.Annotations)
	}
	setAside := New(Spec{Network: "san", Kind: tenurev1alpha1.KindAddress, Item: netip.MustParsePrefix("10.0.0.6/32"),
		Owner: tenurev1alpha1.ReservationOwner{Kind: tenurev1alpha1.OwnerAdministrator, Name: "admin", UID: "a1"}})
	setAside.Annotations[AnnotationReason] = "router"
	if _, _ = Compact(setAside); len(setAside.Annotations) != 1 || setAside.Annotations[AnnotationReason] != "router" {
		t.Fatalf("an address set aside kept annotations %v, want only its reason", setAside.Annotations)
	}
	noNode := &tenurev1alpha1.IPReservation{ObjectMeta: metav1.ObjectMeta{Name: "x", Labels: map[string]string{LabelOwnerUID: "o"}}}
	if _, _ = Compact(noNode); noNode.Labels != nil {
		t.Fatalf("a reservation without a node label keeps no label map: %v", noNode.Labels)
	}
}

func TestNodeLabel(t *testing.T) {
	long := strings.Repeat("rack-17.", 12) + "node-a.example.com"
	for _, node := range []string{"node-a", "ip-10-0-0-1.ec2.internal", long, long + "x"} {
		l := NodeLabel(node)
		if errs := validation.IsValidLabelValue(l); len(errs) > 0 {
			t.Errorf("NodeLabel(%q) = %q: %v", node, l, errs)
		}
		if len(node) <= 63 && l != node {
			t.Errorf("NodeLabel(%q) = %q: a name that is a valid label value is kept as it is", node, l)
		}
		if NodeLabel(node) != l {
			t.Errorf("NodeLabel(%q) is not deterministic", node)
		}
	}
	if NodeLabel(long) == NodeLabel(long+"x") {
		t.Error("two long names sharing their first 63 bytes got one label")
	}
	r := New(Spec{Network: "san", Kind: tenurev1alpha1.KindAddress, Item: netip.MustParsePrefix("10.0.0.1/32"), Owner: tenurev1alpha1.ReservationOwner{UID: "u", Node: long}})
	if r.Labels[LabelNode] != NodeLabel(long) || r.Spec.Owner.Node != long {
		t.Errorf("New: node label %q, spec node %q", r.Labels[LabelNode], r.Spec.Owner.Node)
	}
}
