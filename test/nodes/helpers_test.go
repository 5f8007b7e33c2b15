//go:build integration

package nodes_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/dev/devnode"
	"github.com/tenure-ipam/tenure/internal/dev/localnode"
)

func testContext(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func namespace(ctx context.Context, t *testing.T, name string) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := cl.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cl.Delete(context.Background(), ns) })
	return name
}

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
		t.Fatalf("waiting for %s: %v (last: %v)", what, err, last)
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

// nodeNamed is the cluster's node of that name.
func nodeNamed(t *testing.T, name string) *devnode.Node {
	t.Helper()
	for _, n := range cluster.Nodes {
		if n.Name == name {
			return n
		}
	}
	t.Fatalf("no node %q in the cluster", name)
	return nil
}

// podNetns is the path of the pod's network namespace: the one of its
// node's whose eth0 holds the pod IP.
func podNetns(t *testing.T, p *corev1.Pod) string {
	t.Helper()
	for _, path := range nodeNamed(t, p.Spec.NodeName).NetworkNamespaces() {
		if addrs, ok := addrsIn(t, path, "eth0"); ok && slices.ContainsFunc(addrs, func(a string) bool { return strings.SplitN(a, "/", 2)[0] == p.Status.PodIP }) {
			return path
		}
	}
	t.Fatalf("pod %s: no network namespace of node %s has eth0 %s", p.Name, p.Spec.NodeName, p.Status.PodIP)
	return ""
}

// addrsIn lists ifname's global addresses (CIDR) in the namespace at path.
func addrsIn(t *testing.T, path, ifname string) ([]string, bool) {
	t.Helper()
	ns, err := netns.GetFromPath(path)
	if err != nil {
		return nil, false
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

// ping sends one ICMP echo from inside the network namespace at path to
// dst and waits for its reply.
func ping(path, dst string) error {
	var conn *icmp.PacketConn
	errc := make(chan error, 1)
	go func() {
		// Left locked if it cannot go back: Go ends the thread.
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			errc <- err
			return
		}
		defer orig.Close()
		ns, err := netns.GetFromPath(path)
		if err != nil {
			errc <- err
			return
		}
		defer ns.Close()
		if err := netns.Set(ns); err != nil {
			errc <- err
			return
		}
		conn, err = icmp.ListenPacket("ip4:icmp", "0.0.0.0")
		if backErr := netns.Set(orig); backErr != nil {
			errc <- backErr
			return
		}
		runtime.UnlockOSThread()
		errc <- err
	}()
	if err := <-errc; err != nil {
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

// reservationsOf lists the reservations owned by pods in namespace ns.
func reservationsOf(ctx context.Context, t *testing.T, ns string) []tenurev1alpha1.IPReservation {
	t.Helper()
	var list tenurev1alpha1.IPReservationList
	if err := cl.List(ctx, &list); err != nil {
		t.Fatal(err)
	}
	var out []tenurev1alpha1.IPReservation
	for _, r := range list.Items {
		if r.Spec.Owner.Namespace == ns {
			out = append(out, r)
		}
	}
	return out
}

// net1Of reads net1's one address inside the pod, checks it against
// Multus' network-status and the pod's reservation, and returns it.
func net1Of(ctx context.Context, t *testing.T, p *corev1.Pod) string {
	t.Helper()
	inside, _ := addrsIn(t, podNetns(t, p), "net1")
	recorded, err := localnode.AttachmentIPs(p, "net1")
	if err != nil {
		t.Fatal(err)
	}
	if len(inside) != 1 || strings.SplitN(inside[0], "/", 2)[0] != strings.Join(recorded, ",") {
		t.Fatalf("pod %s on %s: net1 holds %v, Multus recorded %v", p.Name, p.Spec.NodeName, inside, recorded)
	}
	addr := strings.SplitN(inside[0], "/", 2)[0]
	var mine []string
	for _, r := range reservationsOf(ctx, t, p.Namespace) {
		if r.Spec.Owner.UID == string(p.UID) {
			mine = append(mine, r.Spec.Address)
		}
	}
	if !slices.Equal(mine, []string{addr}) {
		t.Errorf("pod %s: reservations %v, want [%s]", p.Name, mine, addr)
	}
	return addr
}
