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
//   - [Server] wraps insomniacslk/dhcp's server6 on one network interface:
//     a UDP socket on [::]:547 bound to that interface (SO_BINDTODEVICE) and
//     joined to ff02::1:2 there, so several Servers (one per VM interface)
//     coexist in one network namespace.
//
// # Who is the client
//
// The Lookup is the only authority on whether a client is ours. The handler
// derives candidate link-layer (MAC) addresses for the client and asks the
// Lookup about each, with the interface name the message arrived on, in this
// order; the first candidate that maps to a binding wins, and a message none
// of them maps is dropped without an answer:
//
//  1. The link-layer source of the client's packet as seen by whoever is
//     closest to it: for a relayed message, the RFC 6939 Client Link-Layer
//     Address option of the innermost Relay-forward (added by the first-hop
//     relay); for a direct message, the mac argument of [Handler.Handle]
//     (Source.MAC), when the caller knows it. For a relayed message the
//     caller's mac is the relay's, and is ignored.
//  2. The link-layer address inside the client's DUID, when the Client
//     Identifier is a DUID-LL or DUID-LLT.
//  3. The modified EUI-64 interface identifier of the client's link-local
//     source address (fe80::/10 with ff:fe in the middle), turned back into a
//     MAC: for a relayed message the innermost relay's peer-address, for a
//     direct one Source.Peer (the UDP source address; [Server] fills it in).
//
// Candidates 2 and 3 are chosen by the guest, so the interface name passed to
// Lookup is what keeps a guest from claiming someone else's lease: a Lookup
// must only return bindings that live behind that interface.
//
// # What is answered
//
// Solicit (Advertise, or Reply when the client asked for Rapid Commit),
// Request, Renew, Rebind, Release, Decline, Confirm and Information-request,
// each validated as RFC 8415 §16 requires; messages only a client may
// receive, Relay-reply, and unknown types are ignored. answer.go and the
// table test in handler_test.go give the details per message type.
package dhcp6
