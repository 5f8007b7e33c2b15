package kubevirt

import (
	"context"
	"log/slog"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tenure-ipam/tenure/internal/kube"
)

var crdListKind = schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinitionList"}

// Watcher keeps a cache of the cluster's VirtualMachineInstances while the
// API serves them, and none while it does not.
//
// It watches the one CustomResourceDefinition CRDName (a watch with a
// metadata.name field selector, which RBAC can restrict to that name), not
// the discovery API on a timer: KubeVirt installed or removed while the
// agent runs is seen at once, and a cluster without KubeVirt costs one idle
// watch per agent instead of a discovery request per agent and period.
// When that CRD exists, is Established and serves v1, a VMI informer starts;
// when it is deleted or stops serving v1, the informer stops and its cache
// is dropped, so the callers fall back to the rules they use without
// KubeVirt.
//
// Nothing waits for it: until its caches synced (or forever, if RBAC denies
// the watch) Served is false and tenure behaves as without KubeVirt.
type Watcher struct {
	c        client.WithWatch
	log      *slog.Logger
	onChange func()
	crds     cache.SharedIndexInformer

	mu     sync.Mutex
	vmis   cache.SharedIndexInformer // nil while the API does not serve VMIs
	stop   context.CancelFunc
	synced bool
}

// NewWatcher returns a Watcher over c; onChange is called (from informer
// goroutines) whenever a VMI, or whether VMIs are served, changes.
func NewWatcher(c client.WithWatch, log *slog.Logger, onChange func()) *Watcher {
	w := &Watcher{c: c, log: log, onChange: onChange}
	w.crds = kube.NewInformer(c, func() client.ObjectList {
		l := &unstructured.UnstructuredList{}
		l.SetGroupVersionKind(crdListKind)
		return l
	}, &unstructured.Unstructured{}, nil, client.MatchingFieldsSelector{Selector: fields.OneTermEqualSelector("metadata.name", CRDName)})
	_ = w.crds.SetTransform(trimCRD)
	return w
}

// trimCRD is the CRD informer's transform: KubeVirt's VMI CRD carries an
// OpenAPI schema of several hundred kilobytes, of which served reads the
// versions' names and served flags and the conditions' types and statuses.
var trimCRD = transform(func(u, out *unstructured.Unstructured) {
	keep := func(path []string, fields ...string) {
		list, _, _ := unstructured.NestedSlice(u.Object, path...)
		var kept []any
		for _, e := range list {
			m, _ := e.(map[string]any)
			k := map[string]any{}
			for _, f := range fields {
				if v, ok := m[f]; ok {
					k[f] = v
				}
			}
			kept = append(kept, k)
		}
		if kept != nil {
			_ = unstructured.SetNestedSlice(out.Object, kept, path...)
		}
	}
	keep([]string{"spec", "versions"}, "name", "served")
	keep([]string{"status", "conditions"}, "type", "status")
})

// Run watches the CRD until ctx ends.
func (w *Watcher) Run(ctx context.Context) {
	eval := func(any) { w.evaluate(ctx) }
	if _, err := w.crds.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: eval, UpdateFunc: func(_, o any) { eval(o) }, DeleteFunc: eval,
	}); err != nil {
		w.log.Warn("cannot watch KubeVirt's CRD; serving without VirtualMachineInstances", "err", err)
		return
	}
	go w.crds.RunWithContext(ctx)
	<-ctx.Done()
	w.mu.Lock()
	if w.stop != nil {
		w.stop()
	}
	w.mu.Unlock()
}

// served reads the cached CRD: it exists, is not being deleted, is
// Established and serves v1.
func (w *Watcher) served() bool {
	obj, ok, _ := w.crds.GetStore().GetByKey(CRDName)
	if !ok {
		return false
	}
	u, ok := obj.(*unstructured.Unstructured)
	if !ok || u.GetDeletionTimestamp() != nil {
		return false
	}
	return crdServes(u, VMIResource.Version)
}

// crdServes reports whether the CRD u is Established and serves version.
func crdServes(u *unstructured.Unstructured, version string) bool {
	versions, _, _ := unstructured.NestedSlice(u.Object, "spec", "versions")
	serves := false
	for _, v := range versions {
		m, _ := v.(map[string]any)
		if name, _ := m["name"].(string); name == version {
			serves, _ = m["served"].(bool)
		}
	}
	if !serves {
		return false
	}
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] == "Established" && m["status"] == "True" {
			return true
		}
	}
	return false
}

func (w *Watcher) evaluate(ctx context.Context) {
	served := w.served()
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case served && w.vmis == nil:
		inf := kube.NewInformer(w.c, func() client.ObjectList {
			l := &unstructured.UnstructuredList{}
			l.SetGroupVersionKind(VMIListKind)
			return l
		}, &unstructured.Unstructured{}, nil)
		_ = inf.SetTransform(Trim)
		changed := func(any) { w.onChange() }
		if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc: changed, UpdateFunc: func(_, o any) { changed(o) }, DeleteFunc: changed,
		}); err != nil {
			w.log.Warn("cannot watch VirtualMachineInstances", "err", err)
			return
		}
		vctx, stop := context.WithCancel(ctx)
		w.vmis, w.stop, w.synced = inf, stop, false
		go inf.RunWithContext(vctx)
		go func() {
			if !cache.WaitForCacheSync(vctx.Done(), inf.HasSynced) {
				return
			}
			w.mu.Lock()
			current := w.vmis == inf
			if current {
				w.synced = true
			}
			w.mu.Unlock()
			if current {
				w.log.Info("KubeVirt VirtualMachineInstances are served: DHCPv6 and prefix routes follow the node each VM runs on", "crd", CRDName)
				w.onChange()
			}
		}()
	case !served && w.vmis != nil:
		w.stop()
		w.vmis, w.stop, w.synced = nil, nil, false
		w.log.Info("KubeVirt VirtualMachineInstances are no longer served: back to the claim's status.ownerPod", "crd", CRDName)
		go w.onChange()
	}
}

// Served reports whether the API serves VirtualMachineInstances and their
// cache has synced.
func (w *Watcher) Served() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.synced
}

// Get returns the cached VirtualMachineInstance namespace/name; false when
// it does not exist or VMIs are not served.
func (w *Watcher) Get(namespace, name string) (VMI, bool) {
	w.mu.Lock()
	inf, synced := w.vmis, w.synced
	w.mu.Unlock()
	if inf == nil || !synced {
		return VMI{}, false
	}
	obj, ok, _ := inf.GetStore().GetByKey(namespace + "/" + name)
	if !ok {
		return VMI{}, false
	}
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return VMI{}, false
	}
	return FromUnstructured(u), true
}

// Read returns the VirtualMachineInstance namespace/name as the API server
// has it now, not as a cache does; false when it does not exist.
func Read(ctx context.Context, c client.Reader, namespace, name string) (VMI, bool, error) {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(VMIKind)
	if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, u); err != nil {
		if apierrors.IsNotFound(err) {
			return VMI{}, false, nil
		}
		return VMI{}, false, err
	}
	return FromUnstructured(u), true, nil
}

// LiveLookup is a Lookup that reads the API server (Read); the first error
// it met is in *err, and the VMI it could not read is treated as absent.
func LiveLookup(ctx context.Context, c client.Reader, err *error) Lookup {
	return func(namespace, name string) (VMI, bool) {
		v, ok, e := Read(ctx, c, namespace, name)
		if e != nil && *err == nil {
			*err = e
		}
		return v, ok
	}
}
