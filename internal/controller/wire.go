package controller

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/controller/repair"
)

// EventReasonAddressAnswers is the reason of the Warning Event on a pod
// whose address a NodeNotReady release would give back, kept because an
// agent of another node heard something answer for it on the wire.
const EventReasonAddressAnswers = "AddressAnswers"

// wireFact reads r's IPProbe live and the readiness of the nodes that
// answered it: a node that cannot be read counts as not Ready.
func (rl *Releaser) wireFact(ctx context.Context, r *tenurev1alpha1.IPReservation) (*repair.WireFact, *tenurev1alpha1.IPProbe, error) {
	p, err := getOrNil(ctx, rl.Live, types.NamespacedName{Name: r.Name}, &tenurev1alpha1.IPProbe{})
	switch {
	case meta.IsNoMatchError(err):
		// No IPProbe CRD: nothing was asked, nor can be.
		return &repair.WireFact{}, nil, nil
	case err != nil:
		return nil, nil, fmt.Errorf("reading IPProbe %s: %w", r.Name, err)
	}
	f := repair.WireFactOf(r, p, func(node string) bool {
		n, err := getOrNil(ctx, rl.Live, types.NamespacedName{Name: node}, &corev1.Node{})
		if err != nil {
			rl.log().Warn("reading the node of a probe's answer", "node", node, "err", err)
			return false
		}
		f := repair.NodeFactOf(n)
		return f.Exists && f.Ready
	})
	return f, p, nil
}

// tendProbe makes r's IPProbe match the decision d, unless DryRun or
// AskWire is off: one exists while the release waits for the wire
// (d.Probe), asked again when d.Reask; none otherwise. p is the IPProbe
// read live for d, nil when none was read (d.Probe unset: Probed says
// whether one exists).
func (rl *Releaser) tendProbe(ctx context.Context, r *tenurev1alpha1.IPReservation, d repair.Decision, p *tenurev1alpha1.IPProbe) error {
	if rl.DryRun || !rl.AskWire {
		return nil
	}
	now := metav1.NewTime(rl.now())
	switch {
	case d.Probe && p == nil:
		p = &tenurev1alpha1.IPProbe{
			ObjectMeta: metav1.ObjectMeta{Name: r.Name, OwnerReferences: []metav1.OwnerReference{{
				APIVersion: tenurev1alpha1.GroupVersion.String(), Kind: "IPReservation", Name: r.Name, UID: r.UID,
			}}},
			Spec: tenurev1alpha1.IPProbeSpec{Network: r.Spec.Network, Address: r.Spec.Address, Node: r.Spec.Owner.Node, AskedAt: now},
		}
		if err := rl.Writer.Create(ctx, p); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("asking for a probe of %s (IPProbe %s): %w", r.Spec.Address, r.Name, err)
		}
		rl.log().Info("asked other nodes' agents to probe the address on the wire", "reservation", r.Name, "address", r.Spec.Address,
			"network", r.Spec.Network, "node", r.Spec.Owner.Node)
	case d.Probe && d.Reask:
		p = p.DeepCopy()
		p.Spec.AskedAt = now
		if err := rl.Writer.Update(ctx, p); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return fmt.Errorf("asking again for a probe of %s (IPProbe %s): %w", r.Spec.Address, r.Name, err)
		}
	case !d.Probe:
		return rl.retireProbe(ctx, r.Name, p)
	}
	return nil
}

// retireProbe deletes the IPProbe called name, the one read live (p) or,
// when none was, the one Probed says exists.
func (rl *Releaser) retireProbe(ctx context.Context, name string, p *tenurev1alpha1.IPProbe) error {
	if rl.DryRun || !rl.AskWire {
		return nil
	}
	var pre client.Preconditions
	if p != nil {
		pre.UID = &p.UID
	} else if rl.Probed == nil {
		return nil
	} else if uid, ok := rl.Probed(name); ok {
		pre.UID = &uid
	} else {
		return nil
	}
	err := rl.Writer.Delete(ctx, &tenurev1alpha1.IPProbe{ObjectMeta: metav1.ObjectMeta{Name: name}}, pre)
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("deleting IPProbe %s: %w", name, err)
	}
	return nil
}

// settleCached is what a decision made on a cache, not nominated, asks of
// the wire: an IPProbe of a reservation that no longer waits for one goes.
func (rl *Releaser) settleCached(ctx context.Context, r *tenurev1alpha1.IPReservation, d repair.Decision) {
	if d.Probe || d.Release {
		return
	}
	if err := rl.retireProbe(ctx, r.Name, nil); err != nil {
		rl.log().Warn("retiring a probe", "reservation", r.Name, "err", err)
	}
}

// probeSet is the names and UIDs of the IPProbes that exist, from the
// informer's events: a map lookup per decision, where a cache Get that
// misses builds an error.
type probeSet struct {
	mu    sync.Mutex
	names map[string]types.UID
}

func newProbeSet() *probeSet { return &probeSet{names: map[string]types.UID{}} }

func (s *probeSet) get(name string) (types.UID, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	uid, ok := s.names[name]
	return uid, ok
}

func (s *probeSet) handler() toolscache.ResourceEventHandler {
	set := func(obj any) {
		if p, ok := obj.(*tenurev1alpha1.IPProbe); ok {
			s.mu.Lock()
			s.names[p.Name] = p.UID
			s.mu.Unlock()
		}
	}
	return toolscache.ResourceEventHandlerFuncs{
		AddFunc:    set,
		UpdateFunc: func(_, obj any) { set(obj) },
		DeleteFunc: func(obj any) {
			if t, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			if p, ok := obj.(*tenurev1alpha1.IPProbe); ok {
				s.mu.Lock()
				if s.names[p.Name] == p.UID {
					delete(s.names, p.Name)
				}
				s.mu.Unlock()
			}
		},
	}
}

// wireAnswers tells, once per reservation and MAC, that an address a
// NodeNotReady release would give back answers on the wire: a Warning
// Event on the pod, a log line, and the count in
// tenure_reservations_answering. A reservation stays counted from an
// answered request until one decision no longer waits for the wire (it is
// released, or no longer due) or it is deleted; a request asked again
// that has no answer yet leaves it counted.
type wireAnswers struct {
	events EventRecorder // nil: no Events
	log    *slog.Logger
	*toldOnce
}

func newWireAnswers(events EventRecorder, log *slog.Logger) *wireAnswers {
	return &wireAnswers{events: events, log: log, toldOnce: newToldOnce(answeringGauge)}
}

func (w *wireAnswers) observe(r *tenurev1alpha1.IPReservation, d repair.Decision) {
	switch {
	case d.Release || !d.Probe:
		w.forget(r.Name)
		return
	case d.Answering == nil:
		return
	}
	a := d.Answering
	if !w.first(r.Name, a.MAC) {
		return
	}
	o := r.Spec.Owner
	w.log.Warn("kept: the address answers on the wire", "reservation", r.Name, "address", r.Spec.Address, "network", r.Spec.Network,
		"owner", "Pod "+o.Namespace+"/"+o.Name, "node", o.Node, "mac", a.MAC, "heardBy", a.Node, "interface", a.Interface)
	if w.events == nil {
		return
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: o.Namespace, Name: o.Name, UID: types.UID(o.UID)}}
	w.events.Eventf(pod, corev1.EventTypeWarning, EventReasonAddressAnswers, "keeping %s %s of network %s (IPReservation %s): it answers on the wire from MAC %s (%s, heard by node %s on %s)",
		kindWord(r), r.Spec.Address, r.Spec.Network, r.Name, a.MAC, a.Kind, a.Node, a.Interface)
}
