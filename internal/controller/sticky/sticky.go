// Package sticky decides when a sticky StatefulSet claim (internal/claims:
// the IPAMClaim the agent makes for a StatefulSet's pod and interface) is
// given back. It is pure, as package repair is: the controller gathers the
// facts from its cache to nominate and from live reads to confirm, and
// Decide answers the same way for both. Deleting the claim is the release:
// the claim's finalizer then frees its addresses and prefixes.
//
// The StatefulSet is the one of the claim's namespace and name (label
// ipam.tenure.dev/statefulset), whatever its UID, as a StatefulSet's
// PersistentVolumeClaims are: a StatefulSet deleted with the orphan policy
// and created again finds its pods' addresses where it left them, and the
// claim's ownerReference is pointed at the new one (adopted).
//
// The rules, in the order Decide applies them:
//   - a claim being deleted, or whose pod or StatefulSet is not known, is
//     left alone;
//   - never while a pod of the claim's pod name exists (whatever its UID
//     or state): it may hold the addresses;
//   - StatefulSetGone: no StatefulSet of that name, or it is being
//     deleted;
//   - ScaledDown: the pod's ordinal is outside the StatefulSet's ordinals
//     (spec.ordinals.start to start+spec.replicas-1) and has been since
//     the mark was set, at least the grace period. The mark (annotations
//     ipam.tenure.dev/scaled-down-since and -generation) records when the
//     controller first saw it so, and the StatefulSet's generation then:
//     any change of the StatefulSet's spec restarts the clock, so a scale
//     up and down again between two looks is never mistaken for one long
//     scale-down.
package sticky

import (
	"fmt"
	"strconv"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	ipamclaimsv1alpha1 "github.com/tenure-ipam/tenure/api/ipamclaims/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/claims"
)

// Reason says why a sticky claim is released; the `reason` label of
// tenure_sticky_claims_released_total.
type Reason string

// The release reasons.
const (
	StatefulSetGone Reason = "StatefulSetGone"
	ScaledDown      Reason = "ScaledDown"
)

// Reasons lists every Reason, for metric initialisation.
var Reasons = []Reason{StatefulSetGone, ScaledDown}

// The mark the controller keeps on a claim whose pod's ordinal is outside
// the StatefulSet's.
const (
	AnnotationScaledDownSince      = "ipam.tenure.dev/scaled-down-since"
	AnnotationScaledDownGeneration = "ipam.tenure.dev/scaled-down-generation"
)

// Mark is when the controller first saw the ordinal outside the
// StatefulSet's, and the StatefulSet's generation then.
type Mark struct {
	Since      time.Time
	Generation int64
}

// MarkOf reads a claim's mark; nil when it has none or it does not parse
// (a mark the controller cannot read is set again: the clock restarts).
func MarkOf(c *ipamclaimsv1alpha1.IPAMClaim) *Mark {
	since, err := time.Parse(time.RFC3339, c.Annotations[AnnotationScaledDownSince])
	if err != nil {
		return nil
	}
	gen, err := strconv.ParseInt(c.Annotations[AnnotationScaledDownGeneration], 10, 64)
	if err != nil {
		return nil
	}
	return &Mark{Since: since, Generation: gen}
}

// Annotations is the mark as the claim carries it (whole seconds).
func (m *Mark) Annotations() map[string]string {
	return map[string]string{
		AnnotationScaledDownSince:      m.Since.UTC().Format(time.RFC3339),
		AnnotationScaledDownGeneration: strconv.FormatInt(m.Generation, 10),
	}
}

// Equal compares marks as the annotations hold them.
func (m *Mark) Equal(o *Mark) bool {
	if m == nil || o == nil {
		return m == o
	}
	return m.Since.Unix() == o.Since.Unix() && m.Generation == o.Generation
}

// StatefulSetFact is what is known of the StatefulSet of the claim's name.
type StatefulSetFact struct {
	Exists     bool
	UID        string
	Deleting   bool
	Generation int64
	Replicas   int32 // spec.replicas, 1 when unset
	Start      int32 // spec.ordinals.start
}

// PodFact is what is known of the pod of the claim's pod name.
type PodFact struct{ Exists bool }

// Facts about one sticky claim. A nil fact is unknown, and nothing is ever
// released or marked on the strength of an unknown.
type Facts struct {
	Now         time.Time
	StatefulSet *StatefulSetFact
	Pod         *PodFact
}

// Policy holds the tunable.
type Policy struct {
	// ReleaseAfter is the grace period: how long a pod's ordinal must be
	// outside its StatefulSet's before its claim is released.
	ReleaseAfter time.Duration
}

// Decision is Decide's answer.
type Decision struct {
	Release bool
	Reason  Reason // set when Release
	// Message says why, in words, for Events and logs.
	Message string
	// Mark is the mark the claim must carry (nil: none). Ignored when
	// Release, and when Hold.
	Mark *Mark
	// Hold: the facts are incomplete; change nothing.
	Hold bool
	// Adopt, when set, is the UID of the StatefulSet the claim's
	// ownerReference must name.
	Adopt string
	// RecheckAfter, when positive, is when the answer may change by the
	// clock alone (the grace period ending).
	RecheckAfter time.Duration
}

func hold(format string, args ...any) Decision {
	return Decision{Hold: true, Message: fmt.Sprintf(format, args...)}
}

// Decide says what to do with the sticky claim c (s as claims.StickyOf
// read it).
func Decide(c *ipamclaimsv1alpha1.IPAMClaim, s claims.Sticky, f Facts, p Policy) Decision {
	key := claims.Key(c)
	pod := c.Namespace + "/" + s.Pod
	switch {
	case c.DeletionTimestamp != nil:
		return hold("IPAMClaim %s is being deleted; its finalizer releases what it holds", key)
	case f.Pod == nil:
		return hold("pod %s: state unknown", pod)
	case f.StatefulSet == nil:
		return hold("StatefulSet %s/%s: state unknown", c.Namespace, s.StatefulSet)
	}
	sts := f.StatefulSet
	adopt := ""
	if sts.Exists && !sts.Deleting && sts.UID != s.OwnerUID {
		adopt = sts.UID
	}
	if f.Pod.Exists {
		return Decision{Adopt: adopt, Message: fmt.Sprintf("pod %s exists", pod)}
	}
	if !sts.Exists || sts.Deleting {
		what := "no longer exists"
		if sts.Exists {
			what = "is being deleted"
		}
		return Decision{Release: true, Reason: StatefulSetGone, Message: fmt.Sprintf("StatefulSet %s/%s %s and no pod %s exists", c.Namespace, s.StatefulSet, what, pod)}
	}
	end := int64(sts.Start) + int64(sts.Replicas) // ordinals run from Start to end-1
	if int64(s.Ordinal) >= int64(sts.Start) && int64(s.Ordinal) < end {
		return Decision{Adopt: adopt, Message: fmt.Sprintf("ordinal %d is one of StatefulSet %s/%s's (%d to %d)", s.Ordinal, c.Namespace, s.StatefulSet, sts.Start, end-1)}
	}
	mark := MarkOf(c)
	if mark == nil || mark.Generation != sts.Generation {
		// The annotation holds whole seconds: rounding up never starts
		// the clock before the controller saw the scale-down.
		since := f.Now.Truncate(time.Second)
		if since.Before(f.Now) {
			since = since.Add(time.Second)
		}
		mark = &Mark{Since: since, Generation: sts.Generation}
	}
	scaled := fmt.Sprintf("ordinal %d is outside StatefulSet %s/%s's %d replicas from ordinal %d", s.Ordinal, c.Namespace, s.StatefulSet, sts.Replicas, sts.Start)
	elapsed := f.Now.Sub(mark.Since)
	if elapsed >= p.ReleaseAfter {
		return Decision{Release: true, Reason: ScaledDown, Message: fmt.Sprintf("%s, and no pod %s exists, for %s (grace period %s)", scaled, pod, elapsed.Round(time.Second), p.ReleaseAfter)}
	}
	return Decision{Adopt: adopt, Mark: mark, RecheckAfter: p.ReleaseAfter - elapsed,
		Message: fmt.Sprintf("%s for %s of its %s grace period", scaled, elapsed.Round(time.Second), p.ReleaseAfter)}
}

// StatefulSetFactOf summarises a StatefulSet; nil means NotFound.
func StatefulSetFactOf(s *appsv1.StatefulSet) *StatefulSetFact {
	if s == nil {
		return &StatefulSetFact{}
	}
	f := &StatefulSetFact{Exists: true, UID: string(s.UID), Deleting: s.DeletionTimestamp != nil, Generation: s.Generation, Replicas: 1}
	if s.Spec.Replicas != nil {
		f.Replicas = *s.Spec.Replicas
	}
	if s.Spec.Ordinals != nil {
		f.Start = s.Spec.Ordinals.Start
	}
	return f
}

// PodFactOf summarises a pod; nil means NotFound.
func PodFactOf(p *corev1.Pod) *PodFact { return &PodFact{Exists: p != nil} }
