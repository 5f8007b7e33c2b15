package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/allocator"
	"github.com/tenure-ipam/tenure/internal/claims"
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

// slot is one thing an ADD hands out: an address of a range (Range set),
// or a prefix of the delegation pool (Range nil). It is the config's scoped
// space and what the pod asks of it.
type slot struct {
	config.ScopedSpace
	// requested is the address runtimeConfig.ips asks for from Range; zero
	// for any free one.
	requested netip.Addr
}

// requestedItem is the requested address as the allocator's item.
func (s slot) requestedItem() netip.Prefix {
	return netip.PrefixFrom(s.requested, s.requested.BitLen())
}

// holds reads the reservation's name, which says its scope and item
// whether the cache holds the whole object or only its metadata.
func (s slot) holds(r *tenurev1alpha1.IPReservation) bool {
	return reservation.ScopeLabelOf(r.Name) == reservation.ScopeLabel(s.Scope) && allocator.InSpace(s.Space, r.Name)
}

func slots(cfg *config.Config, withPrefix bool) []slot {
	out := make([]slot, 0, len(cfg.Ranges)+1)
	for i, sp := range cfg.Spaces() {
		if sp.Range == nil && !withPrefix {
			continue
		}
		s := slot{ScopedSpace: sp}
		if i < len(cfg.Requested) {
			s.requested = cfg.Requested[i]
		}
		out = append(out, s)
	}
	return out
}

func (a *Agent) loadConfig(ctx context.Context, req *cniwire.Request) (*config.Config, error) {
	cfg, err := a.netconfs.get(req.StdinData, req.FlatConfig)
	if err != nil {
		return nil, err
	}
	if cfg.Pool == "" {
		return cfg, nil // its own ranges, or a pools list SelectPools resolves per pod
	}
	pool := &tenurev1alpha1.IPPool{}
	if obj, ok, _ := a.pools.GetIndexer().GetByKey(cfg.Pool); ok {
		pool = obj.(*tenurev1alpha1.IPPool)
	} else if err := a.client.Get(ctx, k8stypes.NamespacedName{Name: cfg.Pool}, pool); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, &config.Error{Key: "ipam.pool", Value: fmt.Sprintf("%q", cfg.Pool), Reason: "no IPPool of that name"}
		}
		return nil, err
	}
	if err := cfg.ApplyPool(pool.Name, pool.Spec); err != nil {
		return nil, err
	}
	return cfg, nil
}

type attachment struct {
	req *cniwire.Request
	// cfg is the config the ADD allocates from; for a pools list, base
	// until choosePools resolved it, and base is the config as parsed.
	cfg  *config.Config
	base *config.Config
	pod  *corev1.Pod
	sel  claims.Selection
	args podArgs
}

func (a *Agent) prepare(ctx context.Context, req *cniwire.Request) (*attachment, error) {
	if req.ContainerID == "" || req.IfName == "" {
		return nil, codedf(CodeInvalidEnvironmentVariables, nil, "CNI_CONTAINERID and CNI_IFNAME are required (got %q, %q)", req.ContainerID, req.IfName)
	}
	cfg, err := a.loadConfig(ctx, req)
	if err != nil {
		return nil, err
	}
	args, err := parseCNIArgs(req.Args)
	if err != nil {
		return nil, codedf(CodeInvalidEnvironmentVariables, nil, "%v", err)
	}
	pod, err := a.pod(ctx, args)
	if err != nil {
		return nil, err
	}
	sel, err := claims.Select(pod, req.IfName)
	if err != nil {
		return nil, codedf(CodeInvalidNetworkConfig, nil, "%v", err)
	}
	return &attachment{req: req, cfg: cfg, base: cfg, pod: pod, sel: sel, args: args}, nil
}

func (a *Agent) add(ctx context.Context, req *cniwire.Request) (types.Result, error) {
	at, err := a.prepare(ctx, req)
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

func attachmentKey(req *cniwire.Request) string {
	return reservation.AttachmentKey(req.ContainerID, req.IfName)
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

type heldSlot struct {
	slot slot
	res  *tenurev1alpha1.IPReservation
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
	existing, err := a.attachmentHolds(ctx, at.req.ContainerID, at.req.IfName, tmpl.Owner.UID, !a.store.AwaitFresh(ctx, a.freshWait), true)
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
			a.rollback(created)
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

// attachmentHolds returns the pod-owned reservations of one attachment
// (of pod UID podUID; "" when unknown): the node cache's, or with live
// the API server's (a list by the owner-UID label, or by this node's label
// when the pod UID is unknown). Creates of the attachment whose outcome is
// unknown (Store.Unsettled) are settled first by live reads; with
// recreate (ADD) a name found free is created again, so a create still in
// flight cannot commit beside it. One that cannot be settled in time is a
// retryable error.
func (a *Agent) attachmentHolds(ctx context.Context, containerID, ifName, podUID string, live, recreate bool) ([]*tenurev1alpha1.IPReservation, error) {
	ours := func(r *tenurev1alpha1.IPReservation) bool {
		o := r.Spec.Owner
		// Made on this node: any node may write a reservation naming this
		// node's pod and sandbox, and none but this node's is the
		// attachment's.
		return o.Kind == tenurev1alpha1.OwnerPod && o.ContainerID == containerID && o.Interface == ifName && (podUID == "" || o.UID == podUID) &&
			o.Node == a.node
	}
	var out, unsettled []*tenurev1alpha1.IPReservation
	for _, r := range a.store.ByAttachment(containerID, ifName) {
		if !ours(r) {
			continue
		}
		if u, ok := a.store.Unsettled(r.Name); ok {
			unsettled = append(unsettled, u)
			continue
		}
		if !live {
			out = append(out, r)
		}
	}
	if live {
		sel := client.MatchingLabels{reservation.LabelOwnerUID: podUID}
		if podUID == "" {
			sel = client.MatchingLabels{reservation.LabelNode: reservation.NodeLabel(a.node)}
		}
		list := &tenurev1alpha1.IPReservationList{}
		if err := a.client.List(ctx, list, sel); err != nil {
			return nil, codedf(CodeTryAgainLater, err, "reading what container %s interface %s holds from the API server", containerID, ifName)
		}
		for i := range list.Items {
			r := &list.Items[i]
			if _, ok := a.store.Unsettled(r.Name); ok || !ours(r) {
				continue // settled below
			}
			out = append(out, r)
		}
	}
	for _, u := range unsettled {
		r, err := a.alloc.Settle(ctx, u, recreate)
		switch {
		case apierrors.IsAlreadyExists(err):
			// Someone else's: the create did not commit for this attachment.
		case err != nil:
			return nil, codedf(CodeTryAgainLater, err, "container %s interface %s: an earlier create of %s is unsettled", containerID, ifName, u.Name)
		case r != nil:
			out = append(out, r)
		}
	}
	return out, nil
}

func firstHeld(rs []*tenurev1alpha1.IPReservation, s slot) *tenurev1alpha1.IPReservation {
	for _, r := range rs {
		if s.holds(r) {
			return r
		}
	}
	return nil
}

// rollback frees what a failed ADD created, so a dual-stack ADD that got
// its IPv4 address but not its IPv6 one leaves nothing behind.
func (a *Agent) rollback(created []*tenurev1alpha1.IPReservation) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, r := range created {
		if err := a.alloc.Release(ctx, r); err != nil {
			a.log.Error("rollback failed; the controller will release it", "reservation", r.Name, "err", err)
		}
	}
}

// freshWait bounds how long after the node cache went stale a call waits
// for it to be found whole (Store.AwaitFresh) rather than read past it: a
// watch the API server closed reopens within milliseconds, and its check
// takes one list and the reopened watch's catch-up; a cache stale for
// longer is read past at once.
const freshWait = time.Second

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
	fresh := a.store.AwaitFresh(ctx, a.freshWait)
	live := !fresh || len(a.store.ByAttachment(req.ContainerID, req.IfName)) == 0
	held, err := a.attachmentHolds(ctx, req.ContainerID, req.IfName, podUID, live, false)
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
	at, err := a.prepare(ctx, req)
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
		live, err := a.attachmentHolds(ctx, req.ContainerID, req.IfName, string(at.pod.UID), true, false)
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

func (a *Agent) pod(ctx context.Context, args podArgs) (*corev1.Pod, error) {
	key := args.Namespace + "/" + args.Name
	match := func(p *corev1.Pod) bool { return args.UID == "" || string(p.UID) == args.UID }
	// The runtime calls ADD right after the pod was bound, often before the
	// pod informer has it: wait a moment for the cache, then ask the API.
	var cached *corev1.Pod
	inCache := func(context.Context) (bool, error) {
		if obj, ok, _ := a.pods.GetIndexer().GetByKey(key); ok && match(obj.(*corev1.Pod)) {
			cached = obj.(*corev1.Pod)
			return true, nil
		}
		return false, nil
	}
	// Looked up once before the poll, which costs a timer and a context
	// even when, as on most calls, the cache has the pod already.
	if found, _ := inCache(ctx); !found {
		_ = wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, a.podWait, true, inCache)
	}
	if cached != nil {
		return cached, nil
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	p := &corev1.Pod{}
	if err := a.client.Get(ctx, k8stypes.NamespacedName{Namespace: args.Namespace, Name: args.Name}, p); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, codedf(CodeTryAgainLater, nil, "pod %s not found", key)
		}
		return nil, err
	}
	if !match(p) {
		if hash, ok := p.Annotations[corev1.MirrorPodAnnotationKey]; ok && hash == args.UID {
			// The runtime's UID of a static pod is its manifest's hash,
			// which the kubelet writes on the mirror pod; the mirror pod is
			// the node's own word (claims.IsMirrorPod).
			return nil, codedf(CodeStaticPod, nil, "pod %s is a static pod (its mirror pod carries %s=%s): tenure gives no address of a shared network to a pod whose API object its node writes itself, as NodeRestriction gives a mirror pod no Secret, ConfigMap or ServiceAccount; run it as a DaemonSet's pod",
				key, corev1.MirrorPodAnnotationKey, hash)
		}
		return nil, codedf(CodeTryAgainLater, nil, "pod %s has UID %s, the runtime asked for UID %s (a deleted pod's sandbox)", key, p.UID, args.UID)
	}
	switch p.Spec.NodeName {
	case a.node:
	case "":
		// A runtime sets up pods bound to its node; an unbound pod's
		// reservation would record a node that may never run it.
		return nil, codedf(CodeInvalidEnvironmentVariables, nil, "pod %s is not bound to a node (spec.nodeName is empty), this agent serves node %s", key, a.node)
	default:
		return nil, codedf(CodeInvalidEnvironmentVariables, nil, "pod %s is bound to node %s, this agent serves node %s", key, p.Spec.NodeName, a.node)
	}
	return p, nil
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
