package kube

import (
	"context"
	"fmt"
	"net/http"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/runtime/serializer/cbor"
	clientfeatures "k8s.io/client-go/features"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Encodings of the agent's reservation traffic (tenure-agent
// --api-encoding).
const (
	// EncodingAuto: CBOR where the API server serves IPReservations as
	// CBOR (kube-apiserver's CBORServingAndStorage feature gate), WithJSON
	// where it does not.
	EncodingAuto = "auto"
	// EncodingJSON: JSON always, through WithJSON (the agent's default).
	EncodingJSON = "json"
)

// ValidEncoding returns an error naming the value when s is no encoding.
func ValidEncoding(s string) error {
	switch s {
	case EncodingAuto, EncodingJSON:
		return nil
	}
	return fmt.Errorf("api encoding %q: want %q or %q", s, EncodingAuto, EncodingJSON)
}

const reservationResource = "ipreservations"

// cborAccept prefers CBOR and takes JSON from a server that stops serving
// CBOR (a downgrade while the agent runs).
const cborAccept = runtime.ContentTypeCBOR + ";q=1," + runtime.ContentTypeJSON + ";q=0.9"

var allowCBOR sync.Once

// AllowCBOR lets this process's client-go clients speak CBOR where they
// are configured to (client-go's ClientsAllowCBOR gate; without it
// client-go rewrites every CBOR media type to JSON). Clients configured
// for JSON or protobuf, as every client but WithCBOR's is, are unchanged.
// Call it before the first client is built: client-go reads its gates then.
func AllowCBOR() {
	allowCBOR.Do(func() {
		clientfeatures.ReplaceFeatureGates(cborGates{clientfeatures.FeatureGates()})
	})
}

type cborGates struct{ clientfeatures.Gates }

func (g cborGates) Enabled(f clientfeatures.Feature) bool {
	return f == clientfeatures.ClientsAllowCBOR || g.Gates.Enabled(f)
}

// ServesCBOR asks the API server for one IPReservation in CBOR only: a
// server that serves custom resources as CBOR answers in it, one that
// does not answers 406 Not Acceptable. The question is a read of at most
// one object.
func ServesCBOR(ctx context.Context, cfg *rest.Config) (bool, error) {
	rc, err := reservationREST(cfg, cborCodec)
	if err != nil {
		return false, err
	}
	res := rc.Get().Resource(reservationResource).Param("limit", "1").SetHeader("Accept", runtime.ContentTypeCBOR).Do(ctx)
	var code int
	res.StatusCode(&code)
	if err := res.Error(); err != nil {
		if code == http.StatusNotAcceptable || apierrors.IsNotAcceptable(err) || apierrors.IsUnsupportedMediaType(err) {
			return false, nil
		}
		return false, err
	}
	var ct string
	res.ContentType(&ct)
	return ct == runtime.ContentTypeCBOR, nil
}

// cborCodec encodes requests in CBOR and accepts CBOR first; with
// AllowCBOR not called, client-go makes both JSON.
var cborCodec = reservationCodec{
	name:        "cbor",
	contentType: runtime.ContentTypeCBOR,
	accept:      cborAccept,
	serializers: serializer.NewCodecFactory(Scheme, serializer.WithSerializer(cbor.NewSerializerInfo)).WithoutConversion(),
}

// WithCBOR returns c with its creates, deletes, lists and watches of
// IPReservations made in CBOR; everything else goes through c. AllowCBOR
// must have been called, and ServesCBOR said yes. Should the server stop
// serving CBOR, client-go answers the first refused write (415, which
// commits nothing) with JSON from then on, and the reads' Accept takes
// JSON.
func WithCBOR(c client.WithWatch, cfg *rest.Config) (client.WithWatch, error) {
	return withReservationCodec(c, cfg, cborCodec)
}
