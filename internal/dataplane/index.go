package dataplane

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/tenure-ipam/tenure/internal/config"
	"github.com/tenure-ipam/tenure/internal/dhcp6"
)

type index struct {
	byMACIf map[string]Binding // mac|ifname
}

func macIfKey(mac net.HardwareAddr, ifname string) string { return mac.String() + "|" + ifname }

// Lookup implements dhcp6.Lookup from the last reconcile's bindings. It
// records nothing: only Heard says where a client is.
func (s *Service) Lookup(mac net.HardwareAddr, ifname string) (dhcp6.Binding, bool) {
	b, ok := s.index.Load().byMACIf[macIfKey(mac, ifname)]
	if !ok {
		return dhcp6.Binding{}, false
	}
	out := b.Binding
	out.MAC = slices.Clone(b.MAC)
	out.TrustedRelays = slices.Clone(b.TrustedRelays)
	return out, true
}

// Heard implements dhcp6.Heard: the handler answered a Request, Renew or
// Rebind of b's client, from b's MAC as the link gives it, on ifname. A
// binding without an own interface is routed through the interface it was last heard
// on this way; one with an own interface is served there alone, and never
// moves. The binding must still be the one this MAC maps to there.
func (s *Service) Heard(b dhcp6.Binding, ifname string) {
	cur, ok := s.index.Load().byMACIf[macIfKey(b.MAC, ifname)]
	if !ok || cur.Key != b.Key || cur.OwnInterface != "" {
		return
	}
	s.heardMu.Lock()
	moved := s.heard[b.Key] != ifname
	s.heard[b.Key] = ifname
	s.heardMu.Unlock()
	if moved && len(cur.Interfaces) > 1 {
		s.Trigger() // the route follows the client to another interface
	}
}

// rebind recomputes the bindings of pods and publishes them to Lookup.
func (s *Service) rebind(pods []*corev1.Pod, networks map[string]config.DHCPv6) ([]Binding, []Skip) {
	in := Inputs{Pods: pods, Claim: s.opts.Source.Claim, Networks: networks}
	if vs, ok := s.opts.Source.(VMISource); ok && vs.VMIsServed() {
		in.VMI = vs.VMI
	}
	if rs, ok := s.opts.Source.(ReservationSource); ok {
		in.PodReservations = rs.PodReservations
	}
	if cs, ok := s.opts.Source.(ClaimReservationSource); ok {
		in.ClaimReservations = cs.ClaimReservations
	}
	bindings, skips := Compute(in)
	idx := &index{byMACIf: map[string]Binding{}}
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
	s.reportConflicts(skips)
	return bindings, skips
}

// ConflictObserver is implemented by an Options.Observer that keeps the
// number of MAC conflicts (MACConflict) this node has.
type ConflictObserver interface {
	MACConflicts(n int)
}

// reportConflicts hands each MAC conflict that appeared since the last
// reconcile to Options.OnConflict, logs it, and tells the Observer how many
// there are.
func (s *Service) reportConflicts(skips []Skip) {
	now := map[string]MACConflict{}
	for _, k := range skips {
		if k.Conflict != nil {
			now[k.Conflict.String()] = *k.Conflict
		}
	}
	for _, id := range slices.Sorted(maps.Keys(now)) {
		if _, seen := s.lastConflicts[id]; seen {
			continue
		}
		c := now[id]
		s.log.Warn("dhcpv6 MAC held by several bindings: none of them is served", "mac", c.MAC, "interface", c.Interface, "holders", c.String())
		if s.opts.OnConflict != nil {
			s.opts.OnConflict(c)
		}
	}
	s.lastConflicts = now
	if o, ok := s.opts.Observer.(ConflictObserver); ok {
		o.MACConflicts(len(now))
	}
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

func (s *Service) heardSnapshot() map[string]string {
	s.heardMu.Lock()
	defer s.heardMu.Unlock()
	return maps.Clone(s.heard)
}
