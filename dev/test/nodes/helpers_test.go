//go:build integration

package nodes_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tenure-ipam/tenure/dev/devnode"
	"github.com/tenure-ipam/tenure/dev/localnode"
	"github.com/tenure-ipam/tenure/dev/nodetest"
)

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
	return nodetest.PodNetns(t, p, nodeNamed(t, p.Spec.NodeName).NetworkNamespaces())
}

// net1Of reads net1's one address inside the pod, checks it against
// Multus' network-status and the pod's reservation, and returns it.
func net1Of(ctx context.Context, t *testing.T, p *corev1.Pod) string {
	t.Helper()
	inside, _ := nodetest.AddrsIn(t, podNetns(t, p), "net1")
	recorded, err := localnode.AttachmentIPs(p, "net1")
	if err != nil {
		t.Fatal(err)
	}
	if len(inside) != 1 || strings.SplitN(inside[0], "/", 2)[0] != strings.Join(recorded, ",") {
		t.Fatalf("pod %s on %s: net1 holds %v, Multus recorded %v", p.Name, p.Spec.NodeName, inside, recorded)
	}
	addr := strings.SplitN(inside[0], "/", 2)[0]
	var mine []string
	for _, r := range kc.Reservations(ctx, t, p.Namespace) {
		if r.Spec.Owner.UID == string(p.UID) {
			mine = append(mine, r.Spec.Address)
		}
	}
	if !slices.Equal(mine, []string{addr}) {
		t.Errorf("pod %s: reservations %v, want [%s]", p.Name, mine, addr)
	}
	return addr
}

// sanReplicaSetSpec is a part's ReplicaSet of six pods on the SAN.
type sanReplicaSetSpec struct {
	// name is the namespace's prefix, the ReplicaSet's name and its pods'
	// app label.
	name string
	// network is the NetworkAttachmentDefinition's and the network's name.
	network string
	// ipam is the tenure IPAM config's members besides "type", as JSON.
	ipam string
	// failover: the pods tolerate the unreachable and not-ready taints for
	// partitionTolerationSeconds and spread two a node, a node whose
	// taints they do not tolerate not counted (so the replacements go to
	// the other nodes). Otherwise the default tolerations, and the spread
	// is a preference.
	failover bool
}

// sanReplicaSet is a started sanReplicaSetSpec: its namespace, the watch
// of its reservations' holders, and the ReplicaSet.
type sanReplicaSet struct {
	ns     string
	labels map[string]string
	held   *holders
	rs     *appsv1.ReplicaSet
}

// startSANReplicaSet makes the namespace and its macvlan network over
// each node's SAN leg, starts watching the reservations' holders, and
// creates the ReplicaSet.
func startSANReplicaSet(ctx context.Context, t *testing.T, spec sanReplicaSetSpec) *sanReplicaSet {
	t.Helper()
	ns := kc.Namespace(ctx, t, spec.name)
	kc.NAD(ctx, t, ns, spec.network, `{
		"cniVersion": "1.0.0", "name": "`+spec.network+`", "type": "macvlan", "master": "`+devnode.SANLink+`", "mode": "bridge",
		"ipam": {"type": "tenure", `+spec.ipam+`}}`)
	s := &sanReplicaSet{ns: ns, labels: map[string]string{"app": spec.name}, held: watchHolders(ctx, t, ns)}

	tmpl := localnode.Pod(ns, "", spec.network)
	tmpl.Labels = s.labels
	spread := corev1.TopologySpreadConstraint{
		MaxSkew: 1, TopologyKey: corev1.LabelHostname, WhenUnsatisfiable: corev1.ScheduleAnyway,
		LabelSelector: &metav1.LabelSelector{MatchLabels: s.labels},
	}
	if spec.failover {
		tmpl.Spec.Tolerations = []corev1.Toleration{
			{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To(int64(partitionTolerationSeconds))},
			{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To(int64(partitionTolerationSeconds))},
		}
		spread.WhenUnsatisfiable = corev1.DoNotSchedule
		spread.NodeTaintsPolicy = ptr.To(corev1.NodeInclusionPolicyHonor)
	}
	tmpl.Spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{spread}
	s.rs = &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: spec.name},
		Spec: appsv1.ReplicaSetSpec{
			Replicas: ptr.To(int32(6)),
			Selector: &metav1.LabelSelector{MatchLabels: s.labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: tmpl.ObjectMeta, Spec: tmpl.Spec},
		},
	}
	if err := cl.Create(ctx, s.rs); err != nil {
		t.Fatal(err)
	}
	return s
}

// pods lists the ReplicaSet's pods.
func (s *sanReplicaSet) pods(ctx context.Context, t *testing.T) []corev1.Pod {
	t.Helper()
	var pods corev1.PodList
	if err := cl.List(ctx, &pods, client.InNamespace(s.ns), client.MatchingLabels(s.labels)); err != nil {
		t.Fatal(err)
	}
	return pods.Items
}

// running lists the ReplicaSet's running pods that are not being deleted.
func (s *sanReplicaSet) running(ctx context.Context, t *testing.T) []corev1.Pod {
	t.Helper()
	return slices.DeleteFunc(s.pods(ctx, t), func(p corev1.Pod) bool {
		return p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil
	})
}

// waitTwoPerNode waits for six running pods, two on each node, and
// returns them.
func (s *sanReplicaSet) waitTwoPerNode(ctx context.Context, t *testing.T) []corev1.Pod {
	t.Helper()
	var pods []corev1.Pod
	kc.Poll(ctx, t, "six replicas running, two per node", func() error {
		pods = s.running(ctx, t)
		perNode := map[string]int{}
		for _, p := range pods {
			perNode[p.Spec.NodeName]++
		}
		for _, n := range cluster.Nodes {
			if perNode[n.Name] != 2 {
				return fmt.Errorf("%d running: %v per node", len(pods), perNode)
			}
		}
		return nil
	})
	return pods
}

// deleteAndCheck deletes the ReplicaSet, waits for the namespace's
// reservations to be released, and fails t for every address that two
// owners held at once while the part ran.
func (s *sanReplicaSet) deleteAndCheck(ctx context.Context, t *testing.T) {
	t.Helper()
	if err := cl.Delete(ctx, s.rs); err != nil {
		t.Fatal(err)
	}
	kc.WaitReleased(ctx, t, s.ns)
	s.held.check(t)
}

// controllerPod is the tenure controller's one pod.
func controllerPod(ctx context.Context, t *testing.T) corev1.Pod {
	t.Helper()
	var ctrl corev1.PodList
	if err := cl.List(ctx, &ctrl, client.InNamespace(localnode.Namespace), client.MatchingLabels{"app.kubernetes.io/name": "tenure-controller"}); err != nil {
		t.Fatal(err)
	}
	if len(ctrl.Items) != 1 {
		t.Fatalf("%d controller pods, want 1", len(ctrl.Items))
	}
	return ctrl.Items[0]
}

// nodeOtherThan is a cluster node not named name.
func nodeOtherThan(t *testing.T, name string) *devnode.Node {
	t.Helper()
	for _, n := range cluster.Nodes {
		if n.Name != name {
			return n
		}
	}
	t.Fatalf("no node other than %s", name)
	return nil
}

// partitioned is a pod on the node a part partitions, as it ran before.
type partitioned struct {
	pod   corev1.Pod
	addr  netip.Addr // net1's
	mac   string     // net1's
	netns string
	res   string // its reservation's name
}

// partitionedPods checks every pod's net1 (net1Of) and returns those on
// node with their reservations (name: UID).
func partitionedPods(ctx context.Context, t *testing.T, ns string, pods []corev1.Pod, node string) ([]partitioned, map[string]string) {
	t.Helper()
	var out []partitioned
	kept := map[string]string{}
	for _, p := range pods {
		addr := net1Of(ctx, t, &p)
		if p.Spec.NodeName != node {
			continue
		}
		path := podNetns(t, &p)
		mac, err := nodetest.LinkMAC(path, "net1")
		if err != nil {
			t.Fatal(err)
		}
		c := partitioned{pod: p, addr: netip.MustParseAddr(addr), mac: mac, netns: path}
		for _, r := range kc.Reservations(ctx, t, ns) {
			if r.Spec.Owner.UID == string(p.UID) {
				kept[r.Name] = string(r.UID)
				c.res = r.Name
			}
		}
		out = append(out, c)
	}
	return out, kept
}

// waitSandboxesGone waits for each pod to be gone and its kubelet to have
// removed its sandbox's network namespace.
func waitSandboxesGone(ctx context.Context, t *testing.T, ns string, pods []partitioned) {
	t.Helper()
	for _, c := range pods {
		kc.WaitGone(ctx, t, ns, c.pod.Name)
		kc.Poll(ctx, t, "the kubelet to remove "+c.pod.Name+"'s sandbox", func() error {
			if _, err := os.Stat(c.netns); !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("network namespace %s still there (%v)", c.netns, err)
			}
			return nil
		})
	}
}

// hasPod reports whether pods hold p (by UID).
func hasPod(pods []corev1.Pod, p corev1.Pod) bool {
	return slices.ContainsFunc(pods, func(b corev1.Pod) bool { return b.UID == p.UID })
}
