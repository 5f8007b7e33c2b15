package claims

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

func stsPod(name string, owner *metav1.OwnerReference, ann map[string]string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "db", Name: name, Annotations: ann}}
	if owner != nil {
		p.OwnerReferences = []metav1.OwnerReference{*owner}
	}
	return p
}

func ref(apiVersion, kind, name string, controller bool) *metav1.OwnerReference {
	return &metav1.OwnerReference{APIVersion: apiVersion, Kind: kind, Name: name, UID: "sts-uid", Controller: &controller}
}

func TestWantsSticky(t *testing.T) {
	cases := []struct {
		value     *string
		ifName    string
		want, set bool
	}{
		{nil, "net1", false, false},
		{ptr("true"), "net1", true, true},
		{ptr("*"), "net1", true, true},
		{ptr("false"), "net1", false, true},
		{ptr(""), "net1", false, true},
		{ptr("net2, net1"), "net1", true, true},
		{ptr("net2"), "net1", false, true},
	}
	for _, tc := range cases {
		ann := map[string]string{}
		if tc.value != nil {
			ann[StickyAnnotation] = *tc.value
		}
		want, set := WantsSticky(stsPod("db-0", nil, ann), tc.ifName)
		if want != tc.want || set != tc.set {
			t.Errorf("annotation %v on %s: want, set = %v, %v; want %v, %v", tc.value, tc.ifName, want, set, tc.want, tc.set)
		}
	}
}

func ptr(s string) *string { return &s }

func TestStatefulSetOf(t *testing.T) {
	cases := []struct {
		name    string
		pod     *corev1.Pod
		ok      bool
		ordinal int
	}{
		{"a StatefulSet's pod", stsPod("db-2", ref("apps/v1", "StatefulSet", "db", true), nil), true, 2},
		{"a dashed StatefulSet name", stsPod("my-db-10", ref("apps/v1", "StatefulSet", "my-db", true), nil), true, 10},
		{"no owner", stsPod("db-0", nil, nil), false, 0},
		{"owned, not controlled", stsPod("db-0", ref("apps/v1", "StatefulSet", "db", false), nil), false, 0},
		{"a ReplicaSet's pod", stsPod("db-0", ref("apps/v1", "ReplicaSet", "db", true), nil), false, 0},
		{"a StatefulSet of another group", stsPod("db-0", ref("apps.kruise.io/v1beta1", "StatefulSet", "db", true), nil), false, 0},
		{"a name that is not NAME-ORDINAL", stsPod("db-x", ref("apps/v1", "StatefulSet", "db", true), nil), false, 0},
		{"a leading zero", stsPod("db-01", ref("apps/v1", "StatefulSet", "db", true), nil), false, 0},
		{"an ordinal beyond int32", stsPod("db-99999999999", ref("apps/v1", "StatefulSet", "db", true), nil), false, 0},
	}
	for _, tc := range cases {
		r, ord, ok := StatefulSetOf(tc.pod)
		if ok != tc.ok || ord != tc.ordinal || (ok && r.Name == "") {
			t.Errorf("%s: %+v, %d, %v; want ordinal %d, %v", tc.name, r, ord, ok, tc.ordinal, tc.ok)
		}
	}
}

func TestStickyClaimName(t *testing.T) {
	if n := StickyClaimName("db-0", "net1"); n != "db-0.net1" {
		t.Errorf("plain: %q", n)
	}
	long := strings.Repeat("a", 63) + "-2147483647"
	for _, tc := range []struct{ pod, ifName string }{
		{"db-0", "Net_1"},
		{long, "net1"},
		{strings.Repeat("b", 250), "net1"},
	} {
		n := StickyClaimName(tc.pod, tc.ifName)
		if errs := validation.IsDNS1123Subdomain(n); len(errs) > 0 {
			t.Errorf("%s/%s: %q is not a valid name: %v", tc.pod, tc.ifName, n, errs)
		}
		if StickyClaimName(tc.pod, tc.ifName+"x") == n {
			t.Errorf("%s/%s: another interface gets the same name %q", tc.pod, tc.ifName, n)
		}
	}
	if n := StickyClaimName(long, "net1"); n != long+".net1" {
		t.Errorf("a long StatefulSet pod name that fits: %q", n)
	}
}

func TestStickyOfRoundTrip(t *testing.T) {
	owner := ref("apps/v1", "StatefulSet", "db", true)
	p := stsPod("db-4", owner, nil)
	c := NewStickyClaim(p, "net1", "san", *owner)
	if c.Name != "db-4.net1" || c.Namespace != "db" || c.Spec.Network != "san" || c.Spec.Interface != "net1" {
		t.Fatalf("claim %s/%s spec %+v", c.Namespace, c.Name, c.Spec)
	}
	o := c.OwnerReferences[0]
	if *o.Controller || *o.BlockOwnerDeletion || o.UID != "sts-uid" || o.Kind != "StatefulSet" {
		t.Errorf("ownerReference %+v: want the StatefulSet, neither controller nor blocking its deletion", o)
	}
	s, ok, err := StickyOf(c)
	if err != nil || !ok || s.StatefulSet != "db" || s.Pod != "db-4" || s.Ordinal != 4 || s.OwnerUID != "sts-uid" {
		t.Errorf("StickyOf = %+v, %v, %v", s, ok, err)
	}
	c.OwnerReferences = nil // the StatefulSet was deleted with the orphan policy
	if s, _, _ := StickyOf(c); s.OwnerUID != "" {
		t.Errorf("OwnerUID %q without an ownerReference", s.OwnerUID)
	}
	c.Annotations[AnnotationPod] = "other-4"
	if _, ok, err := StickyOf(c); !ok || err == nil || !strings.Contains(err.Error(), AnnotationPod) {
		t.Errorf("a sticky claim naming another StatefulSet's pod: %v %v", ok, err)
	}
	delete(c.Labels, LabelSticky)
	if _, ok, err := StickyOf(c); ok || err != nil {
		t.Errorf("an unlabelled claim: %v %v", ok, err)
	}
}
