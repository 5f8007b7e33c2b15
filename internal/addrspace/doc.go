// Package addrspace owns the arithmetic of the spaces tenure allocates from:
// a Range of assignable addresses (its bounds, size, capacity after
// excludes, the address at an offset and back) and a PrefixDelegation pool
// of equal-length IPv6 prefixes (its count, the prefix at an index and
// back), both over a 128-bit integer so IPv4 and IPv6 share one code path.
//
// Space is the ordered set of candidates the allocator walks, over either.
//
// It parses nothing: internal/config reads and validates the JSON keys and
// builds these values; the allocator, the agent and the controller walk
// them.
package addrspace
