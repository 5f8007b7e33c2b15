// Package dataplane is the node agent's side of the data path for
// interfaces with a delegated prefix: claim-bound (IPAMClaim, including a
// sticky StatefulSet pod's) interfaces, and those of pods without a claim
// that opted in to a prefix. It serves DHCPv6 (IA_NA + IA_PD) to the guest
// behind the interface from the persisted state, and installs the route to
// the guest's delegated prefix on the node that serves it: for a KubeVirt
// VM, the node the VM runs on. Everything it does is derived,
// level-triggered, from these inputs, and recomputed whole on every change
// and on a periodic resync:
//
//   - the pods of this node (the agent's pods informer);
//   - the IPAMClaims (the agent's claims informer);
//   - KubeVirt's VirtualMachineInstances, where the API serves them
//     (internal/kubevirt; see "KubeVirt" below);
//   - the reservations of this node's pods (the agent's store), for pods
//     without a claim;
//   - the dhcpv6 settings each NetworkAttachmentDefinition (NAD) gives its
//     CNI network, learnt from the configs the agent parses at ADD (see
//     "Network settings" below).
//
// Nothing here writes to the API server or to tenure's reservations: a
// wrong answer can at worst tell a guest what its claim already holds.
//
// # Which clients are answered (bindings)
//
// [Compute] turns the inputs into bindings. For every pod of this node that
// is not in a terminal phase (Succeeded, Failed), for every element of its
// k8s.v1.cni.cncf.io/networks annotation:
//
//  1. the pod interface is the element's "interface", else net<N> for the
//     N-th element (1-based), as Multus names interfaces and as
//     claims.Select matches them;
//  2. the claim is <pod namespace>/<ipam-claim-reference>; for an element
//     without one, the pod's sticky StatefulSet claim of that interface
//     (claims.StickyClaimName, labelled sticky and annotated with this
//     pod's name) when it exists, else rule 7 applies. A missing claim, or
//     one being deleted that no finalizer but tenure's holds any more
//     (claims.Held), gives no binding;
//  3. the element names a NAD (namespace/name; the pod's namespace where it
//     names none) whose learnt settings define the claim's spec.network (the
//     CNI network name) with dhcpv6 enabled=true and at least one
//     interface. The binding is served with that NAD's settings alone
//     (interfaces, lifetimes, trusted relays, install_routes), never
//     another NAD's, whichever namespace it is in;
//  4. the pod must be where the claim is served, so that exactly one node
//     answers during a live migration:
//     a. where the API serves KubeVirt's VirtualMachineInstances and the
//     claim's ownerReferences (KubeVirt's IPAM extension makes a VM's
//     claims owned by the VirtualMachine, whose VMI has its name; a VMI
//     without a VM owns them itself), else the pod's (a virt-launcher pod's
//     controller is its VMI), name a VMI that runs on a node: the pod must
//     be on that node. The VMI runs on status.nodeName, or on
//     status.migrationState.targetNode once the migration switched over
//     without failing: targetNodeDomainReadyTimestamp (the target's domain
//     runs) or completed, whichever comes first; KubeVirt moves nodeName
//     only after completed. KubeVirt creates the target pod when a
//     migration starts, minutes before the switchover for a large guest:
//     until then the source keeps answering the guest's Renews and keeps
//     the route; from then on the target does and the source answers no
//     more. The source keeps its route for RouteOverlap after it sees the
//     switchover (make before break): each node sees it through its own
//     informer, and a source that withdrew first would leave the
//     segment's router, still sending the prefix its way, with no route
//     until the target's appears; the guest is on the same segment, so
//     the source's route still reaches it.
//     A migration that fails leaves nodeName on the source, and everything
//     stays there or goes back there. ownerPod plays no part;
//     b. otherwise (the API is not served, the claim is no VM's, the VMI
//     does not exist or is not scheduled yet) the claim's
//     status.ownerPod.name must be this pod: the agent's ADD for a
//     migration target moves ownerPod to the target, and from the moment
//     each agent's claims cache sees that, the source node falls silent and
//     the target node answers. This is the rule without KubeVirt's API.
//     Either way an informer lag can at worst make both nodes answer for an
//     instant, with identical content;
//  5. the binding holds the first IPv6 entry of status.ips (IA_NA) and the
//     IPv6 delegated prefix a reservation of the claim holds (IA_PD; the
//     one status.delegatedPrefixes records when the claim holds several,
//     else the lowest). The reservations are the truth and the status only
//     their record, which an IPAMClaim CRD without the field (the upstream
//     k8snetworkplumbingwg one) drops: the agent reads them from its caches
//     and one list of the claim's owner-UID label (at the claim's ADD on
//     this node, when the claim is first bound, when it changes, and every
//     30 s), and only until that first list answers does the record alone
//     decide. A claim with neither gives no binding, a claim with only one
//     of them is served that one (the handler answers the other IA with
//     NoAddrsAvail/NoPrefixAvail);
//  6. the client's MAC is, in this order:
//     a. the element's "mac" (the MAC KubeVirt or the user asked Multus for);
//     b. the "mac" of the entry of the pod's k8s.v1.cni.cncf.io/network-status
//     annotation whose "interface" is the pod interface of step 1 (Multus
//     writes it after the ADD; KubeVirt's bridge binding hands that MAC to
//     the guest);
//     c. otherwise there is no binding: without a MAC there is nothing to
//     map a DHCPv6 client to. The guest's DUID is chosen by the guest and
//     is not checked against anything but the MAC (see internal/dhcp6), so
//     no MAC means no answer, never a guess. The binding appears as soon as
//     Multus writes network-status (a pod update event).
//     An unparsable value at a. falls through to b. and is logged;
//  7. an element that presents no claim (rule 2) is served when its pod
//     opted in to a delegated prefix (claims.PrefixDelegationAnnotation or
//     the element's cni-args) and holds one: the binding holds the IPv6
//     prefix and the IPv6 address the pod's reservations of this interface
//     record (owner kind Pod, the pod's UID, the interface), on the network
//     those reservations name, with the settings of the element's NAD (rule
//     3), with the MAC of rule 6, under the key namespace/pod/interface. A
//     pod is on one node, so one node answers. Reservations of two
//     sandboxes of the pod (an earlier one's are released by its DEL or the
//     runtime's GC) give no binding until one set is gone: which one the
//     guest holds cannot be told. An attachment without a prefix is not
//     served;
//  8. a MAC that two or more bindings of this node hold on a DHCPv6
//     interface they share serves none of them (a MACConflict): the frame's
//     source MAC is all that tells guests apart there, so answering one
//     could hand its lease, and move its route, to the other's guest, and
//     no order among them (a tenant's pod sorting before a VM's claim) is
//     an authority. Each conflict is logged, handed to Options.OnConflict
//     once when it appears (the agent records a Warning Event,
//     DHCPv6MACConflict, on each pod, naming every binding and its pod),
//     and counted (ConflictObserver; the agent's gauge
//     tenure_dhcpv6_mac_conflicts). Bindings on interfaces they do not
//     share (their NADs' links differ) do not conflict. The same claim
//     presented twice by one pod is kept once, on its first interface.
//
// Where a binding is served: on its NAD's Link (the node-side interface
// its main plugin plugs the attachment into: a bridge plugin's "bridge", a
// macvlan or ipvlan plugin's "master") when the network's dhcpv6.interfaces
// lists it, and there alone: that is the binding's own interface
// (Binding.OwnInterface).
// A NAD whose link is none of the listed interfaces gives bindings served
// on every listed interface, without an own interface.
//
// The handler (internal/dhcp6) derives the client's MAC from the packet (the
// Ethernet source of the frame; only where there is none, the DUID-LL/LLT
// link-layer address, then the EUI-64 of the link-local source) and asks
// [Service.Lookup] with the interface the message came in on; the answer is
// the binding whose MAC matches and that is served on that interface.
// Everyone else gets no answer. A Relay-forward is answered only from a relay
// that a network's dhcpv6.trusted_relays lists for that interface (its
// frame's source MAC, and its address where given; none by default), and then
// for the MAC of its RFC 6939 option, and only for a binding whose own NAD
// trusts that relay; any other is dropped, so it neither gets a lease nor
// moves a route. An interface's server lets through the relays any NAD
// listing it trusts; each binding then answers only through its own. On a bridge shared by several guests the frame's
// source MAC is sent by the guest, so MAC-spoofing protection on the bridge
// ports (e.g. the bridge plugin's macspoofchk, KubeVirt's bridge binding) is
// what ties a MAC to a guest; without it a guest can pose as another.
//
// # Where DHCPv6 is served
//
// On every interface listed by the dhcpv6.interfaces of any enabled network,
// as names in the dataplane network namespace: the node-side interfaces the
// guests' traffic reaches, typically the node bridge the VMs' pod interfaces
// are plugged into (br-vm), or a VLAN interface for macvlan networks. One
// [dhcp6.Server] per interface, started when a network lists it (retried on
// every resync while the interface does not exist yet), restarted when the
// interface is re-created (its index changed) or its settings change, and
// stopped when no network lists it any more. A network without interfaces is
// not served.
//
// Each binding is served at its own NAD's lifetimes. An interface's server
// has, as its default, the smallest preferred and the smallest valid
// lifetime of the NADs listing it, which no binding uses.
//
// All servers present one server identifier, a DUID-UUID (RFC 6355) that is
// the same on every node of every cluster running tenure ([ServerDUID]).
// tenure's DHCPv6 service is one logical server whose state lives in the
// IPAMClaims; a shared identity lets a guest that migrated keep renewing
// (Renew carries the server identifier) with whichever node now hosts it,
// instead of waiting for its Renew to time out and Rebind. Two nodes never
// answer the same client (rules 4 and 7), so the shared DUID never confuses
// one.
// Advertise carries Preference 255: an agent only ever answers a client it
// holds the binding of, so the client need not wait for other servers.
//
// # Router Advertisements
//
// A network whose dhcpv6.router_advertisements is true gets Router
// Advertisements (M and O flags, its IPv6 ranges' subnets on-link, router
// lifetime 0 unless it has an IPv6 gateway) on each of its DHCPv6 interfaces
// on which this node holds one of its bindings ([WantedAdvertisements]): the
// node that serves a guest is the one that advertises to it, whatever rule
// chooses that node. One advertiser per interface (ra.go) sends them
// periodically and in answer to Router Solicitations, warns about other
// routers' advertisements, and sends a last one with router lifetime 0 when
// the interface is no longer wanted.
//
// # Routes
//
// On the node that serves a binding (rules 4 and 7), for each binding with
// both an address and a prefix on a network whose dhcpv6.install_routes is
// true (the default), the route
//
//	PREFIX via ADDRESS dev HOSTIF onlink proto 116
//
// is installed in the main table of the dataplane namespace, where HOSTIF is
// the binding's own interface (its NAD's Link) when it has one. A binding
// without one is routed through the interface its client was last heard
// on, else the first interface the network lists; "heard" means one thing
// only: the server answered a Request, Renew or Rebind of the binding with
// a Reply that leases its address or prefix, the client's MAC being the
// frame's Ethernet source (or a trusted relay's RFC 6939 option) on an
// interface the binding is served on ([Service.Heard], called by the
// dhcp6 Handler). A Solicit (Rapid Commit too), Confirm,
// Information-request, Release, Decline, a message for another server, a
// malformed, unanswered or unparsable one, a MAC only the DUID or the
// link-local address names, and any frame from an interface the binding is
// not served on never move it: a host that sends from the binding's MAC
// on another interface, as a node on a shared VLAN can, gets nothing
// answered there when the binding has an own interface, and otherwise
// moves the route only with the exchange a client holding the lease makes.
// Without MAC-spoofing protection on the ports of a network whose NAD names
// no listed link, that exchange is still possible: name the link (a bridge
// plugin's "bridge") where several interfaces are listed. The protocol number 116 ([RouteProtocol])
// marks tenure's routes: each reconcile lists the IPv6 routes of the main
// table with that protocol, replaces (RTM_NEWROUTE with NLM_F_REPLACE) the
// wanted ones that differ and deletes the others, so a route disappears from
// a node that no longer serves the binding (the VM moved at a switchover,
// ownerPod moved, pod deleted, claim deleted, install_routes turned off) also
// after an agent restart, and
// routes nobody else marked 116 are never touched. The routes stay when the
// agent stops, so an agent restart does not interrupt forwarding.
//
// # KubeVirt
//
// The agent (internal/kubevirt.Watcher) watches one CustomResourceDefinition,
// virtualmachineinstances.kubevirt.io, selected by name: when it exists, is
// Established and serves v1, an informer over the VMIs starts (kept trimmed
// to name, status.nodeName and status.migrationState); when the CRD goes or
// stops serving v1, the informer stops and rule 4b applies again. KubeVirt
// installed after the agent is seen at once, without a restart or a timer,
// and a cluster without KubeVirt costs one idle watch per agent. Nothing
// waits for it: until the VMI cache has synced (or if RBAC denies the watch)
// rule 4b applies. VMI changes trigger a reconcile as pod and claim changes
// do.
//
// The claim's status.ownerPod follows the same rule (internal/agent, not this
// package, which writes nothing): where rule 4a applies, the ADD of a
// migration target leaves ownerPod on the source, and the agent of the node
// the VM runs on moves ownerPod to its pod when it names another one (at the
// switchover; or, after a failed migration whose target's ADD moved it
// before the VMI was known, back to the source).
//
// # Network settings
//
// The agent learns the dhcpv6 settings a NAD gives its CNI network from
// the config of each ADD through it, before the ADD allocates
// ([Service.Learn]), keyed by the NAD the attachment's network-selection
// element names (namespace/name), never by the CNI network name alone: a
// NAD of another namespace with the same network name, whoever wrote it,
// is kept apart and neither retunes nor switches off this one's guests. An
// ADD through a NAD whose config has no dhcpv6 key, or enabled=false,
// records that it has none. An ADD with no element (a cluster default
// network) names no NAD, learns nothing, and is served nothing.
//
// The NADs of one namespace that define one CNI network must agree: every
// dhcpv6 key, the IPv6 subnets of the ranges and the gateway (the link may
// differ). An ADD through a NAD whose settings differ from those another NAD
// of its namespace gave the same network, while a pod of this node names
// that other NAD, is refused with a CNI error (7, invalid network config)
// naming both NADs, the key and both values, and changes nothing (a
// *SettingsConflict). NADs of different namespaces need not agree: one
// cannot refuse the other's ADDs. The settings of a NAD no pod of this node
// names and no ADD gave for 10 minutes are forgotten.
//
// The settings are written to a small JSON state file (the agent's
// --socket path + ".dataplane.json", on the host's /run/tenure in the
// DaemonSet), by NAD, and read back at start, so an agent restart keeps
// serving the guests already running instead of waiting for the next ADD
// through each NAD. Settings a file holds by CNI network name alone (one
// written without NADs) are given, at the first reconcile, to each NAD
// without settings through which a pod of this node attaches that network,
// so the guests running through an upgrade stay served; the file is then
// written back by NAD. Without a state file, a restarted agent serves a
// NAD's guests again from its next ADD on this node.
//
// # Network namespace
//
// With a dataplane namespace path (tenure-agent --dataplane-netns), every
// DHCPv6 socket is opened, and every interface name resolved, in ns.Do
// (containernetworking/plugins' pkg/ns): on a locked OS thread switched into
// that namespace and back, or discarded if it cannot switch back; the socket
// stays in the namespace it was made in. Route
// changes go through a netlink handle opened in that namespace
// (netlink.NewHandleAt). The agent's API traffic, its CNI socket and its
// metrics stay in the agent's own namespace. Without a path, all of it is
// the agent's own namespace (the host's, in the DaemonSet).
package dataplane
