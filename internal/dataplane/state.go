package dataplane

import (
	"encoding/json"
	"errors"
	"maps"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/tenure-ipam/tenure/internal/atomicfile"
	"github.com/tenure-ipam/tenure/internal/config"
)

// stateFile is the persisted form of the learnt settings.
type stateFile struct {
	// NADs are the settings by NAD (namespace/name).
	NADs map[string]stateNetwork `json:"nads"`
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
		if !n.Enabled {
			s.networks[name] = config.DHCPv6{Network: n.Network}
			s.learnt[name] = now
			continue
		}
		d := config.DHCPv6{Enabled: true, Network: n.Network, Link: n.Link, Interfaces: n.Interfaces, InstallRoutes: n.InstallRoutes,
			PreferredLifetime: time.Duration(n.PreferredLifetime) * time.Second, ValidLifetime: time.Duration(n.ValidLifetime) * time.Second,
			RouterAdvertisements: n.RouterAdvertisements, OnLink: n.OnLink, Gateway: n.Gateway}
		if d.PreferredLifetime <= 0 || d.ValidLifetime < d.PreferredLifetime {
			s.log.Warn("ignoring invalid settings in the dataplane state file", "nad", name)
			continue
		}
		bad := false
		for _, r := range n.TrustedRelays {
			mac, err := net.ParseMAC(r.MAC)
			if err != nil || !slices.Contains(n.Interfaces, r.Interface) {
				bad = true
				break
			}
			d.TrustedRelays = append(d.TrustedRelays, config.TrustedRelay{Interface: r.Interface, MAC: mac, Address: r.Address})
		}
		if bad {
			s.log.Warn("ignoring invalid trusted relay in the dataplane state file", "nad", name)
			continue
		}
		s.networks[name] = d
		s.learnt[name] = now
	}
	s.log.Info("dhcpv6 settings restored", "path", s.opts.StateFile, "networks", slices.Sorted(maps.Keys(s.networks)))
	return nil
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
