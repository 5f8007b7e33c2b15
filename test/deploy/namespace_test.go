//go:build integration

package deploy_test

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/kube"
	"github.com/tenure-ipam/tenure/internal/reservation"
	"github.com/tenure-ipam/tenure/test/controlplane/cptest"
	"github.com/tenure-ipam/tenure/test/testbed"
)

// otherNamespace is where testdata/other-namespace installs tenure.
const otherNamespace = "ipam-elsewhere"

// TestNodeRestrictionInAnotherNamespace: tenure installed with kustomize in
// a namespace other than tenure-system (testdata/other-namespace, an
// overlay of deploy/ that sets only `namespace:`) names tenure-system
// nowhere, and its node restriction is in force there: an agent whose token
// is bound to its pod on node A in that namespace runs, may create its own
// node's reservation, and is refused, by the policy's rule, a reservation
// of node B and the deletion of node B's.
func TestNodeRestrictionInAnotherNamespace(t *testing.T) {
	ctx := testContext(t, 3*time.Minute)
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	rm, err := k.Run(filesys.MakeFsOnDisk(), filepath.Join(repoRoot(), "test", "deploy", "testdata", "other-namespace"))
	if err != nil {
		t.Fatalf("kustomize build of the overlay: %v", err)
	}
	yml, err := rm.AsYaml()
	if err != nil {
		t.Fatal(err)
	}
	if i := bytes.Index(yml, []byte(namespace)); i >= 0 {
		t.Fatalf("the overlay's build still names %s: ...%s...", namespace, yml[max(0, i-300):min(len(yml), i+100)])
	}
	objs, err := decodeYAML(yml)
	if err != nil {
		t.Fatal(err)
	}
	find(t, objs, "Namespace", otherNamespace)
	if sa := find(t, objs, "ServiceAccount", agentSA); sa.GetNamespace() != otherNamespace {
		t.Fatalf("agent service account in %q, want %s", sa.GetNamespace(), otherNamespace)
	}
	// The policy does not depend on the namespace: the overlay's is
	// deploy/'s, so the one this cluster runs is the overlay's.
	policy := find(t, objs, "ValidatingAdmissionPolicy", testbed.AgentPolicyName)
	if base := find(t, kustomizeBuild(t), "ValidatingAdmissionPolicy", testbed.AgentPolicyName); !equality.Semantic.DeepEqual(policy.Object["spec"], base.Object["spec"]) {
		t.Fatal("the overlay's admission policy differs from deploy/'s")
	}

	c := adminClient(t)
	// The cluster-scoped ClusterRoleBindings share their names with
	// deploy/'s, which other tests of this package apply: give them back.
	t.Cleanup(func() {
		for _, o := range ofKind(kustomizeBuild(t), "ClusterRoleBinding") {
			if err := c.Apply(context.Background(), client.ApplyConfigurationFromUnstructured(o), client.FieldOwner(fieldManager), client.ForceOwnership); err != nil {
				t.Errorf("restoring %s: %v", objKey(o), err)
			}
		}
	})
	ns := find(t, objs, "Namespace", otherNamespace)
	if err := c.Create(ctx, ns.DeepCopy()); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	apply := []*unstructured.Unstructured{}
	apply = append(apply, ofKind(objs, "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")...)
	apply = append(apply, ofKind(objs, "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")...)
	for _, o := range apply {
		o = o.DeepCopy()
		if o.GetKind() == "ValidatingAdmissionPolicy" || o.GetKind() == "ValidatingAdmissionPolicyBinding" {
			o.SetNamespace("") // cluster-scoped: the overlay's namespace: put it back on
		}
		if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(o), client.FieldOwner(fieldManager), client.ForceOwnership); err != nil {
			t.Fatalf("applying %s: %v", objKey(o), err)
		}
	}

	admin := cptest.Current().Config
	// In force for this namespace's agent: a token of its service account
	// bound to no pod is refused (the API server loads policies a moment
	// after they are written).
	unboundToken, err := testbed.ServiceAccountToken(ctx, admin, otherNamespace, agentSA, nil)
	if err != nil {
		t.Fatal(err)
	}
	unbound, err := kube.NewClient(testbed.WithToken(admin, unboundToken))
	if err != nil {
		t.Fatal(err)
	}
	const network = "elsewhere"
	probe := nodeReservation("ns-probe", network, "10.78.0.9")
	var last error
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		last = unbound.Create(ctx, probe.DeepCopy(), client.DryRunAll)
		return apierrors.IsForbidden(last) && strings.Contains(last.Error(), "[node-bound-token]"), nil
	}); err != nil {
		t.Fatalf("a token of %s/%s bound to no pod: %v, want refused by [node-bound-token]", otherNamespace, agentSA, last)
	}

	nodeA, nodeB := "ns-elsewhere-a", "ns-elsewhere-b"
	for _, n := range []string{nodeA, nodeB} {
		if _, err := testbed.CreateNode(ctx, c, n); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	kubeconfig, err := testbed.NodeAgentKubeconfigIn(ctx, admin, otherNamespace, nodeA, dir)
	if err != nil {
		t.Fatal(err)
	}
	bins, err := testbed.Build("")
	if err != nil {
		t.Fatal(err)
	}
	agent, err := testbed.StartAgent(ctx, bins, dir, kubeconfig, nodeA)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		agent.Stop()
		if refusals := testbed.PolicyRefusals(agent.Log); len(refusals) > 0 {
			t.Errorf("the agent of %s was refused:\n%s", nodeA, strings.Join(refusals, "\n"))
		}
	})

	// The agent's own credentials: its pod-bound token in otherNamespace.
	cfg, err := kube.RESTConfig(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	a, err := kube.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Create(ctx, nodeReservation(nodeA, network, "10.78.0.1"), client.DryRunAll); err != nil {
		t.Fatalf("agent of %s creating its own node's reservation: %v", nodeA, err)
	}
	wantPolicyRefusal(t, "agent of A creates a reservation of node B",
		a.Create(ctx, nodeReservation(nodeB, network, "10.78.0.2"), client.DryRunAll), "reservation-create-own-node")
	theirs := nodeReservation(nodeB, network, "10.78.0.3")
	if err := c.Create(ctx, theirs); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Delete(context.Background(), theirs) })
	wantPolicyRefusal(t, "agent of A deletes node B's reservation", a.Delete(ctx, theirs.DeepCopy()), "reservation-delete-own-node")
	if err := c.Get(ctx, client.ObjectKeyFromObject(theirs), &tenurev1alpha1.IPReservation{}); err != nil {
		t.Errorf("node B's reservation after the refused delete: %v", err)
	}
}

// nodeReservation is a pod's reservation of addr made on node.
func nodeReservation(node, network, addr string) *tenurev1alpha1.IPReservation {
	a := netip.MustParseAddr(addr)
	uid := fmt.Sprintf("00000000-0000-4000-8000-%012d", time.Now().UnixNano()%1e12)
	return reservation.New(reservation.Spec{Network: network, Kind: tenurev1alpha1.KindAddress,
		Item: netip.PrefixFrom(a, a.BitLen()), Range: "10.78.0.0/24",
		Owner: tenurev1alpha1.ReservationOwner{Kind: tenurev1alpha1.OwnerPod, Namespace: "np", Name: "p-" + addr, UID: uid,
			PodName: "p-" + addr, PodUID: uid, ContainerID: "sandbox-" + uid, Interface: "net1", Node: node}})
}

// wantPolicyRefusal fails unless err is the node-restriction policy's
// refusal by rule.
func wantPolicyRefusal(t *testing.T, what string, err error, rule string) {
	t.Helper()
	switch {
	case err == nil:
		t.Errorf("%s: allowed, want refused by rule %s", what, rule)
	case !apierrors.IsForbidden(err) && !apierrors.IsInvalid(err):
		t.Errorf("%s: %v, want refused by rule %s", what, err, rule)
	case !strings.Contains(err.Error(), testbed.AgentPolicyName) || !strings.Contains(err.Error(), "["+rule+"]"):
		t.Errorf("%s: refused with %q, want the policy's rule [%s] named", what, err, rule)
	default:
		t.Logf("%s: refused: %v", what, err)
	}
}
