package importwa

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/tenure-ipam/tenure/internal/config"
)

// PoolName is the name whereabouts gives the IPPool of a range
// (IPPoolName without node slices): the CIDR with ':' and '/' as '-',
// after "NETWORK_NAME-" when network_name is set.
func PoolName(networkName string, prefix netip.Prefix) string {
	s := prefix.Masked().String()
	if strings.HasSuffix(s, ":") {
		s += "0"
	}
	s = strings.NewReplacer(":", "-", "/", "-").Replace(s)
	if networkName != "" {
		return networkName + "-" + s
	}
	return s
}

// SlicePoolName is the name whereabouts gives the IPPool of node's slice
// of a range made with node_slice_size (IPPoolName with a node): the
// slice's CIDR as PoolName writes it, after "NODE-", after
// "NETWORK_NAME-" when network_name is set.
func SlicePoolName(networkName, node string, slice netip.Prefix) string {
	if networkName != "" {
		return networkName + "-" + node + "-" + PoolName("", slice)
	}
	return node + "-" + PoolName("", slice)
}

// isSlicePool reports whether name is a SlicePoolName of network_name
// networkName for slice, whatever the node.
func isSlicePool(networkName, name string, slice netip.Prefix) bool {
	rest := name
	if networkName != "" {
		var ok bool
		if rest, ok = strings.CutPrefix(name, networkName+"-"); !ok {
			return false
		}
	}
	node, ok := strings.CutSuffix(rest, "-"+PoolName("", slice))
	return ok && node != "" && SlicePoolName(networkName, node, slice) == name
}

// OverlappingName is the name whereabouts gives the
// OverlappingRangeIPReservation of an address (NormalizeIP).
func OverlappingName(networkName string, addr netip.Addr) string {
	s := addr.Unmap().String()
	if strings.HasSuffix(s, ":") {
		s += "0"
	}
	s = strings.ReplaceAll(s, ":", "-")
	if networkName != "" {
		return networkName + "-" + s
	}
	return s
}

// addrOfOverlapping reverses OverlappingName for one network name.
func addrOfOverlapping(networkName, name string) (netip.Addr, bool) {
	rest := name
	if networkName != "" {
		var ok bool
		if rest, ok = strings.CutPrefix(name, networkName+"-"); !ok {
			return netip.Addr{}, false
		}
	}
	a, err := netip.ParseAddr(rest)
	if err != nil {
		if a, err = netip.ParseAddr(strings.ReplaceAll(rest, "-", ":")); err != nil {
			return netip.Addr{}, false
		}
	}
	return a, OverlappingName(networkName, a) == name
}

// addOffset is whereabouts' IPAddOffset: first plus a decimal offset.
func addOffset(first netip.Addr, offset string) (netip.Addr, error) {
	n, err := strconv.ParseUint(offset, 10, 64)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("offset %q: %v", offset, err)
	}
	b := first.As16()
	carry := n
	for i := 15; i >= 0 && carry > 0; i-- {
		sum := uint64(b[i]) + carry&0xff
		b[i] = byte(sum)
		carry = carry>>8 + sum>>8
	}
	if carry > 0 {
		return netip.Addr{}, fmt.Errorf("offset %s overflows the address space", offset)
	}
	a := netip.AddrFrom16(b)
	if first.Is4() {
		if !a.Is4In6() {
			return netip.Addr{}, fmt.Errorf("offset %s leaves IPv4", offset)
		}
		a = a.Unmap()
	}
	return a, nil
}

func poolFirst(rng string) (netip.Addr, error) {
	// net.ParseCIDR's IP, as whereabouts' IPPool.ParseCIDR: the address as
	// written, not masked.
	a, _, ok := strings.Cut(rng, "/")
	if !ok {
		return netip.Addr{}, fmt.Errorf("spec.range %q is not a CIDR", rng)
	}
	if _, err := netip.ParsePrefix(rng); err != nil {
		return netip.Addr{}, fmt.Errorf("spec.range %q: %v", rng, err)
	}
	return netip.ParseAddr(a)
}

func cmpOffset(a, b string) int {
	x, errA := strconv.ParseUint(a, 10, 64)
	y, errB := strconv.ParseUint(b, 10, 64)
	if errA != nil || errB != nil {
		return strings.Compare(a, b)
	}
	switch {
	case x < y:
		return -1
	case x > y:
		return 1
	}
	return 0
}

// parseAsTenure parses a whereabouts or tenure network configuration with
// tenure's parser, which takes whereabouts' keys: what the agent reads
// once the ipam type says tenure.
func parseAsTenure(conf []byte) (*config.Config, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(conf, &top); err != nil {
		return nil, err
	}
	var ipam map[string]json.RawMessage
	if err := json.Unmarshal(top["ipam"], &ipam); err != nil {
		return nil, err
	}
	ipam["type"] = json.RawMessage(strconv.Quote(config.PluginType))
	b, err := json.Marshal(ipam)
	if err != nil {
		return nil, err
	}
	top["ipam"] = b
	if conf, err = json.Marshal(top); err != nil {
		return nil, err
	}
	return config.Parse(conf, nil)
}
