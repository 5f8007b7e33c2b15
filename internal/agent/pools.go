package agent

import (
	"context"
	"errors"
	"fmt"
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	k8stypes "k8s.io/apimachinery/pkg/types"

	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/config"
)

// choosePools resolves at.cfg from at.base when the config names a pools
// list: per family the pool config.SelectPools chooses for the pod's
// namespace and this node, or the one holding an address of held (the
// items the pod's claim records). The namespace and the node are read
// from the API server, so a label changed a moment ago counts. A config
// without a list is left as loadConfig made it.
func (a *Agent) choosePools(ctx context.Context, at *attachment, held []netip.Addr) error {
	if at.base.Pools == nil {
		return nil
	}
	specs := map[string]*tenurev1alpha1.IPPoolSpec{}
	for _, name := range at.base.Pools {
		pool := &tenurev1alpha1.IPPool{}
		if obj, ok, _ := a.pools.GetIndexer().GetByKey(name); ok {
			pool = obj.(*tenurev1alpha1.IPPool)
		} else if err := a.client.Get(ctx, k8stypes.NamespacedName{Name: name}, pool); err != nil {
			if apierrors.IsNotFound(err) {
				continue // SelectPools says "no IPPool of that name"
			}
			return codedf(CodeTryAgainLater, err, "reading IPPool %s", name)
		}
		specs[name] = &pool.Spec
	}
	ns := &corev1.Namespace{}
	if err := a.client.Get(ctx, k8stypes.NamespacedName{Name: at.pod.Namespace}, ns); err != nil {
		return codedf(CodeTryAgainLater, err, "reading namespace %s for the pools list's namespaceSelectors", at.pod.Namespace)
	}
	node := &corev1.Node{}
	if err := a.client.Get(ctx, k8stypes.NamespacedName{Name: a.node}, node); err != nil {
		return codedf(CodeTryAgainLater, err, "reading node %s for the pools list's nodeSelectors", a.node)
	}
	cfg, choice, err := at.base.SelectPools(specs, config.Placement{
		Namespace: ns.Name, NamespaceLabels: ns.Labels, Node: node.Name, NodeLabels: node.Labels}, held)
	if err != nil {
		var ce *config.Error
		if errors.As(err, &ce) {
			return err // code 7
		}
		return fmt.Errorf("choosing a pool: %w", err)
	}
	at.cfg = cfg
	a.log.Debug("pools chosen", "pod", at.pod.Namespace+"/"+at.pod.Name, "interface", at.req.IfName, "chosen", choice.Chosen)
	return nil
}
