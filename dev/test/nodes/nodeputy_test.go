//go:build integration

package nodes_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/tenure-ipam/tenure/dev/devnode"
	"github.com/tenure-ipam/tenure/dev/localnode"
	"github.com/tenure-ipam/tenure/dev/nodetest"
	"github.com/tenure-ipam/tenure/internal/claims"
	"github.com/tenure-ipam/tenure/test/testbed"
)

// nodePodNetworksPolicy is the ValidatingAdmissionPolicy deploy/ ships
// (deploy/policy/node-pod-networks.yaml) that keeps a node's identities
// from changing a pod's networks annotation.
const nodePodNetworksPolicy = "tenure-node-pod-networks"

// Root on node 1 tries to take the claim of a VM running on node 2 with
// what node 1's kubelet may write (Node authorizer and NodeRestriction on,
// deploy/'s policies installed by the chart): a static pod manifest in
// node 1's staticPodPath whose networks annotation names the VM's claim,
// as a virt-launcher pod's does, and, with node 1's kubelet credentials,
// a pods/status patch that makes one of node 1's own pods name the claim.
// The mirror pod's ADD is refused by node 1's agent (the test logs which
// of its two refusals it met) and it holds no address of the claim; the
// rewrite is refused by the policy.
// After two full sweeps of the controller (a replica started after both
// writes sweeps at once, twice), the VM's reservations (by name and UID),
// its claim's status (ips, delegatedPrefixes in order, ownerPod), the
// DHCPv6 Renew answers from node 2 and node 2's route to its prefix are
// what they were; node 1 routes nothing of it and answers none of its
// Renews.
func mirrorPodAndKubeletRewriteOnNodeOne(t *testing.T) {
	ctx := nodetest.Context(t, 10*time.Minute)
	testbed.NeedDhclient(t)
	n1, n2 := cluster.Nodes[0], cluster.Nodes[1]
	ns1, ns2 := filepath.Base(n1.Netns()), filepath.Base(n2.Netns())
	installKubeVirtCRDs(ctx, t)
	// The migration part deleted the CRDs: the agents log that VMIs are
	// no longer served, and that they are once the CRDs are back.
	for i := range 2 {
		waitAgentLogLast(ctx, t, cluster.Nodes[i].Name, "KubeVirt VirtualMachineInstances are served", "KubeVirt VirtualMachineInstances are no longer served")
	}
	ns := migNamespace(ctx, t, "deputy3")

	// The VM on node 2, served and routed there.
	vm := createMigVM(ctx, t, ns, "vm2")
	vm.Start(ctx, t, cl)
	src := launcher(ctx, t, vm, n2.Name, "")
	vm.Running(ctx, t, cl, testbed.LauncherOf(src))
	waitClaimOwner(ctx, t, ns, vm.Claim, src.Name)
	onlyClaimHolds(ctx, t, ns, vm.Claim, src)
	wantAddr, wantPrefix := claimV6(ctx, t, ns, vm.Claim)
	guest := plugGuestOnSAN(ctx, t)
	dhc := startGuestDhclient(t, guest)
	if lease := dhc.waitLease(ctx); lease.Addr != wantAddr || lease.Prefix != wantPrefix {
		t.Fatalf("the guest leased %s and %s, the claim holds %s and %s", lease.Addr, lease.Prefix, wantAddr, wantPrefix)
	}
	wantRoute := fmt.Sprintf("%s via %s dev %s", wantPrefix, wantAddr, devnode.SANLink)
	waitPrefixRoute(ctx, t, ns2, wantPrefix, wantRoute)
	noPrefixRoute(ctx, t, ns1, wantPrefix)
	renewedByTwo := func(what string) {
		t.Helper()
		before1, before2 := renewReplies(ctx, t, 1), renewReplies(ctx, t, 2)
		dhc.waitRenewed(ctx, wantAddr, wantPrefix, what)
		if n := renewReplies(ctx, t, 2); n <= before2 {
			t.Fatalf("node-2 answered %v Renews, %v before: the guest's Renew %s was not answered there", n, before2, what)
		}
		if n := renewReplies(ctx, t, 1); n != before1 {
			t.Errorf("node-1 answered %v Renews %s, %v before", n, what, before1)
		}
	}
	renewedByTwo("before node 1's writes")

	type claimState struct {
		IPs, DelegatedPrefixes []string
		OwnerPod               string
	}
	stateOf := func() claimState {
		c := claimOf(ctx, t, ns, vm.Claim)
		s := claimState{IPs: c.Status.IPs, DelegatedPrefixes: c.Status.DelegatedPrefixes}
		if c.Status.OwnerPod != nil {
			s.OwnerPod = c.Status.OwnerPod.Name
		}
		return s
	}
	reservations := func() map[string]string {
		out := map[string]string{}
		for _, r := range kc.Reservations(ctx, t, ns) {
			out[r.Name+" ("+r.Spec.Address+")"] = string(r.UID)
		}
		return out
	}
	wantClaim, wantRes := stateOf(), reservations()
	claimAddrs := append(ipsOnly(wantClaim.IPs), wantClaim.DelegatedPrefixes...)
	presents := fmt.Sprintf(`[{"name":%q,"namespace":%q,"interface":%q,"mac":%q,"ipam-claim-reference":%q}]`,
		migNAD, ns, testbed.LauncherInterface(migNetwork), migVMMAC, vm.Claim)

	// (b) One of node 1's own pods, then node 1's kubelet rewriting its
	// networks annotation through pods/status to name the claim.
	own := localnode.Pod(ns, "node1-own", "")
	own.Spec.NodeName = n1.Name
	if err := cl.Create(ctx, own); err != nil {
		t.Fatal(err)
	}
	own = kc.WaitRunning(ctx, t, ns, own.Name)
	kubelet1, err := testbed.KubeletClientset(cp, n1.Name)
	if err != nil {
		t.Fatal(err)
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{nadv1.NetworkAttachmentAnnot: presents}}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = kubelet1.CoreV1().Pods(ns).Patch(ctx, own.Name, k8stypes.MergePatchType, patch, metav1.PatchOptions{}, "status")
	switch {
	case err == nil:
		t.Errorf("node 1's kubelet rewrote pod %s's %s through pods/status to name claim %s", own.Name, nadv1.NetworkAttachmentAnnot, vm.Claim)
	case !strings.Contains(err.Error(), nodePodNetworksPolicy) || !strings.Contains(err.Error(), "[pod-networks-immutable]"):
		t.Errorf("node 1's kubelet's rewrite of pod %s's networks: %v; want it refused by ValidatingAdmissionPolicy %s", own.Name, err, nodePodNetworksPolicy)
	default:
		t.Logf("node 1's kubelet's rewrite refused: %v", err)
	}
	if p, err := kc.Pod(ctx, ns, own.Name); err != nil {
		t.Fatal(err)
	} else if got := p.Annotations[nadv1.NetworkAttachmentAnnot]; got != own.Annotations[nadv1.NetworkAttachmentAnnot] {
		t.Errorf("pod %s's networks annotation is %q after node 1's kubelet's rewrite, was %q", own.Name, got, own.Annotations[nadv1.NetworkAttachmentAnnot])
	}

	// (a) A static pod on node 1 that presents the claim as a launcher
	// pod does.
	static := localnode.Pod(ns, "claimer", presents)
	static.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"}
	manifest, err := yaml.Marshal(static)
	if err != nil {
		t.Fatal(err)
	}
	manifestFile := filepath.Join(n1.StaticPodDir(), "claimer.yaml")
	if err := os.WriteFile(manifestFile, manifest, 0o644); err != nil {
		t.Fatal(err)
	}
	mirrorName := static.Name + "-" + n1.Name
	manifestGone := false
	removeManifest := func() {
		if !manifestGone {
			manifestGone = true
			if err := os.Remove(manifestFile); err != nil {
				t.Error(err)
			}
		}
	}
	defer removeManifest()
	var mirror *corev1.Pod
	var refusal string
	kc.Poll(ctx, t, "node 1's kubelet to create mirror pod "+mirrorName+" and its ADD to be refused", func() error {
		p, err := kc.Pod(ctx, ns, mirrorName)
		if err != nil {
			return err
		}
		if !claims.IsMirrorPod(p) {
			return fmt.Errorf("pod %s is no mirror pod: %v", p.Name, p.Annotations)
		}
		mirror = p
		// tenure's agent refuses it as a static pod: the runtime asks for
		// the manifest's hash, which the mirror pod carries.
		for _, e := range strings.Split(kc.Events(ctx, ns, mirrorName), " | ") {
			if !strings.HasPrefix(e, "FailedCreatePodSandBox: ") {
				continue
			}
			if strings.Contains(e, "pod "+ns+"/"+mirrorName+" is a static pod (its mirror pod carries "+corev1.MirrorPodAnnotationKey+"="+p.Annotations[corev1.MirrorPodAnnotationKey]+")") {
				refusal = e
				return nil
			}
		}
		return fmt.Errorf("phase %s, events: %s", p.Status.Phase, kc.Events(ctx, ns, mirrorName))
	})
	t.Logf("the mirror pod's ADD: %s", refusal)

	// Two full sweeps, each by a controller replica started after both
	// writes.
	for i := range 2 {
		restartControllerForASweep(ctx, t, i+1)
	}

	if p, err := kc.Pod(ctx, ns, mirrorName); err != nil {
		t.Fatal(err)
	} else {
		mirror = p
	}
	if p := mirror; p.Status.Phase == corev1.PodRunning {
		t.Errorf("mirror pod %s runs", p.Name)
	}
	if raw := mirror.Annotations[nadv1.NetworkStatusAnnot]; raw != "" {
		for _, a := range claimAddrs {
			if strings.Contains(raw, `"`+a+`"`) {
				t.Errorf("mirror pod %s's network-status holds the claim's %s: %s", mirror.Name, a, raw)
			}
		}
	}
	for _, r := range kc.Reservations(ctx, t, ns) {
		if r.Spec.Owner.Name == mirrorName || r.Spec.Owner.Name == own.Name {
			t.Errorf("reservation %s of %s is %s %s's", r.Name, r.Spec.Address, r.Spec.Owner.Kind, r.Spec.Owner.Name)
		}
	}
	if got := reservations(); !maps.Equal(got, wantRes) {
		t.Errorf("the VM's reservations (name: UID) are %v, were %v", got, wantRes)
	}
	if got := stateOf(); !slices.Equal(got.IPs, wantClaim.IPs) || !slices.Equal(got.DelegatedPrefixes, wantClaim.DelegatedPrefixes) || got.OwnerPod != wantClaim.OwnerPod {
		t.Errorf("claim %s's status is %+v, was %+v", vm.Claim, got, wantClaim)
	}
	onlyClaimHolds(ctx, t, ns, vm.Claim, src)
	renewedByTwo("after node 1's writes and two sweeps")
	waitPrefixRoute(ctx, t, ns2, wantPrefix, wantRoute)
	noPrefixRoute(ctx, t, ns1, wantPrefix)
	if got := dhc.leasedAddrs(); len(got) != 1 || got[0] != wantAddr.String() {
		t.Errorf("the guest was given %v, want only %s\n%s", got, wantAddr, dhc.Dump())
	}

	removeManifest()
	kc.WaitGone(ctx, t, ns, mirrorName)
	deletePod(ctx, t, own)
	dhc.Stop()
	if err := cl.Delete(ctx, vm.Object(), client.PropagationPolicy(metav1.DeletePropagationForeground)); err != nil {
		t.Fatal(err)
	}
	if err := releaseClaim(ctx, ns, vm.Claim); err != nil {
		t.Fatal(err)
	}
	kc.WaitReleased(ctx, t, ns)
	noPrefixRoute(ctx, t, ns2, wantPrefix)
}

// restartControllerForASweep deletes the controller's pod and waits
// until the replica that replaces it has finished a full sweep, which it
// runs as soon as it leads (its tenure_last_sweep_success_timestamp_seconds,
// scraped in its node's namespace, is set): a sweep that began after
// everything done before the call.
func restartControllerForASweep(ctx context.Context, t *testing.T, n int) {
	t.Helper()
	sel := client.MatchingLabels{"app.kubernetes.io/name": "tenure-controller"}
	var old corev1.PodList
	if err := cl.List(ctx, &old, client.InNamespace(localnode.Namespace), sel); err != nil {
		t.Fatal(err)
	}
	for _, p := range old.Items {
		if err := cl.Delete(ctx, &p); client.IgnoreNotFound(err) != nil {
			t.Fatal(err)
		}
	}
	kc.Poll(ctx, t, fmt.Sprintf("sweep %d: a new controller replica to sweep", n), func() error {
		var pods corev1.PodList
		if err := cl.List(ctx, &pods, client.InNamespace(localnode.Namespace), sel); err != nil {
			return err
		}
		for _, p := range pods.Items {
			if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning ||
				slices.ContainsFunc(old.Items, func(o corev1.Pod) bool { return o.UID == p.UID }) {
				continue
			}
			m, err := scrapeInNode(ctx, nodeNamed(t, p.Spec.NodeName), "127.0.0.1:9465")
			if err != nil {
				return err
			}
			if v, _ := m.Sum("tenure_last_sweep_success_timestamp_seconds"); v > 0 {
				t.Logf("sweep %d: by %s on %s at %s", n, p.Name, p.Spec.NodeName, time.Unix(int64(v), 0).UTC().Format(time.RFC3339))
				return nil
			}
			return fmt.Errorf("%s has not swept yet", p.Name)
		}
		return fmt.Errorf("no new replica running yet")
	})
}
