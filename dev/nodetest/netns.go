package nodetest

import (
	"strings"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
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
