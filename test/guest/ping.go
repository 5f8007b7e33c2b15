package guest

import (
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
)

// listenICMP opens an ICMP socket of dst's family in the network namespace
// at path ("" for the caller's).
func listenICMP(path string, dst netip.Addr) (*icmp.PacketConn, error) {
	network, laddr := "ip4:icmp", "0.0.0.0"
	if dst.Is6() && !dst.Is4In6() {
		network, laddr = "ip6:ipv6-icmp", "::"
	}
	if path == "" {
		return icmp.ListenPacket(network, laddr)
	}
	var c *icmp.PacketConn
	err := ns.WithNetNSPath(path, func(ns.NetNS) error {
		var err error
		c, err = icmp.ListenPacket(network, laddr)
		return err
	})
	return c, err
}

// Ping sends one ICMP echo request from the network namespace at path to
// dst and waits up to timeout for its reply from dst.
func Ping(path string, dst netip.Addr, timeout time.Duration) error {
	conn, err := listenICMP(path, dst)
	if err != nil {
		return err
	}
	defer conn.Close()
	id := rand.IntN(0xffff) + 1
	var typ, reply icmp.Type = ipv4.ICMPTypeEcho, ipv4.ICMPTypeEchoReply
	proto := 1
	if dst.Is6() {
		typ, reply, proto = ipv6.ICMPTypeEchoRequest, ipv6.ICMPTypeEchoReply, 58
	}
	msg := icmp.Message{Type: typ, Body: &icmp.Echo{ID: id, Seq: 1, Data: []byte("tenure-guest")}}
	b, err := msg.Marshal(nil)
	if err != nil {
		return err
	}
	if _, err := conn.WriteTo(b, &net.IPAddr{IP: dst.AsSlice()}); err != nil {
		return fmt.Errorf("ping %s: %w", dst, err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(timeout))
	buf := make([]byte, 1500)
	for {
		n, from, err := conn.ReadFrom(buf)
		if err != nil {
			return fmt.Errorf("no echo reply from %s: %w", dst, err)
		}
		rm, err := icmp.ParseMessage(proto, buf[:n])
		if err != nil || rm.Type != reply {
			continue
		}
		echo, ok := rm.Body.(*icmp.Echo)
		if !ok || echo.ID != id {
			continue
		}
		if ip, ok := from.(*net.IPAddr); ok {
			if a, ok := netip.AddrFromSlice(ip.IP); ok && a.Unmap() == dst {
				return nil
			}
		}
	}
}
