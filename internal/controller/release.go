package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/controller/repair"
	"github.com/tenure-ipam/tenure/internal/reservation"
)

// ErrChanged: the reservation changed (or was re-created) between the
// live read the decision rests on and the delete; decide again.
var ErrChanged = errors.New("reservation changed since it was read; deciding again")

// Releaser is the only path by which the controller releases anything.
// Whatever found the candidate (an event on a cache, a sweep's lists, a
// claim's finalizer), the release is decided again on live reads: the
// reservation itself, then its owner (pod by namespace/name, its node,
// its sibling reservations; or the claim). The delete carries the UID and
// resourceVersion of the reservation so read, so it removes exactly the
// object the decision was about.
type Releaser struct {
	// Live reads from the API server, never from a cache.
	Live   client.Reader
	Writer client.Writer
	Events EventRecorder // nil: no Events
	Policy repair.Policy
	// DryRun decides and reports but changes nothing.
	DryRun bool
	Log    *slog.Logger
	Now    func() time.Time
	// Observe, when set, is told every decision about a reservation that
	// exists, whether a cache or the live reads made it.
	Observe func(r *tenurev1alpha1.IPReservation, d repair.Decision)
	// AskWire: the Releaser keeps an IPProbe for each reservation whose
	// NodeNotReady release waits for the wire (repair.Decision.Probe), and
	// deletes it once it no longer does. Off, it reads an IPProbe that
	// exists and writes none.
	AskWire bool
	// Probed, when set, says whether an IPProbe of that name exists, and
	// its UID (the controller's informer).
	Probed func(name string) (types.UID, bool)
}

func (rl *Releaser) observe(r *tenurev1alpha1.IPReservation, d repair.Decision) {
	if rl.Observe != nil {
		rl.Observe(r, d)
	}
}

// Outcome is what Release did with one reservation.
type Outcome struct {
	Name string
	// Reservation as read live; nil when it no longer exists.
	Reservation *tenurev1alpha1.IPReservation
	// Decision on the live facts.
	Decision repair.Decision
	// Released: this call deleted it.
	Released bool
}

func (rl *Releaser) now() time.Time {
	if rl.Now != nil {
		return rl.Now()
	}
	return time.Now()
}

func (rl *Releaser) log() *slog.Logger {
	if rl.Log != nil {
		return rl.Log
	}
	return slog.Default()
}

// Release decides on live facts whether the reservation called name is an
// orphan and, unless DryRun, deletes it when it is.
func (rl *Releaser) Release(ctx context.Context, name string) (Outcome, error) {
	out := Outcome{Name: name}
	r := &tenurev1alpha1.IPReservation{}
	if err := rl.Live.Get(ctx, types.NamespacedName{Name: name}, r); err != nil {
		if apierrors.IsNotFound(err) {
			return out, nil
		}
		return out, fmt.Errorf("reading reservation %s: %w", name, err)
	}
	out.Reservation = r
	if err := reservation.Check(r); err != nil {
		// Judged on its spec, as every release is; its metadata, which the
		// caches read, says otherwise, so the caches may not nominate it
		// when they should.
		rl.log().Warn("reservation's metadata disagrees with its spec", "reservation", name, "err", err)
	}
	g, err := gather(ctx, liveSource{rl.Live}, r, rl.now())
	if err != nil {
		return out, fmt.Errorf("reading the owner of reservation %s: %w", name, err)
	}
	d := repair.Decide(r, g.facts, rl.Policy)
	var probe *tenurev1alpha1.IPProbe
	if d.Probe {
		// The release is due and the wire decides: what other nodes'
		// agents heard, read live as the rest.
		if g.facts.Wire, probe, err = rl.wireFact(ctx, r); err != nil {
			return out, err
		}
		d = repair.Decide(r, g.facts, rl.Policy)
	}
	out.Decision = d
	rl.observe(r, d)
	if !d.Release {
		return out, rl.tendProbe(ctx, r, d, probe)
	}
	if rl.DryRun {
		return out, nil
	}
	uid, rv := r.UID, r.ResourceVersion
	err = rl.Writer.Delete(ctx, &tenurev1alpha1.IPReservation{ObjectMeta: metav1.ObjectMeta{Name: name}},
		client.Preconditions{UID: &uid, ResourceVersion: &rv})
	switch {
	case apierrors.IsNotFound(err):
		out.Reservation = nil // freed meanwhile (a late DEL): nothing of ours to do
		return out, nil
	case apierrors.IsConflict(err):
		return out, fmt.Errorf("%s: %w", name, ErrChanged)
	case err != nil:
		return out, fmt.Errorf("deleting reservation %s: %w", name, err)
	}
	out.Released = true
	releasesTotal.WithLabelValues(string(d.Reason)).Inc()
	if err := rl.retireProbe(ctx, name, probe); err != nil {
		// Its owner reference to the reservation lets the garbage
		// collector delete it too.
		rl.log().Warn("retiring the probe of a released reservation", "reservation", name, "err", err)
	}
	o := r.Spec.Owner
	rl.log().Info("released", "reservation", name, "address", r.Spec.Address, "network", r.Spec.Network,
		"owner", string(o.Kind)+" "+o.Namespace+"/"+o.Name, "uid", o.UID, "node", o.Node, "reason", d.Reason, "why", d.Message)
	if rl.Events != nil {
		rl.Events.Eventf(rl.eventTarget(ctx, r, g), corev1.EventTypeNormal, EventReason, "released %s %s of network %s (IPReservation %s): %s: %s",
			kindWord(r), r.Spec.Address, r.Spec.Network, name, d.Reason, d.Message)
	}
	return out, nil
}

func kindWord(r *tenurev1alpha1.IPReservation) string {
	if r.Spec.Kind == tenurev1alpha1.KindDelegatedPrefix {
		return "delegated prefix"
	}
	return "address"
}

// eventTarget picks the object the release Event is about: the owning pod
// while it still exists (earlier sandbox, node lost), else the owning
// IPAMClaim while it exists (being deleted), else the IPPool the address
// came from, else the (now deleted) IPReservation itself, which `kubectl
// get events` still lists in namespace default.
func (rl *Releaser) eventTarget(ctx context.Context, r *tenurev1alpha1.IPReservation, g gathered) runtime.Object {
	uid := r.Spec.Owner.UID
	if g.pod != nil && string(g.pod.UID) == uid {
		return g.pod
	}
	if g.claim != nil && string(g.claim.UID) == uid {
		return g.claim
	}
	if r.Spec.Pool != "" {
		pool := &tenurev1alpha1.IPPool{}
		if err := rl.Live.Get(ctx, types.NamespacedName{Name: r.Spec.Pool}, pool); err == nil {
			return pool
		}
	}
	return r
}
