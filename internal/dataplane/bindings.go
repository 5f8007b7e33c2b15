package dataplane

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	corev1 "k8s.io/api/core/v1"

	ipamclaimsv1alpha1 "github.com/tenure-ipam/tenure/api/ipamclaims/v1alpha1"
	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/claims"
	"github.com/tenure-ipam/tenure/internal/config"
	"github.com/tenure-ipam/tenure/internal/dhcp6"
	"github.com/tenure-ipam/tenure/internal/kubevirt"
	"github.com/tenure-ipam/tenure/internal/reservation"
)

// Where a binding's MAC came from.
const (
	MACFromSelection     = "network-selection-element"
	MACFromNetworkStatus = "network-status"
)

// noSettings is the reason of a skip for a network without dhcpv6.
const noSettings = "has no dhcpv6 settings learnt on this node"

// Binding is one client this node answers: a claim's IPv6 state, the MAC of
// the guest presenting it, and where it is served.
type Binding struct {
	dhcp6.Binding // Key is "namespace/claim"

	// Network is the CNI network name (the claim's spec.network).
	Network string
	// NAD is namespace/name of the NetworkAttachmentDefinition the pod's
	// network-selection element names: whose learnt settings serve it.
	NAD string
	// OwnInterface is the one DHCPv6 interface the binding is served on
	// (its own interface), when its NAD's main plugin plugs the attachment
	// into an interface the network lists (its Link); "" when the NAD names
	// none of them.
	OwnInterface string
	// Pod is namespace/name of the owner pod, PodInterface its interface.
	Pod, PodInterface string
	// MACSource is MACFromSelection or MACFromNetworkStatus.
	MACSource string
	// Interfaces are the DHCPv6 interfaces (dataplane namespace) serving it.
	Interfaces []string
	// InstallRoutes is the network's dhcpv6.install_routes.
	InstallRoutes bool
	// Migration says why a VM's migration put the binding here, when it
	// did (rule 4a): nil otherwise.
	Migration *MigrationCause
}

// MigrationCause is a KubeVirt migration that serves a VM on this node.
type MigrationCause struct {
	// Outcome is SwitchoverTarget (this node is the target of a migration
	// that switched over) or SwitchoverBack (this node is the source of a
	// migration that failed).
	Outcome string
	// Signal is when the VMI signalled it (kubevirt.Migration.Signal);
	// zero when it records no time.
	Signal time.Time
}

// Outcomes of a switchover.
const (
	SwitchoverTarget = "target"
	SwitchoverBack   = "back_to_source"
)

// Skip says why an attachment that presents a claim has no binding here.
type Skip struct {
	Pod, PodInterface, Claim string
	Reason                   string
	// Conflict is set when the reason is a MAC another binding holds too.
	Conflict *MACConflict
	// SwitchedAway is the claim's delegated prefix when the reason is that
	// its VM left this node by a migration that switched over: the guest
	// runs on the target, on the same segment, and this node's route to
	// it still delivers until the target's route is in place
	// (RouteOverlap).
	SwitchedAway netip.Prefix
}

// MACConflict is one MAC on one DHCPv6 interface that two or more bindings
// of this node hold: none of them is served, since which guest sends from
// that MAC cannot be told.
type MACConflict struct {
	MAC, Interface string
	// Holders are the bindings that hold it, by Key.
	Holders []Holder
}

// Holder is one binding of a MACConflict.
type Holder struct {
	// Key is the binding's Key (namespace/claim, or namespace/pod/interface
	// for a pod without a claim); Pod is namespace/name of its pod.
	Key, Pod, PodInterface string
}

// String names every holder, as Events and logs show them.
func (c MACConflict) String() string {
	var hs []string
	for _, h := range c.Holders {
		hs = append(hs, fmt.Sprintf("%s (pod %s interface %s)", h.Key, h.Pod, h.PodInterface))
	}
	return fmt.Sprintf("MAC %s on interface %s is held by %s", c.MAC, c.Interface, strings.Join(hs, " and "))
}

// Inputs are what bindings are computed from.
type Inputs struct {
	// Pods are the pods of this node.
	Pods []*corev1.Pod
	// Claim returns the claim namespace/name, if it exists.
	Claim func(namespace, name string) (*ipamclaimsv1alpha1.IPAMClaim, bool)
	// Networks are the learnt dhcpv6 settings by NAD (namespace/name).
	Networks map[string]config.DHCPv6
	// VMI returns a KubeVirt VirtualMachineInstance; nil when the API does
	// not serve them (then status.ownerPod alone decides, rule 4).
	VMI kubevirt.Lookup
	// PodReservations returns the reservations a pod (by UID) holds; nil
	// serves no attachment without a claim.
	PodReservations func(podUID string) []*tenurev1alpha1.IPReservation
	// ClaimReservations returns the reservations a claim holds, and whether
	// they are known (false: not read yet, the status record decides);
	// nil leaves the delegated prefix to the status record.
	ClaimReservations func(claim *ipamclaimsv1alpha1.IPAMClaim) ([]*tenurev1alpha1.IPReservation, bool)
}

// Compute returns this node's bindings, sorted by Key, and the attachments
// that present a claim but get no binding, with the reason. It is a pure
// function of its inputs; the package documentation gives the rules.
func Compute(in Inputs) ([]Binding, []Skip) {
	var (
		out   []Binding
		skips []Skip
	)
	pods := slices.Clone(in.Pods)
	slices.SortFunc(pods, func(a, b *corev1.Pod) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	for _, pod := range pods {
		if pod == nil || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
			continue
		}
		if pod.Annotations[nadv1.NetworkAttachmentAnnot] == "" {
			continue
		}
		podKey := pod.Namespace + "/" + pod.Name
		elems, err := claims.Networks(pod)
		if err != nil {
			skips = append(skips, Skip{Pod: podKey, Reason: fmt.Sprintf("annotation %s: %v", nadv1.NetworkAttachmentAnnot, err)})
			continue
		}
		var statuses []nadv1.NetworkStatus
		var statusErr error
		if s := pod.Annotations[nadv1.NetworkStatusAnnot]; s != "" {
			statusErr = json.Unmarshal([]byte(s), &statuses)
		}
		for i, e := range elems {
			if e == nil {
				continue
			}
			ifName := e.InterfaceRequest
			if ifName == "" {
				ifName = "net" + strconv.Itoa(i+1)
			}
			claimName := e.IPAMClaimReference
			if claimName == "" {
				claimName = stickyClaim(pod, ifName, in)
			}
			if claimName == "" {
				b, reason := bindPod(pod, ifName, e, statuses, statusErr, in)
				switch {
				case reason != "":
					skips = append(skips, Skip{Pod: podKey, PodInterface: ifName, Reason: reason})
				case b.Key != "":
					out = append(out, b)
				}
				continue
			}
			skip := func(format string, args ...any) {
				skips = append(skips, Skip{Pod: podKey, PodInterface: ifName, Claim: pod.Namespace + "/" + claimName, Reason: fmt.Sprintf(format, args...)})
			}
			b, reason := bind(pod, ifName, claimName, e, statuses, statusErr, in)
			if reason != "" {
				skip("%s", reason)
				skips[len(skips)-1].SwitchedAway = switchedAway(pod, claimName, in)
				continue
			}
			out = append(out, b)
		}
	}
	return dedupe(out, skips)
}

// stickyClaim names the sticky StatefulSet claim (claims.StickyClaimName)
// of a pod's interface that presents no claim, when that claim exists and
// is that pod's; "" otherwise. The agent made it at the pod's first ADD and
// records its addresses and prefix in it as in any claim, so it is served
// as one.
func stickyClaim(pod *corev1.Pod, ifName string, in Inputs) string {
	if in.Claim == nil {
		return ""
	}
	name := claims.StickyClaimName(pod.Name, ifName)
	c, ok := in.Claim(pod.Namespace, name)
	if !ok || c == nil {
		return ""
	}
	if s, sticky, err := claims.StickyOf(c); !sticky || err != nil || s.Pod != pod.Name {
		return ""
	}
	return name
}

func bind(pod *corev1.Pod, ifName, claimName string, e *nadv1.NetworkSelectionElement, statuses []nadv1.NetworkStatus, statusErr error, in Inputs) (Binding, string) {
	var b Binding
	if in.Claim == nil {
		return b, "no claim source"
	}
	claim, ok := in.Claim(pod.Namespace, claimName)
	if !ok || claim == nil {
		return b, "claim not found"
	}
	if !claims.Held(claim) {
		return b, "claim is being deleted"
	}
	nad := nadOf(e)
	settings, reason := settingsOf(in, nad, claim.Spec.Network)
	if reason != "" {
		return b, reason
	}
	if reason := servedElsewhere(pod, claim, in.VMI); reason != "" {
		return b, reason
	}
	b.Migration = migrationCause(pod, claim, in.VMI)
	rec, _ := claims.ParseStatus(claim.Status) // unparsable entries are skipped
	for _, p := range rec.Addresses {
		if p.Addr().Is6() && !p.Addr().Is4In6() {
			b.Address = p.Addr()
			break
		}
	}
	b.Prefix = claimPrefix(claim, rec, in.ClaimReservations)
	if !b.Address.IsValid() && !b.Prefix.IsValid() {
		return b, "claim status holds no IPv6 address or delegated prefix"
	}
	mac, source, reason := macOf(ifName, e, statuses, statusErr)
	if mac == nil {
		return b, reason
	}
	b.Key = pod.Namespace + "/" + claimName
	b.MAC = mac
	b.MACSource = source
	b.Network = claim.Spec.Network
	b.Pod = pod.Namespace + "/" + pod.Name
	b.PodInterface = ifName
	b.serveWith(nad, settings)
	return b, ""
}

// nadOf is namespace/name of the NAD a network-selection element names
// (claims.Networks fills in the pod's namespace where the element has none).
func nadOf(e *nadv1.NetworkSelectionElement) string { return e.Namespace + "/" + e.Name }

// settingsOf returns the settings the NAD gives network (rule 3), or why
// there are none to serve it with.
func settingsOf(in Inputs, nad, network string) (config.DHCPv6, string) {
	settings, ok := in.Networks[nad]
	switch {
	case !ok || !settings.Enabled:
		return settings, fmt.Sprintf("NAD %s of network %q %s", nad, network, noSettings)
	case settings.Network != network:
		return settings, fmt.Sprintf("NAD %s defines network %q, the attachment's is %q", nad, settings.Network, network)
	case len(settings.Interfaces) == 0:
		return settings, fmt.Sprintf("NAD %s of network %q: dhcpv6.interfaces is empty", nad, network)
	}
	return settings, ""
}

// serveWith sets where and how the binding is served from its NAD's
// settings: on the NAD's Link alone when the network lists it (the
// attachment is behind that interface and no other), else on every
// interface the network lists.
func (b *Binding) serveWith(nad string, s config.DHCPv6) {
	b.NAD = nad
	b.InstallRoutes = s.InstallRoutes
	b.PreferredLifetime, b.ValidLifetime = s.PreferredLifetime, s.ValidLifetime
	b.Interfaces = slices.Clone(s.Interfaces)
	b.OwnInterface = ""
	if s.Link != "" && slices.Contains(s.Interfaces, s.Link) {
		b.OwnInterface = s.Link
		b.Interfaces = []string{s.Link}
	}
	b.TrustedRelays = []dhcp6.Relay{}
	for _, r := range s.TrustedRelays {
		if slices.Contains(b.Interfaces, r.Interface) {
			b.TrustedRelays = append(b.TrustedRelays, dhcp6.Relay{Ifname: r.Interface, MAC: slices.Clone(r.MAC), Address: r.Address})
		}
	}
}

// claimPrefix is the claim's delegated IPv6 prefix (rule 5). The claim's
// reservations are the truth and status.delegatedPrefixes only their
// record, which an IPAMClaim CRD without the field (the upstream one)
// drops: the prefix a reservation of the claim holds is served, the
// recorded one when several are held. Only while the reservations are not
// known yet does the record alone decide.
func claimPrefix(claim *ipamclaimsv1alpha1.IPAMClaim, rec claims.Recorded, held func(*ipamclaimsv1alpha1.IPAMClaim) ([]*tenurev1alpha1.IPReservation, bool)) netip.Prefix {
	var recorded netip.Prefix
	for _, p := range rec.Prefixes {
		if p.Addr().Is6() && !p.Addr().Is4In6() {
			recorded = p
			break
		}
	}
	if held == nil {
		return recorded
	}
	rs, known := held(claim)
	if !known {
		return recorded
	}
	var owned []netip.Prefix
	for _, r := range rs {
		if r.Spec.Kind != tenurev1alpha1.KindDelegatedPrefix || r.Spec.Owner.UID != string(claim.UID) {
			continue
		}
		if p, err := reservation.ParseItem(r.Spec.Address); err == nil && p.Addr().Is6() && !p.Addr().Is4In6() {
			owned = append(owned, p.Masked())
		}
	}
	if len(owned) == 0 {
		return netip.Prefix{}
	}
	if recorded.IsValid() && slices.Contains(owned, recorded.Masked()) {
		return recorded.Masked()
	}
	// Several unrecorded prefixes: the lowest, as every node picks it.
	slices.SortFunc(owned, func(a, b netip.Prefix) int {
		return cmp.Or(a.Addr().Compare(b.Addr()), cmp.Compare(a.Bits(), b.Bits()))
	})
	return owned[0]
}

// bindPod binds an attachment that presents no claim to the delegated
// prefix its pod opted in to (and the pod's IPv6 address of that
// attachment): rule 7 of the package doc. A zero Binding and no reason:
// the attachment holds no delegated prefix, and is not served.
func bindPod(pod *corev1.Pod, ifName string, e *nadv1.NetworkSelectionElement, statuses []nadv1.NetworkStatus, statusErr error, in Inputs) (Binding, string) {
	var b Binding
	if in.PodReservations == nil {
		return b, ""
	}
	var mine []*tenurev1alpha1.IPReservation
	sandboxes := map[string]bool{}
	hasPrefix := false
	for _, r := range in.PodReservations(string(pod.UID)) {
		o := r.Spec.Owner
		if o.Kind != tenurev1alpha1.OwnerPod || o.UID != string(pod.UID) || o.Interface != ifName {
			continue
		}
		mine = append(mine, r)
		sandboxes[o.ContainerID] = true
		hasPrefix = hasPrefix || r.Spec.Kind == tenurev1alpha1.KindDelegatedPrefix
	}
	if !hasPrefix {
		return b, ""
	}
	if len(sandboxes) > 1 {
		// An earlier sandbox's reservations stay until its DEL or the
		// runtime's GC; which one the guest holds cannot be told.
		return b, fmt.Sprintf("the pod's reservations for %s belong to %d sandboxes; served once the older ones are released", ifName, len(sandboxes))
	}
	network := mine[0].Spec.CNINetwork
	nad := nadOf(e)
	settings, reason := settingsOf(in, nad, network)
	if reason != "" {
		return b, reason
	}
	for _, r := range mine {
		p, err := reservation.ParseItem(r.Spec.Address)
		if err != nil || !p.Addr().Is6() || p.Addr().Is4In6() {
			continue
		}
		switch {
		case r.Spec.Kind == tenurev1alpha1.KindDelegatedPrefix && !b.Prefix.IsValid():
			b.Prefix = p.Masked()
		case r.Spec.Kind != tenurev1alpha1.KindDelegatedPrefix && !b.Address.IsValid():
			b.Address = p.Addr()
		}
	}
	if !b.Prefix.IsValid() {
		return b, "the pod's delegated prefix is not IPv6"
	}
	mac, source, reason := macOf(ifName, e, statuses, statusErr)
	if mac == nil {
		return b, reason
	}
	b.Key = pod.Namespace + "/" + pod.Name + "/" + ifName
	b.MAC = mac
	b.MACSource = source
	b.Network = network
	b.Pod = pod.Namespace + "/" + pod.Name
	b.PodInterface = ifName
	b.serveWith(nad, settings)
	return b, ""
}

// servedElsewhere applies rule 4: it says why pod is not where the claim is
// served, "" when it is. Where KubeVirt's API is served and the claim (or
// the pod) belongs to a VirtualMachineInstance that runs on a node, the pod
// on that node serves; otherwise the claim's status.ownerPod does.
func servedElsewhere(pod *corev1.Pod, claim *ipamclaimsv1alpha1.IPAMClaim, vmis kubevirt.Lookup) string {
	if vmi, ok := kubevirt.VMOf(vmis, pod.Namespace, claim.OwnerReferences, pod.OwnerReferences); ok {
		node := vmi.Node()
		if node == pod.Spec.NodeName {
			return ""
		}
		why := fmt.Sprintf("VirtualMachineInstance %s/%s runs on node %s", vmi.Namespace, vmi.Name, node)
		if m := vmi.Migration; m != nil && m.Failed && m.TargetNode == pod.Spec.NodeName {
			why += "; its migration to this node failed"
		}
		if vmi.Migrating() && vmi.Migration.TargetNode == pod.Spec.NodeName {
			why += "; this node is its migration target and serves it from the switchover"
		}
		return why
	}
	if claim.Status.OwnerPod == nil || claim.Status.OwnerPod.Name == "" {
		return "claim has no status.ownerPod"
	}
	if claim.Status.OwnerPod.Name != pod.Name {
		return fmt.Sprintf("claim is owned by pod %s", claim.Status.OwnerPod.Name)
	}
	return ""
}

// switchedAway is the delegated prefix of pod's claim when its VM left pod's
// node by a migration that switched over to another node; invalid
// otherwise.
func switchedAway(pod *corev1.Pod, claimName string, in Inputs) netip.Prefix {
	if in.Claim == nil {
		return netip.Prefix{}
	}
	claim, ok := in.Claim(pod.Namespace, claimName)
	if !ok || claim == nil {
		return netip.Prefix{}
	}
	vmi, ok := kubevirt.VMOf(in.VMI, pod.Namespace, claim.OwnerReferences, pod.OwnerReferences)
	if !ok {
		return netip.Prefix{}
	}
	m := vmi.Migration
	if !m.SwitchedOver() {
		return netip.Prefix{}
	}
	src := m.SourceNode
	if src == "" {
		src = vmi.NodeName
	}
	if src != pod.Spec.NodeName || m.TargetNode == pod.Spec.NodeName {
		return netip.Prefix{}
	}
	rec, _ := claims.ParseStatus(claim.Status)
	return claimPrefix(claim, rec, in.ClaimReservations)
}

// migrationCause is the migration that serves pod's claim on its node, when
// one does: a switched-over migration whose target is the pod's node, or a
// failed one whose source is.
func migrationCause(pod *corev1.Pod, claim *ipamclaimsv1alpha1.IPAMClaim, vmis kubevirt.Lookup) *MigrationCause {
	vmi, ok := kubevirt.VMOf(vmis, pod.Namespace, claim.OwnerReferences, pod.OwnerReferences)
	if !ok || vmi.Migration == nil {
		return nil
	}
	m := vmi.Migration
	at, _ := m.Signal()
	switch {
	case m.SwitchedOver() && m.TargetNode == pod.Spec.NodeName:
		return &MigrationCause{Outcome: SwitchoverTarget, Signal: at}
	case m.Failed && m.SourceNode == pod.Spec.NodeName && m.TargetNode != pod.Spec.NodeName:
		return &MigrationCause{Outcome: SwitchoverBack, Signal: at}
	}
	return nil
}

// macOf finds the guest's MAC: the element's mac, else the network-status
// entry of the interface. reason explains a nil MAC.
func macOf(ifName string, e *nadv1.NetworkSelectionElement, statuses []nadv1.NetworkStatus, statusErr error) (net.HardwareAddr, string, string) {
	var why []string
	if e.MacRequest != "" {
		if mac, err := parseMAC(e.MacRequest); err == nil {
			return mac, MACFromSelection, ""
		}
		why = append(why, fmt.Sprintf("network-selection element mac %q is not an Ethernet MAC", e.MacRequest))
	}
	if statusErr != nil {
		why = append(why, fmt.Sprintf("annotation %s is malformed: %v", nadv1.NetworkStatusAnnot, statusErr))
	}
	for _, s := range statuses {
		if s.Interface != ifName || s.Mac == "" {
			continue
		}
		if mac, err := parseMAC(s.Mac); err == nil {
			return mac, MACFromNetworkStatus, ""
		}
		why = append(why, fmt.Sprintf("network-status mac %q of %s is not an Ethernet MAC", s.Mac, ifName))
		break
	}
	if len(why) == 0 {
		why = append(why, fmt.Sprintf("no MAC: the network-selection element has no mac and %s has no entry with a mac for interface %s (yet)", nadv1.NetworkStatusAnnot, ifName))
	}
	return nil, "", strings.Join(why, "; ")
}

func parseMAC(s string) (net.HardwareAddr, error) {
	mac, err := net.ParseMAC(s)
	if err != nil {
		return nil, err
	}
	if len(mac) != 6 {
		return nil, fmt.Errorf("%d bytes", len(mac))
	}
	return mac, nil
}

// dedupe keeps, in key order, the first binding of each claim (a pod may
// present one claim on two interfaces), and drops every binding whose MAC
// another binding holds on a DHCPv6 interface they share: the frame's source
// MAC is all that tells the guests apart there, so neither can be answered
// without maybe answering the other's guest (rule 8).
func dedupe(bs []Binding, skips []Skip) ([]Binding, []Skip) {
	slices.SortStableFunc(bs, func(a, b Binding) int { return cmp.Compare(a.Key, b.Key) })
	seen := map[string]bool{}
	unique := bs[:0:0]
	for _, b := range bs {
		if seen[b.Key] {
			skips = append(skips, Skip{Pod: b.Pod, PodInterface: b.PodInterface, Claim: b.Key,
				Reason: "the claim is presented twice by the pod; the first interface serves it"})
			continue
		}
		seen[b.Key] = true
		unique = append(unique, b)
	}
	type slot struct{ mac, ifname string }
	holders := map[slot][]int{}
	for i, b := range unique {
		for _, ifn := range b.Interfaces {
			s := slot{b.MAC.String(), ifn}
			holders[s] = append(holders[s], i)
		}
	}
	conflict := make([]*MACConflict, len(unique))
	for _, ifn := range slices.SortedFunc(maps.Keys(holders), func(a, b slot) int {
		return cmp.Or(cmp.Compare(a.mac, b.mac), cmp.Compare(a.ifname, b.ifname))
	}) {
		idx := holders[ifn]
		if len(idx) < 2 {
			continue
		}
		c := &MACConflict{MAC: ifn.mac, Interface: ifn.ifname}
		for _, i := range idx {
			c.Holders = append(c.Holders, Holder{Key: unique[i].Key, Pod: unique[i].Pod, PodInterface: unique[i].PodInterface})
		}
		for _, i := range idx {
			if conflict[i] == nil {
				conflict[i] = c
			}
		}
	}
	out := unique[:0:0]
	for i, b := range unique {
		c := conflict[i]
		if c == nil {
			out = append(out, b)
			continue
		}
		skips = append(skips, Skip{Pod: b.Pod, PodInterface: b.PodInterface, Claim: b.Key, Conflict: c,
			Reason: c.String() + ": none of them is served"})
	}
	return out, skips
}
