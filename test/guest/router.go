package guest

import (
	"fmt"
	"net"
	"net/netip"
	"sync"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// RouteFollower plays, for a segment's router, the routing protocol that
// would export the routes nodes install for delegated prefixes: when a node
// adds such a route (its protocol number), the router routes that prefix
// via the node's address on the segment, at once.
type RouteFollower struct {
	mu   sync.Mutex
	via  map[netip.Prefix]netip.Addr
	done chan struct{}
	rh   *netlink.Handle
	once sync.Once
}

// FollowRoutes starts following: nodes maps each node's network namespace
// path to its address on the segment; the router's namespace is at
// routerPath and reaches the segment on link.
func FollowRoutes(routerPath, link string, protocol int, nodes map[string]netip.Addr) (*RouteFollower, error) {
	rns, err := netns.GetFromPath(routerPath)
	if err != nil {
		return nil, err
	}
	rh, err := netlink.NewHandleAt(rns)
	rns.Close()
	if err != nil {
		return nil, err
	}
	l, err := rh.LinkByName(link)
	if err != nil {
		rh.Close()
		return nil, fmt.Errorf("guest: the router's link %q: %w", link, err)
	}
	f := &RouteFollower{via: map[netip.Prefix]netip.Addr{}, done: make(chan struct{}), rh: rh}
	for path, gw := range nodes {
		ns, err := netns.GetFromPath(path)
		if err != nil {
			f.Stop()
			return nil, err
		}
		ch := make(chan netlink.RouteUpdate, 64)
		err = netlink.RouteSubscribeWithOptions(ch, f.done, netlink.RouteSubscribeOptions{Namespace: &ns, ListExisting: true})
		ns.Close()
		if err != nil {
			f.Stop()
			return nil, err
		}
		go func() {
			for u := range ch {
				if u.Type != unix.RTM_NEWROUTE || int(u.Protocol) != protocol || u.Dst == nil {
					continue
				}
				a, ok := netip.AddrFromSlice(u.Dst.IP)
				if !ok {
					continue
				}
				ones, _ := u.Dst.Mask.Size()
				prefix := netip.PrefixFrom(a.Unmap(), ones)
				if err := rh.RouteReplace(&netlink.Route{LinkIndex: l.Attrs().Index, Dst: u.Dst, Gw: net.IP(gw.AsSlice())}); err != nil {
					continue
				}
				f.mu.Lock()
				f.via[prefix] = gw
				f.mu.Unlock()
			}
		}()
	}
	return f, nil
}

// Via is the node address the router routes prefix through; false when it
// routes it through none.
func (f *RouteFollower) Via(prefix netip.Prefix) (netip.Addr, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	a, ok := f.via[prefix]
	return a, ok
}

// Stop ends the following; the router's routes stay.
func (f *RouteFollower) Stop() {
	f.once.Do(func() {
		close(f.done)
		f.rh.Close()
	})
}
