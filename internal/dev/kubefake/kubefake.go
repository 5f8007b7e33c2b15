// Package kubefake is an in-memory API for unit tests of code that runs
// informers over a client.WithWatch: controller-runtime's fake client, made
// to behave as kube-apiserver does where tenure's caches and write paths
// depend on it, which the fake alone does not:
//   - a watch sends only the objects its label and field selectors match,
//     and metadata-only watches send PartialObjectMetadata;
//   - a created object's labels are validated and it gets a UID, and a
//     delete's UID precondition is
//     checked (tenure releases "exactly this reservation" that way);
//   - informers fall back from watch-list to list-then-watch, as they do
//     for any client that cannot stream initial events.
//
// Pause holds every watch event until Resume, so a test can make the
// caches stale on purpose. Behaviour proven against a real API server is
// tested there (the integration tests); this is for the table tests.
package kubefake

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apimachinery/pkg/watch"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	ipamclaimsv1alpha1 "github.com/tenure-ipam/tenure/api/ipamclaims/v1alpha1"
	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
)

// Client is the fake API. Its methods are safe for concurrent use.
type Client struct {
	client.WithWatch

	mu     sync.Mutex
	paused chan struct{} // closed on Resume; nil while events flow

	creates, reservationLists atomic.Int64

	// BeforeCreate, when set, is called before every Create; an error it
	// returns is the Create's answer and nothing is written.
	BeforeCreate func(obj client.Object) error
	// AfterCreate, when set, is called after every Create that was written;
	// an error it returns is the Create's answer all the same (a reply
	// lost after the commit).
	AfterCreate func(obj client.Object) error
	// BeforeDelete, when set, is called before every Delete; an error it
	// returns is the Delete's answer and nothing is deleted.
	BeforeDelete func(obj client.Object) error
	beforeList   func(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error
	watches      []watch.Interface // open watches, for BreakWatches
}

// SetBeforeList sets a function called before every List; an error it
// returns is the List's answer. Safe while the client is in use.
func (c *Client) SetBeforeList(fn func(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.beforeList = fn
}

// New returns a fake API holding objs.
func New(objs ...client.Object) *Client {
	c := &Client{}
	inner := fake.NewClientBuilder().
		WithScheme(scheme()).
		WithObjects(objs...).
		WithStatusSubresource(&ipamclaimsv1alpha1.IPAMClaim{}).
		WithIndex(&corev1.Pod{}, "spec.nodeName", func(o client.Object) []string { return []string{o.(*corev1.Pod).Spec.NodeName} }).
		// The agent watches one CRD by name (internal/kubevirt).
		WithIndex(crd(), "metadata.name", func(o client.Object) []string { return []string{o.GetName()} }).
		Build()
	c.WithWatch = interceptor.NewClient(inner, interceptor.Funcs{
		Create: c.create,
		Delete: c.delete,
		Watch:  c.watch,
		List: func(ctx context.Context, cl client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			c.mu.Lock()
			before := c.beforeList
			c.mu.Unlock()
			if before != nil {
				if err := before(ctx, list, opts...); err != nil {
					return err
				}
			}
			if _, whole := list.(*tenurev1alpha1.IPReservationList); whole {
				c.reservationLists.Add(1)
			}
			return cl.List(ctx, list, opts...)
		},
	})
	return c
}

// scheme is a scheme like internal/kube's Scheme plus the kinds the agent
// reads as unstructured: the fake registers an unstructured kind it does
// not know into its scheme on first use, a write racing every concurrent
// read of that scheme (and, were it kube.Scheme, of every other client's).
func scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, tenurev1alpha1.AddToScheme, ipamclaimsv1alpha1.AddToScheme} {
		if err := add(s); err != nil {
			panic(err)
		}
	}
	// The agent reads these as unstructured (internal/kubevirt).
	for _, gvk := range []schema.GroupVersionKind{
		{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"},
		{Group: "kubevirt.io", Version: "v1", Kind: "VirtualMachineInstance"},
	} {
		s.AddKnownTypeWithName(gvk, &unstructured.Unstructured{})
		s.AddKnownTypeWithName(gvk.GroupVersion().WithKind(gvk.Kind+"List"), &unstructured.UnstructuredList{})
	}
	return s
}

func crd() *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"})
	return u
}

// IsWatchListSemanticsUnSupported tells client-go's reflector to list and
// then watch: the fake cannot stream a watch's initial events.
func (c *Client) IsWatchListSemanticsUnSupported() bool { return true }

// Creates counts the creates made through c.
func (c *Client) Creates() int64 { return c.creates.Load() }

// ReservationLists counts the lists of whole IPReservations (not of their
// metadata) made through c.
func (c *Client) ReservationLists() int64 { return c.reservationLists.Load() }

// Pause holds every watch event (of open and new watches) until Resume.
func (c *Client) Pause() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.paused == nil {
		c.paused = make(chan struct{})
	}
}

// Resume delivers the held events, in order, and lets new ones flow.
func (c *Client) Resume() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.paused != nil {
		close(c.paused)
		c.paused = nil
	}
}

// BreakWatches ends every open watch, as kube-apiserver closes a watcher
// that fell behind: the clients' reflectors open new ones.
func (c *Client) BreakWatches() {
	c.mu.Lock()
	ws := c.watches
	c.watches = nil
	c.mu.Unlock()
	for _, w := range ws {
		w.Stop()
	}
}

func (c *Client) gate() {
	c.mu.Lock()
	ch := c.paused
	c.mu.Unlock()
	if ch != nil {
		<-ch
	}
}

func (c *Client) create(ctx context.Context, cl client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
	if c.BeforeCreate != nil {
		if err := c.BeforeCreate(obj); err != nil {
			return err
		}
	}
	// The API server's own check of every object's labels.
	if errs := metav1validation.ValidateLabels(obj.GetLabels(), field.NewPath("metadata", "labels")); len(errs) > 0 {
		gvk, _ := cl.GroupVersionKindFor(obj)
		return apierrors.NewInvalid(gvk.GroupKind(), obj.GetName(), errs)
	}
	if obj.GetUID() == "" {
		obj.SetUID(uuid.NewUUID())
	}
	if err := cl.Create(ctx, obj, opts...); err != nil {
		return err
	}
	c.creates.Add(1)
	if c.AfterCreate != nil {
		return c.AfterCreate(obj)
	}
	return nil
}

func (c *Client) delete(ctx context.Context, cl client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
	if c.BeforeDelete != nil {
		if err := c.BeforeDelete(obj); err != nil {
			return err
		}
	}
	var o client.DeleteOptions
	o.ApplyOptions(opts)
	if o.Preconditions != nil && o.Preconditions.UID != nil {
		cur, ok := obj.DeepCopyObject().(client.Object)
		if !ok {
			return fmt.Errorf("kubefake: %T is not a client.Object", obj)
		}
		if err := cl.Get(ctx, client.ObjectKeyFromObject(obj), cur); err != nil {
			return err
		}
		if cur.GetUID() != *o.Preconditions.UID {
			gvk, _ := cl.GroupVersionKindFor(obj)
			return apierrors.NewConflict(schema.GroupResource{Group: gvk.Group, Resource: gvk.Kind}, obj.GetName(),
				fmt.Errorf("precondition failed: UID in precondition: %s, UID in object meta: %s", *o.Preconditions.UID, cur.GetUID()))
		}
	}
	return cl.Delete(ctx, obj, opts...)
}

func (c *Client) watch(ctx context.Context, cl client.WithWatch, list client.ObjectList, opts ...client.ListOption) (watch.Interface, error) {
	w, err := cl.Watch(ctx, list, opts...)
	if err != nil {
		return nil, err
	}
	var o client.ListOptions
	o.ApplyOptions(opts)
	_, metadataOnly := list.(*metav1.PartialObjectMetadataList)
	c.mu.Lock()
	c.watches = append(c.watches, w)
	c.mu.Unlock()
	return watch.Filter(w, func(ev watch.Event) (watch.Event, bool) {
		c.gate()
		if !matches(ev.Object, o.LabelSelector, o.FieldSelector) {
			return ev, false
		}
		if metadataOnly {
			ev.Object = asMetadata(ev.Object)
		}
		return ev, true
	}), nil
}

func matches(obj runtime.Object, ls labels.Selector, fs fields.Selector) bool {
	m, err := meta.Accessor(obj)
	if err != nil {
		return true // a Status or bookmark: pass it on
	}
	if ls != nil && !ls.Matches(labels.Set(m.GetLabels())) {
		return false
	}
	if fs == nil {
		return true
	}
	set := fields.Set{"metadata.name": m.GetName(), "metadata.namespace": m.GetNamespace()}
	if p, ok := obj.(*corev1.Pod); ok {
		set["spec.nodeName"] = p.Spec.NodeName
	}
	return fs.Matches(set)
}

func asMetadata(obj runtime.Object) runtime.Object {
	m, err := meta.Accessor(obj)
	if err != nil {
		return obj
	}
	out := meta.AsPartialObjectMetadata(m)
	if t, err := meta.TypeAccessor(obj); err == nil {
		out.APIVersion, out.Kind = t.GetAPIVersion(), t.GetKind()
	}
	return out
}
