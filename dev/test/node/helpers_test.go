//go:build integration

package node_test

import (
	"fmt"
	"net"
	"testing"

	"github.com/vishvananda/netlink"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/tenure-ipam/tenure/dev/localnode"
	"github.com/tenure-ipam/tenure/dev/nodetest"
)

// hostLink makes a link on the host for a network's plugin (a macvlan
// master, a bridge) and removes it afterwards. It carries no address.
func hostLink(t *testing.T, link netlink.Link) {
	t.Helper()
	if err := netlink.LinkAdd(link); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if l, err := netlink.LinkByName(link.Attrs().Name); err == nil {
			_ = netlink.LinkDel(l)
		}
	})
	if err := netlink.LinkSetUp(link); err != nil {
		t.Fatal(err)
	}
}

// networkStatus is the IPs Multus recorded for interface ifname.
func networkStatus(t *testing.T, p *corev1.Pod, ifname string) []string {
	t.Helper()
	ips, err := localnode.AttachmentIPs(p, ifname)
	if err != nil {
		t.Fatal(err)
	}
	return ips
}

// interfaceAddrs reads the global addresses of ifname inside the pod's own
// network namespace: the one of the node's whose eth0 holds the pod IP.
func interfaceAddrs(t *testing.T, p *corev1.Pod, ifname string) []string {
	t.Helper()
	path := nodetest.PodNetns(t, p, node.NetworkNamespaces())
	got, ok := nodetest.AddrsIn(t, path, ifname)
	if !ok {
		t.Fatalf("pod %s: no %s in its network namespace %s", p.Name, ifname, path)
	}
	return got
}

// ipsOf strips the prefix lengths.
func ipsOf(cidrs []string) []string {
	out := make([]string, len(cidrs))
	for i, c := range cidrs {
		ip, _, err := net.ParseCIDR(c)
		if err != nil {
			out[i] = c
			continue
		}
		out[i] = ip.String()
	}
	return out
}

func errorf(format string, args ...any) error { return fmt.Errorf(format, args...) }

func labelSelector(s string) (labels.Selector, error) { return labels.Parse(s) }
