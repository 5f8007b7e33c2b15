package ops

import (
	"context"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tenure-ipam/tenure/internal/reservation"
)

// Networks returns the network names and allocation scopes that the
// declared pools and network configurations name, sorted: what Get takes.
func (c *Client) Networks(ctx context.Context) ([]string, error) {
	inv, err := c.inventory(ctx)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, s := range inv.Spaces() {
		for _, n := range []string{reservation.NetworkNameOf(s.Scope), s.Scope} {
			if !slices.Contains(out, n) {
				out = append(out, n)
			}
		}
	}
	slices.Sort(out)
	return out, nil
}

// PodNames returns the names of the pods of a namespace, from their
// metadata.
func (c *Client) PodNames(ctx context.Context, namespace string) ([]string, error) {
	l := &metav1.PartialObjectMetadataList{}
	l.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("PodList"))
	if err := c.c.List(ctx, l, client.InNamespace(namespace), client.Limit(c.PageSize)); err != nil {
		return nil, err
	}
	out := make([]string, len(l.Items))
	for i, p := range l.Items {
		out[i] = p.Name
	}
	return out, nil
}

// Namespaces returns the names of the namespaces.
func (c *Client) Namespaces(ctx context.Context) ([]string, error) {
	l := &metav1.PartialObjectMetadataList{}
	l.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("NamespaceList"))
	if err := c.c.List(ctx, l, client.Limit(c.PageSize)); err != nil {
		return nil, err
	}
	out := make([]string, len(l.Items))
	for i, n := range l.Items {
		out[i] = n.Name
	}
	return out, nil
}
