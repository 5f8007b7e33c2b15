// Package agent is the node agent: it answers the CNI shim's calls from
// informer caches and creates or deletes IPReservations, one API write per
// address, never a read on the hot path when the caches already know.
//
// The agent is made of parts. Each is a struct holding what it owns; what
// it needs of another part it gets through a func field or a small
// interface declared in its own file, never through the Agent. The Agent
// holds the caches the parts read (the store, the informers of pods,
// claims and IPPools, the VMI watcher), wires the parts (New), runs them
// (Start) and keeps the entry points: Handle, Serve, ServeMetrics.
//
//	part (file)                   owns                                     needs of the others
//	addVerb (add.go)              ADD: the pod path, AddFailed Events      prepare, attachment locks and arrivals,
//	                                                                       attachmentReservations, dataplane Learn and
//	                                                                       Attached, claimPath, choosePools, nextAllocator
//	delVerb (del.go)              DEL                                      attachment locks and arrivals,
//	                                                                       attachmentReservations, dataplane Detached
//	checkVerb (check.go)          CHECK                                    prepare, attachmentReservations, claimPath
//	gcVerb (gc.go)                GC                                       attachment locks
//	statusVerb (status.go)        STATUS                                   ready
//	callReader (attachment.go)    a call's config (the netconf cache, the  -
//	                              IPPool it names) and its pod
//	attachmentReservations        what an attachment holds, settled; the   -
//	(holds.go)                    rollback of a failed ADD; freshWait
//	claimPath (claim.go,          the claim path of ADD; sticky claims     choosePools, nextAllocator, rollback,
//	sticky.go)                                                             holdings' learn, claimStatus, the VMI lookup
//	claimStatus (statusrecord.go, a claim's status: items, ownerPod,       the VMI follower's runsElsewhere
//	prefixrecord.go)              conditions, their Events
//	ownerFollower (vmi.go)        ownerPod following its VM                the caches' pods and claims
//	agentDataplane (dataplane.go) the DHCPv6 service and routes, MAC       the caches, holdings
//	                              conflict Events
//	socketServer (server.go)      the socket: connections, workers, the    handle, ready, arrivals, the CNI call metrics
//	                              request budget, health endpoints
//	poolChooser (pools.go)        a pools list's choice, the IPPool schema -
//	allocators (wire.go)          nextAllocator: the allocator, wire-      -
//	                              checked where the network asks
//	claimHoldings (holdings.go)   a claim's reservations for the dataplane -
//	wire, answerer (wire.go,      the wire check; answers to IPProbes      -
//	answer.go)
//	agentMetrics (metrics.go)     the Prometheus registry                  -
package agent
