package agent

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/netip"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/allocator"
	"github.com/tenure-ipam/tenure/internal/cniwire"
	"github.com/tenure-ipam/tenure/internal/config"
	"github.com/tenure-ipam/tenure/internal/reservation"
)

// Response is the outcome of one CNI call: the result to print, already
// encoded in the requested cniVersion (nil when the command prints none), or
// a CNI error.
type Response struct {
	Result json.RawMessage
	Error  *types.Error
}

// Handle runs one CNI call. It is the agent's plain Go API; the socket
// server is a thin transport over it.
func (a *Agent) Handle(ctx context.Context, req *cniwire.Request) *Response {
	var (
		res types.Result
		err error
	)
	if verr := validateCall(req, &a.heads); verr != nil {
		return &Response{Error: verr}
	}
	ctx = a.arrivals.withArrival(ctx)
	switch req.Command {
	case "ADD":
		res, err = a.add(ctx, req)
	case "DEL":
		err = a.del(ctx, req)
	case "CHECK":
		err = a.check(ctx, req)
	case "GC":
		err = a.gc(ctx, req)
	case "STATUS":
		err = a.status(ctx)
	}
	if err != nil {
		a.log.Info("cni call failed", "command", req.Command, "containerID", req.ContainerID, "ifName", req.IfName, "err", err)
		return &Response{Error: toCNI(err)}
	}
	if res == nil {
		return &Response{}
	}
	data, err := encodeResult(res)
	if err != nil {
		return &Response{Error: toCNI(err)}
	}
	return &Response{Result: data}
}

func (a *Agent) add(ctx context.Context, req *cniwire.Request) (types.Result, error) {
	at, err := a.calls.prepare(ctx, req)
	if err != nil {
		return nil, err
	}
	unlock := a.locks.lock(attachmentKey(req))
	defer unlock()
	if a.arrivals.deletedAfter(attachmentKey(req), arrivalOf(ctx)) {
		return nil, codedf(CodeTryAgainLater, nil, "ADD of container %s interface %s abandoned: a DEL of the attachment arrived after it and has run", req.ContainerID, req.IfName)
	}
	if err := a.dataplane.Learn(at); err != nil {
		a.recordAddFailure(at, err)
		return nil, err
	}
	if at.sel.Claim == "" {
		if at.sel.Claim, err = a.claimPath.stickyClaim(ctx, at, true); err != nil {
			return nil, err
		}
	}
	var held []heldSlot
	if at.sel.Claim != "" {
		held, err = a.claimPath.addForClaim(ctx, at)
	} else {
		held, err = a.addForPod(ctx, at)
	}
	if err != nil {
		a.recordAddFailure(at, err)
		return nil, err
	}
	a.dataplane.Attached(at.cfg)
	return buildResult(at.cfg, held)
}

// EventAddFailed is the reason of the Warning Event recorded on a pod whose
// ADD failed once its pod was known. The message names the attachment as
// "interface NAME", which `tenurectl why` reads to say why that interface
// has no address.
const EventAddFailed = "AddFailed"

// recordAddFailure records the failed ADD on the pod; the recorder
// aggregates repeats (a runtime retrying the sandbox) into one Event.
func (a *Agent) recordAddFailure(at *attachment, err error) {
	if a.recorder == nil {
		return
	}
	ce := toCNI(err)
	id := at.req.ContainerID
	if len(id) > 12 {
		id = id[:12]
	}
	a.recorder.Eventf(at.pod, corev1.EventTypeWarning, EventAddFailed, "ADD of interface %s (network %s, container %s) failed with CNI error %d: %s",
		at.req.IfName, at.cfg.Name, id, ce.Code, ce.Msg)
}

func (a *Agent) owner(at *attachment) tenurev1alpha1.ReservationOwner {
	return tenurev1alpha1.ReservationOwner{
		Kind: tenurev1alpha1.OwnerPod, Namespace: at.pod.Namespace, Name: at.pod.Name, UID: string(at.pod.UID),
		PodName: at.pod.Name, PodUID: string(at.pod.UID),
		ContainerID: at.req.ContainerID, Interface: at.req.IfName, Node: a.node,
	}
}

func (a *Agent) addForPod(ctx context.Context, at *attachment) ([]heldSlot, error) {
	tmpl := allocator.Template{Owner: a.owner(at), CNINetwork: at.cfg.Name}
	// A fresh cache that holds nothing for the attachment is believed (a
	// first ADD costs no read); a cache that may lag is read past.
	existing, err := a.reservations.attachmentHolds(ctx, at.req.ContainerID, at.req.IfName, tmpl.Owner.UID, !a.reservations.fresh(ctx), true)
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
	if err := a.poolChooser.choosePools(ctx, at, holds); err != nil {
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
			r, err = a.allocateRequested(ctx, s, tmpl)
		} else {
			var al allocator.Interface
			if al, err = a.allocators.nextAllocator(at, s); err == nil {
				r, err = al.AllocateNext(ctx, tmpl)
			}
		}
		if err != nil {
			a.reservations.rollback(created)
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
func (a *Agent) allocateRequested(ctx context.Context, s slot, tmpl allocator.Template) (*tenurev1alpha1.IPReservation, error) {
	al := a.alloc.For(s.Scope, s.Space)
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
		a.log.Info("releasing a requested address an earlier sandbox of the pod holds", "reservation", r.Name, "containerID", o.ContainerID)
		if err := a.alloc.Release(ctx, r); err != nil {
			return nil, err
		}
	}
	return nil, codedf(CodeTryAgainLater, nil, "%s: an earlier sandbox of the pod still holds it", s.requested)
}

func (a *Agent) del(ctx context.Context, req *cniwire.Request) error {
	if req.ContainerID == "" || req.IfName == "" {
		return codedf(CodeInvalidEnvironmentVariables, nil, "CNI_CONTAINERID and CNI_IFNAME are required")
	}
	// DEL must succeed on a config that no longer parses: it only needs the
	// attachment identity, so a bad config does not strand reservations.
	unlock := a.locks.lock(attachmentKey(req))
	defer unlock()
	a.arrivals.recordDel(attachmentKey(req), arrivalOf(ctx), time.Now())
	var released []string // their CNI networks
	defer func() {
		for _, network := range released {
			a.dataplane.Detached(network)
		}
	}()
	// DEL answers success only when the attachment holds nothing: a cache
	// that may lag, or that holds nothing for it, is read past.
	podUID := ""
	if args, err := parseCNIArgs(req.Args); err == nil {
		podUID = args.UID
	}
	fresh := a.reservations.fresh(ctx)
	live := !fresh || len(a.store.ByAttachment(req.ContainerID, req.IfName)) == 0
	held, err := a.reservations.attachmentHolds(ctx, req.ContainerID, req.IfName, podUID, live, false)
	if err != nil {
		return err
	}
	for _, r := range held {
		// Claim-owned ones are not listed: released only when the claim goes.
		if err := a.alloc.Release(ctx, r); err != nil {
			return codedf(CodeTryAgainLater, err, "releasing %s of container %s interface %s", r.Name, req.ContainerID, req.IfName)
		}
		released = append(released, r.Spec.CNINetwork)
	}
	return nil
}

func (a *Agent) check(ctx context.Context, req *cniwire.Request) error {
	at, err := a.calls.prepare(ctx, req)
	if err != nil {
		return err
	}
	var conf struct {
		CNIVersion string          `json:"cniVersion"`
		PrevResult json.RawMessage `json:"prevResult"`
	}
	if err := json.Unmarshal(req.StdinData, &conf); err != nil || len(conf.PrevResult) == 0 {
		return codedf(CodeInvalidNetworkConfig, err, "CHECK needs prevResult")
	}
	prev, err := version.NewResult(conf.CNIVersion, conf.PrevResult)
	if err != nil {
		return codedf(CodeDecodingFailure, err, "decoding prevResult")
	}
	pr, err := current.NewResultFromResult(prev)
	if err != nil {
		return codedf(CodeDecodingFailure, err, "converting prevResult")
	}
	held := a.store.ByAttachment(req.ContainerID, req.IfName)
	if at.sel.Claim == "" {
		if at.sel.Claim, err = a.claimPath.stickyClaim(ctx, at, false); err != nil {
			return err
		}
	}
	if at.sel.Claim != "" {
		if claim, err := a.claimPath.getClaim(ctx, at.pod.Namespace, at.sel.Claim, false); err == nil {
			owned, err := a.store.ClaimHolds(ctx, string(claim.UID))
			if err != nil {
				return err
			}
			held = append(held, owned...)
		}
	}
	have := map[netip.Addr]bool{}
	note := func(held []*tenurev1alpha1.IPReservation) {
		for _, r := range held {
			if _, unsettled := a.store.Unsettled(r.Name); unsettled {
				continue // not known to exist
			}
			if r.Spec.Kind == tenurev1alpha1.KindAddress {
				if p, err := reservation.ParseItem(r.Spec.Address); err == nil {
					have[p.Addr()] = true
				}
			}
		}
	}
	missing := func() net.IP {
		for _, ipc := range pr.IPs {
			if addr, ok := netip.AddrFromSlice(ipc.Address.IP); !ok || !have[addr.Unmap()] {
				return ipc.Address.IP
			}
		}
		return nil
	}
	note(held)
	if missing() != nil {
		// The node cache may lag (its watch broke, the agent restarted):
		// what it lacks is read from the API server before CHECK fails.
		live, err := a.reservations.attachmentHolds(ctx, req.ContainerID, req.IfName, string(at.pod.UID), true, false)
		if err != nil {
			return err
		}
		note(live)
	}
	if ip := missing(); ip != nil {
		return codedf(CodeCheckFailed, nil, "address %s of the previous result has no reservation for container %s interface %s", ip, req.ContainerID, req.IfName)
	}
	if len(pr.IPs) == 0 && (len(at.cfg.Ranges) > 0 || at.cfg.Pools != nil) {
		return codedf(CodeCheckFailed, nil, "previous result holds no address")
	}
	return nil
}

func (a *Agent) gc(ctx context.Context, req *cniwire.Request) error {
	var conf struct {
		Name  string `json:"name"`
		Valid []struct {
			ContainerID string `json:"containerID"`
			IfName      string `json:"ifname"`
		} `json:"cni.dev/valid-attachments"`
	}
	if err := json.Unmarshal(req.StdinData, &conf); err != nil {
		return codedf(CodeDecodingFailure, err, "decoding GC configuration")
	}
	valid := map[string]bool{}
	for _, v := range conf.Valid {
		valid[reservation.AttachmentKey(v.ContainerID, v.IfName)] = true
	}
	var errs []error
	for _, r := range a.store.Local() {
		o := r.Spec.Owner
		if o.Kind != tenurev1alpha1.OwnerPod || o.Node != a.node || r.Spec.CNINetwork != conf.Name {
			continue
		}
		key := reservation.AttachmentKey(o.ContainerID, o.Interface)
		if valid[key] || a.locks.held(key) {
			continue
		}
		if u, ok := a.store.Unsettled(r.Name); ok {
			// Deleted by name only once it is known to be this one.
			cur, err := a.alloc.Settle(ctx, u, false)
			if apierrors.IsAlreadyExists(err) || (err == nil && cur == nil) {
				continue
			}
			if err != nil {
				errs = append(errs, err)
				continue
			}
			r = cur
		}
		a.log.Info("GC releases a reservation of a gone attachment", "reservation", r.Name, "containerID", o.ContainerID, "ifName", o.Interface)
		if err := a.alloc.Release(ctx, r); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (a *Agent) status(ctx context.Context) error {
	if !a.Ready() {
		return codedf(CodePluginNotAvailable, nil, "tenure agent caches are not synced yet")
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := a.client.List(ctx, &tenurev1alpha1.IPPoolList{}, limitOne); err != nil {
		return codedf(CodePluginNotAvailable, err, "Kubernetes API not reachable")
	}
	return nil
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
