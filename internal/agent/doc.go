// Package agent is the node agent: it answers the CNI shim's calls from
// informer caches and creates or deletes IPReservations, one API write per
// address, never a read on the hot path when the caches already know.
//
// The agent is made of parts. Each is a struct holding what it owns; what
// it needs of another part it gets through a func field or a small
// interface declared beside it, never through the Agent. Two leaf parts,
// poolChooser and agentMetrics, are handed over as pointers where the ADD
// calls them: a slice or answer passed through a func value or an
// interface escapes to the heap, and the ADD would allocate more.
//
// The Agent holds the caches the parts read (the store, the informers of
// pods, claims and IPPools, the VMI watcher), wires the parts (New), runs
// them (Start) and keeps the entry points: Handle (cni.go), Serve,
// ServeMetrics.
//
//	part (file)                   owns                                     needs of the others
//	addVerb (add.go)              ADD, the pod path, AddFailed Events      callReader.prepare, attachmentHolder,
//	                                                                       addObserver (the dataplane), addClaims
//	                                                                       (claimPath), poolChooser, nextAllocator
//	delVerb (del.go)              DEL                                      attachmentHolder, the dataplane's Detached
//	checkVerb (check.go)          CHECK                                    callReader.prepare, attachmentHolder,
//	                                                                       checkClaims (claimPath)
//	gcVerb (gc.go)                GC                                       -
//	statusVerb (status.go)        STATUS                                   Agent.Ready
//	callReader (attachment.go)    a call's config (parsed once, with the   -
//	                              IPPool it names) and its pod
//	attachmentReservations        what an attachment holds, settled;       -
//	(holds.go)                    freshWait (and rollback, a function)
//	keyedMutex (locks.go),        the order of one attachment's calls,     -
//	arrivals (arrival.go)         shared by ADD, DEL and GC
//	claimPath (claim.go,          a claim's items for its ADDs; sticky     poolChooser, nextAllocator,
//	sticky.go)                    claims                                   claimHoldings.learnHeld, claimStatusWriter
//	                                                                       (statusRecorder), the VMI lookup
//	statusRecorder                a claim's status: items, ownerPod,       the VMI follower's vmRunsElsewhere
//	(statusrecord.go,             conditions, their Events; the
//	prefixrecord.go)              delegatedPrefixes record's check
//	ownerFollower (vmi.go)        ownerPod following its VM                the caches' pods and claims (func fields)
//	agentDataplane (dataplane.go) the DHCPv6 service and prefix routes,    informerSource: the caches, claimHoldings.get
//	                              MAC conflict Events
//	socketServer (server.go)      the socket: connections, workers, the    Agent.Handle, Agent.Ready, arrivals,
//	                              request budget, health endpoints         agentMetrics
//	poolChooser (pools.go)        a pools list's choice; the IPPool schema -
//	allocators (allocators.go)    a slot's allocator, wire-checked where   wire
//	                              the network asks
//	claimHoldings (holdings.go)   a claim's reservations, for the          the store's lists, the dataplane's trigger
//	                              dataplane
//	wire (wire.go), answerer      the wire check; answers to IPProbes      wire (the answerer)
//	(answer.go)
//	agentMetrics (metrics.go)     the Prometheus registry                  -
package agent
