// Package ops is what tenurectl's operator commands do, as a plain Go API
// over the Kubernetes API: pool usage (Pools), a network's reservations
// (Get), who holds an address (Who), why a pod has no address (Why),
// releasing one address (Release) and the consistency check (Check). The
// command layer in cmd/tenurectl only parses flags and prints what these
// return (each report has a WriteTable method; JSON and YAML are its
// fields).
//
// The decisions are pure functions over listed objects, table-tested
// without an API server: the check's rules (rules.go), the pool rows, the
// current node of a reservation's owner, a pod's attachments.
package ops

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/openapi"
	"k8s.io/client-go/tools/pager"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/inventory"
	"github.com/tenure-ipam/tenure/internal/reservation"
)

// DefaultPageSize is the number of objects per list page: what kubectl
// uses (--chunk-size), so a list of 100,000 reservations is 200 requests of
// bounded size rather than one response the API server builds in memory.
const DefaultPageSize = 500

// Client runs the operator commands against one cluster.
type Client struct {
	c client.Client
	// OpenAPI reads the API server's OpenAPI v3 documents, for whether the
	// IPPool CRD has the fields pools lists choose by
	// (RuleIPPoolSchemaStale); nil leaves that unchecked, with a note.
	OpenAPI openapi.ClientWithContext
	// Now is the clock for ages and grace periods.
	Now func() time.Time
	// PageSize is the limit of each list request.
	PageSize int64
	// Progress, when set, is called after each page of a long list with
	// what is being listed and how many objects have been read so far.
	Progress func(what string, n int)
}

// New returns a Client over c, which must know tenure's types (kube.Scheme).
func New(c client.Client) *Client {
	return &Client{c: c, Now: time.Now, PageSize: DefaultPageSize}
}

// each calls fn for every object of a paged list. A page is a consistent
// snapshot with the others (the continue token pins the revision); when the
// token expires mid-way, client-go's pager falls back to one full list.
func (c *Client) each(ctx context.Context, what string, newList func() client.ObjectList, opts metav1.ListOptions, fn func(runtime.Object) error) error {
	p := pager.New(func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
		l := newList()
		// controller-runtime takes limit and continue from its own fields,
		// not from Raw.
		err := c.c.List(ctx, l, &client.ListOptions{Raw: &o, Limit: o.Limit, Continue: o.Continue})
		return l, err
	})
	p.PageSize = c.PageSize
	n := 0
	return p.EachListItem(ctx, opts, func(obj runtime.Object) error {
		n++
		if c.Progress != nil && n%int(c.PageSize) == 0 {
			c.Progress(what, n)
		}
		return fn(obj)
	})
}

// reservations lists reservations (all, or those opts selects), compacted
// as the caches keep them.
func (c *Client) reservations(ctx context.Context, opts metav1.ListOptions) ([]*tenurev1alpha1.IPReservation, error) {
	return c.reservationsShaped(ctx, opts, nil)
}

// reservationsShaped is reservations that, with shapes, records by name
// what reservation.Check says of each before compaction drops the labels
// and the summary it reads.
func (c *Client) reservationsShaped(ctx context.Context, opts metav1.ListOptions, shapes map[string]error) ([]*tenurev1alpha1.IPReservation, error) {
	var out []*tenurev1alpha1.IPReservation
	err := c.each(ctx, "reservations", func() client.ObjectList { return &tenurev1alpha1.IPReservationList{} }, opts, func(o runtime.Object) error {
		r := o.(*tenurev1alpha1.IPReservation)
		if shapes != nil {
			if err := reservation.Check(r); err != nil {
				shapes[r.Name] = err
			}
		}
		if _, err := reservation.Compact(r); err != nil {
			return err
		}
		out = append(out, r)
		return nil
	})
	return out, err
}

// reservationNames lists only the names of the reservations (a metadata
// list): a name says its scope label and its item.
func (c *Client) reservationNames(ctx context.Context) ([]string, error) {
	var out []string
	err := c.each(ctx, "reservation names", func() client.ObjectList { return reservation.NewMetadataList() }, metav1.ListOptions{}, func(o runtime.Object) error {
		out = append(out, o.(*metav1.PartialObjectMetadata).Name)
		return nil
	})
	return out, err
}

// podMeta lists every pod's metadata: enough to tell whether the pod a
// reservation names exists with its UID and whether it is terminating.
func (c *Client) podMeta(ctx context.Context, fn func(*metav1.PartialObjectMetadata)) error {
	return c.each(ctx, "pods", func() client.ObjectList {
		l := &metav1.PartialObjectMetadataList{}
		l.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("PodList"))
		return l
	}, metav1.ListOptions{}, func(o runtime.Object) error {
		fn(o.(*metav1.PartialObjectMetadata))
		return nil
	})
}

// networkConfigs reads every NetworkAttachmentDefinition's config; none
// when the cluster has no such CRD.
func (c *Client) networkConfigs(ctx context.Context) ([]inventory.NetworkConfig, error) {
	var out []inventory.NetworkConfig
	err := c.each(ctx, "network configurations", func() client.ObjectList {
		l := &unstructured.UnstructuredList{}
		l.SetGroupVersionKind(inventory.NADListGVK)
		return l
	}, metav1.ListOptions{}, func(o runtime.Object) error {
		out = append(out, inventory.NetworkConfigOf(o.(*unstructured.Unstructured)))
		return nil
	})
	if meta.IsNoMatchError(err) {
		return nil, nil
	}
	return out, err
}

// pools lists the declared IPPools.
func (c *Client) pools(ctx context.Context) ([]tenurev1alpha1.IPPool, error) {
	l := &tenurev1alpha1.IPPoolList{}
	if err := c.c.List(ctx, l); err != nil {
		return nil, err
	}
	return l.Items, nil
}

// inventory reads the declared pools and the network configurations.
func (c *Client) inventory(ctx context.Context) (*inventory.Inventory, error) {
	pools, err := c.pools(ctx)
	if err != nil {
		return nil, err
	}
	nads, err := c.networkConfigs(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing NetworkAttachmentDefinitions: %w", err)
	}
	return inventory.BuildInventory(pools, nads), nil
}
