package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/config"
	"github.com/tenure-ipam/tenure/internal/kube"
)

// poolChooser resolves a config's pools list for one ADD (choosePools).
type poolChooser struct {
	node   string
	log    *slog.Logger
	client client.Reader
	// schema says whether the IPPool CRD has the selector fields a pools
	// list chooses by; nil without Options.OpenAPI.
	schema *kube.PoolSchema
}

// choosePools resolves at.cfg from at.base when the config names a pools
// list: per family the pool config.SelectPools chooses for the pod's
// namespace and this node, or the one holding an address of held (the
// items the pod's claim records). The pools, the namespace and the node
// are read from the API server, so a label changed a moment ago counts. A config
// without a list is left as loadConfig made it.
//
// A list is refused before anything is read or written while the
// cluster's IPPool CRD lacks the selector fields (poolSchemaOK).
func (p *poolChooser) choosePools(ctx context.Context, at *attachment, held []netip.Addr) error {
	if at.base.Pools == nil {
		return nil
	}
	if err := p.poolSchemaOK(ctx); err != nil {
		return err
	}
	// The listed pools are read from the API server, not the informer: an
	// object the informer received while the API server served an older
	// CRD lacks its selectors, and applying the CRD sends no event for it.
	specs := map[string]*tenurev1alpha1.IPPoolSpec{}
	for _, name := range at.base.Pools {
		pool := &tenurev1alpha1.IPPool{}
		if err := p.client.Get(ctx, k8stypes.NamespacedName{Name: name}, pool); err != nil {
			if apierrors.IsNotFound(err) {
				continue // SelectPools says "no IPPool of that name"
			}
			return codedf(CodeTryAgainLater, err, "reading IPPool %s", name)
		}
		specs[name] = &pool.Spec
	}
	ns := &corev1.Namespace{}
	if err := p.client.Get(ctx, k8stypes.NamespacedName{Name: at.pod.Namespace}, ns); err != nil {
		return codedf(CodeTryAgainLater, err, "reading namespace %s for the pools list's namespaceSelectors", at.pod.Namespace)
	}
	node := &corev1.Node{}
	if err := p.client.Get(ctx, k8stypes.NamespacedName{Name: p.node}, node); err != nil {
		return codedf(CodeTryAgainLater, err, "reading node %s for the pools list's nodeSelectors", p.node)
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
	p.log.Debug("pools chosen", "pod", at.pod.Namespace+"/"+at.pod.Name, "interface", at.req.IfName, "chosen", choice.Chosen)
	return nil
}

// poolSchemaOK makes sure the IPPool CRD the API server serves has the
// selector fields. An older CRD (Helm never upgrades one it installed)
// makes the API server prune them from every IPPool written: every pool
// would select every pod and the first listed pool would serve every node.
// Such a list is refused with code 7, naming the CRD, the fields and the
// fix; a schema that cannot be read now is code 11.
func (p *poolChooser) poolSchemaOK(ctx context.Context) error {
	if p.schema == nil {
		return codedf(CodeInvalidNetworkConfig, nil, "ipam.pools: this agent cannot read the API server's OpenAPI documents to make sure the IPPool CRD has the selector fields")
	}
	err := p.schema.Check(ctx)
	var stale *kube.StalePoolSchemaError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &stale):
		return codedf(CodeInvalidNetworkConfig, nil, "ipam.pools: %v", stale)
	default:
		return codedf(CodeTryAgainLater, err, "ipam.pools: reading the IPPool CRD's schema")
	}
}
