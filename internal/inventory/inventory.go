// Package inventory knows which spaces exist in a cluster, with which
// allocation scope: the spaces of the declared IPPools and of the tenure IPAM
// configurations in NetworkAttachmentDefinitions, each a config.ScopedSpace
// with where it is configured. The operator commands (internal/ops) and the
// controller's pool usage (internal/controller) both read it.
package inventory

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/addrspace"
	"github.com/tenure-ipam/tenure/internal/config"
	"github.com/tenure-ipam/tenure/internal/reservation"
)

// NetworkConfig is one NetworkAttachmentDefinition's spec.config.
type NetworkConfig struct {
	Namespace, Name string
	Config          string
}

// NADListGVK is the NetworkAttachmentDefinition list, read as unstructured
// so that a cluster without Multus's CRD is only a cluster without network
// configurations to read.
var NADListGVK = schema.GroupVersionKind{Group: "k8s.cni.cncf.io", Version: "v1", Kind: "NetworkAttachmentDefinitionList"}

// NetworkConfigOf is the spec.config of a NetworkAttachmentDefinition read
// as unstructured.
func NetworkConfigOf(u *unstructured.Unstructured) NetworkConfig {
	cfg, _, _ := unstructured.NestedString(u.Object, "spec", "config")
	return NetworkConfig{Namespace: u.GetNamespace(), Name: u.GetName(), Config: cfg}
}

// Entry is one known space: a scoped space, as the agent allocates from it,
// and where it is configured.
type Entry struct {
	config.ScopedSpace
	// Sources name where the space is configured: "IPPool NAME",
	// "NetworkAttachmentDefinition NS/NAME".
	Sources []string
	// CNINetworks are the CNI network names (the configurations' "name",
	// what an IPAMClaim's spec.network says) that allocate from it.
	CNINetworks []string
}

// Inventory is every space known from the cluster's objects:
// declared IPPools and the tenure IPAM configurations in
// NetworkAttachmentDefinitions. Configurations that live only in files on
// the nodes (a flat config's ranges) are not known.
type Inventory struct {
	spaces []*Entry
	index  map[spaceKey]*Entry
	// Notes are configurations that could not be read, in words.
	Notes []string
	// Pools and NetworkConfigs count what it was built from.
	Pools, NetworkConfigs int
	// Selectors are each declared IPPool's selectors, by pool name.
	Selectors map[string]PoolSelectors
	// Listed are the declared IPPools a pools list names, by pool name:
	// the NetworkAttachmentDefinitions whose configs list them.
	Listed map[string][]string
}

// PoolSelectors are an IPPool's namespaceSelector and nodeSelector as
// kubectl prints a selector, "" for one that selects everything (unset or
// empty); a selector that does not parse is printed as its error.
type PoolSelectors struct {
	Namespace string `json:"namespaceSelector,omitempty"`
	Node      string `json:"nodeSelector,omitempty"`
}

// selectorsOf renders a pool's selectors.
func selectorsOf(p *tenurev1alpha1.IPPool) PoolSelectors {
	show := func(s *metav1.LabelSelector) string {
		if s == nil {
			return ""
		}
		sel, err := metav1.LabelSelectorAsSelector(s)
		if err != nil {
			return "invalid: " + err.Error()
		}
		if sel.Empty() {
			return ""
		}
		return sel.String()
	}
	return PoolSelectors{Namespace: show(p.Spec.NamespaceSelector), Node: show(p.Spec.NodeSelector)}
}

// Describe says what the selectors select: "any namespace, nodes rack=a".
func (s PoolSelectors) Describe() string {
	ns, node := "any namespace", "any node"
	if s.Namespace != "" {
		ns = "namespaces " + s.Namespace
	}
	if s.Node != "" {
		node = "nodes " + s.Node
	}
	return ns + ", " + node
}

type spaceKey struct {
	scope string
	kind  tenurev1alpha1.ReservationKind
	rng   string
}

// BuildInventory derives the spaces of pools and network configurations.
// A pool named by a configuration takes that configuration's
// enable_overlapping_ranges; a pool no configuration names is taken with
// the default (true).
func BuildInventory(pools []tenurev1alpha1.IPPool, nads []NetworkConfig) *Inventory {
	inv := &Inventory{index: map[spaceKey]*Entry{}, Pools: len(pools), NetworkConfigs: len(nads), Selectors: map[string]PoolSelectors{}, Listed: map[string][]string{}}
	byName := map[string]*tenurev1alpha1.IPPool{}
	for i := range pools {
		byName[pools[i].Name] = &pools[i]
		inv.Selectors[pools[i].Name] = selectorsOf(&pools[i])
	}
	named := map[string]bool{}
	for _, nad := range nads {
		source := "NetworkAttachmentDefinition " + nad.Namespace + "/" + nad.Name
		confs, err := TenureConfigs(nad.Config)
		if err != nil {
			inv.Notes = append(inv.Notes, fmt.Sprintf("%s: %v", source, err))
			continue
		}
		for _, conf := range confs {
			c, err := config.Parse(conf, nil)
			if err == nil && c.Pool != "" {
				named[c.Pool] = true
				if p := byName[c.Pool]; p == nil {
					err = fmt.Errorf("names IPPool %s, which does not exist", c.Pool)
				} else {
					err = c.ApplyPool(p.Name, p.Spec)
				}
			}
			if err != nil {
				inv.Notes = append(inv.Notes, fmt.Sprintf("%s: %v", source, err))
				continue
			}
			if c.Pools == nil {
				inv.addConfig(c, source)
				continue
			}
			// A pools list allocates from every listed pool's ranges,
			// whichever of them an ADD chooses.
			for _, name := range c.Pools {
				named[name] = true
				p := byName[name]
				if p == nil {
					inv.Notes = append(inv.Notes, fmt.Sprintf("%s: lists IPPool %s, which does not exist", source, name))
					continue
				}
				if !slices.Contains(inv.Listed[name], source) {
					inv.Listed[name] = append(inv.Listed[name], source)
				}
				pc := c.Clone()
				if err := pc.ApplyPool(p.Name, p.Spec); err != nil {
					inv.Notes = append(inv.Notes, fmt.Sprintf("%s: %v", source, err))
					continue
				}
				inv.addConfig(pc, source)
			}
		}
	}
	for i := range pools {
		p := &pools[i]
		if named[p.Name] {
			inv.addPoolSource(p.Name)
			continue
		}
		// The checks that depend on the configuration that names a pool
		// (the cniVersion's one address per family) are left out.
		c := &config.Config{CNIVersion: "1.0.0", OverlappingRanges: true}
		if err := c.ApplyPool(p.Name, p.Spec); err != nil {
			inv.Notes = append(inv.Notes, fmt.Sprintf("IPPool %s: %v", p.Name, err))
			continue
		}
		inv.addConfig(c, "IPPool "+p.Name)
	}
	return inv
}

func (inv *Inventory) addConfig(c *config.Config, source string) {
	for _, sp := range c.Spaces() {
		inv.add(sp, source, c.Name)
	}
}

// add records a space; the first configuration of a (scope, range) wins,
// later ones only add their name as a source and their CNI network name.
func (inv *Inventory) add(sp config.ScopedSpace, source, cniNetwork string) {
	k := spaceKey{sp.Scope, sp.Space.Kind(), sp.Space.String()}
	s := inv.index[k]
	if s == nil {
		s = &Entry{ScopedSpace: sp}
		inv.index[k] = s
		inv.spaces = append(inv.spaces, s)
	}
	if !slices.Contains(s.Sources, source) {
		s.Sources = append(s.Sources, source)
	}
	if cniNetwork != "" && !slices.Contains(s.CNINetworks, cniNetwork) {
		s.CNINetworks = append(s.CNINetworks, cniNetwork)
	}
}

// Resolve names the allocation scopes a network name given to get stands
// for, and how it matched each: the scope named exactly ("allocation
// scope"), a network_name's per-range scopes ("network_name"), the scopes a
// CNI network name allocates from ("CNI network name"), and those of a
// NetworkAttachmentDefinition NS/NAME ("NetworkAttachmentDefinition").
// A name nothing configured matches is taken as a scope named exactly.
func (inv *Inventory) Resolve(name string) []ScopeMatch {
	var out []ScopeMatch
	match := func(scope, how string) {
		for i := range out {
			if out[i].Scope == scope {
				if !slices.Contains(out[i].Via, how) {
					out[i].Via = append(out[i].Via, how)
				}
				return
			}
		}
		out = append(out, ScopeMatch{Scope: scope, Via: []string{how}})
	}
	for _, s := range inv.spaces {
		switch {
		case s.Scope == name:
			match(s.Scope, "allocation scope")
		case reservation.NetworkNameOf(name) == name && reservation.NetworkNameOf(s.Scope) == name:
			match(s.Scope, "network_name")
		}
		if slices.Contains(s.CNINetworks, name) {
			match(s.Scope, "CNI network name")
		}
		if slices.Contains(s.Sources, "NetworkAttachmentDefinition "+name) {
			match(s.Scope, "NetworkAttachmentDefinition")
		}
	}
	if len(out) == 0 {
		out = append(out, ScopeMatch{Scope: name, Via: []string{"allocation scope"}})
	}
	return out
}

// ScopeMatch is an allocation scope Resolve found, and how.
type ScopeMatch struct {
	Scope string   `json:"scope"`
	Via   []string `json:"via"`
}

// addPoolSource names the IPPool among the sources of the spaces taken
// from it through configurations.
func (inv *Inventory) addPoolSource(pool string) {
	for _, s := range inv.spaces {
		if s.Pool == pool && !slices.Contains(s.Sources, "IPPool "+pool) {
			s.Sources = append(s.Sources, "IPPool "+pool)
		}
	}
}

// Spaces returns every known space in the order they were found.
func (inv *Inventory) Spaces() []*Entry { return inv.spaces }

// Lookup returns the known space of a scope, kind and range string, or nil.
func (inv *Inventory) Lookup(scope string, kind tenurev1alpha1.ReservationKind, rng string) *Entry {
	return inv.index[spaceKey{scope, kind, rng}]
}

// InScope returns the known spaces of one allocation scope and kind.
func (inv *Inventory) InScope(scope string, kind tenurev1alpha1.ReservationKind) []*Entry {
	var out []*Entry
	for _, s := range inv.spaces {
		if s.Scope == scope && s.Space.Kind() == kind {
			out = append(out, s)
		}
	}
	return out
}

// TenureConfigs returns the network configurations with a tenure ipam
// section in a NetworkAttachmentDefinition's spec.config (IPAMConfigs).
func TenureConfigs(specConfig string) ([][]byte, error) {
	return IPAMConfigs(specConfig, config.PluginType)
}

// IPAMConfigs returns the network configurations in a
// NetworkAttachmentDefinition's spec.config whose ipam type is one of
// ipamTypes: the config itself, or each plugin of a configuration list with
// the list's name and cniVersion, as the runtime hands them to the plugin.
// A config of another IPAM type, or none (the config lives on the nodes),
// gives nothing.
func IPAMConfigs(specConfig string, ipamTypes ...string) ([][]byte, error) {
	if strings.TrimSpace(specConfig) == "" {
		return nil, nil
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal([]byte(specConfig), &top); err != nil {
		return nil, fmt.Errorf("spec.config is not a JSON object: %v", err)
	}
	plugins := []map[string]json.RawMessage{top}
	if raw, ok := top["plugins"]; ok {
		plugins = nil
		if err := json.Unmarshal(raw, &plugins); err != nil {
			return nil, fmt.Errorf("spec.config plugins: %v", err)
		}
	}
	var out [][]byte
	for _, p := range plugins {
		var ipam struct {
			Type string `json:"type"`
		}
		if raw, ok := p["ipam"]; !ok || json.Unmarshal(raw, &ipam) != nil || !slices.Contains(ipamTypes, ipam.Type) {
			continue
		}
		for _, k := range []string{"name", "cniVersion"} {
			if v, ok := top[k]; ok {
				p[k] = v
			}
		}
		b, err := json.Marshal(p)
		if err != nil {
			return nil, err
		}
		out = append(out, b)
	}
	return out, nil
}

// SpaceOfRange rebuilds a space from a reservation's spec.range alone, for
// scopes no known configuration describes: the range's bounds without its
// excludes (a reservation does not record them), or a delegation pool
// ("2001:db8::/40 as /56"). nil when rng is neither.
func SpaceOfRange(kind tenurev1alpha1.ReservationKind, rng string) addrspace.Space {
	if kind == tenurev1alpha1.KindDelegatedPrefix {
		p, l, ok := strings.Cut(rng, " as /")
		if !ok {
			return nil
		}
		pfx, err1 := netip.ParsePrefix(p)
		n, err2 := strconv.Atoi(l)
		pd := addrspace.PrefixDelegation{Range: pfx.Masked(), PrefixLength: n}
		if err1 != nil || err2 != nil || pd.Count() == 0 {
			return nil
		}
		return addrspace.PrefixSpace{PD: pd}
	}
	conf, err := json.Marshal(map[string]any{"cniVersion": "1.0.0", "name": "range", "ipam": map[string]string{"type": config.PluginType, "range": rng}})
	if err != nil {
		return nil
	}
	c, err := config.Parse(conf, nil)
	if err != nil || len(c.Ranges) != 1 {
		return nil
	}
	return addrspace.AddressSpace{Range: c.Ranges[0]}
}

// RangeCapacity is the capacity of a range as a reservation records it in
// spec.range (its bounds without excludes, or a delegation pool), 0 when
// rng is neither.
func RangeCapacity(kind tenurev1alpha1.ReservationKind, rng string) uint64 {
	if sp := SpaceOfRange(kind, rng); sp != nil {
		return sp.Capacity()
	}
	return 0
}
