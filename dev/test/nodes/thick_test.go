//go:build integration

package nodes_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tenure-ipam/tenure/dev/devnode"
	"github.com/tenure-ipam/tenure/dev/localnode"
	"github.com/tenure-ipam/tenure/dev/nodetest"
	"github.com/tenure-ipam/tenure/internal/kubevirt"
)

// Multus in thick mode: the running cluster is switched from Multus' thin
// plugin to its thick one (localnode.UseMultusThick, what `tenurectl dev
// up --node --multus thick` installs: multus-daemon as a DaemonSet that
// runs the delegates chrooted into the node's root, multus-shim as the
// node's CNI plugin), and the /29 SAN and the VM migration parts run
// again on it. Thick mode is shown to be in effect: every node's
// 00-multus.conf is the shim's, the daemon's chroot holds the node's own
// agent socket and tenure shim (the node's private binds, not the host's
// or another node's), every pod of the parts was added by the daemon on
// its node, and the thin plugin ran for none of them.
func TestMultusThick(t *testing.T) {
	// Long enough for both parts, which have deadlines of their own.
	ctx := nodetest.Context(t, 20*time.Minute)
	chartInstalled(t)
	begin := time.Now()
	if err := localnode.UseMultusThick(ctx, cp, cluster); err != nil {
		t.Fatal(err)
	}
	t.Logf("Multus thick rolled out on 3 nodes in %v", time.Since(begin).Round(time.Millisecond))
	for _, n := range cluster.Nodes {
		if typ, err := localnode.MultusConfType(n); err != nil || typ != "multus-shim" {
			t.Fatalf("node %s: 00-multus.conf of type %q (%v), want multus-shim", n.Name, typ, err)
		}
		chrootSeesTheNodesOwnFiles(t, n)
	}
	for node, log := range multusDaemonLogs(ctx, t) {
		if !strings.Contains(log, "server configured with chroot: /hostroot") {
			t.Errorf("the daemon on %s does not run delegates chrooted into /hostroot:\n%s", node, log)
		}
	}
	// The agents restart, so that the migration part's waits on their
	// logs read only what they log from now on; the parts' namespaces and
	// KubeVirt's CRDs from the thin run must be gone before they are made
	// again.
	restartAgents(ctx, t)
	waitGoneForRerun(ctx, t, []string{"san3", "mig3"}, []string{kubevirt.CRDName, "virtualmachines.kubevirt.io"})
	thinLogs := thinMultusLogSizes(t)

	parts := []struct {
		name string
		run  func(*testing.T)
		ns   string
		// pods by the node they run on (index in cluster.Nodes).
		pods map[int][]string
	}{
		{"Slash29SANAcrossNodesFillsUpAndTheWaitingPodStartsWhenOneLeaves", slash29SANAcrossNodes, "san3", map[int][]string{
			0: {"san-0", "san-3", "san-6"}, 1: {"san-1", "san-4"}, 2: {"san-2", "san-5"},
		}},
		{"VMMigratesBetweenTwoNodesWithItsAddressesPrefixAndDHCPv6", vmMigratesBetweenTwoNodes, "mig3", map[int][]string{
			0: {"virt-launcher-vm1-node-1"}, 1: {"virt-launcher-vm1-node-2-migration-failed", "virt-launcher-vm1-node-2-migration-ok"},
		}},
	}
	for _, p := range parts {
		start := time.Now()
		t.Run(p.name, p.run)
		t.Logf("%s under Multus thick: %v", p.name, time.Since(start).Round(time.Second))
	}

	logs := multusDaemonLogs(ctx, t)
	for _, p := range parts {
		for i, pods := range p.pods {
			node := cluster.Nodes[i].Name
			added := podsAddedByDaemon(logs[node], p.ns)
			for _, pod := range pods {
				if !added.Has(pod) {
					t.Errorf("the multus daemon on %s logged no successful ADD of %s/%s (it added %v)", node, p.ns, pod, sets.List(added))
				}
			}
		}
	}
	for n, size := range thinMultusLogSizes(t) {
		if size != thinLogs[n] {
			t.Errorf("node %s: the thin multus plugin logged %d bytes under thick mode", n, size-thinLogs[n])
		}
	}
}

// chrootSeesTheNodesOwnFiles checks that the daemon's chroot, /hostroot in
// its container, is the node's root with the node's private binds: the
// agent's socket and tenure's shim there are the very files the node has
// (its directory's, bound over /run/tenure and /opt/cni/bin in its mount
// namespace), and not another node's.
func chrootSeesTheNodesOwnFiles(t *testing.T, n *devnode.Node) {
	t.Helper()
	pids, err := n.Processes("multus-daemon")
	if err != nil {
		t.Fatal(err)
	}
	if len(pids) != 1 {
		t.Fatalf("node %s: %d multus-daemon processes (%v), want 1", n.Name, len(pids), pids)
	}
	chroot := fmt.Sprintf("/proc/%d/root/hostroot", pids[0])
	for _, f := range []string{"/run/tenure/agent.sock", "/opt/cni/bin/tenure"} {
		inChroot, err := os.Stat(filepath.Join(chroot, f))
		if err != nil {
			t.Fatalf("node %s: in the daemon's chroot: %v", n.Name, err)
		}
		for _, other := range cluster.Nodes {
			own, err := os.Stat(other.Path(f))
			if err != nil {
				t.Fatal(err)
			}
			if same := os.SameFile(inChroot, own); same != (other == n) {
				t.Errorf("node %s: %s in the daemon's chroot is node %s's: %v", n.Name, f, other.Name, same)
			}
		}
	}
}

// multusDaemonLogs is each node's multus-daemon log, read as kubectl logs
// does.
func multusDaemonLogs(ctx context.Context, t *testing.T) map[string]string {
	t.Helper()
	var pods corev1.PodList
	if err := cl.List(ctx, &pods, client.InNamespace(localnode.MultusNamespace), client.MatchingLabels{"name": "multus"}); err != nil {
		t.Fatal(err)
	}
	logs := map[string]string{}
	for _, p := range pods.Items {
		b, err := cs.CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{Container: localnode.MultusDaemonContainer}).DoRaw(ctx)
		if err != nil {
			t.Fatalf("logs of %s: %v", p.Name, err)
		}
		logs[p.Spec.NodeName] = string(b)
	}
	if len(logs) != len(cluster.Nodes) {
		t.Fatalf("multus daemon logs from %d nodes, want %d", len(logs), len(cluster.Nodes))
	}
	return logs
}

// daemonAdd is the daemon's line for an ADD that succeeded, its
// CNI_ARGS quoted (their order varies).
var daemonAdd = regexp.MustCompile(`ADD finished CNI request .* Args:"([^"]*)" .*, err: <nil>$`)

// podsAddedByDaemon are the pods of namespace ns the daemon's log shows
// an ADD without error for.
func podsAddedByDaemon(log, ns string) sets.Set[string] {
	added := sets.New[string]()
	for _, line := range strings.Split(log, "\n") {
		m := daemonAdd.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		args := map[string]string{}
		for _, kv := range strings.Split(m[1], ";") {
			if k, v, ok := strings.Cut(kv, "="); ok {
				args[k] = v
			}
		}
		if args["K8S_POD_NAMESPACE"] == ns {
			added.Insert(args["K8S_POD_NAME"])
		}
	}
	return added
}

// thinMultusLogSizes is the size of each node's thin multus plugin log
// (its logFile, in the node's directory).
func thinMultusLogSizes(t *testing.T) map[string]int64 {
	t.Helper()
	sizes := map[string]int64{}
	for _, n := range cluster.Nodes {
		fi, err := os.Stat(filepath.Join(n.Dir, "logs", "multus.log"))
		switch {
		case errors.Is(err, fs.ErrNotExist):
			sizes[n.Name] = 0
		case err != nil:
			t.Fatal(err)
		default:
			sizes[n.Name] = fi.Size()
		}
	}
	return sizes
}

// restartAgents deletes the agent pods and waits until their DaemonSet's
// replacements are Ready on every node.
func restartAgents(ctx context.Context, t *testing.T) {
	t.Helper()
	sel := client.MatchingLabels{"app.kubernetes.io/name": "tenure-agent"}
	var old corev1.PodList
	if err := cl.List(ctx, &old, client.InNamespace(localnode.Namespace), sel); err != nil {
		t.Fatal(err)
	}
	var oldUIDs []string
	for _, p := range old.Items {
		oldUIDs = append(oldUIDs, string(p.UID))
		if err := cl.Delete(ctx, &p); err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
	}
	kc.Poll(ctx, t, "new agent pods Ready on every node", func() error {
		var pods corev1.PodList
		if err := cl.List(ctx, &pods, client.InNamespace(localnode.Namespace), sel); err != nil {
			return err
		}
		ready := map[string]bool{}
		for _, p := range pods.Items {
			if slices.Contains(oldUIDs, string(p.UID)) {
				continue
			}
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
					ready[p.Spec.NodeName] = true
				}
			}
		}
		for _, n := range cluster.Nodes {
			if !ready[n.Name] {
				return fmt.Errorf("no new Ready agent on %s", n.Name)
			}
		}
		return nil
	})
}

// waitGoneForRerun waits until the namespaces and CRDs a part makes, left
// by its earlier run, are deleted.
func waitGoneForRerun(ctx context.Context, t *testing.T, namespaces, crds []string) {
	t.Helper()
	ext, err := apiextensionsclient.NewForConfig(cp.Config)
	if err != nil {
		t.Fatal(err)
	}
	kc.Poll(ctx, t, fmt.Sprintf("namespaces %v and CRDs %v to be gone", namespaces, crds), func() error {
		for _, ns := range namespaces {
			if _, err := cs.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return fmt.Errorf("namespace %s: %v", ns, err)
			}
		}
		for _, crd := range crds {
			if _, err := ext.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, crd, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return fmt.Errorf("CRD %s: %v", crd, err)
			}
		}
		return nil
	})
}
