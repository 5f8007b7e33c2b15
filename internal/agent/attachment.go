package agent

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/allocator"
	"github.com/tenure-ipam/tenure/internal/claims"
	"github.com/tenure-ipam/tenure/internal/cniwire"
	"github.com/tenure-ipam/tenure/internal/config"
	"github.com/tenure-ipam/tenure/internal/reservation"
)

// slot is one thing an ADD hands out: an address of a range (Range set),
// or a prefix of the delegation pool (Range nil). It is the config's scoped
// space and what the pod asks of it.
type slot struct {
	config.ScopedSpace
	// requested is the address runtimeConfig.ips asks for from Range; zero
	// for any free one.
	requested netip.Addr
}

// requestedItem is the requested address as the allocator's item.
func (s slot) requestedItem() netip.Prefix {
	return netip.PrefixFrom(s.requested, s.requested.BitLen())
}

// holds reads the reservation's name, which says its scope and item
// whether the cache holds the whole object or only its metadata.
func (s slot) holds(r *tenurev1alpha1.IPReservation) bool {
	return reservation.ScopeLabelOf(r.Name) == reservation.ScopeLabel(s.Scope) && allocator.InSpace(s.Space, r.Name)
}

func slots(cfg *config.Config, withPrefix bool) []slot {
	out := make([]slot, 0, len(cfg.Ranges)+1)
	for i, sp := range cfg.Spaces() {
		if sp.Range == nil && !withPrefix {
			continue
		}
		s := slot{ScopedSpace: sp}
		if i < len(cfg.Requested) {
			s.requested = cfg.Requested[i]
		}
		out = append(out, s)
	}
	return out
}

type heldSlot struct {
	slot slot
	res  *tenurev1alpha1.IPReservation
}

func firstHeld(rs []*tenurev1alpha1.IPReservation, s slot) *tenurev1alpha1.IPReservation {
	for _, r := range rs {
		if s.holds(r) {
			return r
		}
	}
	return nil
}

type attachment struct {
	req *cniwire.Request
	// cfg is the config the ADD allocates from; for a pools list, base
	// until choosePools resolved it, and base is the config as parsed.
	cfg  *config.Config
	base *config.Config
	pod  *corev1.Pod
	sel  claims.Selection
	args podArgs
}

func attachmentKey(req *cniwire.Request) string {
	return reservation.AttachmentKey(req.ContainerID, req.IfName)
}

// callReader reads what a call is about: its network config, parsed once
// per distinct config (netconfs) and completed by the IPPool it names, and
// its pod.
type callReader struct {
	node string
	// podWait is how long a call waits for its pod to reach the cache
	// before reading it from the API server.
	podWait  time.Duration
	client   client.Reader
	pods     cache.SharedIndexInformer
	pools    cache.SharedIndexInformer
	netconfs *netconfCache
}

func (cr *callReader) loadConfig(ctx context.Context, req *cniwire.Request) (*config.Config, error) {
	cfg, err := cr.netconfs.get(req.StdinData, req.FlatConfig)
	if err != nil {
		return nil, err
	}
	if cfg.Pool == "" {
		return cfg, nil // its own ranges, or a pools list SelectPools resolves per pod
	}
	pool := &tenurev1alpha1.IPPool{}
	if obj, ok, _ := cr.pools.GetIndexer().GetByKey(cfg.Pool); ok {
		pool = obj.(*tenurev1alpha1.IPPool)
	} else if err := cr.client.Get(ctx, k8stypes.NamespacedName{Name: cfg.Pool}, pool); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, &config.Error{Key: "ipam.pool", Value: fmt.Sprintf("%q", cfg.Pool), Reason: "no IPPool of that name"}
		}
		return nil, err
	}
	if err := cfg.ApplyPool(pool.Name, pool.Spec); err != nil {
		return nil, err
	}
	return cfg, nil
}

func (cr *callReader) prepare(ctx context.Context, req *cniwire.Request) (*attachment, error) {
	if req.ContainerID == "" || req.IfName == "" {
		return nil, codedf(CodeInvalidEnvironmentVariables, nil, "CNI_CONTAINERID and CNI_IFNAME are required (got %q, %q)", req.ContainerID, req.IfName)
	}
	cfg, err := cr.loadConfig(ctx, req)
	if err != nil {
		return nil, err
	}
	args, err := parseCNIArgs(req.Args)
	if err != nil {
		return nil, codedf(CodeInvalidEnvironmentVariables, nil, "%v", err)
	}
	pod, err := cr.pod(ctx, args)
	if err != nil {
		return nil, err
	}
	sel, err := claims.Select(pod, req.IfName)
	if err != nil {
		return nil, codedf(CodeInvalidNetworkConfig, nil, "%v", err)
	}
	return &attachment{req: req, cfg: cfg, base: cfg, pod: pod, sel: sel, args: args}, nil
}

func (cr *callReader) pod(ctx context.Context, args podArgs) (*corev1.Pod, error) {
	key := args.Namespace + "/" + args.Name
	match := func(p *corev1.Pod) bool { return args.UID == "" || string(p.UID) == args.UID }
	// The runtime calls ADD right after the pod was bound, often before the
	// pod informer has it: wait a moment for the cache, then ask the API.
	var cached *corev1.Pod
	inCache := func(context.Context) (bool, error) {
		if obj, ok, _ := cr.pods.GetIndexer().GetByKey(key); ok && match(obj.(*corev1.Pod)) {
			cached = obj.(*corev1.Pod)
			return true, nil
		}
		return false, nil
	}
	// Looked up once before the poll, which costs a timer and a context
	// even when, as on most calls, the cache has the pod already.
	if found, _ := inCache(ctx); !found {
		_ = wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, cr.podWait, true, inCache)
	}
	if cached != nil {
		return cached, nil
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	p := &corev1.Pod{}
	if err := cr.client.Get(ctx, k8stypes.NamespacedName{Namespace: args.Namespace, Name: args.Name}, p); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, codedf(CodeTryAgainLater, nil, "pod %s not found", key)
		}
		return nil, err
	}
	if !match(p) {
		if hash, ok := p.Annotations[corev1.MirrorPodAnnotationKey]; ok && hash == args.UID {
			// The runtime's UID of a static pod is its manifest's hash,
			// which the kubelet writes on the mirror pod; the mirror pod is
			// the node's own word (claims.IsMirrorPod).
			return nil, codedf(CodeStaticPod, nil, "pod %s is a static pod (its mirror pod carries %s=%s): tenure gives no address of a shared network to a pod whose API object its node writes itself, as NodeRestriction gives a mirror pod no Secret, ConfigMap or ServiceAccount; run it as a DaemonSet's pod",
				key, corev1.MirrorPodAnnotationKey, hash)
		}
		return nil, codedf(CodeTryAgainLater, nil, "pod %s has UID %s, the runtime asked for UID %s (a deleted pod's sandbox)", key, p.UID, args.UID)
	}
	switch p.Spec.NodeName {
	case cr.node:
	case "":
		// A runtime sets up pods bound to its node; an unbound pod's
		// reservation would record a node that may never run it.
		return nil, codedf(CodeInvalidEnvironmentVariables, nil, "pod %s is not bound to a node (spec.nodeName is empty), this agent serves node %s", key, cr.node)
	default:
		return nil, codedf(CodeInvalidEnvironmentVariables, nil, "pod %s is bound to node %s, this agent serves node %s", key, p.Spec.NodeName, cr.node)
	}
	return p, nil
}
