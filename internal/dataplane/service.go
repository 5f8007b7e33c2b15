package dataplane

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv6"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"

	ipamclaimsv1 "github.com/tenure-ipam/tenure/api/ipamclaims/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/config"
	"github.com/tenure-ipam/tenure/internal/dhcp6"
)

// RouteProtocol marks the routes tenure installs (rtm_protocol); routes with
// another protocol are never changed.
const RouteProtocol = 116

// DefaultResync is the period of the full reconcile when Options.Resync is 0.
const DefaultResync = 30 * time.Second

// ServerDUID is the server identifier of every tenure DHCPv6 server: a
// DUID-UUID whose UUID is derived (SHA-256, RFC 9562 version 8 layout) from
// a fixed name, so it is the same on every node (see the package doc).
func ServerDUID() dhcpv6.DUID {
	sum := sha256.Sum256([]byte("tenure-ipam.dev/dhcpv6-server-id/v1"))
	d := &dhcpv6.DUIDUUID{}
	copy(d.UUID[:], sum[:16])
	d.UUID[6] = d.UUID[6]&0x0f | 0x80 // version 8
	d.UUID[8] = d.UUID[8]&0x3f | 0x80 // RFC 9562 variant
	return d
}

// Source gives the informer caches' current content.
type Source interface {
	// Pods returns the pods of this node.
	Pods() []*corev1.Pod
	// Claim returns the IPAMClaim namespace/name, if cached.
	Claim(namespace, name string) (*ipamclaimsv1.IPAMClaim, bool)
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

// Service serves DHCPv6 and keeps the routes of this node's bindings.
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
	servers   map[string]*server
	lastState map[string]string // pod|interface -> binding or skip, as last logged
	lastErrs  map[string]string
}

type index struct {
	byMACIf  map[string]Binding // mac|ifname
	bindings []Binding
}

func macIfKey(mac net.HardwareAddr, ifname string) string { return mac.String() + "|" + ifname }

type server struct {
	srv     *dhcp6.Server
	ifindex int
	cfg     dhcp6.Config
	done    chan struct{}
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
		heard: map[string]string{}, servers: map[string]*server{}, lastErrs: map[string]string{},
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
		if !had || !sameSettings(old, nd) {
			s.networks[network] = nd
			changed = true
		}
	}
	s.dirty = s.dirty || changed
	s.mu.Unlock()
	if changed && d != nil && d.Enabled {
		s.log.Info("dhcpv6 settings learnt", "network", network, "interfaces", d.Interfaces, "installRoutes", d.InstallRoutes,
			"preferredLifetime", d.PreferredLifetime, "validLifetime", d.ValidLifetime)
	} else if changed {
		s.log.Info("dhcpv6 settings forgotten: the network's config has no enabled dhcpv6", "network", network)
	}
	if changed {
		s.Trigger()
	}
}

func sameSettings(a, b config.DHCPv6) bool {
	return a.Enabled == b.Enabled && a.InstallRoutes == b.InstallRoutes && a.PreferredLifetime == b.PreferredLifetime &&
		a.ValidLifetime == b.ValidLifetime && slices.Equal(a.Interfaces, b.Interfaces)
}

// Networks returns a copy of the learnt settings.
func (s *Service) Networks() map[string]config.DHCPv6 {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]config.DHCPv6, len(s.networks))
	for k, v := range s.networks {
		v.Interfaces = slices.Clone(v.Interfaces)
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

// Bindings returns the bindings of the last reconcile.
func (s *Service) Bindings() []Binding { return slices.Clone(s.index.Load().bindings) }

// Lookup implements dhcp6.Lookup from the last reconcile's bindings.
func (s *Service) Lookup(mac net.HardwareAddr, ifname string) (dhcp6.Binding, bool) {
	b, ok := s.index.Load().byMACIf[macIfKey(mac, ifname)]
	if !ok {
		return dhcp6.Binding{}, false
	}
	s.heardMu.Lock()
	moved := s.heard[b.Key] != ifname
	s.heard[b.Key] = ifname
	s.heardMu.Unlock()
	if moved && len(b.Interfaces) > 1 {
		s.Trigger() // the route may follow the client to another interface
	}
	out := b.Binding
	out.MAC = slices.Clone(b.MAC)
	return out, true
}

// Run reconciles on every Trigger and every Resync until ctx ends, then
// stops the DHCPv6 servers (routes are left in place).
func (s *Service) Run(ctx context.Context) {
	s.log.Info("dataplane running", "netns", s.ns.String(), "resync", s.opts.Resync)
	t := time.NewTicker(s.opts.Resync)
	defer t.Stop()
	defer s.shutdown()
	for {
		s.reconcile()
		select {
		case <-ctx.Done():
			return
		case <-s.trigger:
		case <-t.C:
		}
	}
}

func (s *Service) shutdown() {
	for name, sv := range s.servers {
		s.stopServer(name, sv)
	}
	s.nl.Close()
	s.ns.close()
}

func (s *Service) reconcile() {
	networks := s.Networks()
	s.persist()
	bindings := s.rebind(networks)
	s.reconcileServers(networks)
	s.reconcileRoutes(bindings)
}

// rebind recomputes the bindings and publishes them to Lookup.
func (s *Service) rebind(networks map[string]config.DHCPv6) []Binding {
	bindings, skips := Compute(Inputs{Pods: s.opts.Source.Pods(), Claim: s.opts.Source.Claim, Networks: networks})
	idx := &index{byMACIf: map[string]Binding{}, bindings: bindings}
	for _, b := range bindings {
		for _, ifn := range b.Interfaces {
			idx.byMACIf[macIfKey(b.MAC, ifn)] = b
		}
	}
	s.index.Store(idx)
	s.heardMu.Lock()
	for k := range s.heard {
		if !slices.ContainsFunc(bindings, func(b Binding) bool { return b.Key == k }) {
			delete(s.heard, k)
		}
	}
	s.heardMu.Unlock()
	s.logState(bindings, skips)
	return bindings
}

// logState logs what changed since the last reconcile: bindings that
// appeared, changed or went, and attachments whose reason for having no
// binding changed. "No dhcpv6 on this network" is the normal state of most
// claim-bound attachments and is logged at debug level only.
func (s *Service) logState(bindings []Binding, skips []Skip) {
	now := map[string]string{}
	for _, b := range bindings {
		now[b.Pod+"|"+b.PodInterface] = fmt.Sprintf("B %s %s %s %s %s %v", b.Key, b.MAC, b.MACSource, b.Address, b.Prefix, b.Interfaces)
	}
	for _, k := range skips {
		now[k.Pod+"|"+k.PodInterface] = "S " + k.Claim + " " + k.Reason
	}
	for _, b := range bindings {
		if id := b.Pod + "|" + b.PodInterface; s.lastState[id] != now[id] {
			s.log.Info("dhcpv6 binding", "claim", b.Key, "pod", b.Pod, "interface", b.PodInterface, "mac", b.MAC.String(),
				"macSource", b.MACSource, "address", b.Address, "prefix", b.Prefix, "serveOn", b.Interfaces)
		}
	}
	for _, k := range skips {
		if id := k.Pod + "|" + k.PodInterface; s.lastState[id] != now[id] {
			level := slog.LevelInfo
			if strings.Contains(k.Reason, noSettings) {
				level = slog.LevelDebug
			}
			s.log.Log(context.Background(), level, "no dhcpv6 binding", "claim", k.Claim, "pod", k.Pod, "interface", k.PodInterface, "reason", k.Reason)
		}
	}
	for id, was := range s.lastState {
		if _, ok := now[id]; !ok && strings.HasPrefix(was, "B ") {
			pod, ifn, _ := strings.Cut(id, "|")
			s.log.Info("dhcpv6 binding gone: pod left the node or dropped the claim", "pod", pod, "interface", ifn)
		}
	}
	s.lastState = now
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

// handlerConfig is the Handler config of one interface: the smallest
// lifetimes of the networks listing it.
func handlerConfig(networks map[string]config.DHCPv6) map[string]dhcp6.Config {
	out := map[string]dhcp6.Config{}
	for _, name := range slices.Sorted(maps.Keys(networks)) {
		n := networks[name]
		if !n.Enabled {
			continue
		}
		for _, ifn := range n.Interfaces {
			c, ok := out[ifn]
			if !ok {
				c = dhcp6.Config{ServerDUID: ServerDUID(), Preference: 255, PreferredLifetime: n.PreferredLifetime, ValidLifetime: n.ValidLifetime}
			}
			c.PreferredLifetime = min(c.PreferredLifetime, n.PreferredLifetime)
			c.ValidLifetime = min(c.ValidLifetime, n.ValidLifetime)
			out[ifn] = c
		}
	}
	return out
}

func sameConfig(a, b dhcp6.Config) bool {
	return a.PreferredLifetime == b.PreferredLifetime && a.ValidLifetime == b.ValidLifetime &&
		a.T1 == b.T1 && a.T2 == b.T2 && a.Preference == b.Preference
}

func (s *Service) reconcileServers(networks map[string]config.DHCPv6) {
	want := handlerConfig(networks)
	for name, sv := range s.servers {
		c, wanted := want[name]
		select {
		case <-sv.done:
			s.log.Warn("dhcpv6 server stopped; restarting", "interface", name)
			s.stopServer(name, sv)
			continue
		default:
		}
		if !wanted {
			s.log.Info("dhcpv6 server no longer wanted", "interface", name)
			s.stopServer(name, sv)
			continue
		}
		if !sameConfig(c, sv.cfg) {
			s.log.Info("dhcpv6 server settings changed; restarting", "interface", name)
			s.stopServer(name, sv)
			continue
		}
		link, err := s.nl.LinkByName(name)
		if err != nil || link.Attrs().Index != sv.ifindex {
			s.log.Info("dhcpv6 interface gone or re-created; restarting its server", "interface", name)
			s.stopServer(name, sv)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(want)) {
		if _, ok := s.servers[name]; ok {
			continue
		}
		sv, err := s.startServer(name, want[name])
		s.logErr("server "+name, err, "cannot serve dhcpv6 yet; retrying at the next resync", "interface", name, "netns", s.ns.String())
		if err == nil {
			s.servers[name] = sv
			s.log.Info("serving dhcpv6", "interface", name, "netns", s.ns.String(), "ifindex", sv.ifindex,
				"preferredLifetime", sv.cfg.PreferredLifetime, "validLifetime", sv.cfg.ValidLifetime)
		}
	}
}

func (s *Service) startServer(name string, cfg dhcp6.Config) (*server, error) {
	h := dhcp6.NewHandler(cfg, s, s.opts.Observer)
	if err := h.Err(); err != nil {
		return nil, err
	}
	sv := &server{cfg: cfg, done: make(chan struct{})}
	err := s.ns.do(func() error {
		iface, err := net.InterfaceByName(name)
		if err != nil {
			return err
		}
		sv.ifindex = iface.Index
		sv.srv, err = dhcp6.NewServer(name, h, dhcp6.WithLogger(s.log.With("interface", name)))
		return err
	})
	if err != nil {
		return nil, err
	}
	go func() {
		defer close(sv.done)
		if err := sv.srv.Serve(); err != nil {
			s.log.Warn("dhcpv6 server failed", "interface", name, "err", err)
			s.Trigger()
		}
	}()
	return sv, nil
}

func (s *Service) stopServer(name string, sv *server) {
	_ = sv.srv.Close()
	<-sv.done
	delete(s.servers, name)
}

func (s *Service) heardSnapshot() map[string]string {
	s.heardMu.Lock()
	defer s.heardMu.Unlock()
	return maps.Clone(s.heard)
}

func (s *Service) reconcileRoutes(bindings []Binding) {
	want := DesiredRoutes(bindings, s.heardSnapshot())
	have, err := s.tenureRoutes()
	s.logErr("routes list", err, "cannot list routes", "netns", s.ns.String())
	if err != nil {
		return
	}
	replace, remove := PlanRoutes(want, have)
	for _, r := range remove {
		err := s.deleteRoute(r)
		s.logErr("route del "+r.Prefix.String(), err, "cannot delete route", "route", r.String())
		if err == nil {
			s.log.Info("route removed", "route", r.String(), "netns", s.ns.String())
		}
	}
	for _, r := range replace {
		err := s.replaceRoute(r)
		s.logErr("route "+r.Prefix.String(), err, "cannot install route", "route", r.String())
		if err == nil {
			s.log.Info("route installed", "route", r.String(), "netns", s.ns.String())
		}
	}
}

// tenureRoutes lists the IPv6 main-table routes with RouteProtocol.
func (s *Service) tenureRoutes() ([]Route, error) {
	rs, err := s.nl.RouteListFiltered(netlink.FAMILY_V6, &netlink.Route{Protocol: RouteProtocol, Table: unix.RT_TABLE_MAIN},
		netlink.RT_FILTER_PROTOCOL|netlink.RT_FILTER_TABLE)
	if err != nil {
		// Also ErrDumpInterrupted: never delete from a torn dump; the next
		// reconcile retries.
		return nil, err
	}
	names := map[int]string{}
	var out []Route
	for _, r := range rs {
		if r.Dst == nil {
			continue
		}
		p, ok := prefixOf(r.Dst)
		if !ok {
			continue
		}
		via, _ := netip.AddrFromSlice(r.Gw)
		dev, ok := names[r.LinkIndex]
		if !ok {
			if l, err := s.nl.LinkByIndex(r.LinkIndex); err == nil {
				dev = l.Attrs().Name
			}
			names[r.LinkIndex] = dev
		}
		if r.Flags&int(netlink.FLAG_ONLINK) == 0 {
			dev = "" // not the route we install: replace it
		}
		out = append(out, Route{Prefix: p, Via: via.Unmap(), Dev: dev})
	}
	return out, nil
}

func prefixOf(n *net.IPNet) (netip.Prefix, bool) {
	a, ok := netip.AddrFromSlice(n.IP)
	if !ok {
		return netip.Prefix{}, false
	}
	ones, _ := n.Mask.Size()
	return netip.PrefixFrom(a.Unmap(), ones), true
}

func (s *Service) replaceRoute(r Route) error {
	link, err := s.nl.LinkByName(r.Dev)
	if err != nil {
		return fmt.Errorf("interface %s: %w", r.Dev, err)
	}
	return s.nl.RouteReplace(&netlink.Route{
		LinkIndex: link.Attrs().Index,
		Dst:       &net.IPNet{IP: r.Prefix.Addr().AsSlice(), Mask: net.CIDRMask(r.Prefix.Bits(), 128)},
		Gw:        r.Via.AsSlice(),
		Flags:     int(netlink.FLAG_ONLINK),
		Protocol:  RouteProtocol,
		Table:     unix.RT_TABLE_MAIN,
		Family:    netlink.FAMILY_V6,
	})
}

func (s *Service) deleteRoute(r Route) error {
	err := s.nl.RouteDel(&netlink.Route{
		Dst:      &net.IPNet{IP: r.Prefix.Addr().AsSlice(), Mask: net.CIDRMask(r.Prefix.Bits(), 128)},
		Protocol: RouteProtocol,
		Table:    unix.RT_TABLE_MAIN,
		Family:   netlink.FAMILY_V6,
	})
	if errors.Is(err, unix.ESRCH) {
		return nil // already gone
	}
	return err
}

// stateFile is the persisted form of the learnt settings.
type stateFile struct {
	Networks map[string]stateNetwork `json:"networks"`
}

type stateNetwork struct {
	Interfaces        []string `json:"interfaces"`
	PreferredLifetime int64    `json:"preferred_lifetime"`
	ValidLifetime     int64    `json:"valid_lifetime"`
	InstallRoutes     bool     `json:"install_routes"`
}

func (s *Service) load() error {
	b, err := os.ReadFile(s.opts.StateFile)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var st stateFile
	if err := json.Unmarshal(b, &st); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for name, n := range st.Networks {
		d := config.DHCPv6{Enabled: true, Interfaces: n.Interfaces, InstallRoutes: n.InstallRoutes,
			PreferredLifetime: time.Duration(n.PreferredLifetime) * time.Second, ValidLifetime: time.Duration(n.ValidLifetime) * time.Second}
		if d.PreferredLifetime <= 0 || d.ValidLifetime < d.PreferredLifetime {
			s.log.Warn("ignoring invalid network in the dataplane state file", "network", name)
			continue
		}
		s.networks[name] = d
	}
	s.log.Info("dhcpv6 settings restored", "path", s.opts.StateFile, "networks", slices.Sorted(maps.Keys(s.networks)))
	return nil
}

// persist writes the state file when the settings changed (atomically:
// a temporary file renamed over it).
func (s *Service) persist() {
	if s.opts.StateFile == "" {
		return
	}
	s.mu.Lock()
	if !s.dirty {
		s.mu.Unlock()
		return
	}
	st := stateFile{Networks: map[string]stateNetwork{}}
	for name, n := range s.networks {
		st.Networks[name] = stateNetwork{Interfaces: n.Interfaces, InstallRoutes: n.InstallRoutes,
			PreferredLifetime: int64(n.PreferredLifetime / time.Second), ValidLifetime: int64(n.ValidLifetime / time.Second)}
	}
	s.dirty = false
	s.mu.Unlock()
	err := writeAtomic(s.opts.StateFile, st)
	s.logErr("state file", err, "cannot write the dataplane state file", "path", s.opts.StateFile)
	if err != nil {
		s.mu.Lock()
		s.dirty = true
		s.mu.Unlock()
	}
}

func writeAtomic(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(append(b, '\n')); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}
