package sticky

import (
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ipamclaimsv1alpha1 "github.com/tenure-ipam/tenure/api/ipamclaims/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/claims"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

const (
	stsUID   = "11111111-1111-1111-1111-111111111111"
	otherUID = "22222222-2222-2222-2222-222222222222"
)

type claimOpt func(*ipamclaimsv1alpha1.IPAMClaim)

// claim is the sticky claim of pod web-2 of StatefulSet web.
func claim(opts ...claimOpt) (*ipamclaimsv1alpha1.IPAMClaim, claims.Sticky) {
	c := &ipamclaimsv1alpha1.IPAMClaim{ObjectMeta: metav1.ObjectMeta{
		Namespace: "ns", Name: "web-2.net1",
		Labels:          map[string]string{claims.LabelSticky: "true", claims.LabelStatefulSet: "web"},
		Annotations:     map[string]string{claims.AnnotationPod: "web-2"},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "StatefulSet", Name: "web", UID: stsUID}},
	}}
	for _, o := range opts {
		o(c)
	}
	s, ok, err := claims.StickyOf(c)
	if !ok || err != nil {
		panic(err)
	}
	return c, s
}

func marked(since time.Time, gen int64) claimOpt {
	return func(c *ipamclaimsv1alpha1.IPAMClaim) {
		for k, v := range (&Mark{Since: since, Generation: gen}).Annotations() {
			c.Annotations[k] = v
		}
	}
}

func orphaned(c *ipamclaimsv1alpha1.IPAMClaim) { c.OwnerReferences = nil }

func deleting(c *ipamclaimsv1alpha1.IPAMClaim) {
	now := metav1.NewTime(t0)
	c.DeletionTimestamp = &now
}

func sts(replicas, start int32, gen int64) *StatefulSetFact {
	return &StatefulSetFact{Exists: true, UID: stsUID, Generation: gen, Replicas: replicas, Start: start}
}

var (
	podExists = &PodFact{Exists: true}
	podGone   = &PodFact{}
	stsGone   = &StatefulSetFact{}
)

func TestDecide(t *testing.T) {
	policy := Policy{ReleaseAfter: 10 * time.Minute}
	cases := []struct {
		name  string
		opts  []claimOpt
		f     Facts
		want  Reason // "" = no release
		hold  bool
		mark  *Mark // the mark the claim must carry when kept
		adopt string
		after time.Duration
		inMsg string
	}{
		// Releases.
		{name: "StatefulSet deleted, pod gone", f: Facts{Now: t0, StatefulSet: stsGone, Pod: podGone}, want: StatefulSetGone, inMsg: "no longer exists"},
		{name: "StatefulSet being deleted (foreground), pod gone", f: Facts{Now: t0, StatefulSet: &StatefulSetFact{Exists: true, UID: stsUID, Deleting: true, Replicas: 3}, Pod: podGone},
			want: StatefulSetGone, inMsg: "being deleted"},
		{name: "StatefulSet deleted, claim orphaned (orphan policy), pod gone", opts: []claimOpt{orphaned}, f: Facts{Now: t0, StatefulSet: stsGone, Pod: podGone}, want: StatefulSetGone},
		{name: "scaled below the ordinal for the grace period", opts: []claimOpt{marked(t0.Add(-10*time.Minute), 7)}, f: Facts{Now: t0, StatefulSet: sts(2, 0, 7), Pod: podGone},
			want: ScaledDown, inMsg: "ordinal 2 is outside StatefulSet ns/web's 2 replicas from ordinal 0, and no pod ns/web-2 exists, for 10m0s"},
		{name: "scaled to zero past the grace period", opts: []claimOpt{marked(t0.Add(-time.Hour), 3)}, f: Facts{Now: t0, StatefulSet: sts(0, 0, 3), Pod: podGone}, want: ScaledDown},
		{name: "ordinals.start moved past the ordinal, past the grace period", opts: []claimOpt{marked(t0.Add(-time.Hour), 4)}, f: Facts{Now: t0, StatefulSet: sts(5, 3, 4), Pod: podGone}, want: ScaledDown},
		{name: "a zero grace period releases on the first look", f: Facts{Now: t0, StatefulSet: sts(1, 0, 1), Pod: podGone}, want: ScaledDown},

		// Never while a pod of that name exists.
		{name: "StatefulSet deleted but the pod exists", f: Facts{Now: t0, StatefulSet: stsGone, Pod: podExists}, inMsg: "pod ns/web-2 exists"},
		{name: "scaled down past the grace period but the pod exists (terminating, or another UID): the mark is dropped",
			opts: []claimOpt{marked(t0.Add(-time.Hour), 7)}, f: Facts{Now: t0, StatefulSet: sts(1, 0, 7), Pod: podExists}, inMsg: "exists"},

		// Kept, with the clock.
		{name: "in range", f: Facts{Now: t0, StatefulSet: sts(3, 0, 1), Pod: podGone}, inMsg: "ordinal 2 is one of StatefulSet ns/web's (0 to 2)"},
		{name: "in range again after a scale-down: the mark is dropped", opts: []claimOpt{marked(t0.Add(-time.Hour), 5)}, f: Facts{Now: t0, StatefulSet: sts(3, 0, 6), Pod: podGone}},
		{name: "in range with ordinals.start", f: Facts{Now: t0, StatefulSet: sts(1, 2, 1), Pod: podGone}},
		{name: "first seen scaled down: marked now, rounded up to a second", f: Facts{Now: t0.Add(300 * time.Millisecond), StatefulSet: sts(2, 0, 7), Pod: podGone},
			mark: &Mark{Since: t0.Add(time.Second), Generation: 7}, after: 10*time.Minute + 700*time.Millisecond, inMsg: "grace period"},
		{name: "scaled down within the grace period: the mark stays", opts: []claimOpt{marked(t0.Add(-4*time.Minute), 7)}, f: Facts{Now: t0, StatefulSet: sts(2, 0, 7), Pod: podGone},
			mark: &Mark{Since: t0.Add(-4 * time.Minute), Generation: 7}, after: 6 * time.Minute, inMsg: "4m0s of its 10m0s"},
		{name: "the StatefulSet changed since the mark (scaled up and down again): the clock restarts", opts: []claimOpt{marked(t0.Add(-time.Hour), 7)},
			f: Facts{Now: t0, StatefulSet: sts(1, 0, 9), Pod: podGone}, mark: &Mark{Since: t0, Generation: 9}, after: 10 * time.Minute},
		{name: "an unreadable mark restarts the clock", opts: []claimOpt{func(c *ipamclaimsv1alpha1.IPAMClaim) { c.Annotations[AnnotationScaledDownSince] = "yesterday" }},
			f: Facts{Now: t0, StatefulSet: sts(1, 0, 9), Pod: podGone}, mark: &Mark{Since: t0, Generation: 9}, after: 10 * time.Minute},

		// Adoption: the StatefulSet of that name, created again.
		{name: "re-created StatefulSet, pod exists: adopted", f: Facts{Now: t0, StatefulSet: &StatefulSetFact{Exists: true, UID: otherUID, Replicas: 3}, Pod: podExists}, adopt: otherUID},
		{name: "re-created StatefulSet, in range: adopted", opts: []claimOpt{orphaned}, f: Facts{Now: t0, StatefulSet: sts(3, 0, 1), Pod: podGone}, adopt: stsUID},
		{name: "re-created StatefulSet, scaled below: adopted and marked", f: Facts{Now: t0, StatefulSet: &StatefulSetFact{Exists: true, UID: otherUID, Replicas: 1, Generation: 1}, Pod: podGone},
			adopt: otherUID, mark: &Mark{Since: t0, Generation: 1}, after: 10 * time.Minute},

		// Nothing known, nothing done.
		{name: "pod unknown", f: Facts{Now: t0, StatefulSet: stsGone}, hold: true, inMsg: "unknown"},
		{name: "StatefulSet unknown", f: Facts{Now: t0, Pod: podGone}, hold: true, inMsg: "unknown"},
		{name: "claim being deleted", opts: []claimOpt{deleting}, f: Facts{Now: t0, StatefulSet: stsGone, Pod: podGone}, hold: true, inMsg: "finalizer"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, s := claim(tc.opts...)
			p := policy
			if strings.HasPrefix(tc.name, "a zero grace period") {
				p.ReleaseAfter = 0
			}
			d := Decide(c, s, tc.f, p)
			if d.Release != (tc.want != "") || d.Reason != tc.want {
				t.Fatalf("Release, Reason = %v, %q (%s); want %q", d.Release, d.Reason, d.Message, tc.want)
			}
			if d.Hold != tc.hold {
				t.Errorf("Hold = %v (%s), want %v", d.Hold, d.Message, tc.hold)
			}
			if !d.Release && !d.Hold && !d.Mark.Equal(tc.mark) {
				t.Errorf("Mark = %+v, want %+v", d.Mark, tc.mark)
			}
			if d.Adopt != tc.adopt {
				t.Errorf("Adopt = %q, want %q", d.Adopt, tc.adopt)
			}
			if d.RecheckAfter != tc.after {
				t.Errorf("RecheckAfter = %v, want %v", d.RecheckAfter, tc.after)
			}
			if !strings.Contains(d.Message, tc.inMsg) {
				t.Errorf("Message %q lacks %q", d.Message, tc.inMsg)
			}
		})
	}
}

func TestMarkRoundTrip(t *testing.T) {
	c, _ := claim(marked(t0, 12))
	m := MarkOf(c)
	if m == nil || !m.Since.Equal(t0) || m.Generation != 12 {
		t.Fatalf("MarkOf = %+v", m)
	}
	if c, _ := claim(); MarkOf(c) != nil {
		t.Error("a claim without the annotations has a mark")
	}
}

func TestStatefulSetFactOf(t *testing.T) {
	if f := StatefulSetFactOf(nil); f.Exists {
		t.Errorf("nil: %+v", f)
	}
	three := int32(3)
	s := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{UID: stsUID, Generation: 4}, Spec: appsv1.StatefulSetSpec{Replicas: &three, Ordinals: &appsv1.StatefulSetOrdinals{Start: 5}}}
	if f := StatefulSetFactOf(s); !f.Exists || f.Replicas != 3 || f.Start != 5 || f.Generation != 4 || f.UID != stsUID {
		t.Errorf("%+v", f)
	}
	s.Spec.Replicas, s.Spec.Ordinals = nil, nil
	if f := StatefulSetFactOf(s); f.Replicas != 1 || f.Start != 0 { // the API's defaults
		t.Errorf("defaults: %+v", f)
	}
}
