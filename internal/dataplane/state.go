package dataplane

import (
	"cmp"
	"encoding/json"
	"errors"
	"maps"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/tenure-ipam/tenure/internal/atomicfile"
	"github.com/tenure-ipam/tenure/internal/claims"
	"github.com/tenure-ipam/tenure/internal/config"
)

// stateFile is the persisted form of the learnt settings.
type stateFile struct {
	// NADs are the settings by NAD (namespace/name).
	NADs map[string]stateNetwork `json:"nads"`
	// Networks are settings by CNI network name alone, as a file without
	// NADs holds them: the first reconcile gives each to the NADs this
	// node's pods attach that network through (Service.adopt), so guests
	// running through an upgrade keep being served.
	Networks map[string]stateNetwork `json:"networks,omitempty"`
}

type stateNetwork struct {
	// Network is the CNI network name the NAD defines; Enabled whether it
	// has enabled dhcpv6 (the other fields are then unset); Link its
	// main plugin's node-side interface.
	Network           string   `json:"network"`
	Enabled           bool     `json:"enabled"`
	Link              string   `json:"link,omitempty"`
	Interfaces        []string `json:"interfaces"`
	PreferredLifetime int64    `json:"preferred_lifetime"`
	ValidLifetime     int64    `json:"valid_lifetime"`
	InstallRoutes     bool     `json:"install_routes"`
	// Router Advertisements (absent in files written before they existed:
	// off, as the default).
	RouterAdvertisements bool           `json:"router_advertisements,omitempty"`
	OnLink               []netip.Prefix `json:"on_link,omitempty"`
	Gateway              netip.Addr     `json:"gateway,omitzero"`
	// Trusted relays (absent: none, the default).
	TrustedRelays []stateRelay `json:"trusted_relays,omitempty"`
}

type stateRelay struct {
	Interface string     `json:"interface"`
	MAC       string     `json:"mac"`
	Address   netip.Addr `json:"address,omitzero"`
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
	now := time.Now()
	for name, n := range st.NADs {
		ns, nadName, _ := strings.Cut(name, "/")
		if ns == "" || nadName == "" || n.Network == "" {
			s.log.Warn("ignoring an entry of the dataplane state file that names no NAD and network", "nad", name, "network", n.Network)
			continue
		}
		d, ok := s.fromState(name, n)
		if !ok {
			continue
		}
		s.networks[name] = d
		s.learnt[name] = now
	}
	for network, n := range st.Networks {
		n.Network, n.Enabled = network, true
		if d, ok := s.fromState(network, n); ok {
			s.legacy[network] = d
		}
	}
	s.log.Info("dhcpv6 settings restored", "path", s.opts.StateFile, "nads", slices.Sorted(maps.Keys(s.networks)),
		"networksWithoutNAD", slices.Sorted(maps.Keys(s.legacy)))
	return nil
}

// fromState reads one entry of the state file; false (logged) when it does
// not hold together.
func (s *Service) fromState(name string, n stateNetwork) (config.DHCPv6, bool) {
	if !n.Enabled {
		return config.DHCPv6{Network: n.Network}, true
	}
	d := config.DHCPv6{Enabled: true, Network: n.Network, Link: n.Link, Interfaces: n.Interfaces, InstallRoutes: n.InstallRoutes,
		PreferredLifetime: time.Duration(n.PreferredLifetime) * time.Second, ValidLifetime: time.Duration(n.ValidLifetime) * time.Second,
		RouterAdvertisements: n.RouterAdvertisements, OnLink: n.OnLink, Gateway: n.Gateway}
	if d.PreferredLifetime <= 0 || d.ValidLifetime < d.PreferredLifetime {
		s.log.Warn("ignoring invalid settings in the dataplane state file", "entry", name)
		return d, false
	}
	for _, r := range n.TrustedRelays {
		mac, err := net.ParseMAC(r.MAC)
		if err != nil || !slices.Contains(n.Interfaces, r.Interface) {
			s.log.Warn("ignoring invalid trusted relay in the dataplane state file", "entry", name)
			return d, false
		}
		d.TrustedRelays = append(d.TrustedRelays, config.TrustedRelay{Interface: r.Interface, MAC: mac, Address: r.Address})
	}
	return d, true
}

// adopt gives the settings the state file held by CNI network name alone to
// each NAD without settings of its own through which a pod of pods attaches
// to that network (the claim's spec.network; for a pod without a claim,
// its reservations' CNI network), then forgets them: from then on, ADDs
// through each NAD keep its own. Called once the caches synced, with the
// node's pods.
func (s *Service) adopt(pods []*corev1.Pod) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.legacy) == 0 {
		return
	}
	rs, _ := s.opts.Source.(ReservationSource)
	for _, p := range pods {
		if p == nil || p.Annotations[nadv1.NetworkAttachmentAnnot] == "" {
			continue
		}
		elems, err := claims.Networks(p)
		if err != nil {
			continue
		}
		for i, e := range elems {
			nad := nadOf(e)
			if _, ok := s.networks[nad]; ok {
				continue
			}
			ifName := cmp.Or(e.InterfaceRequest, "net"+strconv.Itoa(i+1))
			network := ""
			for _, name := range []string{e.IPAMClaimReference, claims.StickyClaimName(p.Name, ifName)} {
				if c, ok := s.opts.Source.Claim(p.Namespace, name); name != "" && ok && c != nil {
					network = c.Spec.Network
					break
				}
			}
			if network == "" && rs != nil {
				for _, r := range rs.PodReservations(string(p.UID)) {
					if r.Spec.Owner.Interface == ifName {
						network = r.Spec.CNINetwork
						break
					}
				}
			}
			if d, ok := s.legacy[network]; ok {
				s.networks[nad] = d
				s.learnt[nad] = time.Now()
				s.log.Info("dhcpv6 settings of a network given to its NAD", "nad", nad, "network", network)
			}
		}
	}
	s.legacy = nil
	s.dirty = true
}

// persist writes the state file when the settings changed.
func (s *Service) persist() {
	if s.opts.StateFile == "" {
		return
	}
	s.mu.Lock()
	if !s.dirty {
		s.mu.Unlock()
		return
	}
	st := stateFile{NADs: map[string]stateNetwork{}}
	for name, n := range s.networks {
		if !n.Enabled {
			st.NADs[name] = stateNetwork{Network: n.Network}
			continue
		}
		sn := stateNetwork{Network: n.Network, Enabled: true, Link: n.Link, Interfaces: n.Interfaces, InstallRoutes: n.InstallRoutes,
			PreferredLifetime: int64(n.PreferredLifetime / time.Second), ValidLifetime: int64(n.ValidLifetime / time.Second),
			RouterAdvertisements: n.RouterAdvertisements, OnLink: n.OnLink, Gateway: n.Gateway}
		for _, r := range n.TrustedRelays {
			sn.TrustedRelays = append(sn.TrustedRelays, stateRelay{Interface: r.Interface, MAC: r.MAC.String(), Address: r.Address})
		}
		st.NADs[name] = sn
	}
	s.dirty = false
	s.mu.Unlock()
	err := writeState(s.opts.StateFile, st)
	s.logErr("state file", err, "cannot write the dataplane state file", "path", s.opts.StateFile)
	if err != nil {
		s.mu.Lock()
		s.dirty = true
		s.mu.Unlock()
	}
}

// writeState writes st as indented JSON, atomically and durably, readable
// by its owner only (0600).
func writeState(path string, st stateFile) error {
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(path, append(b, '\n'), 0o600)
}
