package agent

import (
	"cmp"
	"context"
	"encoding/json"
	"log/slog"
	"net/netip"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	ipamclaimsv1alpha1 "github.com/tenure-ipam/tenure/api/ipamclaims/v1alpha1"
	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/config"
	"github.com/tenure-ipam/tenure/internal/dataplane"
	"github.com/tenure-ipam/tenure/internal/kubevirt"
	"github.com/tenure-ipam/tenure/internal/store"
)

// DataplaneOptions configure the agent's DHCPv6 service and prefix routes
// (internal/dataplane).
type DataplaneOptions struct {
	// Netns is the path of the network namespace DHCPv6 is served in and
	// routes are installed in; "" is the agent's own.
	Netns string
	// StateFile keeps the dhcpv6 settings learnt at ADD across agent
	// restarts; "" keeps them in memory only.
	StateFile string
	// Resync is the period of the full reconcile; 0 means 30 s.
	Resync time.Duration
}

// agentDataplane glues the dataplane service (DHCPv6 servers and prefix
// routes) to the agent: it learns from ADDs, is told of attachments made
// and gone, reads the caches (src) and records MAC conflicts as Events.
type agentDataplane struct {
	svc *dataplane.Service
	// trigger is svc.Trigger, for what a CNI call changed (tests count it).
	trigger func()
	src     informerSource
	// recorder records the MAC conflicts' Events; nil records none.
	recorder record.EventRecorder
}

// newDataplane starts nothing: Run does. Every change of src's pods and
// claims triggers a reconcile; obs counts what the service does.
func newDataplane(opts DataplaneOptions, src informerSource, obs *agentMetrics, log *slog.Logger, rec record.EventRecorder) (*agentDataplane, error) {
	d := &agentDataplane{src: src, recorder: rec}
	svc, err := dataplane.New(dataplane.Options{
		Source: src, Netns: opts.Netns, StateFile: opts.StateFile, Resync: opts.Resync,
		Observer: obs, Logger: log, OnConflict: d.recordMACConflict,
	})
	if err != nil {
		return nil, err
	}
	if err := onEveryEvent(svc.Trigger, src.pods, src.claims); err != nil {
		return nil, err
	}
	d.svc, d.trigger = svc, svc.Trigger
	return d, nil
}

// EventMACConflict is the reason of the Warning Event recorded on each pod
// of a MAC conflict (dataplane.MACConflict): two bindings of this node hold
// one MAC on one DHCPv6 interface, and neither is served.
const EventMACConflict = "DHCPv6MACConflict"

// recordMACConflict records a MAC conflict on each pod that holds one of
// its bindings: the pods are this node's, which the agent may write Events
// about.
func (d *agentDataplane) recordMACConflict(c dataplane.MACConflict) {
	if d.recorder == nil {
		return
	}
	seen := map[string]bool{}
	for _, h := range c.Holders {
		if seen[h.Pod] {
			continue
		}
		seen[h.Pod] = true
		obj, ok, _ := d.src.pods.GetIndexer().GetByKey(h.Pod)
		if !ok {
			continue
		}
		if pod, ok := obj.(*corev1.Pod); ok {
			d.recorder.Eventf(pod, corev1.EventTypeWarning, EventMACConflict, "%s: none of them is served DHCPv6 or routed by node %s until only one holds it", c, d.src.node)
		}
	}
}

// Learn records, before an ADD allocates, the dhcpv6 settings the
// attachment's NetworkAttachmentDefinition (the network-selection element
// Multus delegated it for) gives its CNI network, keyed by that NAD, so a
// NAD of another namespace cannot change what this one serves. It refuses
// the ADD, naming both NADs and the setting, when another NAD of the same
// namespace in use on this node defines the same CNI network otherwise. An
// attachment without an element (a default network) has no NAD to key by,
// and no binding is made from it either.
func (d *agentDataplane) Learn(at *attachment) error {
	e := at.sel.Element
	if e == nil {
		return nil
	}
	if err := d.svc.Learn(e.Namespace+"/"+e.Name, at.cfg.Name, withLinkInfo(at.cfg, at.req.StdinData)); err != nil {
		return codedf(CodeInvalidNetworkConfig, nil, "%v", err)
	}
	return nil
}

// Attached is called after every successful ADD: on a network served the
// bindings are recomputed. On any other network an ADD changes no binding:
// a storm of ADDs there costs the dataplane nothing.
func (d *agentDataplane) Attached(cfg *config.Config) {
	if d.svc.Serves(cfg.Name) {
		d.trigger()
	}
}

// withLinkInfo returns the network's dhcpv6 settings with what its Router
// Advertisements tell the guests (the IPv6 subnets of its ranges, its IPv6
// gateway) and the node-side interface its main plugin plugs the
// attachment into: a bridge plugin's (or OVS's) "bridge", else a macvlan,
// ipvlan or vlan plugin's "master", read from the network config the
// runtime passed (netconf).
func withLinkInfo(cfg *config.Config, netconf []byte) *config.DHCPv6 {
	if cfg.DHCPv6 == nil {
		return nil
	}
	d := *cfg.DHCPv6
	d.OnLink = nil
	for _, r := range cfg.Ranges {
		if p := r.Prefix.Masked(); p.Addr().Is6() && !p.Addr().Is4In6() && !slices.Contains(d.OnLink, p) {
			d.OnLink = append(d.OnLink, p)
		}
	}
	d.Gateway = netip.Addr{}
	if cfg.Gateway.Is6() && !cfg.Gateway.Is4In6() {
		d.Gateway = cfg.Gateway
	}
	var link struct {
		Bridge string `json:"bridge"`
		Master string `json:"master"`
	}
	// The config parsed already (config.Parse); a main plugin's keys of
	// another type simply name no link.
	_ = json.Unmarshal(netconf, &link)
	d.Link = cmp.Or(link.Bridge, link.Master)
	return &d
}

// Detached is called after a DEL released a pod's reservations of that CNI
// network ("" when unknown): a pod's opt-in prefix stops being served and
// routed at once (within the dataplane's spacing of a burst of triggers),
// not at the next resync (the pod itself may stay, e.g. a sandbox being
// re-created). Only a network served can have had a binding.
func (d *agentDataplane) Detached(network string) {
	if network == "" || d.svc.Serves(network) {
		d.trigger()
	}
}

// Run reconciles until ctx ends; Start calls it once the caches synced.
func (d *agentDataplane) Run(ctx context.Context) { d.svc.Run(ctx) }

// onEveryEvent calls f on every add, update and delete of the informers.
func onEveryEvent(f func(), infs ...cache.SharedIndexInformer) error {
	h := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { f() },
		UpdateFunc: func(any, any) { f() },
		DeleteFunc: func(any) { f() },
	}
	for _, inf := range infs {
		if _, err := inf.AddEventHandler(h); err != nil {
			return err
		}
	}
	return nil
}

// informerSource is dataplane.Source on the agent's caches: the informers
// of node's pods and of claims, the store, the claims' holdings
// (claimHoldings.get) and the VMI watcher.
type informerSource struct {
	node     string
	pods     cache.SharedIndexInformer
	claims   cache.SharedIndexInformer
	store    *store.Store
	holdings func(claim *ipamclaimsv1alpha1.IPAMClaim) ([]*tenurev1alpha1.IPReservation, bool)
	vmis     *kubevirt.Watcher
}

func (s informerSource) Pods() []*corev1.Pod {
	objs := s.pods.GetStore().List()
	out := make([]*corev1.Pod, 0, len(objs))
	for _, o := range objs {
		if p, ok := o.(*corev1.Pod); ok && p.Spec.NodeName == s.node {
			out = append(out, p)
		}
	}
	return out
}

func (s informerSource) PodReservations(podUID string) []*tenurev1alpha1.IPReservation {
	return s.store.ByOwnerUID(podUID)
}

func (s informerSource) ClaimReservations(claim *ipamclaimsv1alpha1.IPAMClaim) ([]*tenurev1alpha1.IPReservation, bool) {
	return s.holdings(claim)
}

func (s informerSource) VMIsServed() bool { return s.vmis.Served() }

func (s informerSource) VMI(namespace, name string) (kubevirt.VMI, bool) {
	return s.vmis.Get(namespace, name)
}

func (s informerSource) Claim(namespace, name string) (*ipamclaimsv1alpha1.IPAMClaim, bool) {
	obj, ok, _ := s.claims.GetIndexer().GetByKey(namespace + "/" + name)
	if !ok {
		return nil, false
	}
	c, ok := obj.(*ipamclaimsv1alpha1.IPAMClaim)
	return c, ok
}
