package dataplane

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vishvananda/netlink"
	corev1 "k8s.io/api/core/v1"

	ipamclaimsv1alpha1 "github.com/tenure-ipam/tenure/api/ipamclaims/v1alpha1"
	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
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
	Observer dhcp6.Observer
	Logger   *slog.Logger
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
	networks map[string]config.DHCPv6
	dirty    bool // networks changed since the state file was written

	index atomic.Pointer[index]

	heardMu sync.Mutex
	heard   map[string]string // binding key -> interface last heard on

	// Owned by the Run goroutine.
	servers     map[string]*server
	advertisers map[string]*advertiser // by interface
	lastState   map[string]string      // pod|interface -> binding or skip, as last logged
	lastErrs    map[string]string
	// idle: the last reconcile saw no network served and left nothing of
	// tenure's in place (no server, advertiser or route).
	idle bool
	// routesLeft are the routes the last reconcile wanted in the
	// namespace and those it failed to remove (-1: the list failed).
	routesLeft int
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
		trigger: make(chan struct{}, 1), networks: map[string]config.DHCPv6{},
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

// Learn records the dhcpv6 settings of a CNI network, as an ADD's IPAM
// config gives them; nil (no dhcpv6 key) or Enabled=false forgets them.
func (s *Service) Learn(network string, d *config.DHCPv6) {
	s.mu.Lock()
	old, had := s.networks[network]
	changed := false
	switch {
	case d == nil || !d.Enabled:
		if had {
			delete(s.networks, network)
			changed = true
		}
	default:
		nd := *d
		nd.Interfaces = slices.Clone(d.Interfaces)
		nd.OnLink = slices.Clone(d.OnLink)
		nd.TrustedRelays = slices.Clone(d.TrustedRelays)
		if !had || !sameSettings(old, nd) {
			s.networks[network] = nd
			changed = true
		}
	}
	s.dirty = s.dirty || changed
	s.mu.Unlock()
	if changed && d != nil && d.Enabled {
		s.log.Info("dhcpv6 settings learnt", "network", network, "interfaces", d.Interfaces, "installRoutes", d.InstallRoutes,
			"preferredLifetime", d.PreferredLifetime, "validLifetime", d.ValidLifetime,
			"routerAdvertisements", d.RouterAdvertisements, "onLink", d.OnLink, "gateway", d.Gateway, "trustedRelays", len(d.TrustedRelays))
	} else if changed {
		s.log.Info("dhcpv6 settings forgotten: the network's config has no enabled dhcpv6", "network", network)
	}
	if changed {
		s.Trigger()
	}
}

func sameSettings(a, b config.DHCPv6) bool {
	return a.Enabled == b.Enabled && a.InstallRoutes == b.InstallRoutes && a.PreferredLifetime == b.PreferredLifetime &&
		a.ValidLifetime == b.ValidLifetime && slices.Equal(a.Interfaces, b.Interfaces) &&
		a.RouterAdvertisements == b.RouterAdvertisements && slices.Equal(a.OnLink, b.OnLink) && a.Gateway == b.Gateway &&
		slices.EqualFunc(a.TrustedRelays, b.TrustedRelays, func(x, y config.TrustedRelay) bool {
			return x.Interface == y.Interface && x.MAC.String() == y.MAC.String() && x.Address == y.Address
		})
}

// Serves reports whether DHCPv6 settings of network are learnt: only then
// can its attachments have bindings, and a change of them matter here.
func (s *Service) Serves(network string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.networks[network]
	return ok
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
		if !s.awaitWork(ctx, t.C, last) {
			return
		}
	}
}

// awaitWork waits for what starts the next reconcile: the Resync, or a
// Trigger that may change something, spaced triggerSpacing from last. It
// returns false when ctx ends.
func (s *Service) awaitWork(ctx context.Context, resync <-chan time.Time, last time.Time) bool {
	for {
		select {
		case <-ctx.Done():
			return false
		case <-resync:
			return true
		case <-s.trigger:
			if s.idle && len(s.Networks()) == 0 {
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
	networks := s.Networks()
	s.persist()
	bindings := s.rebind(networks)
	s.reconcileServers(networks)
	s.reconcileAdvertisers(WantedAdvertisements(bindings, networks))
	s.reconcileRoutes(bindings)
	s.idle = len(networks) == 0 && len(s.servers) == 0 && len(s.advertisers) == 0 && s.routesLeft == 0
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
