package nodetest

import (
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"
	corev1 "k8s.io/api/core/v1"
)

// AddrsIn lists ifname's global addresses (CIDR) in the network namespace
// at path; false if the namespace or the link is gone.
func AddrsIn(t *testing.T, path, ifname string) ([]string, bool) {
	t.Helper()
	target, err := netns.GetFromPath(path)
	if err != nil {
		return nil, false
	}
	defer target.Close()
	h, err := netlink.NewHandleAt(target)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	link, err := h.LinkByName(ifname)
	if err != nil {
		return nil, false
	}
	list, err := h.AddrList(link, netlink.FAMILY_ALL)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, a := range list {
		if a.Scope == int(netlink.SCOPE_UNIVERSE) {
			out = append(out, a.IPNet.String())
		}
	}
	return out, true
}

// PodNetns is the path of the pod's network namespace: the one of paths
// (its node's namespaces) whose eth0 holds the pod IP.
func PodNetns(t *testing.T, p *corev1.Pod, paths []string) string {
	t.Helper()
	for _, path := range paths {
		addrs, ok := AddrsIn(t, path, "eth0")
		if !ok {
			continue
		}
		for _, a := range addrs {
			if strings.SplitN(a, "/", 2)[0] == p.Status.PodIP {
				return path
			}
		}
	}
	t.Fatalf("pod %s: no network namespace of node %s has eth0 %s", p.Name, p.Spec.NodeName, p.Status.PodIP)
	return ""
}

// Ping sends one ICMP echo from inside the network namespace at path to
// dst and waits for its reply.
func Ping(path, dst string) error {
	var conn *icmp.PacketConn
	if err := ns.WithNetNSPath(path, func(ns.NetNS) error {
		var err error
		conn, err = icmp.ListenPacket("ip4:icmp", "0.0.0.0")
		return err
	}); err != nil {
		return err
	}
	defer conn.Close()
	id := os.Getpid() & 0xffff
	msg := icmp.Message{Type: ipv4.ICMPTypeEcho, Body: &icmp.Echo{ID: id, Seq: 1, Data: []byte("tenure")}}
	b, err := msg.Marshal(nil)
	if err != nil {
		return err
	}
	if _, err := conn.WriteTo(b, &net.IPAddr{IP: net.ParseIP(dst)}); err != nil {
		return err
	}
	_ = conn.SetReadDeadline(time.Now().Add(3 * time.Second))
	buf := make([]byte, 1500)
	for {
		n, from, err := conn.ReadFrom(buf)
		if err != nil {
			return fmt.Errorf("no echo reply from %s: %w", dst, err)
		}
		rm, err := icmp.ParseMessage(1, buf[:n])
		if err == nil && rm.Type == ipv4.ICMPTypeEchoReply && from.String() == dst {
			return nil
		}
	}
}
