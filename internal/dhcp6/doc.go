// Package dhcp6 is tenure's DHCPv6 server (RFC 8415) for the node agent: it
// hands a guest the IPv6 address (IA_NA) and the delegated prefix (IA_PD)
// persisted for its IPAMClaim, and stays silent for everyone else.
//
// The package has two layers:
//
//   - [Handler] is the protocol: a pure function from one received message
//     (plus where it came from) to the reply to send, or to nothing. It keeps
//     no lease state of its own: whatever [Lookup] returns for the client is
//     the lease, and the Lookup interface has no write path, so answering a
//     message can never change what tenure has allocated.
//   - [Server] serves a Handler on one network interface: it reads the
//     clients' messages from a packet socket (with a BPF filter passing only
//     IPv6 UDP to port 547 addressed to this host), which gives the Ethernet
//     source address of each frame, and answers from a UDP socket on
//     [::]:547 bound to the interface (SO_BINDTODEVICE) and joined to
//     ff02::1:2 there, so several Servers (one per VM interface) coexist in
//     one network namespace. Packets that are no DHCPv6 message are counted
//     as [OutcomeUndecodable]. Messages are handled one at a time.
//
// # Who is the client
//
// The Lookup is the only authority on whether a client is ours. The handler
// derives candidate link-layer (MAC) addresses for the client and asks the
// Lookup about each, with the interface name the message arrived on; the
// first candidate that maps to a binding wins, and a message none of them
// maps is dropped without an answer:
//
//   - A direct message with a Source.MAC (the Ethernet source of the frame,
//     which [Server] fills in): that MAC alone. It is what a bridge port's
//     MAC-spoofing check ties to one guest; the DUID and the link-local
//     address are chosen by the guest and name nobody.
//   - A Relay-forward is first checked against Config.TrustedRelays: its
//     frame's link-layer source must be a trusted relay's MAC (and its IP
//     source the relay's address, where one is configured). A Relay-forward
//     from anyone else, any guest included, is dropped unread
//     ([OutcomeUntrustedRelay]): none is trusted by default. From a trusted
//     relay, the only candidate is the RFC 6939 Client Link-Layer Address
//     option of the innermost Relay-forward, which the first-hop relay adds
//     from the client's frame; a relay that does not add it gets no answer.
//   - Only a direct message without a Source.MAC (a link without
//     link-layer addresses, a caller that does not know it) falls back to
//     what the guest says: the link-layer address inside its DUID, when
//     the Client Identifier is a DUID-LL or DUID-LLT, then the modified
//     EUI-64 interface identifier of its link-local source address
//     (fe80::/10 with ff:fe in the middle), turned back into a MAC.
//
// So a guest with a DUID-UUID or DUID-EN and a stable-privacy link-local
// address (NetworkManager's defaults) is known by its frames' source MAC, and
// a guest that names another guest (in a DUID, a link-local address, or a
// forged Relay-forward) is answered for itself or not at all. The interface
// name passed to Lookup keeps a client to the bindings of its own link: a
// Lookup must only return bindings that live behind that interface.
//
// A binding may carry its own lifetimes and its own trusted relays
// (Binding.PreferredLifetime, ValidLifetime, TrustedRelays): bindings that
// share an interface may come from settings of different owners, so a
// Relay-forward the interface's Config lets through is still dropped
// ([OutcomeUntrustedRelay]) for a binding that does not trust that relay,
// and each binding is served at its own lifetimes.
//
// # Where the client is
//
// Lookup records nothing. A Lookup that implements [Heard] is told that a
// client sits behind an interface only when that is what the exchange
// shows: the Handler answered a Request, Renew or Rebind with a Reply that
// leases the binding's address or prefix, and the client's MAC was the
// link's word (the frame's source, or a trusted relay's RFC 6939 option),
// not the guest's (its DUID or link-local address). A Solicit (Rapid Commit
// too), Confirm, Information-request, Release or Decline, and any message
// that is unanswered, ignored or malformed, say nothing of where the client
// is: anyone on the link can send them from any MAC (internal/dataplane
// routes the client's prefix by what Heard says).
//
// # One address, one prefix
//
// A client gets its binding's address in one IA_NA and its prefix in one
// IA_PD: the first IA that already lists it, else the first of its kind in
// the message. Any other IA_NA or IA_PD is answered as one the server has
// nothing for (NoAddrsAvail / NoPrefixAvail in Solicit and Request,
// NoBinding in Renew), RFC 8415 §18.3.
//
// # What is answered
//
// Solicit (Advertise, or Reply when the client asked for Rapid Commit),
// Request, Renew, Rebind, Release, Decline, Confirm and Information-request,
// each validated as RFC 8415 §16 requires; messages only a client may
// receive, Relay-reply, and unknown types are ignored. answer.go and the
// table test in handler_test.go give the details per message type.
package dhcp6
