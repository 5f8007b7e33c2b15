//go:build integration

package node_test

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/tenure-ipam/tenure/internal/dev/localnode"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// namespace makes a namespace for the test and deletes it afterwards.
func namespace(ctx context.Context, t *testing.T, name string) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := cl.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cl.Delete(context.Background(), ns) })
	return name
}

// nad creates a NetworkAttachmentDefinition whose config is conf.
func nad(ctx context.Context, t *testing.T, ns, name, conf string) {
	t.Helper()
	obj, err := localnode.NAD(ns, name, conf)
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.Create(ctx, obj); err != nil {
		t.Fatal(err)
	}
}

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

// poll calls check every 250 ms until it returns nil; it fails the test
// with check's last answer when ctx ends.
func poll(ctx context.Context, t *testing.T, what string, check func() error) {
	t.Helper()
	var last error
	err := wait.PollUntilContextCancel(ctx, 250*time.Millisecond, true, func(context.Context) (bool, error) {
		last = check()
		return last == nil, nil
	})
	if err != nil {
		t.Fatalf("waiting for %s: %v (last: %v)\n%s", what, err, last, node.LogTail("kubelet"))
	}
}

func getPod(ctx context.Context, ns, name string) (*corev1.Pod, error) {
	var p corev1.Pod
	err := cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &p)
	return &p, err
}

func waitRunning(ctx context.Context, t *testing.T, ns, name string) *corev1.Pod {
	t.Helper()
	var pod *corev1.Pod
	poll(ctx, t, "pod "+ns+"/"+name+" to run", func() error {
		p, err := getPod(ctx, ns, name)
		if err != nil {
			return err
		}
		if p.Status.Phase != corev1.PodRunning || p.Status.PodIP == "" {
			return fmt.Errorf("phase %s, events: %s", p.Status.Phase, eventsOf(ctx, ns, name))
		}
		pod = p
		return nil
	})
	return pod
}

func waitGone(ctx context.Context, t *testing.T, ns, name string) {
	t.Helper()
	poll(ctx, t, "pod "+ns+"/"+name+" to be gone", func() error {
		_, err := getPod(ctx, ns, name)
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("still there (%v)", err)
	})
}

// eventsOf joins the messages of the events about a pod.
func eventsOf(ctx context.Context, ns, name string) string {
	list, err := cs.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
	if err != nil {
		return err.Error()
	}
	var msgs []string
	for _, e := range list.Items {
		msgs = append(msgs, e.Reason+": "+e.Message)
	}
	return strings.Join(msgs, " | ")
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
	for _, path := range node.NetworkNamespaces() {
		addrs, ok := addrsIn(t, path, "eth0")
		if !ok || !contains(addrs, p.Status.PodIP) {
			continue
		}
		got, ok := addrsIn(t, path, ifname)
		if !ok {
			t.Fatalf("pod %s: no %s in its network namespace %s", p.Name, ifname, path)
		}
		return got
	}
	t.Fatalf("pod %s: no network namespace of the node has eth0 %s", p.Name, p.Status.PodIP)
	return nil
}

func contains(addrs []string, ip string) bool {
	for _, a := range addrs {
		if strings.SplitN(a, "/", 2)[0] == ip {
			return true
		}
	}
	return false
}

// addrsIn lists ifname's global addresses (CIDR) in the namespace at path.
func addrsIn(t *testing.T, path, ifname string) ([]string, bool) {
	t.Helper()
	ns, err := netns.GetFromPath(path)
	if err != nil {
		return nil, false // removed meanwhile
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns)
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
