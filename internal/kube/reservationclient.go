package kube

import (
	"context"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
)

// reservationCodec is how a reservation client speaks: the media type of
// its request bodies, what it accepts, and the serializers of both.
type reservationCodec struct {
	// name ends the REST client's User-Agent (ipreservations/NAME), which
	// tells its requests from the wrapped client's in the API server's
	// audit log.
	name        string
	contentType string
	accept      string
	serializers runtime.NegotiatedSerializer
}

// jsonCodec is JSON both ways, read and written by reservationJSON.
var jsonCodec = reservationCodec{
	name:        "json",
	contentType: runtime.ContentTypeJSON,
	accept:      runtime.ContentTypeJSON,
	serializers: newReservationJSONSerializers(),
}

// reservationJSONSerializers is the codec factory's JSON alone, with
// reservationJSON in place of its serializer.
type reservationJSONSerializers struct {
	runtime.NegotiatedSerializer
	infos []runtime.SerializerInfo
}

func (s reservationJSONSerializers) SupportedMediaTypes() []runtime.SerializerInfo { return s.infos }

func newReservationJSONSerializers() runtime.NegotiatedSerializer {
	base := serializer.NewCodecFactory(Scheme).WithoutConversion()
	info, ok := runtime.SerializerInfoForMediaType(base.SupportedMediaTypes(), runtime.ContentTypeJSON)
	if !ok || info.StreamSerializer == nil {
		panic("kube: the codec factory has no JSON stream serializer")
	}
	fast := newReservationJSON(info.Serializer)
	info.Serializer = fast
	stream := *info.StreamSerializer
	stream.Serializer = fast
	stream.Framer = jsonFramer{stream.Framer}
	info.StreamSerializer = &stream
	return reservationJSONSerializers{NegotiatedSerializer: base, infos: []runtime.SerializerInfo{info}}
}

// reservationREST is a REST client for tenure's group speaking codec.
func reservationREST(cfg *rest.Config, codec reservationCodec) (*rest.RESTClient, error) {
	c := rest.CopyConfig(cfg)
	gv := tenurev1alpha1.GroupVersion
	c.GroupVersion = &gv
	c.APIPath = "/apis"
	c.ContentType = codec.contentType
	c.AcceptContentTypes = codec.accept
	c.NegotiatedSerializer = codec.serializers
	if c.UserAgent == "" {
		c.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	c.UserAgent += " ipreservations/" + codec.name
	return rest.RESTClientFor(c)
}

// WithJSON returns c with its creates, deletes, lists and watches of
// IPReservations in JSON that reservationJSON reads and writes in one
// pass; everything else goes through c.
func WithJSON(c client.WithWatch, cfg *rest.Config) (client.WithWatch, error) {
	return withReservationCodec(c, cfg, jsonCodec)
}

func withReservationCodec(c client.WithWatch, cfg *rest.Config, codec reservationCodec) (client.WithWatch, error) {
	rc, err := reservationREST(cfg, codec)
	if err != nil {
		return nil, err
	}
	return &reservationClient{WithWatch: c, rc: rc, params: runtime.NewParameterCodec(Scheme)}, nil
}

// reservationClient sends IPReservations' creates, deletes, lists and
// watches through rc, everything else through the client it wraps.
type reservationClient struct {
	client.WithWatch
	rc     *rest.RESTClient
	params runtime.ParameterCodec
}

// IsWatchListSemanticsUnSupported is false: the API server streams a
// watch's initial events to this client as to c.
func (c *reservationClient) IsWatchListSemanticsUnSupported() bool { return false }

func (c *reservationClient) Create(ctx context.Context, obj client.Object, opts ...client.CreateOption) error {
	r, ok := obj.(*tenurev1alpha1.IPReservation)
	if !ok {
		return c.WithWatch.Create(ctx, obj, opts...)
	}
	req := c.rc.Post().Resource(reservationResource)
	if len(opts) > 0 {
		// Without options there are no parameters: every ADD's create
		// skips converting an empty CreateOptions to none.
		req = req.VersionedParams((&client.CreateOptions{}).ApplyOptions(opts).AsCreateOptions(), c.params)
	}
	out := &tenurev1alpha1.IPReservation{}
	if err := req.Body(r).Do(ctx).Into(out); err != nil {
		return err
	}
	*r = *out
	return nil
}

func (c *reservationClient) Delete(ctx context.Context, obj client.Object, opts ...client.DeleteOption) error {
	r, ok := obj.(*tenurev1alpha1.IPReservation)
	if !ok {
		return c.WithWatch.Delete(ctx, obj, opts...)
	}
	do := (&client.DeleteOptions{}).ApplyOptions(opts)
	return c.rc.Delete().Resource(reservationResource).Name(r.Name).Body(do.AsDeleteOptions()).Do(ctx).Error()
}

func (c *reservationClient) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	l, ok := list.(*tenurev1alpha1.IPReservationList)
	if !ok {
		return c.WithWatch.List(ctx, list, opts...)
	}
	lo := (&client.ListOptions{}).ApplyOptions(opts).AsListOptions()
	out := &tenurev1alpha1.IPReservationList{}
	if err := c.rc.Get().Resource(reservationResource).VersionedParams(lo, c.params).Do(ctx).Into(out); err != nil {
		return err
	}
	*l = *out
	return nil
}

func (c *reservationClient) Watch(ctx context.Context, list client.ObjectList, opts ...client.ListOption) (watch.Interface, error) {
	if _, ok := list.(*tenurev1alpha1.IPReservationList); !ok {
		return c.WithWatch.Watch(ctx, list, opts...)
	}
	lo := (&client.ListOptions{}).ApplyOptions(opts).AsListOptions()
	w := *lo
	w.Watch = true
	return c.rc.Get().Resource(reservationResource).VersionedParams(&w, c.params).Watch(ctx)
}
