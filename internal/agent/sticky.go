package agent

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	k8stypes "k8s.io/apimachinery/pkg/types"

	ipamclaimsv1alpha1 "github.com/tenure-ipam/tenure/api/ipamclaims/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/claims"
)

// EventStickyClaimCreated is the reason of the Event on a pod whose ADD
// created its sticky claim.
const EventStickyClaimCreated = "StickyClaimCreated"

// stickyClaim returns the name of the sticky claim of the attachment, ""
// when it is not sticky: the pod's annotation, else the network's
// sticky_statefulsets, asks for it, and a StatefulSet controls the pod.
// With create, a missing claim is created (ADD); without, a missing one is
// no claim (CHECK).
func (cp *claimPath) stickyClaim(ctx context.Context, at *attachment, create bool) (string, error) {
	pod, ifName := at.pod, at.req.IfName
	want, set := claims.WantsSticky(pod, ifName)
	if !set {
		want = at.cfg.StickyStatefulSets
	}
	if !want {
		return "", nil
	}
	sts, _, ok := claims.StatefulSetOf(pod)
	if !ok {
		if !set {
			return "", nil // a sticky network's pods of other workloads are not sticky
		}
		return "", codedf(CodeInvalidNetworkConfig, nil, "pod %s/%s has annotation %s but is not a StatefulSet's pod (no apps StatefulSet controller reference whose name and an ordinal make the pod's name)",
			pod.Namespace, pod.Name, claims.StickyAnnotation)
	}
	name := claims.StickyClaimName(pod.Name, ifName)
	cl, err := cp.claimOrNil(ctx, pod.Namespace, name)
	if err != nil {
		return "", err
	}
	if cl == nil {
		if !create {
			return "", nil
		}
		cl = claims.NewStickyClaim(pod, ifName, at.cfg.Name, sts)
		if err := cp.client.Create(ctx, cl); apierrors.IsAlreadyExists(err) {
			// A concurrent ADD of the same pod name made it: the claim
			// path reads it from the API server.
			return name, nil
		} else if err != nil {
			return "", err
		}
		cp.log.Info("created sticky IPAMClaim", "claim", claims.Key(cl), "statefulSet", sts.Name, "pod", pod.Name, "ifName", ifName)
		if cp.recorder != nil {
			cp.recorder.Eventf(pod, corev1.EventTypeNormal, EventStickyClaimCreated, "IPAMClaim %s keeps the addresses of interface %s for the pods called %s of StatefulSet %s", cl.Name, ifName, pod.Name, sts.Name)
		}
		return name, nil
	}
	if s, sticky, _ := claims.StickyOf(cl); !sticky || s.Pod != pod.Name {
		return "", codedf(CodeInvalidNetworkConfig, nil, "IPAMClaim %s exists but is not the sticky claim of pod %s (label %s=true, annotation %s=%s)",
			claims.Key(cl), pod.Name, claims.LabelSticky, claims.AnnotationPod, pod.Name)
	}
	return name, nil
}

// claimOrNil reads a claim from the cache, else the API server; nil when
// neither has it.
func (cp *claimPath) claimOrNil(ctx context.Context, namespace, name string) (*ipamclaimsv1alpha1.IPAMClaim, error) {
	if obj, ok, _ := cp.claims.GetIndexer().GetByKey(namespace + "/" + name); ok {
		return obj.(*ipamclaimsv1alpha1.IPAMClaim), nil
	}
	c := &ipamclaimsv1alpha1.IPAMClaim{}
	if err := cp.client.Get(ctx, k8stypes.NamespacedName{Namespace: namespace, Name: name}, c); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, err
	}
	return c, nil
}
