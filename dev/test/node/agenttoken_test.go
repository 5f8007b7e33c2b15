//go:build integration

package node_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipamclaimsv1alpha1 "github.com/tenure-ipam/tenure/api/ipamclaims/v1alpha1"
	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/dev/localnode"
	"github.com/tenure-ipam/tenure/dev/nodetest"
	"github.com/tenure-ipam/tenure/internal/admission"
	"github.com/tenure-ipam/tenure/internal/kube"
	"github.com/tenure-ipam/tenure/internal/reservation"
	"github.com/tenure-ipam/tenure/test/testbed"
)

// Rows of the attack matrix (test/e2e TestAgentAttackMatrix) sent with the
// token the kubelet minted for the DaemonSet's agent pod, read from the
// pod's projected volume on the host: the node restriction holds the real
// agent to its node (deploy/policy's CEL and deploy/webhook's webhook,
// served by the deployed controller), and lets it write its own node's
// objects.
func TestTheAgentsKubeletMintedTokenIsHeldToItsNode(t *testing.T) {
	ctx := nodetest.Context(t, 2*time.Minute)
	agent := podOf(t, "app.kubernetes.io/name=tenure-agent")
	var self corev1.Node
	if err := cl.Get(ctx, client.ObjectKey{Name: node.Name}, &self); err != nil {
		t.Fatal(err)
	}

	// The kubelet's projected service-account token of the agent pod.
	token, file := nodetest.ProjectedToken(t, filepath.Join(node.Dir, "kubelet", "root"), string(agent.UID))

	// Bound to that pod on this node: in its claims, and as the API server
	// authenticates it.
	claims := tokenClaims(t, token)
	k := claims.Kubernetes
	if k.Namespace != localnode.Namespace || k.ServiceAccount.Name != testbed.AgentServiceAccount ||
		k.Pod.Name != agent.Name || k.Pod.UID != string(agent.UID) || k.Node.Name != node.Name || k.Node.UID != string(self.UID) {
		t.Fatalf("the token's kubernetes.io claims %+v, want service account %s/%s, pod %s (uid %s), node %s (uid %s)",
			k, localnode.Namespace, testbed.AgentServiceAccount, agent.Name, agent.UID, node.Name, self.UID)
	}
	tr, err := cs.AuthenticationV1().TokenReviews().Create(ctx, &authv1.TokenReview{Spec: authv1.TokenReviewSpec{Token: token}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	u := tr.Status.User
	if !tr.Status.Authenticated || u.Username != "system:serviceaccount:"+localnode.Namespace+":"+testbed.AgentServiceAccount ||
		strings.Join(u.Extra["authentication.kubernetes.io/pod-uid"], ",") != string(agent.UID) ||
		strings.Join(u.Extra["authentication.kubernetes.io/node-name"], ",") != node.Name {
		t.Fatalf("TokenReview of the agent's token: authenticated %v, %+v (error %q)", tr.Status.Authenticated, u, tr.Status.Error)
	}
	t.Logf("the agent pod %s's token (%s): %s, pod uid %s, node %s, expires %s", agent.Name, file, u.Username, k.Pod.UID, k.Node.Name,
		time.Unix(claims.Exp, 0).UTC().Format(time.RFC3339))
	agentCfg := testbed.WithToken(cp.Config, token)
	ac, err := kube.NewClient(agentCfg)
	if err != nil {
		t.Fatal(err)
	}

	// Node B's objects, as B's agent would have written them: a pod of
	// B's that presents a VM's claim, and the claim's status naming it.
	// No kubelet serves B: the pods stay Pending, bound to it.
	const network, other = "agent-token-net", "agent-token-node-b"
	ns := kc.Namespace(ctx, t, "agent-token")
	claimB := &ipamclaimsv1alpha1.IPAMClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "vm-b"},
		Spec: ipamclaimsv1alpha1.IPAMClaimSpec{Network: network, Interface: "net1"}}
	if err := cl.Create(ctx, claimB); err != nil {
		t.Fatal(err)
	}
	launcherB := localnode.Pod(ns, "launcher-b", fmt.Sprintf(`[{"name":%q,"interface":"net1","ipam-claim-reference":%q}]`, network, claimB.Name))
	launcherB.Spec.NodeName = other
	if err := cl.Create(ctx, launcherB); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = testbed.ForceDeletePod(context.Background(), cl, ns, launcherB.Name) })
	// On a fresh read each time: the controller adds its finalizer to a
	// new claim meanwhile.
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := cl.Get(ctx, client.ObjectKeyFromObject(claimB), claimB); err != nil {
			return err
		}
		claimB.Status.IPs, claimB.Status.OwnerPod = []string{"10.93.0.2/24"}, &ipamclaimsv1alpha1.OwnerPod{Name: launcherB.Name}
		return cl.Status().Update(ctx, claimB)
	}); err != nil {
		t.Fatal(err)
	}

	held := func(addr string, o tenurev1alpha1.ReservationOwner) *tenurev1alpha1.IPReservation {
		return reservation.New(reservation.Spec{Network: network, Kind: tenurev1alpha1.KindAddress, Item: netip.MustParsePrefix(addr + "/32"),
			Range: "10.93.0.0/24", CNINetwork: network, Owner: o})
	}
	// B's reservation: labelled and owned as node B's agent makes it.
	resB := held("10.93.0.1", testbed.PodOwner(launcherB, other))
	if got := resB.Labels[reservation.LabelNode]; got != reservation.NodeLabel(other) || resB.Spec.Owner.Node != other {
		t.Fatalf("reservation of node B: label %s=%q, spec.owner.node %q", reservation.LabelNode, got, resB.Spec.Owner.Node)
	}
	// The agent's own: a reservation for its own pod on this node, then its
	// release (what a DEL does).
	ownRes := held("10.93.0.10", testbed.PodOwner(agent, node.Name))

	rows := []testbed.Attempt{
		testbed.Try("B's pod's reservation", "ipreservations", "create", "reserve an address as node B",
			func() error { return ac.Create(ctx, resB.DeepCopy()) }, "reservation-create-own-node"),
		testbed.Try("claim of B's VM", "ipamclaims/status", "update", "hole 1: point ownerPod at its own pod",
			func() error { return testbed.PresentClaim(ctx, ac, client.ObjectKeyFromObject(claimB), agent.Name) }, admission.RuleClaimStatusPresented),
		testbed.Try("its own pod", "ipreservations", "create", "reserve for its pod",
			func() error { return ac.Create(ctx, ownRes.DeepCopy()) }, ""),
		testbed.Try("its own pod", "ipreservations", "delete", "release its pod's address",
			func() error { return ac.Delete(ctx, ownRes.DeepCopy()) }, ""),
	}
	t.Cleanup(func() { _ = cl.Delete(context.Background(), ownRes.DeepCopy()) })
	table := testbed.RunMatrix(t, "node B's unless its own", rows)
	t.Logf("the DaemonSet agent's kubelet-minted token (node %s) against node %s:\n%s", node.Name, other, table)

	// What remains: nothing of B's was written, B's claim names B's pod,
	// and the agent's own reservation is gone again.
	for _, name := range []string{resB.Name, ownRes.Name} {
		if err := cl.Get(ctx, client.ObjectKey{Name: name}, &tenurev1alpha1.IPReservation{}); !apierrors.IsNotFound(err) {
			t.Errorf("reservation %s: %v, want not found", name, err)
		}
	}
	if st := kc.Claim(ctx, t, ns, claimB.Name).Status; st.OwnerPod == nil || st.OwnerPod.Name != launcherB.Name {
		t.Errorf("B's VM's claim's ownerPod: %+v, want %s", st.OwnerPod, launcherB.Name)
	}
}

// jwtClaims are the claims of a pod-bound service-account token.
type jwtClaims struct {
	Exp        int64 `json:"exp"`
	Kubernetes struct {
		Namespace      string `json:"namespace"`
		ServiceAccount struct{ Name, UID string }
		Pod            struct{ Name, UID string }
		Node           struct{ Name, UID string }
	} `json:"kubernetes.io"`
}

// tokenClaims decodes a JWT's payload (its signature is the API server's
// to check: the TokenReview does).
func tokenClaims(t *testing.T, token string) jwtClaims {
	t.Helper()
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		t.Fatalf("the token is not a JWT: %d parts", len(parts))
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		t.Fatalf("the token's payload: %v", err)
	}
	var c jwtClaims
	if err := json.Unmarshal(payload, &c); err != nil {
		t.Fatalf("the token's payload %s: %v", payload, err)
	}
	return c
}
