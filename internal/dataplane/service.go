package dataplane

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	"github.com/vishvananda/netlink"
	corev1 "k8s.io/api/core/v1"

	ipamclaimsv1alpha1 "github.com/tenure-ipam/tenure/api/ipamclaims/v1alpha1"
	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/claims"
	"github.com/tenure-ipam/tenure/internal/config"
	"github.com/tenure-ipam/tenure/internal/dhcp6"
	"github.com/tenure-ipam/tenure/internal/kubevirt"
)

// DefaultResync is the period of the full reconcile when Options.Resync is 0.
const DefaultResync = 30 * time.Second

// triggerSpacing is the least time from one reconcile to the next a
// Trigger starts. A lone Trigger (one ADD on a quiet node) reconciles at
// once; a burst of them (a storm of ADDs and DELs, every pod event of the
// node) is folded into one reconcile per spacing, each a pass over every
// pod of the node and a dump of its routes.
const triggerSpacing = 100 * time.Millisecond

// Source gives the informer caches' current content.
type Source interface {
	// Pods returns the pods of this node.
	Pods() []*corev1.Pod
	// Claim returns the IPAMClaim namespace/name, if cached.
	Claim(namespace, name string) (*ipamclaimsv1alpha1.IPAMClaim, bool)
}

// ReservationSource is implemented by a Source that knows the pods'
// reservations, to serve the delegated prefixes of pods without a claim.
type ReservationSource interface {
	// PodReservations returns the reservations the pod with this UID holds.
	PodReservations(podUID string) []*tenurev1alpha1.IPReservation
}

// ClaimReservationSource is implemented by a Source that knows the
// claims' reservations: a claim's delegated prefix is then the one its
// reservation holds, whatever status.delegatedPrefixes records (rule 5).
type ClaimReservationSource interface {
	// ClaimReservations returns the reservations the claim holds and
	// whether they are known yet.
	ClaimReservations(claim *ipamclaimsv1alpha1.IPAMClaim) ([]*tenurev1alpha1.IPReservation, bool)
}

// VMISource is implemented by a Source that knows KubeVirt's
// VirtualMachineInstances (rule 4 of the package doc).
type VMISource interface {
	// VMIsServed reports whether the API serves VirtualMachineInstances
	// and their cache has synced.
	VMIsServed() bool
	// VMI returns the cached VirtualMachineInstance namespace/name.
	VMI(namespace, name string) (kubevirt.VMI, bool)
}

// Options configure a Service.
type Options struct {
	Source Source
	// Netns is the path of the dataplane network namespace; "" for the
	// process's own.
	Netns string
	// StateFile keeps the learnt network settings across restarts; "" keeps
	// them in memory only.
	StateFile string
	// Resync is the period of the full reconcile; 0 means DefaultResync.
	Resync time.Duration
	// Observer receives one call per DHCPv6 message handled; may be nil.
	// It may implement RouteObserver and ConflictObserver too.
	Observer dhcp6.Observer
	// OnConflict, when set, is called (from the reconcile) once for each
	// MAC conflict when it appears: the agent records it as an Event.
	OnConflict func(MACConflict)
	Logger     *slog.Logger
}

// Service serves DHCPv6 (and, where asked, Router Advertisements) and keeps
// the routes of this node's bindings.
type Service struct {
	opts Options
	log  *slog.Logger
	ns   *namespace
	nl   *netlink.Handle

	trigger chan struct{}

	mu       sync.Mutex
	networks map[string]config.DHCPv6 // by NAD (namespace/name), with or without dhcpv6
	learnt   map[string]time.Time     // by NAD: when an ADD (or the state file) last gave its settings
	legacy   map[string]config.DHCPv6 // by CNI network: the state file's settings without a NAD, until adopt
	dirty    bool                     // networks changed since the state file was written

	index atomic.Pointer[index]

	heardMu sync.Mutex
	heard   map[string]string // binding key -> interface last heard on

	// Owned by the Run goroutine.
	servers       map[string]*server
	advertisers   map[string]*advertiser // by interface
	lastState     map[string]string      // pod|interface -> binding or skip, as last logged
	lastConflicts map[string]MACConflict // by MACConflict.String(), as last reported
	lastErrs      map[string]string
	// idle: the last reconcile saw no network served and left nothing of
	// tenure's in place (no server, advertiser or route).
	idle bool
	// routesLeft are the routes the last reconcile wanted in the
	// namespace and those it failed to remove or kept (-1: the list
	// failed).
	routesLeft int
	// overlaps are the prefixes whose VM left this node by a migration
	// that switched over, with when their route may go (RouteOverlap);
	// held are those whose time has not come, as of the last overlap.
	overlaps, held map[netip.Prefix]time.Time
}

// New opens the dataplane namespace and reads the state file.
func New(opts Options) (*Service, error) {
	if opts.Source == nil {
		return nil, errors.New("dataplane: Options.Source is required")
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Resync <= 0 {
		opts.Resync = DefaultResync
	}
	ns, err := openNamespace(opts.Netns)
	if err != nil {
		return nil, err
	}
	nl, err := ns.netlink()
	if err != nil {
		ns.close()
		return nil, fmt.Errorf("netlink handle in %s: %w", ns, err)
	}
	s := &Service{
		opts: opts, log: opts.Logger.With("component", "dataplane"), ns: ns, nl: nl,
		trigger: make(chan struct{}, 1), networks: map[string]config.DHCPv6{}, learnt: map[string]time.Time{}, legacy: map[string]config.DHCPv6{},
		heard: map[string]string{}, servers: map[string]*server{}, advertisers: map[string]*advertiser{}, lastErrs: map[string]string{},
	}
	s.index.Store(&index{byMACIf: map[string]Binding{}})
	if opts.StateFile != "" {
		if err := s.load(); err != nil {
			s.log.Warn("ignoring the dataplane state file", "path", opts.StateFile, "err", err)
		}
	}
	return s, nil
}

// Learn records the dhcpv6 settings that the NetworkAttachmentDefinition
// nad (namespace/name) gives its CNI network, as an ADD's config gives
// them: d nil (no dhcpv6 key) records that the NAD has none. Settings are
// kept per NAD, so a NAD of another namespace, whoever wrote it, can
// neither retune nor switch off what this one serves. Two NADs of one
// namespace that define one CNI network must agree (every dhcpv6 key, and
// the IPv6 subnets and gateway its Router Advertisements carry; the Link
// may differ): Learn refuses, with a *SettingsConflict and changing
// nothing, settings that differ from those another NAD in use on this
// node (named by a pod of this node) gave the same network.
func (s *Service) Learn(nad, network string, d *config.DHCPv6) error {
	nd := config.DHCPv6{Network: network}
	if d != nil {
		nd = *d
		nd.Network = network
		nd.Interfaces = slices.Clone(d.Interfaces)
		nd.OnLink = slices.Clone(d.OnLink)
		nd.TrustedRelays = slices.Clone(d.TrustedRelays)
	}
	// The in-use set costs a pass over the node's pods: only a NAD whose
	// settings differ from another one's pays it.
	var inUse map[string]bool
	for {
		s.mu.Lock()
		conflict, needPods := s.disagreement(nad, nd, inUse)
		if needPods {
			s.mu.Unlock()
			inUse = nadsInUse(s.opts.Source.Pods())
			continue
		}
		if conflict != nil {
			s.mu.Unlock()
			return conflict
		}
		old, had := s.networks[nad]
		changed := !had || !sameSettings(old, nd) || old.Link != nd.Link
		if changed {
			s.networks[nad] = nd
			s.dirty = true
		}
		s.learnt[nad] = time.Now()
		s.mu.Unlock()
		served := nd.Enabled || (had && old.Enabled)
		switch {
		case !changed:
		case nd.Enabled:
			s.log.Info("dhcpv6 settings learnt", "nad", nad, "network", network, "interfaces", nd.Interfaces, "link", nd.Link,
				"installRoutes", nd.InstallRoutes, "preferredLifetime", nd.PreferredLifetime, "validLifetime", nd.ValidLifetime,
				"routerAdvertisements", nd.RouterAdvertisements, "onLink", nd.OnLink, "gateway", nd.Gateway, "trustedRelays", len(nd.TrustedRelays))
		case served:
			s.log.Info("dhcpv6 settings forgotten: the NAD's config has no enabled dhcpv6", "nad", nad, "network", network)
		}
		if changed && served {
			s.Trigger()
		}
		return nil
	}
}

// disagreement returns the conflict of nad's settings d with another NAD
// of its namespace and network in use; needPods when that cannot be told
// without the in-use set (nil). Called with s.mu held.
func (s *Service) disagreement(nad string, d config.DHCPv6, inUse map[string]bool) (conflict *SettingsConflict, needPods bool) {
	ns, _, _ := strings.Cut(nad, "/")
	for other, o := range s.networks {
		ons, _, _ := strings.Cut(other, "/")
		if other == nad || ons != ns || o.Network != d.Network {
			continue
		}
		field, mine, theirs := settingsDiff(d, o)
		if field == "" {
			continue
		}
		if inUse == nil {
			return nil, true
		}
		// Of several, the one first by name, as every ADD reports it.
		if inUse[other] && (conflict == nil || other < conflict.Other) {
			conflict = &SettingsConflict{Network: d.Network, NAD: nad, Other: other, Field: field, Value: mine, OtherValue: theirs}
		}
	}
	return conflict, false
}

// SettingsConflict is Learn's refusal: two NADs of one namespace define one
// CNI network with different DHCPv6 settings.
type SettingsConflict struct {
	Network, NAD, Other      string
	Field, Value, OtherValue string
}

func (e *SettingsConflict) Error() string {
	return fmt.Sprintf("NADs %s and %s both define CNI network %q with different DHCPv6 settings: %s is %s in %s and %s in %s; make them agree",
		e.NAD, e.Other, e.Network, e.Field, e.Value, e.NAD, e.OtherValue, e.Other)
}

// settingsDiff names the first setting a and b differ in (a config key) and
// its value in each; "" when they agree. Two configs without enabled
// dhcpv6 agree whatever else they say; the Link is each NAD's own.
func settingsDiff(a, b config.DHCPv6) (field, av, bv string) {
	if !a.Enabled || !b.Enabled {
		if a.Enabled != b.Enabled {
			return "dhcpv6.enabled", onOff(a.Enabled), onOff(b.Enabled)
		}
		return "", "", ""
	}
	relays := func(rs []config.TrustedRelay) string {
		var out []string
		for _, r := range rs {
			out = append(out, fmt.Sprintf("%s/%s/%s", r.Interface, r.MAC, r.Address))
		}
		return fmt.Sprintf("%q", out)
	}
	secs := func(d time.Duration) string { return fmt.Sprint(int64(d / time.Second)) }
	for _, f := range []struct{ key, a, b string }{
		{"dhcpv6.interfaces", fmt.Sprintf("%q", a.Interfaces), fmt.Sprintf("%q", b.Interfaces)},
		{"dhcpv6.preferred_lifetime", secs(a.PreferredLifetime), secs(b.PreferredLifetime)},
		{"dhcpv6.valid_lifetime", secs(a.ValidLifetime), secs(b.ValidLifetime)},
		{"dhcpv6.install_routes", fmt.Sprint(a.InstallRoutes), fmt.Sprint(b.InstallRoutes)},
		{"dhcpv6.router_advertisements", fmt.Sprint(a.RouterAdvertisements), fmt.Sprint(b.RouterAdvertisements)},
		{"dhcpv6.trusted_relays", relays(a.TrustedRelays), relays(b.TrustedRelays)},
		{"the IPv6 subnets of the ranges", fmt.Sprint(a.OnLink), fmt.Sprint(b.OnLink)},
		{"gateway", a.Gateway.String(), b.Gateway.String()},
	} {
		if f.a != f.b {
			return f.key, f.a, f.b
		}
	}
	return "", "", ""
}

func onOff(enabled bool) string {
	if enabled {
		return "enabled"
	}
	return "absent or false"
}

// nadsInUse returns the NADs (namespace/name) the network-selection
// elements of pods, not in a terminal phase, name.
func nadsInUse(pods []*corev1.Pod) map[string]bool {
	out := map[string]bool{}
	for _, p := range pods {
		if p == nil || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed || p.Annotations[nadv1.NetworkAttachmentAnnot] == "" {
			continue
		}
		elems, err := claims.Networks(p)
		if err != nil {
			continue
		}
		for _, e := range elems {
			if e != nil {
				out[nadOf(e)] = true
			}
		}
	}
	return out
}

// pruneAfter is how long the settings a NAD gave stay once no pod of this
// node names it: longer than an ADD takes to see its pod in the informer.
const pruneAfter = 10 * time.Minute

// prune forgets the settings of NADs no pod of this node names and that no
// ADD gave for pruneAfter: a deleted or edited NAD's old settings neither
// serve anyone nor stand in the way of its namespace's other NADs.
func (s *Service) prune(pods []*corev1.Pod, now time.Time) {
	inUse := nadsInUse(pods)
	s.mu.Lock()
	defer s.mu.Unlock()
	for nad := range s.networks {
		if inUse[nad] || now.Sub(s.learnt[nad]) < pruneAfter {
			continue
		}
		s.log.Info("dhcpv6 settings of a NAD no pod of this node names any more forgotten", "nad", nad, "network", s.networks[nad].Network)
		delete(s.networks, nad)
		delete(s.learnt, nad)
		s.dirty = true
	}
}

func sameSettings(a, b config.DHCPv6) bool {
	return a.Enabled == b.Enabled && a.Network == b.Network && a.InstallRoutes == b.InstallRoutes && a.PreferredLifetime == b.PreferredLifetime &&
		a.ValidLifetime == b.ValidLifetime && slices.Equal(a.Interfaces, b.Interfaces) &&
		a.RouterAdvertisements == b.RouterAdvertisements && slices.Equal(a.OnLink, b.OnLink) && a.Gateway == b.Gateway &&
		slices.EqualFunc(a.TrustedRelays, b.TrustedRelays, func(x, y config.TrustedRelay) bool {
			return x.Interface == y.Interface && x.MAC.String() == y.MAC.String() && x.Address == y.Address
		})
}

// Serves reports whether a NAD gives network enabled DHCPv6 settings here:
// only then can its attachments have bindings, and a change of them matter.
func (s *Service) Serves(network string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, d := range s.networks {
		if d.Enabled && d.Network == network {
			return true
		}
	}
	return false
}

// Networks returns a copy of the learnt settings.
func (s *Service) Networks() map[string]config.DHCPv6 {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]config.DHCPv6, len(s.networks))
	for k, v := range s.networks {
		v.Interfaces = slices.Clone(v.Interfaces)
		v.OnLink = slices.Clone(v.OnLink)
		v.TrustedRelays = slices.Clone(v.TrustedRelays)
		out[k] = v
	}
	return out
}

// servesAny reports whether any NAD gives enabled DHCPv6 settings.
func (s *Service) servesAny() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, d := range s.networks {
		if d.Enabled {
			return true
		}
	}
	return false
}

// Trigger asks for a reconcile soon; calls coalesce.
func (s *Service) Trigger() {
	select {
	case s.trigger <- struct{}{}:
	default:
	}
}

// Run reconciles on every Trigger and every Resync until ctx ends, then
// stops the DHCPv6 servers (routes are left in place). While no network
// is served and nothing is in place, a Trigger has nothing to change: a
// pod's events on a node without DHCPv6 (every pod of a storm, whatever
// its IPAM) cost no pass over the pods; the Resync still makes one.
func (s *Service) Run(ctx context.Context) {
	s.log.Info("dataplane running", "netns", s.ns.String(), "resync", s.opts.Resync)
	t := time.NewTicker(s.opts.Resync)
	defer t.Stop()
	defer s.shutdown()
	for {
		// What triggered until now, this reconcile sees.
		select {
		case <-s.trigger:
		default:
		}
		last := time.Now()
		s.reconcile()
		if !s.awaitWork(ctx, t.C, s.overlapDue(), last) {
			return
		}
	}
}

// awaitWork waits for what starts the next reconcile: the Resync, a
// route overlap's end (due), or a Trigger that may change something, spaced
// triggerSpacing from last. It returns false when ctx ends.
func (s *Service) awaitWork(ctx context.Context, resync, due <-chan time.Time, last time.Time) bool {
	for {
		select {
		case <-ctx.Done():
			return false
		case <-resync:
			return true
		case <-due:
			return true
		case <-s.trigger:
			if s.idle && !s.servesAny() {
				continue
			}
			if wait := triggerSpacing - time.Since(last); wait > 0 {
				select {
				case <-ctx.Done():
					return false
				case <-time.After(wait):
				}
			}
			return true
		}
	}
}

func (s *Service) shutdown() {
	for name, sv := range s.servers {
		s.stopServer(name, sv)
	}
	for name, a := range s.advertisers {
		s.stopAdvertiser(name, a)
	}
	s.nl.Close()
	s.ns.close()
}

func (s *Service) reconcile() {
	pods := s.opts.Source.Pods()
	s.adopt(pods)
	s.prune(pods, time.Now())
	networks := s.Networks()
	s.persist()
	bindings, skips := s.rebind(pods, networks)
	s.reconcileServers(networks)
	s.reconcileAdvertisers(WantedAdvertisements(bindings, networks))
	s.overlap(skips, time.Now())
	s.reconcileRoutes(bindings)
	s.idle = !s.servesAny() && len(s.servers) == 0 && len(s.advertisers) == 0 && s.routesLeft == 0
}

// logErr logs an error of one subject once until it changes or clears.
func (s *Service) logErr(subject string, err error, msg string, args ...any) {
	if err == nil {
		delete(s.lastErrs, subject)
		return
	}
	if s.lastErrs[subject] == err.Error() {
		return
	}
	s.lastErrs[subject] = err.Error()
	s.log.Warn(msg, append(args, "err", err)...)
}
