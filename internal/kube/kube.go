// Package kube builds the API clients and informers tenure's processes
// share: one scheme with tenure's and the IPAMClaim types, clients from a
// kubeconfig or the in-cluster config, and informers over typed lists.
package kube

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipamclaimsv1alpha1 "github.com/tenure-ipam/tenure/api/ipamclaims/v1alpha1"
	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
)

// Scheme knows core Kubernetes types, tenure's and IPAMClaim.
var Scheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, tenurev1alpha1.AddToScheme, ipamclaimsv1alpha1.AddToScheme} {
		if err := add(s); err != nil {
			panic(err)
		}
	}
	return s
}()

// RESTConfig loads a kubeconfig, or the in-cluster config when path is "".
func RESTConfig(kubeconfig string) (*rest.Config, error) {
	var cfg *rest.Config
	var err error
	if kubeconfig == "" {
		cfg, err = rest.InClusterConfig()
	} else {
		cfg, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
	}
	if err != nil {
		return nil, err
	}
	// One allocation is one write: client-side throttling would only add
	// latency that the API server's own priority and fairness already bounds.
	// A negative QPS leaves the client without a limiter at all, where a
	// high one still has every request wait on a token bucket.
	cfg.QPS, cfg.Burst = -1, 2000
	return cfg, nil
}

// NewClient returns a watching client with Scheme.
func NewClient(cfg *rest.Config) (client.WithWatch, error) {
	return client.NewWithWatch(cfg, client.Options{Scheme: Scheme})
}

// NewInformer is a shared index informer over one list type, with managed
// fields stripped (nobody here reads them, and they are a large share of a
// small object's memory).
func NewInformer(c client.WithWatch, newList func() client.ObjectList, obj runtime.Object, indexers cache.Indexers, opts ...client.ListOption) cache.SharedIndexInformer {
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			list := newList()
			err := c.List(ctx, list, append([]client.ListOption{&client.ListOptions{Raw: &o}}, opts...)...)
			return list, err
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return c.Watch(ctx, newList(), append([]client.ListOption{&client.ListOptions{Raw: &o}}, opts...)...)
		},
	}
	if indexers == nil {
		indexers = cache.Indexers{}
	}
	// The reflector streams a watch's initial events where the client can;
	// a client that says it cannot (kubefake) is listed, then watched.
	inf := cache.NewSharedIndexInformerWithOptions(cache.ToListWatcherWithWatchListSemantics(lw, c), obj, cache.SharedIndexInformerOptions{Indexers: indexers})
	_ = inf.SetTransform(StripManagedFields)
	return inf
}

// StripManagedFields is an informer transform.
func StripManagedFields(obj any) (any, error) {
	if m, ok := obj.(metav1.Object); ok {
		m.SetManagedFields(nil)
	}
	return obj, nil
}

// DeletedObject is the object of an informer's delete event: the event
// carries a cache.DeletedFinalStateUnknown, holding the last state the
// informer knew, when a relist found the object gone without its delete.
func DeletedObject(obj any) any {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		return t.Obj
	}
	return obj
}
