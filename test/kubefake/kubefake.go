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
//     for any client that cannot stream initial events;
//   - a watch opened at the resourceVersion of a List starts where that
//     List ended: it first sends every write committed since (from a log
//     of the last writes; a List older than the log answers 410 Gone, and
//     the reflector lists again), so no write falls between an informer's
//     List and its Watch. A watch at any other resourceVersion starts now.
//
// Pause holds every watch event until Resume, so a test can make the
// caches stale on purpose. Behaviour proven against a real API server is
// tested there (the integration tests); this is for the table tests.
package kubefake

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
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

	// wmu orders every write, List and watch registration: a List's
	// marker names the last write it saw, and a watch registered under
	// wmu sends the logged writes after its marker, then live ones.
	wmu      sync.Mutex
	seq      uint64     // the last write's sequence number
	log      []logEntry // the last logLimit writes, seq dropped+1, dropped+2, ...
	dropped  uint64     // the sequence number of the last write dropped from log
	logLimit int

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
	watches      []*replayWatch // open watches, for BreakWatches
}

// logEntry is one committed change of one object, as a watch sends it.
type logEntry struct {
	seq uint64
	gk  schema.GroupKind
	ev  watch.Event
}

// defaultLogLimit bounds the write log: a List followed by more writes
// than this before its Watch gets 410 Gone, as from an API server whose
// watch cache no longer holds its resourceVersion.
const defaultLogLimit = 20000

// markerPrefix starts the resourceVersion a List answers with. Objects'
// own resourceVersions are numbers, so the two never meet.
const markerPrefix = "kubefake-"

// SetBeforeList sets a function called before every List; an error it
// returns is the List's answer. Safe while the client is in use.
func (c *Client) SetBeforeList(fn func(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.beforeList = fn
}

// New returns a fake API holding objs.
func New(objs ...client.Object) *Client {
	c := &Client{logLimit: defaultLogLimit}
	inner := fake.NewClientBuilder().
		WithScheme(scheme()).
		WithObjects(objs...).
		WithStatusSubresource(&ipamclaimsv1alpha1.IPAMClaim{}).
		WithIndex(&corev1.Pod{}, "spec.nodeName", func(o client.Object) []string { return []string{o.(*corev1.Pod).Spec.NodeName} }).
		// The agent watches one CRD by name (internal/kubevirt).
		WithIndex(crd(), "metadata.name", func(o client.Object) []string { return []string{o.GetName()} }).
		Build()
	c.WithWatch = interceptor.NewClient(inner, interceptor.Funcs{
		Create:            c.create,
		Delete:            c.delete,
		DeleteAllOf:       c.deleteAllOf,
		Update:            c.update,
		Patch:             c.patch,
		Apply:             c.apply,
		SubResourceCreate: c.subResourceCreate,
		SubResourceUpdate: c.subResourceUpdate,
		SubResourcePatch:  c.subResourcePatch,
		SubResourceApply:  c.subResourceApply,
		Watch:             c.watch,
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
			c.wmu.Lock()
			err := cl.List(ctx, list, opts...)
			seq := c.seq
			c.wmu.Unlock()
			if err != nil {
				return err
			}
			list.SetResourceVersion(markerPrefix + strconv.FormatUint(seq, 10))
			return nil
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
		w.inner.Stop() // the events it already queued still reach the reader
	}
}

// held is closed on Resume, or nil while events flow.
func (c *Client) held() chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.paused
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
	if err := c.commit(ctx, cl, obj, func() error { return cl.Create(ctx, obj, opts...) }); err != nil {
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
	return c.commit(ctx, cl, obj, func() error { return c.deleteChecked(ctx, cl, obj, opts...) })
}

// deleteChecked deletes obj after checking a UID precondition, which the
// inner fake ignores.
func (c *Client) deleteChecked(ctx context.Context, cl client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
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
	var o client.ListOptions
	o.ApplyOptions(opts)
	var rv string
	if o.Raw != nil {
		rv = o.Raw.ResourceVersion
	}
	from, fromList := strings.CutPrefix(rv, markerPrefix)
	var since uint64
	if fromList {
		var err error
		if since, err = strconv.ParseUint(from, 10, 64); err != nil {
			return nil, apierrors.NewBadRequest(fmt.Sprintf("kubefake: resourceVersion %q is not a List's", rv))
		}
	}
	gvk, err := cl.GroupVersionKindFor(list)
	if err != nil {
		return nil, err
	}
	gk := schema.GroupKind{Group: gvk.Group, Kind: strings.TrimSuffix(gvk.Kind, "List")}
	_, metadataOnly := list.(*metav1.PartialObjectMetadataList)
	keep := func(ev watch.Event) (watch.Event, bool) {
		if !matches(ev.Object, o.LabelSelector, o.FieldSelector) {
			return ev, false
		}
		if metadataOnly {
			ev.Object = asMetadata(ev.Object)
		}
		return ev, true
	}

	var queue []watch.Event
	c.wmu.Lock()
	if fromList && since < c.dropped {
		c.wmu.Unlock()
		return nil, apierrors.NewResourceExpired(fmt.Sprintf("kubefake: resourceVersion %q is older than the last %d writes", rv, c.logLimit))
	}
	if fromList && since > c.seq {
		c.wmu.Unlock()
		return nil, apierrors.NewBadRequest(fmt.Sprintf("kubefake: resourceVersion %q is newer than the last write (%d)", rv, c.seq))
	}
	inner, err := cl.Watch(ctx, list, opts...)
	if err != nil {
		c.wmu.Unlock()
		return nil, err
	}
	if fromList {
		for _, e := range c.log[since-c.dropped:] {
			if e.gk != gk || (o.Namespace != "" && e.ev.Object.(client.Object).GetNamespace() != o.Namespace) {
				continue
			}
			ev := watch.Event{Type: e.ev.Type, Object: e.ev.Object.DeepCopyObject()}
			if ev, ok := keep(ev); ok {
				queue = append(queue, ev)
			}
		}
	}
	c.wmu.Unlock()

	w := &replayWatch{c: c, inner: inner, result: make(chan watch.Event), stop: make(chan struct{})}
	c.mu.Lock()
	c.watches = append(c.watches, w)
	c.mu.Unlock()
	go w.run(ctx, queue, keep)
	return w, nil
}

// replayWatch sends the logged events it was opened with, then the inner
// watch's, each once the client is not paused. It reads the inner watch
// whatever its reader does, so a paused or slow reader never fills the
// inner fake's bounded channel (which panics when full).
type replayWatch struct {
	c        *Client
	inner    watch.Interface
	result   chan watch.Event
	stop     chan struct{}
	stopOnce sync.Once
}

func (w *replayWatch) ResultChan() <-chan watch.Event { return w.result }

// Stop ends the watch: its channel closes, unsent events are dropped.
func (w *replayWatch) Stop() {
	w.stopOnce.Do(func() {
		close(w.stop)
		w.inner.Stop()
		w.c.mu.Lock()
		defer w.c.mu.Unlock()
		for i, o := range w.c.watches {
			if o == w {
				w.c.watches = append(w.c.watches[:i], w.c.watches[i+1:]...)
				break
			}
		}
	})
}

func (w *replayWatch) run(ctx context.Context, queue []watch.Event, keep func(watch.Event) (watch.Event, bool)) {
	defer close(w.result)
	defer w.Stop()
	in := w.inner.ResultChan()
	for in != nil || len(queue) > 0 {
		var out chan<- watch.Event
		var next watch.Event
		held := w.c.held()
		if len(queue) > 0 && held == nil {
			out, next = w.result, queue[0]
		}
		select {
		case ev, ok := <-in:
			if !ok {
				in = nil // the inner watch ended: send what is queued, then close
				continue
			}
			if ev, ok := keep(ev); ok {
				queue = append(queue, ev)
			}
		case out <- next:
			queue[0] = watch.Event{}
			queue = queue[1:]
		case <-held:
		case <-w.stop:
			return
		case <-ctx.Done():
			return
		}
	}
}

// commit runs write, which changes obj (or, on a create, makes it), under
// wmu and logs the change it made.
func (c *Client) commit(ctx context.Context, cl client.Client, obj client.Object, write func() error) error {
	gvk, err := cl.GroupVersionKindFor(obj)
	if err != nil {
		return err
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	var before client.Object
	if obj.GetName() != "" { // else a create that generates the name
		if before, err = c.current(ctx, cl, gvk, client.ObjectKeyFromObject(obj)); err != nil {
			return err
		}
	}
	if err := write(); err != nil {
		return err
	}
	after, err := c.current(ctx, cl, gvk, client.ObjectKeyFromObject(obj))
	if err != nil {
		return fmt.Errorf("kubefake: reading back a committed write of %s %s: %w", gvk.Kind, client.ObjectKeyFromObject(obj), err)
	}
	c.record(gvk.GroupKind(), before, after)
	return nil
}

// current is the object stored at key, whole (never only its metadata)
// and with its kind set, as the inner fake's watch events carry it; or
// nil if there is none.
func (c *Client) current(ctx context.Context, cl client.Client, gvk schema.GroupVersionKind, key client.ObjectKey) (client.Object, error) {
	obj := c.newObject(gvk)
	if err := cl.Get(ctx, key, obj); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, err
	}
	obj.GetObjectKind().SetGroupVersionKind(gvk)
	return obj, nil
}

func (c *Client) newObject(gvk schema.GroupVersionKind) client.Object {
	if obj, ok := c.typed(gvk).(client.Object); ok {
		return obj
	}
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(gvk)
	return u
}

// typed is a new object of the scheme's Go type for gvk; nil when the
// scheme has none, or only an unstructured one.
func (c *Client) typed(gvk schema.GroupVersionKind) runtime.Object {
	o, err := c.Scheme().New(gvk)
	if err != nil {
		return nil
	}
	if _, u := o.(runtime.Unstructured); u {
		return nil
	}
	return o
}

// record logs the change from before to after (either nil when absent)
// as the event a watch sends for it. Called with wmu held.
func (c *Client) record(gk schema.GroupKind, before, after client.Object) {
	var ev watch.Event
	switch {
	case after == nil && before == nil:
		return
	case before == nil:
		ev = watch.Event{Type: watch.Added, Object: after}
	case after == nil:
		ev = watch.Event{Type: watch.Deleted, Object: before}
	case after.GetResourceVersion() != before.GetResourceVersion():
		ev = watch.Event{Type: watch.Modified, Object: after}
	default:
		return
	}
	c.seq++
	c.log = append(c.log, logEntry{seq: c.seq, gk: gk, ev: ev})
	if len(c.log) > c.logLimit {
		c.dropped = c.log[0].seq
		c.log[0] = logEntry{}
		c.log = c.log[1:]
	}
}

func (c *Client) update(ctx context.Context, cl client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
	return c.commit(ctx, cl, obj, func() error { return cl.Update(ctx, obj, opts...) })
}

func (c *Client) patch(ctx context.Context, cl client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
	return c.commit(ctx, cl, obj, func() error { return cl.Patch(ctx, obj, patch, opts...) })
}

func (c *Client) subResourceCreate(ctx context.Context, cl client.Client, sub string, obj, subObj client.Object, opts ...client.SubResourceCreateOption) error {
	return c.commit(ctx, cl, obj, func() error { return cl.SubResource(sub).Create(ctx, obj, subObj, opts...) })
}

func (c *Client) subResourceUpdate(ctx context.Context, cl client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
	return c.commit(ctx, cl, obj, func() error { return cl.SubResource(sub).Update(ctx, obj, opts...) })
}

func (c *Client) subResourcePatch(ctx context.Context, cl client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
	return c.commit(ctx, cl, obj, func() error { return cl.SubResource(sub).Patch(ctx, obj, patch, opts...) })
}

func (c *Client) apply(ctx context.Context, cl client.WithWatch, obj runtime.ApplyConfiguration, opts ...client.ApplyOption) error {
	target, err := applied(obj)
	if err != nil {
		return err
	}
	return c.commit(ctx, cl, target, func() error { return cl.Apply(ctx, obj, opts...) })
}

func (c *Client) subResourceApply(ctx context.Context, cl client.Client, sub string, obj runtime.ApplyConfiguration, opts ...client.SubResourceApplyOption) error {
	target, err := applied(obj)
	if err != nil {
		return err
	}
	return c.commit(ctx, cl, target, func() error { return cl.SubResource(sub).Apply(ctx, obj, opts...) })
}

// applied is the object an apply configuration names (its kind, name and
// namespace), to read it before and after the apply.
func applied(obj runtime.ApplyConfiguration) (client.Object, error) {
	j, err := json.Marshal(obj)
	if err != nil {
		return nil, err
	}
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(j); err != nil {
		return nil, fmt.Errorf("kubefake: apply configuration: %w", err)
	}
	return u, nil
}

// deleteAllOf logs one delete (or, for an object a finalizer holds, one
// update) per object it removed.
func (c *Client) deleteAllOf(ctx context.Context, cl client.WithWatch, obj client.Object, opts ...client.DeleteAllOfOption) error {
	gvk, err := cl.GroupVersionKindFor(obj)
	if err != nil {
		return err
	}
	var o client.DeleteAllOfOptions
	o.ApplyOptions(opts)
	list := c.newList(gvk)
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if err := cl.List(ctx, list, &o.ListOptions); err != nil {
		return err
	}
	items, err := meta.ExtractList(list)
	if err != nil {
		return err
	}
	if err := cl.DeleteAllOf(ctx, obj, opts...); err != nil {
		return err
	}
	for _, it := range items {
		before, ok := it.(client.Object)
		if !ok {
			continue
		}
		after, err := c.current(ctx, cl, gvk, client.ObjectKeyFromObject(before))
		if err != nil {
			return fmt.Errorf("kubefake: reading back a committed delete of %s %s: %w", gvk.Kind, client.ObjectKeyFromObject(before), err)
		}
		c.record(gvk.GroupKind(), before, after)
	}
	return nil
}

func (c *Client) newList(gvk schema.GroupVersionKind) client.ObjectList {
	lgvk := gvk.GroupVersion().WithKind(gvk.Kind + "List")
	if l, ok := c.typed(lgvk).(client.ObjectList); ok {
		return l
	}
	u := &unstructured.UnstructuredList{}
	u.SetGroupVersionKind(lgvk)
	return u
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
