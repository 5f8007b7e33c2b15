package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/vishvananda/netlink"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipamclaimsv1alpha1 "github.com/tenure-ipam/tenure/api/ipamclaims/v1alpha1"
	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/dev/devnode"
	"github.com/tenure-ipam/tenure/dev/localnode"
)

// NodeOptions configure RunOnNode.
type NodeOptions struct {
	Out io.Writer
	// Client talks to the cluster as its administrator.
	Client client.Client
	// Node is the real node tenure was rolled out on (localnode.Start).
	Node *devnode.Node
}

// RunOnNode plays the demo's story on a real node: pods the kubelet starts
// and containerd wires through Multus and the reference plugins, whose CNI
// calls reach tenure's shim as installed by the DaemonSet. A /29 SAN fills
// up, a VM's two pods share its claim, the node is lost and comes back.
// What it made is deleted; the node and the control plane stay.
func RunOnNode(ctx context.Context, opts NodeOptions) (*Report, error) {
	r := &nodeRun{NodeOptions: opts, rep: &Report{}}
	if r.Out == nil {
		r.Out = io.Discard
	}
	if err := r.setUp(ctx); err != nil {
		return r.rep, err
	}
	defer r.cleanUp()
	for _, act := range []func(context.Context) error{r.san, r.migration, r.nodeLoss} {
		if err := act(ctx); err != nil {
			return r.rep, err
		}
	}
	return r.rep, nil
}

type nodeRun struct {
	NodeOptions
	rep   *Report
	links []string
}

func (r *nodeRun) say(format string, args ...any) { fmt.Fprintf(r.Out, format+"\n", args...) }

// The links the networks' plugins use on the host: a veth whose peer stays
// on the host as the SAN's macvlan master (a NIC with no cable), and the
// VM network's bridge. Neither gets an address.
func (r *nodeRun) setUp(ctx context.Context) error {
	for _, l := range []netlink.Link{
		&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "tndemo-san"}, PeerName: "tndemo-sanp"},
		&netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "tndemo-vm"}},
	} {
		if err := netlink.LinkAdd(l); err != nil {
			return fmt.Errorf("link %s: %w", l.Attrs().Name, err)
		}
		r.links = append(r.links, l.Attrs().Name)
		if err := netlink.LinkSetUp(l); err != nil {
			return err
		}
	}
	if err := r.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}); err != nil {
		return err
	}
	for name, conf := range map[string]string{
		sanNetwork: fmt.Sprintf(`{"cniVersion": "1.0.0", "name": %q, "type": "macvlan", "master": "tndemo-san", "mode": "bridge",
			"ipam": {"type": "tenure", "range": %q}}`, sanNetwork, sanRange),
		vmNetwork: fmt.Sprintf(`{"cniVersion": "1.0.0", "name": %q, "type": "bridge", "bridge": "tndemo-vm", "allowPersistentIPs": true,
			"ipam": {"type": "tenure", "ipRanges": [{"range": "10.200.0.0/24"}, {"range": "fd00:200::/64"}],
				"prefix_delegation": {"range": "2001:db8:100::/40", "prefix_length": 56}}}`, vmNetwork),
	} {
		nad, err := localnode.NAD(namespace, name, conf)
		if err != nil {
			return err
		}
		if err := r.Client.Create(ctx, nad); err != nil {
			return err
		}
	}
	r.say("tenure demo on a real node: kubelet and containerd on this machine, Multus calling tenure's shim\n")
	r.say("[1/4] node %s runs tenure's agent DaemonSet and controller from deploy/, from the image make image built", r.Node.Name)
	return nil
}

// cleanUp deletes the namespace and the links, and waits for the pods to
// be gone so that their DELs have run.
func (r *nodeRun) cleanUp() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_ = r.Client.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}})
	_ = wait.PollUntilContextCancel(ctx, 250*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		err := r.Client.Get(ctx, client.ObjectKey{Name: namespace}, &corev1.Namespace{})
		return apierrors.IsNotFound(err), nil
	})
	for _, name := range r.links {
		if l, err := netlink.LinkByName(name); err == nil {
			_ = netlink.LinkDel(l)
		}
	}
}

// waitPod polls the pod until done says it is settled.
func (r *nodeRun) waitPod(ctx context.Context, name string, timeout time.Duration, done func(*corev1.Pod) (bool, error)) (*corev1.Pod, error) {
	var p corev1.Pod
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		if err := r.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, &p); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		return done(&p)
	})
	if err != nil {
		return nil, fmt.Errorf("pod %s: %w", name, err)
	}
	return &p, nil
}

// waitGone waits until the pod no longer exists: its CNI DEL has run.
func (r *nodeRun) waitGone(ctx context.Context, name string) error {
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		err := r.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, &corev1.Pod{})
		return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	})
	if err != nil {
		return fmt.Errorf("pod %s to be gone: %w", name, err)
	}
	return nil
}

// runningNet1 waits for the pod to run and returns what Multus recorded
// for its net1.
func (r *nodeRun) runningNet1(ctx context.Context, name string) ([]string, error) {
	p, err := r.waitPod(ctx, name, 2*time.Minute, func(p *corev1.Pod) (bool, error) { return p.Status.Phase == corev1.PodRunning, nil })
	if err != nil {
		return nil, err
	}
	return localnode.AttachmentIPs(p, "net1")
}

// sandboxError is the last FailedCreatePodSandBox message of a pod.
func (r *nodeRun) sandboxError(ctx context.Context, name string) string {
	var list corev1.EventList
	if err := r.Client.List(ctx, &list, client.InNamespace(namespace), client.MatchingFields{"involvedObject.name": name}); err != nil {
		return ""
	}
	msg := ""
	for _, e := range list.Items {
		if e.Reason == "FailedCreatePodSandBox" {
			msg = e.Message
		}
	}
	return msg
}

func (r *nodeRun) san(ctx context.Context) error {
	r.say("\n[2/4] A storage SAN: macvlan on a /29 (%s, 6 usable addresses), type tenure.", sanRange)
	r.say("      Seven pods are created; the kubelet starts each, Multus asks tenure for net1:\n")
	for i := 1; i <= 7; i++ {
		if err := r.Client.Create(ctx, localnode.Pod(namespace, fmt.Sprintf("san-%d", i), sanNetwork)); err != nil {
			return err
		}
	}
	tw := tabwriter.NewWriter(r.Out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "      POD\tSTATUS\tNET1 (Multus network-status)")
	waiting := ""
	for i := 1; i <= 7; i++ {
		name := fmt.Sprintf("san-%d", i)
		p, err := r.waitPod(ctx, name, 2*time.Minute, func(p *corev1.Pod) (bool, error) {
			return p.Status.Phase == corev1.PodRunning || strings.Contains(r.sandboxError(ctx, p.Name), "is full"), nil
		})
		if err != nil {
			return err
		}
		if p.Status.Phase != corev1.PodRunning {
			waiting = name
			msg := r.sandboxError(ctx, name)
			r.rep.ExhaustionError = msg[strings.LastIndex(msg, ": range ")+2:]
			fmt.Fprintf(tw, "      %s\tContainerCreating\t%s\n", name, r.rep.ExhaustionError)
			continue
		}
		ips, err := localnode.AttachmentIPs(p, "net1")
		if err != nil {
			return err
		}
		fmt.Fprintf(tw, "      %s\tRunning\t%s\n", name, strings.Join(ips, ", "))
		r.rep.SAN = append(r.rep.SAN, Allocation{Pod: name, Node: r.Node.Name, Address: ips[0] + "/29"})
	}
	_ = tw.Flush()
	if waiting == "" {
		return errors.New("every SAN pod started on a /29 of 6 addresses")
	}
	leaving := r.rep.SAN[0]
	r.say("\n      %s is deleted; the runtime's CNI DEL gives %s back, and the kubelet's", leaving.Pod, leaving.Address)
	r.say("      next retry of %s, with no one touching it, gets it:", waiting)
	if err := r.Client.Delete(ctx, localnode.Pod(namespace, leaving.Pod, "")); err != nil {
		return err
	}
	ips, err := r.runningNet1(ctx, waiting)
	if err != nil {
		return err
	}
	r.rep.RetriedAddress = ips[0] + "/29"
	r.say("      %s Running with net1 %s", waiting, r.rep.RetriedAddress)
	return nil
}

func (r *nodeRun) migration(ctx context.Context) error {
	r.say("\n[3/4] A KubeVirt VM with IPAMClaim vm1.vm-net: its migration target pod starts while the")
	r.say("      source runs, on the same node here.")
	claim := &ipamclaimsv1alpha1.IPAMClaim{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "vm1.vm-net"},
		Spec: ipamclaimsv1alpha1.IPAMClaimSpec{Network: vmNetwork, Interface: "net1"}}
	if err := r.Client.Create(ctx, claim); err != nil {
		return err
	}
	nets := `[{"name": "vm-net", "interface": "net1", "ipam-claim-reference": "vm1.vm-net"}]`
	var got [2][]string
	for i, name := range []string{"virt-launcher-vm1-source", "virt-launcher-vm1-target"} {
		if err := r.Client.Create(ctx, localnode.Pod(namespace, name, nets)); err != nil {
			return err
		}
		ips, err := r.runningNet1(ctx, name)
		if err != nil {
			return err
		}
		if err := r.Client.Get(ctx, client.ObjectKeyFromObject(claim), claim); err != nil {
			return err
		}
		got[i] = append(slices.Sorted(slices.Values(ips)), claim.Status.DelegatedPrefixes...)
	}
	r.rep.MigrationSource, r.rep.MigrationTarget = got[0], got[1]
	tw := tabwriter.NewWriter(r.Out, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "\n      \tSOURCE\tTARGET\t\n")
	for i, label := range []string{"IPv4", "IPv6", "delegated /56"} {
		same := "different!"
		if at(got[0], i) == at(got[1], i) && at(got[0], i) != "-" {
			same = "same"
		}
		fmt.Fprintf(tw, "      %s\t%s\t%s\t%s\n", label, at(got[0], i), at(got[1], i), same)
	}
	_ = tw.Flush()
	if err := r.Client.Delete(ctx, localnode.Pod(namespace, "virt-launcher-vm1-source", "")); err != nil {
		return err
	}
	if err := r.waitGone(ctx, "virt-launcher-vm1-source"); err != nil {
		return err
	}
	if err := r.Client.Get(ctx, client.ObjectKeyFromObject(claim), claim); err != nil {
		return err
	}
	r.rep.ClaimAfterSrcDel = append(slices.Clone(claim.Status.IPs), claim.Status.DelegatedPrefixes...)
	r.say("\n      the source pod is deleted (its DEL ran); the claim still holds %s", strings.Join(r.rep.ClaimAfterSrcDel, ", "))
	return nil
}

// podReservations counts the reservations of the demo's pods (the VM's
// belong to its claim, which outlives any node).
func (r *nodeRun) podReservations(ctx context.Context) (int, error) {
	var list tenurev1alpha1.IPReservationList
	if err := r.Client.List(ctx, &list); err != nil {
		return 0, err
	}
	n := 0
	for _, res := range list.Items {
		if res.Spec.Owner.Namespace == namespace && res.Spec.Owner.Kind == tenurev1alpha1.OwnerPod {
			n++
		}
	}
	return n, nil
}

func (r *nodeRun) nodeLoss(ctx context.Context) error {
	r.rep.LostNode = r.Node.Name
	for _, a := range append(r.rep.SAN[1:], Allocation{Address: r.rep.RetriedAddress}) {
		r.rep.LostAddresses = append(r.rep.LostAddresses, strings.Split(a.Address, "/")[0])
	}
	r.say("\n[4/4] %s is lost hard: its kubelet and containerd are killed (the containers run on, as on", r.Node.Name)
	r.say("      a node cut off). The controller-manager marks it NotReady and evicts the pods, whose")
	r.say("      deletion no kubelet completes. The node is not fenced, so the tenure controller keeps")
	r.say("      their addresses; once it is tainted out-of-service, it releases them.")
	if held, err := r.podReservations(ctx); err != nil || held != len(r.rep.LostAddresses) {
		return fmt.Errorf("before the node is lost its pods hold %d reservations, want %d (%v)", held, len(r.rep.LostAddresses), err)
	}
	if err := r.Node.Lose(); err != nil {
		return err
	}
	begin := time.Now()
	evicted := func(timeout time.Duration) error {
		return wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
			var pods corev1.PodList
			if err := r.Client.List(ctx, &pods, client.InNamespace(namespace)); err != nil {
				return false, err
			}
			for _, p := range pods.Items {
				if strings.HasPrefix(p.Name, "san-") && p.DeletionTimestamp == nil {
					return false, nil
				}
			}
			return true, nil
		})
	}
	if err := evicted(90 * time.Second); err != nil && ctx.Err() == nil {
		// With one node, every node is NotReady: the lifecycle controller
		// may take it for a control-plane fault and stop evicting. The
		// pods are then deleted as an operator would; still no DEL runs.
		r.say("      (the controller-manager stopped evicting: its only node is NotReady; the pods are deleted by hand)")
		var pods corev1.PodList
		if lerr := r.Client.List(ctx, &pods, client.InNamespace(namespace)); lerr == nil {
			for i := range pods.Items {
				if strings.HasPrefix(pods.Items[i].Name, "san-") {
					_ = r.Client.Delete(ctx, &pods.Items[i])
				}
			}
		}
	}
	if held, err := r.podReservations(ctx); err != nil || held != len(r.rep.LostAddresses) {
		_ = r.Node.Return(ctx)
		return fmt.Errorf("the evicted pods hold %d reservations while the node is not fenced, want %d (%v)", held, len(r.rep.LostAddresses), err)
	}
	r.say("      the pods are Terminating and keep %s: waiting for the node to be fenced", strings.Join(r.rep.LostAddresses, ", "))
	// NoSchedule: the tenure controller runs on this node, and NoExecute
	// would evict it too. The key is what fences, whatever the effect.
	if err := r.setFence(ctx, true); err != nil {
		_ = r.Node.Return(ctx)
		return err
	}
	r.say("      kubectl taint node %s %s=nodeshutdown:NoSchedule", r.Node.Name, corev1.TaintNodeOutOfService)
	fenced := time.Now()
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 90*time.Second, true, func(ctx context.Context) (bool, error) {
		held, err := r.podReservations(ctx)
		return held == 0, err
	})
	if err != nil {
		_ = r.Node.Return(ctx)
		_ = r.setFence(context.Background(), false)
		return fmt.Errorf("the SAN's reservations were not released: %w", err)
	}
	r.rep.ReleasedAfter = time.Since(begin)
	r.say("      the SAN's addresses were released %.1fs after the taint (%.0fs after the node was lost)",
		time.Since(fenced).Seconds(), r.rep.ReleasedAfter.Seconds())
	if err := r.Node.Return(ctx); err != nil {
		return err
	}
	if err := r.setFence(ctx, false); err != nil {
		return err
	}
	r.say("      the node is back and Ready, the taint removed; the evicted pods' deletions complete")
	return nil
}

// setFence adds or removes the out-of-service taint on the node.
func (r *nodeRun) setFence(ctx context.Context, on bool) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var n corev1.Node
		if err := r.Client.Get(ctx, client.ObjectKey{Name: r.Node.Name}, &n); err != nil {
			return err
		}
		n.Spec.Taints = slices.DeleteFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == corev1.TaintNodeOutOfService })
		if on {
			n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: corev1.TaintNodeOutOfService, Value: "nodeshutdown", Effect: corev1.TaintEffectNoSchedule})
		}
		return r.Client.Update(ctx, &n)
	})
}
