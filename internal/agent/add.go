package agent

import (
	"context"
	"log/slog"
	"net"
	"net/netip"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"

	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/allocator"
	"github.com/tenure-ipam/tenure/internal/cniwire"
	"github.com/tenure-ipam/tenure/internal/config"
	"github.com/tenure-ipam/tenure/internal/reservation"
)

// addVerb answers ADD: an attachment bound to a claim gets the claim's
// items (claimPath), any other its pod's, reserved for the attachment.
type addVerb struct {
	node     string
	log      *slog.Logger
	recorder record.EventRecorder
	alloc    *allocator.Factory
	// locks and arrivals order the calls of one attachment.
	locks    *keyedMutex
	arrivals *arrivals

	// What it needs of the other parts: the call's config and pod
	// (callReader), what the attachment holds (attachmentReservations),
	// the dataplane glue, the claim path, the pools list's choice and a
	// slot's allocator (allocators). The pools' chooser is called
	// directly: the addresses an ADD passes it would escape to the heap
	// through a func value or an interface.
	prepare       func(ctx context.Context, req *cniwire.Request) (*attachment, error)
	holds         attachmentHolder
	dataplane     addObserver
	claims        addClaims
	pools         *poolChooser
	nextAllocator func(at *attachment, s slot) (allocator.Interface, error)
}

// addObserver is what an ADD tells the dataplane glue (agentDataplane).
type addObserver interface {
	Learn(at *attachment) error
	Attached(cfg *config.Config)
}

// addClaims is what an ADD asks of the claim path (claimPath).
type addClaims interface {
	stickyClaim(ctx context.Context, at *attachment, create bool) (string, error)
	addForClaim(ctx context.Context, at *attachment) ([]heldSlot, error)
}

func (av *addVerb) run(ctx context.Context, req *cniwire.Request) (types.Result, error) {
	at, err := av.prepare(ctx, req)
	if err != nil {
		return nil, err
	}
	unlock := av.locks.lock(attachmentKey(req))
	defer unlock()
	if av.arrivals.deletedAfter(attachmentKey(req), arrivalOf(ctx)) {
		return nil, codedf(CodeTryAgainLater, nil, "ADD of container %s interface %s abandoned: a DEL of the attachment arrived after it and has run", req.ContainerID, req.IfName)
	}
	if err := av.dataplane.Learn(at); err != nil {
		av.recordAddFailure(at, err)
		return nil, err
	}
	if at.sel.Claim == "" {
		if at.sel.Claim, err = av.claims.stickyClaim(ctx, at, true); err != nil {
			return nil, err
		}
	}
	var held []heldSlot
	if at.sel.Claim != "" {
		held, err = av.claims.addForClaim(ctx, at)
	} else {
		held, err = av.addForPod(ctx, at)
	}
	if err != nil {
		av.recordAddFailure(at, err)
		return nil, err
	}
	av.dataplane.Attached(at.cfg)
	return buildResult(at.cfg, held)
}

// EventAddFailed is the reason of the Warning Event recorded on a pod whose
// ADD failed once its pod was known. The message names the attachment as
// "interface NAME", which `tenurectl why` reads to say why that interface
// has no address.
const EventAddFailed = "AddFailed"

// recordAddFailure records the failed ADD on the pod; the recorder
// aggregates repeats (a runtime retrying the sandbox) into one Event.
func (av *addVerb) recordAddFailure(at *attachment, err error) {
	if av.recorder == nil {
		return
	}
	ce := toCNI(err)
	id := at.req.ContainerID
	if len(id) > 12 {
		id = id[:12]
	}
	av.recorder.Eventf(at.pod, corev1.EventTypeWarning, EventAddFailed, "ADD of interface %s (network %s, container %s) failed with CNI error %d: %s",
		at.req.IfName, at.cfg.Name, id, ce.Code, ce.Msg)
}

func (av *addVerb) owner(at *attachment) tenurev1alpha1.ReservationOwner {
	return tenurev1alpha1.ReservationOwner{
		Kind: tenurev1alpha1.OwnerPod, Namespace: at.pod.Namespace, Name: at.pod.Name, UID: string(at.pod.UID),
		PodName: at.pod.Name, PodUID: string(at.pod.UID),
		ContainerID: at.req.ContainerID, Interface: at.req.IfName, Node: av.node,
	}
}

func (av *addVerb) addForPod(ctx context.Context, at *attachment) ([]heldSlot, error) {
	tmpl := allocator.Template{Owner: av.owner(at), CNINetwork: at.cfg.Name}
	// A fresh cache that holds nothing for the attachment is believed (a
	// first ADD costs no read); a cache that may lag is read past.
	existing, err := av.holds.attachmentHolds(ctx, at.req.ContainerID, at.req.IfName, tmpl.Owner.UID, !av.holds.fresh(ctx), true)
	if err != nil {
		return nil, err
	}
	// A retried ADD keeps the pools of what the attachment holds, whatever
	// the selectors say now.
	var holds []netip.Addr
	for _, r := range existing {
		if p, err := reservation.ParseItem(r.Spec.Address); err == nil && r.Spec.Kind == tenurev1alpha1.KindAddress {
			holds = append(holds, p.Addr())
		}
	}
	if err := av.pools.choosePools(ctx, at, holds); err != nil {
		return nil, err
	}
	var held []heldSlot
	var created []*tenurev1alpha1.IPReservation
	for _, s := range slots(at.cfg, at.sel.WantsPrefix) {
		if r := firstHeld(existing, s); r != nil {
			held = append(held, heldSlot{s, r}) // a retried ADD: idempotent
			continue
		}
		var r *tenurev1alpha1.IPReservation
		var err error
		tmpl := tmpl
		tmpl.Pool = s.Pool
		if s.requested.IsValid() {
			r, err = av.allocateRequested(ctx, s, tmpl)
		} else {
			var al allocator.Interface
			if al, err = av.nextAllocator(at, s); err == nil {
				r, err = al.AllocateNext(ctx, tmpl)
			}
		}
		if err != nil {
			rollback(av.alloc, av.log, created)
			return nil, err
		}
		created = append(created, r)
		held = append(held, heldSlot{s, r})
	}
	return held, nil
}

// allocateRequested reserves the address runtimeConfig.ips asks for from
// slot s, for a pod's attachment. The allocator answers a pod UID that
// already holds the address with that reservation; for a pod, that is
// either this sandbox's other interface (a conflict) or an earlier sandbox
// the runtime replaced, whose late DEL or GC would free the address under
// this one: that reservation is released and the address reserved anew.
func (av *addVerb) allocateRequested(ctx context.Context, s slot, tmpl allocator.Template) (*tenurev1alpha1.IPReservation, error) {
	al := av.alloc.For(s.Scope, s.Space)
	for range 2 {
		r, err := al.Allocate(ctx, s.requestedItem(), tmpl)
		if err != nil {
			return nil, err
		}
		o := r.Spec.Owner
		switch {
		case o.ContainerID == tmpl.Owner.ContainerID && o.Interface == tmpl.Owner.Interface:
			return r, nil
		case o.ContainerID == tmpl.Owner.ContainerID:
			return nil, &allocator.ConflictError{Item: r.Spec.Address, Holder: o}
		}
		av.log.Info("releasing a requested address an earlier sandbox of the pod holds", "reservation", r.Name, "containerID", o.ContainerID)
		if err := av.alloc.Release(ctx, r); err != nil {
			return nil, err
		}
	}
	return nil, codedf(CodeTryAgainLater, nil, "%s: an earlier sandbox of the pod still holds it", s.requested)
}

func buildResult(cfg *config.Config, held []heldSlot) (types.Result, error) {
	res := &current.Result{CNIVersion: current.ImplementedSpecVersion, Routes: cfg.Routes, DNS: cfg.DNS}
	for _, h := range held {
		if h.slot.Range == nil {
			continue // a delegated prefix is not an interface address
		}
		p, err := reservation.ParseItem(h.res.Spec.Address)
		if err != nil {
			return nil, err
		}
		addr := p.Addr()
		ipc := &current.IPConfig{Address: net.IPNet{IP: net.IP(addr.AsSlice()), Mask: net.CIDRMask(h.slot.Range.Prefix.Bits(), addr.BitLen())}}
		if gw := h.slot.Gateway; gw.IsValid() {
			ipc.Gateway = net.IP(gw.AsSlice())
		}
		res.IPs = append(res.IPs, ipc)
	}
	cniVersion := cfg.CNIVersion
	if cniVersion == "" {
		cniVersion = "0.3.1"
	}
	return res.GetAsVersion(cniVersion)
}
