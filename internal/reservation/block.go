package reservation

import (
	"net/netip"
	"strconv"
)

// LabelBlock is BlockLabel of the reservation's item: which block of
// its network the item lies in. A node agent watches only the blocks it
// is allocating from (internal/store), so a reservation's create or delete
// reaches the few nodes working in its block instead of every node: the
// API server's cost of an ADD then stays flat as nodes are added
// (docs/performance.md, "fanout").
const LabelBlock = "ipam.tenure.dev/block"

// BlockBits is log2 of a block's size: 64 addresses (an IPv4 /26, an IPv6
// /122), or 64 delegated prefixes of one length. A node allocating a few
// dozen pods' addresses works in one or two blocks; blocks are aligned on
// the address, not on a configured range, so every node and every range
// of a network agree on them.
const BlockBits = 6

// Block is the block an item lies in: an address's /26 or /122, a
// delegated prefix's supernet 6 bits shorter.
func Block(item netip.Prefix) netip.Prefix {
	// Names unmap IPv4-mapped items (AddressName, PrefixName): so does
	// the block, or the label of an item and of its name would differ.
	if a := item.Addr(); a.Is4In6() && item.Bits() >= 96 {
		item = netip.PrefixFrom(a.Unmap(), item.Bits()-96)
	}
	b, _ := item.Addr().Prefix(max(item.Bits()-BlockBits, 0))
	return b
}

// BlockLabel is the LabelBlock value of item on the network of that label
// (ScopeLabel): a hash, since the scope label alone may fill a label
// value's 63 characters. Delegated prefixes and addresses never share a
// block.
func BlockLabel(scopeLabel string, delegatedPrefix bool, item netip.Prefix) string {
	kind := "|ip|"
	if delegatedPrefix {
		kind = "|pd|"
	}
	var buf [len("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff/128")]byte
	h := fnv64a(fnv64a(fnv64a(fnvOffset64, scopeLabel), kind), Block(item).AppendTo(buf[:0]))
	return "b" + strconv.FormatUint(h, 36)
}

// fnv64a continues FNV-1a over s from h: hash/fnv's New64a, without its
// allocation and the copies into []byte.
func fnv64a[T string | []byte](h uint64, s T) uint64 {
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= fnvPrime64
	}
	return h
}

const (
	fnvOffset64 = 14695981039346656037
	fnvPrime64  = 1099511628211
)

// BlockOfName is the LabelBlock value of the reservation of that name.
func BlockOfName(name string) (string, bool) {
	p, err := Parse(name)
	if err != nil {
		return "", false
	}
	return BlockLabel(p.ScopeLabel, p.IsPrefix, p.Prefix), true
}
