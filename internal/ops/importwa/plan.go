// Package importwa imports whereabouts' allocations into tenure, so that a
// running cluster switches a NetworkAttachmentDefinition from
// `"type": "whereabouts"` to `"type": "tenure"` without renumbering: every
// address whereabouts handed out becomes the IPReservation tenure's agent
// would have written for that pod's attachment, so no new pod gets it and
// the pod's next ADD (same container, same interface) returns it.
//
// Whereabouts' objects are read as unstructured (only the few fields used
// here); its Go packages are not linked. Its naming, from whereabouts
// v0.9.4 pkg/storage/kubernetes/ipam.go:
//   - an IPPool is named by its range's CIDR with ':' and '/' replaced by
//     '-' (a trailing ':' gets a '0' first), prefixed with "NETWORK_NAME-"
//     when network_name is set; spec.allocations maps the offset from the
//     CIDR's first address to {id: containerID, podref: ns/name, ifname};
//   - with node_slice_size, each node's slice of a range has its own
//     IPPool, named NODE-SLICE (after "NETWORK_NAME-"), whose spec.range is
//     the slice; its offsets count from the slice's first address;
//   - an OverlappingRangeIPReservation (enable_overlapping_ranges) is named
//     by the IP with ':' replaced by '-', prefixed the same way; spec
//     holds podref and ifname.
//
// Plan is pure: it maps listed objects to entries, given a pod lookup and
// the reservations tenure already holds. Run lists, plans and, with Apply,
// creates.
package importwa

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/addrspace"
	"github.com/tenure-ipam/tenure/internal/config"
	"github.com/tenure-ipam/tenure/internal/inventory"
	"github.com/tenure-ipam/tenure/internal/reservation"
)

// WhereaboutsType is whereabouts' ipam type.
const WhereaboutsType = "whereabouts"

// NetworkConfig is one NetworkAttachmentDefinition's spec.config.
type NetworkConfig = inventory.NetworkConfig

// Allocation is one address of a whereabouts IPPool.
type Allocation struct {
	// Offset is the key of spec.allocations: the offset from the first
	// address of spec.range.
	Offset      string
	ContainerID string
	PodRef      string
	IfName      string
}

// Pool is a whereabouts IPPool.
type Pool struct {
	Namespace, Name string
	Range           string
	Allocations     []Allocation
}

// Overlapping is a whereabouts OverlappingRangeIPReservation.
type Overlapping struct {
	Namespace, Name string
	ContainerID     string
	PodRef          string
	IfName          string
}

// Pod is what the import reads of a live pod.
type Pod struct {
	UID  string
	Node string
	// Addresses are the IPs of each interface in the pod's
	// k8s.v1.cni.cncf.io/network-status annotation (Multus writes it after
	// every ADD); nil when the pod has none.
	Addresses map[string][]string
}

// Action says what the import does with an allocation.
type Action string

// The actions, by what becomes of the allocation.
const (
	Create     Action = "Create"     // to be written (dry run)
	Created    Action = "Created"    // written (--apply)
	Exists     Action = "Exists"     // the pod holds the reservation already: nothing to write
	PodGone    Action = "PodGone"    // the allocation's pod no longer exists: skipped
	Conflict   Action = "Conflict"   // another tenure owner holds the address: refused
	OutOfRange Action = "OutOfRange" // in no range of the configurations that map its pool, so tenure never hands it out: skipped
	// Stale: the pod's interface has allocations of two sandboxes and its
	// network-status lists the other's address: whereabouts never got
	// this sandbox's DEL; skipped.
	Stale Action = "Stale"
)

// Entry is one whereabouts allocation and the tenure reservation it maps to.
type Entry struct {
	Action  Action `json:"action"`
	Address string `json:"address"`
	// Network is the tenure allocation scope (the reservation's
	// spec.network); Range its spec.range.
	Network     string `json:"network"`
	Range       string `json:"range,omitempty"`
	Reservation string `json:"reservation,omitempty"`
	PodRef      string `json:"podRef"`
	PodUID      string `json:"podUID,omitempty"`
	ContainerID string `json:"containerID,omitempty"`
	Interface   string `json:"interface,omitempty"`
	Node        string `json:"node,omitempty"`
	CNINetwork  string `json:"cniNetwork,omitempty"`
	// Sources are the whereabouts objects that record the allocation
	// ("IPPool NS/NAME", "OverlappingRangeIPReservation NS/NAME") and the
	// configuration mapping it ("NetworkAttachmentDefinition NS/NAME").
	Sources []string `json:"sources"`
	// Detail says why an entry is skipped or refused.
	Detail string `json:"detail,omitempty"`
	// Holder is the tenure owner of a Conflict.
	Holder *tenurev1alpha1.ReservationOwner `json:"holder,omitempty"`

	item netip.Addr
	// status is the pod's network-status entry of the interface, when
	// it has one.
	status    []string
	hasStatus bool
}

// Report is what the import found and did: Applied says the Create
// entries were written (now Created); Skipped names the pools and
// overlapping reservations of no known network ("KIND NAMESPACE/NAME:
// why"); Notes are the configurations that could not be read, and
// ambiguities.
type Report struct {
	Applied bool     `json:"applied"`
	Entries []Entry  `json:"entries"`
	Skipped []string `json:"skipped,omitempty"`
	Notes   []string `json:"notes,omitempty"`
}

// Count returns how many entries have action a.
func (r *Report) Count(a Action) int {
	n := 0
	for _, e := range r.Entries {
		if e.Action == a {
			n++
		}
	}
	return n
}

// target is one range of one configuration that a whereabouts pool name
// maps to.
type target struct {
	network    string // reservation.Scope, as the agent computes it
	rng        addrspace.Range
	cniNetwork string
	source     string
	netName    string
}

// targets is every whereabouts-or-tenure configuration's ranges by the
// whereabouts IPPool name they map to.
type targets struct {
	byPool map[string][]target
	// sliced are the targets of configurations with node_slice_size,
	// whose pools are named per node and slice (SlicePoolName).
	sliced []target
	// overlapping are the targets of configurations with
	// enable_overlapping_ranges, which write OverlappingRangeIPReservations.
	overlapping []target
	notes       []string
}

func buildTargets(nads []NetworkConfig) *targets {
	t := &targets{byPool: map[string][]target{}}
	nads = slices.Clone(nads)
	slices.SortFunc(nads, func(a, b NetworkConfig) int {
		return strings.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name)
	})
	for _, nad := range nads {
		source := "NetworkAttachmentDefinition " + nad.Namespace + "/" + nad.Name
		confs, err := inventory.IPAMConfigs(nad.Config, WhereaboutsType, config.PluginType)
		if err != nil {
			t.notes = append(t.notes, fmt.Sprintf("%s: %v", source, err))
			continue
		}
		for _, conf := range confs {
			c, err := parseAsTenure(conf)
			switch {
			case err != nil:
			case c.Pool != "":
				err = fmt.Errorf("names the tenure IPPool %s: whereabouts never allocated from it", c.Pool)
			case c.Pools != nil:
				err = fmt.Errorf("lists the tenure IPPools %s: whereabouts never allocated from them", strings.Join(c.Pools, ", "))
			}
			if err != nil {
				t.notes = append(t.notes, fmt.Sprintf("%s: %v", source, err))
				continue
			}
			for _, sp := range c.Spaces() {
				if sp.Range == nil {
					continue
				}
				r := *sp.Range
				tg := target{network: sp.Scope, rng: r, cniNetwork: c.Name, source: source, netName: c.NetworkName}
				name := PoolName(c.NetworkName, r.Prefix)
				t.byPool[name] = append(t.byPool[name], tg)
				if slices.Contains(c.Ignored, "node_slice_size") {
					t.sliced = append(t.sliced, tg)
				}
				if c.OverlappingRanges {
					t.overlapping = append(t.overlapping, tg)
				}
			}
		}
	}
	return t
}

// slicePool returns the targets a node's slice pool maps to: those of the
// configurations with node_slice_size whose range holds the pool's
// spec.range (the slice) and whose network_name and slice name it. Its
// allocations are offsets from the slice's first address, as any pool's
// from its range's; the slice's NodeSlicePool records only which node has
// which slice, nothing an import needs. whereabouts allocates a slice
// without the range's exclude (v0.9.4): an allocation on an excluded
// address is OutOfRange, and tenure never hands it out.
func (t *targets) slicePool(p Pool) []target {
	slice, err := netip.ParsePrefix(strings.TrimSpace(p.Range))
	if err != nil {
		return nil
	}
	var out []target
	for _, tg := range t.sliced {
		if tg.rng.Prefix.Bits() <= slice.Bits() && tg.rng.Prefix.Contains(slice.Addr()) && isSlicePool(tg.netName, p.Name, slice) {
			out = append(out, tg)
		}
	}
	return out
}

// Inputs are the listed objects Plan maps.
type Inputs struct {
	NetworkConfigs []NetworkConfig
	Pools          []Pool
	Overlapping    []Overlapping
	// Existing is the owner of every tenure reservation by object name.
	Existing map[string]tenurev1alpha1.ReservationOwner
}

// Plan maps every allocation to its entry. pod looks a podref
// ("namespace/name") up live; false when the pod is gone. progress, when
// set, is called after each allocation.
func Plan(in Inputs, pod func(podRef string) (Pod, bool, error), progress func(done, total int)) (*Report, error) {
	t := buildTargets(in.NetworkConfigs)
	rep := &Report{Notes: t.notes}
	total := len(in.Overlapping)
	for _, p := range in.Pools {
		total += len(p.Allocations)
	}
	done := 0
	step := func() {
		done++
		if progress != nil {
			progress(done, total)
		}
	}
	byName := map[string]int{} // reservation name -> index in rep.Entries
	ambiguous := map[string]bool{}
	add := func(e Entry, source string) error {
		if e.Reservation != "" {
			// A record of a gone pod does not hold the address against
			// another record of it.
			if i, ok := byName[e.Reservation]; ok && rep.Entries[i].Action != PodGone {
				prev := &rep.Entries[i]
				if prev.PodRef == e.PodRef && (prev.Interface == e.Interface || e.Interface == "") {
					prev.Sources = append(prev.Sources, source)
					return nil
				}
				e.Action, e.Detail = Conflict, fmt.Sprintf("%s also records it for %s", strings.Join(prev.Sources, ", "), prev.PodRef)
				rep.Entries = append(rep.Entries, e)
				return nil
			}
		}
		if err := resolve(&e, in.Existing, pod); err != nil {
			return err
		}
		if e.Reservation != "" {
			byName[e.Reservation] = len(rep.Entries)
		}
		rep.Entries = append(rep.Entries, e)
		return nil
	}

	pools := slices.Clone(in.Pools)
	slices.SortFunc(pools, func(a, b Pool) int { return strings.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name) })
	for _, p := range pools {
		source := "IPPool " + p.Namespace + "/" + p.Name
		tgs := t.byPool[p.Name]
		if len(tgs) == 0 {
			tgs = t.slicePool(p)
		}
		first, err := poolFirst(p.Range)
		if len(tgs) == 0 || err != nil {
			reason := "no whereabouts or tenure configuration in a NetworkAttachmentDefinition maps to it"
			if err != nil {
				reason = err.Error()
			}
			rep.Skipped = append(rep.Skipped, source+": "+reason)
			for range p.Allocations {
				step()
			}
			continue
		}
		allocs := slices.Clone(p.Allocations)
		slices.SortFunc(allocs, func(a, b Allocation) int { return cmpOffset(a.Offset, b.Offset) })
		for _, a := range allocs {
			e := Entry{PodRef: a.PodRef, ContainerID: a.ContainerID, Interface: a.IfName, Sources: []string{source}}
			addr, err := addOffset(first, a.Offset)
			if err != nil {
				rep.Notes = append(rep.Notes, fmt.Sprintf("%s: %v", source, err))
				step()
				continue
			}
			tg, n := pick(tgs, addr)
			if n > 1 && !ambiguous[p.Name] {
				ambiguous[p.Name] = true
				rep.Notes = append(rep.Notes, fmt.Sprintf("%s: %d configurations with different tenure scopes map to it; %s is used", source, n, tg.source))
			}
			fill(&e, addr, tg, tgs[0])
			if err := add(e, source); err != nil {
				return nil, err
			}
			step()
		}
	}

	over := slices.Clone(in.Overlapping)
	slices.SortFunc(over, func(a, b Overlapping) int { return strings.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name) })
	for _, o := range over {
		source := "OverlappingRangeIPReservation " + o.Namespace + "/" + o.Name
		var tg *target
		var addr netip.Addr
		// The first configuration whose range holds the address, else the
		// first whose subnet does.
		for i := range t.overlapping {
			c := &t.overlapping[i]
			a, ok := addrOfOverlapping(c.netName, o.Name)
			if !ok || !c.rng.Prefix.Contains(a) {
				continue
			}
			if tg == nil || (!tg.rng.Contains(addr) && c.rng.Contains(a)) {
				tg, addr = c, a
			}
		}
		if tg == nil {
			rep.Skipped = append(rep.Skipped, source+": no configuration with enable_overlapping_ranges has a network_name and range that name it")
			step()
			continue
		}
		e := Entry{PodRef: o.PodRef, ContainerID: o.ContainerID, Interface: o.IfName, Sources: []string{source}}
		in := *tg
		if !tg.rng.Contains(addr) {
			// In the subnet but never handed out (excluded, or outside
			// range_start..range_end), as the pool's record of it is.
			in = target{}
		}
		fill(&e, addr, in, *tg)
		if err := add(e, source); err != nil {
			return nil, err
		}
		step()
	}
	rep.Notes = append(rep.Notes, earlierSandboxes(rep.Entries)...)
	return rep, nil
}

// earlierSandboxes settles the pods that would hold two addresses of one
// family for one interface on one network, from two sandboxes: whereabouts
// kept an allocation whose DEL never ran. tenure-controller keeps only the
// newest reservation of such a slot (repair.EarlierSandbox), which after an
// import says nothing of which sandbox runs now, so the live one could be
// released. The pod's network-status says which address the interface has:
// the others become Stale. Without it the operator is told, in the notes
// it returns.
func earlierSandboxes(entries []Entry) []string {
	type slot struct {
		uid, ifName, network string
		is4                  bool
	}
	bySlot := map[slot][]int{}
	var order []slot
	for i, e := range entries {
		if (e.Action != Create && e.Action != Exists) || e.ContainerID == "" {
			continue
		}
		s := slot{e.PodUID, e.Interface, e.Network, e.item.Is4()}
		if bySlot[s] == nil {
			order = append(order, s)
		}
		bySlot[s] = append(bySlot[s], i)
	}
	var notes []string
	for _, s := range order {
		idx := bySlot[s]
		sandboxes := func() []string {
			var ids []string
			for _, i := range idx {
				if entries[i].Action != Stale && !slices.Contains(ids, entries[i].ContainerID) {
					ids = append(ids, entries[i].ContainerID)
				}
			}
			return ids
		}
		if len(sandboxes()) < 2 {
			continue
		}
		for _, i := range idx {
			e := &entries[i]
			if e.Action == Create && e.hasStatus && !slices.Contains(e.status, e.Address) {
				e.Action = Stale
				e.Detail = fmt.Sprintf("sandbox %s: the pod's network-status lists %s for %s, and whereabouts never got this sandbox's DEL",
					e.ContainerID, strings.Join(e.status, ","), e.Interface)
			}
		}
		if ids := sandboxes(); len(ids) > 1 {
			notes = append(notes, fmt.Sprintf("pod uid %s interface %s on network %s has allocations of %d sandboxes (%s) and no network-status to tell the live one: tenure-controller keeps only the newest reservation; release the stale ones (tenurectl release) before the switch",
				s.uid, s.ifName, s.network, len(ids), strings.Join(ids, ", ")))
		}
	}
	return notes
}

// pick returns the first target whose range holds addr, and how many
// distinct scopes hold it; the zero target when none does.
func pick(tgs []target, addr netip.Addr) (target, int) {
	var out target
	scopes := map[string]bool{}
	for _, tg := range tgs {
		if !tg.rng.Contains(addr) {
			continue
		}
		if len(scopes) == 0 {
			out = tg
		}
		scopes[tg.network+"|"+tg.rng.String()] = true
	}
	return out, len(scopes)
}

// fill sets the tenure side of e: the scope, range and reservation name of
// tg, or OutOfRange (named after fallback's scope) when tg is zero.
func fill(e *Entry, addr netip.Addr, tg, fallback target) {
	e.Address, e.item = addr.String(), addr
	if tg.source == "" {
		e.Action, e.Network = OutOfRange, fallback.network
		e.Detail = fmt.Sprintf("not in range %s of %s: tenure never hands it out", fallback.rng.String(), fallback.source)
		e.Sources = append(e.Sources, fallback.source)
		return
	}
	e.Network, e.Range, e.CNINetwork = tg.network, tg.rng.String(), tg.cniNetwork
	e.Reservation = reservation.AddressName(tg.network, addr)
	e.Sources = append(e.Sources, tg.source)
}

// resolve looks the pod up and compares with what tenure holds.
func resolve(e *Entry, existing map[string]tenurev1alpha1.ReservationOwner, pod func(string) (Pod, bool, error)) error {
	if e.Action == OutOfRange {
		return nil
	}
	if _, _, ok := strings.Cut(e.PodRef, "/"); !ok {
		e.Action, e.Detail = PodGone, fmt.Sprintf("podref %q names no pod", e.PodRef)
		return nil
	}
	p, ok, err := pod(e.PodRef)
	if err != nil {
		return fmt.Errorf("pod %s: %w", e.PodRef, err)
	}
	if !ok {
		e.Action, e.Detail = PodGone, "pod "+e.PodRef+" no longer exists"
		return nil
	}
	e.PodUID, e.Node = p.UID, p.Node
	e.status, e.hasStatus = p.Addresses[e.Interface]
	cur, held := existing[e.Reservation]
	switch {
	case !held:
		e.Action = Create
	case cur.UID == p.UID:
		e.Action, e.Detail = Exists, "already held by this pod"
	default:
		e.Action = Conflict
		h := cur
		e.Holder = &h
		e.Detail = fmt.Sprintf("held by %s %s/%s (uid %s)", cur.Kind, cur.Namespace, cur.Name, cur.UID)
	}
	return nil
}

// Object is the reservation of an entry: what the agent writes for that
// pod's ADD (internal/agent owner, internal/allocator object).
func (e *Entry) Object() *tenurev1alpha1.IPReservation {
	ns, name, _ := strings.Cut(e.PodRef, "/")
	return reservation.New(reservation.Spec{
		Network: e.Network, Kind: tenurev1alpha1.KindAddress,
		Item:  netip.PrefixFrom(e.item, e.item.BitLen()),
		Range: e.Range, CNINetwork: e.CNINetwork,
		Owner: tenurev1alpha1.ReservationOwner{
			Kind: tenurev1alpha1.OwnerPod, Namespace: ns, Name: name, UID: e.PodUID,
			PodName: name, PodUID: e.PodUID,
			ContainerID: e.ContainerID, Interface: e.Interface, Node: e.Node,
		},
	})
}
