package agent

import (
	"cmp"
	"context"
	"log/slog"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/record"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipamclaimsv1alpha1 "github.com/tenure-ipam/tenure/api/ipamclaims/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/claims"
	"github.com/tenure-ipam/tenure/internal/kubevirt"
)

// Where KubeVirt's API is served, a claim of a virtual machine has its
// status.ownerPod on the pod of the node the VM runs on (the VMI's
// status.nodeName, or the target of a migration that switched over:
// kubevirt.Migration.SwitchedOver): the pod that serves its DHCPv6 and
// holds its route (internal/dataplane, rule 4). The claim's IPsAllocated
// condition names that pod. A stopped VM's ownerPod names the last pod that
// served it; the next start's ADD moves it to the new pod.
//
// Two writers keep it there, both the agent of that node, whose
// node-restriction policy lets it set ownerPod to a pod (never clear it).
// Neither moves it on its caches' word alone: a move is an update that
// carries the resourceVersion of the claim its writer read (a conflict
// means another writer moved it first, and the move is re-decided on the
// newer claim), and a move away from the pod ownerPod names is decided on
// the VMI as the API server has it then (kubevirt.Read), not as the
// writer's VMI cache has it: an agent whose VMI cache lags behind its claim
// cache (or that was paused across a switchover) would otherwise see the
// VM still on its node and undo the switchover. ownerPod therefore never
// goes back to a node the VM has left:
//   - the ADD of a migration target does not move ownerPod while the VM
//     still runs on another node (recordClaim; without KubeVirt's API,
//     where ownerPod alone decides, it moves it);
//   - the agent of the node the VM runs on writes ownerPod to its pod when
//     it names another one: at the switchover (the target's agent), and
//     wherever the ADD moved it before the VMI was known, e.g. KubeVirt's
//     API appeared after the ADD (the source's agent puts it back). A
//     migration that fails before the switchover leaves ownerPod on the
//     source; one that fails after it, the source's agent moves it back.

// EventOwnerPodFollowsVM is the reason of the Event on a claim whose
// ownerPod the agent moved to the node its VM runs on.
const EventOwnerPodFollowsVM = "OwnerPodFollowsVM"

// ownerFollowRetry spaces the retries of an ownerPod write that failed.
const ownerFollowRetry = 2 * time.Second

// ownerFollower keeps the ownerPod of the claims of VMs running on node on
// node's pod (the rule above), and answers the claim path's questions
// about VMIs.
type ownerFollower struct {
	node     string
	log      *slog.Logger
	client   client.Client
	recorder record.EventRecorder
	vmis     *kubevirt.Watcher
	// pods and claim read the caches (informerSource's).
	pods  func() []*corev1.Pod
	claim func(namespace, name string) (*ipamclaimsv1alpha1.IPAMClaim, bool)
	// kick triggers run.
	kick chan struct{}
}

func newOwnerFollower(node string, log *slog.Logger, c client.Client, rec record.EventRecorder, vmis *kubevirt.Watcher,
	pods func() []*corev1.Pod, claim func(namespace, name string) (*ipamclaimsv1alpha1.IPAMClaim, bool)) *ownerFollower {
	return &ownerFollower{node: node, log: log, client: c, recorder: rec, vmis: vmis, pods: pods, claim: claim, kick: make(chan struct{}, 1)}
}

// vmiLookup is the VMI cache while it is served, else nil.
func (f *ownerFollower) vmiLookup() kubevirt.Lookup {
	if f.vmis == nil || !f.vmis.Served() {
		return nil
	}
	return f.vmis.Get
}

// vmRunsElsewhere names the VMI of a claim presented by pod when it runs on
// another node than this agent's, read from the API server (the ADD is
// about to move ownerPod away from the pod it names). Without KubeVirt's
// API, false.
func (f *ownerFollower) vmRunsElsewhere(ctx context.Context, claim *ipamclaimsv1alpha1.IPAMClaim, pod *corev1.Pod) (kubevirt.VMI, bool, error) {
	if f.vmiLookup() == nil {
		return kubevirt.VMI{}, false, nil
	}
	var err error
	vmi, ok := kubevirt.VMOf(kubevirt.LiveLookup(ctx, f.client, &err), pod.Namespace, claim.OwnerReferences, pod.OwnerReferences)
	if err != nil {
		return kubevirt.VMI{}, false, err
	}
	return vmi, ok && vmi.Node() != f.node, nil
}

// trigger asks followOwners to run soon; calls coalesce.
func (f *ownerFollower) trigger() {
	select {
	case f.kick <- struct{}{}:
	default:
	}
}

// run moves ownerPod of the claims of VMs running here to the local pod,
// on every change of pods, claims or VMIs, until ctx ends.
func (f *ownerFollower) run(ctx context.Context) {
	var retry <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-f.kick:
		case <-retry:
		}
		retry = nil
		if !f.followOwners(ctx) {
			retry = time.After(ownerFollowRetry)
		}
	}
}

// followOwners writes ownerPod where OwnerPodMoves says; false when a write
// failed and is to be retried.
func (f *ownerFollower) followOwners(ctx context.Context) bool {
	lookup := f.vmiLookup()
	if lookup == nil {
		return true
	}
	ok := true
	for _, m := range OwnerPodMoves(f.pods(), f.claim, lookup, f.node) {
		claim, found := f.claim(m.Namespace, m.Claim)
		if !found {
			continue
		}
		// The caches said so; the API server decides: a VMI cache behind
		// the claim cache must not move ownerPod back to where the VM was.
		vmiNS, vmiName, _ := strings.Cut(m.VMI, "/")
		live, exists, err := kubevirt.Read(ctx, f.client, vmiNS, vmiName)
		if err != nil {
			f.log.Warn("cannot read the VirtualMachineInstance before moving the claim's ownerPod", "claim", m.Namespace+"/"+m.Claim, "vmi", m.VMI, "err", err)
			ok = false
			continue
		}
		if !exists || live.Node() != f.node {
			f.log.Info("claim's ownerPod stays: the VirtualMachineInstance no longer runs on this node (the VMI cache is behind)",
				"claim", m.Namespace+"/"+m.Claim, "ownerPod", claim.Status.OwnerPod.Name, "vmi", m.VMI, "vmNode", live.Node())
			continue
		}
		claim = claim.DeepCopy()
		from := claim.Status.OwnerPod.Name
		claim.Status.OwnerPod = &ipamclaimsv1alpha1.OwnerPod{Name: m.Pod}
		claims.SetCondition(claim, true, ipamclaimsv1alpha1.ReasonSuccessfulAllocation, "IPs allocated to pod "+m.Pod)
		// claim carries the resourceVersion read: the update is conditional
		// on no other writer having moved ownerPod since.
		err = f.client.Status().Update(ctx, claim)
		switch {
		case apierrors.IsConflict(err) || apierrors.IsNotFound(err):
			// The cache is behind; the claim's update event runs this again.
		case err != nil:
			f.log.Warn("cannot move the claim's ownerPod to the node its VM runs on", "claim", claims.Key(claim), "pod", m.Pod, "err", err)
			ok = false
		default:
			f.log.Info("claim's ownerPod follows its VM", "claim", claims.Key(claim), "from", from, "to", m.Pod, "vmi", m.VMI, "node", f.node)
			if f.recorder != nil {
				f.recorder.Eventf(claim, corev1.EventTypeNormal, EventOwnerPodFollowsVM, "status.ownerPod moved from %s to %s: VirtualMachineInstance %s runs on node %s", from, m.Pod, m.VMI, f.node)
			}
		}
	}
	return ok
}

// OwnerPodMove is one claim whose ownerPod is to name Pod.
type OwnerPodMove struct {
	Namespace, Claim, Pod, VMI string
}

// OwnerPodMoves is the pure rule of followOwners: for every held claim
// (claims.Held) presented by a pod of node (claims.MayPresent: no mirror
// pod, not terminal, not being deleted, one of its VMI's pods)
// whose VMI runs on node, whose status already records an owner (the ADD
// writes the first one) and whose ownerPod names no such pod, the move to
// the first of them by name.
func OwnerPodMoves(pods []*corev1.Pod, claim func(namespace, name string) (*ipamclaimsv1alpha1.IPAMClaim, bool), lookup kubevirt.Lookup, node string) []OwnerPodMove {
	type key struct{ ns, claim string }
	presenters := map[key][]string{}
	vmiOf := map[key]string{}
	for _, pod := range pods {
		if pod == nil || pod.Spec.NodeName != node || pod.DeletionTimestamp != nil ||
			pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
			continue
		}
		elems, err := claims.Networks(pod)
		if err != nil {
			continue
		}
		for _, e := range elems {
			if e == nil || e.IPAMClaimReference == "" {
				continue
			}
			c, ok := claim(pod.Namespace, e.IPAMClaimReference)
			if !ok || c == nil || !claims.Held(c) || c.Status.OwnerPod == nil || c.Status.OwnerPod.Name == "" {
				continue
			}
			vmi, ok := kubevirt.VMOf(lookup, pod.Namespace, c.OwnerReferences, pod.OwnerReferences)
			if !ok || vmi.Node() != node || claims.MayPresent(pod, c, lookup) != nil {
				continue
			}
			k := key{pod.Namespace, e.IPAMClaimReference}
			if !slices.Contains(presenters[k], pod.Name) {
				presenters[k] = append(presenters[k], pod.Name)
			}
			vmiOf[k] = vmi.Namespace + "/" + vmi.Name
		}
	}
	var out []OwnerPodMove
	for k, names := range presenters {
		c, _ := claim(k.ns, k.claim)
		if slices.Contains(names, c.Status.OwnerPod.Name) {
			continue
		}
		slices.Sort(names)
		out = append(out, OwnerPodMove{Namespace: k.ns, Claim: k.claim, Pod: names[0], VMI: vmiOf[k]})
	}
	slices.SortFunc(out, func(a, b OwnerPodMove) int {
		return cmp.Or(strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Claim, b.Claim))
	})
	return out
}
