package kube

import (
	"bytes"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"

	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/reservation"
)

// stdJSON is the codec factory's JSON serializer: the reference.
var stdJSON = func() runtime.Serializer {
	info, _ := runtime.SerializerInfoForMediaType(serializer.NewCodecFactory(Scheme).SupportedMediaTypes(), runtime.ContentTypeJSON)
	return info.Serializer
}()

// A reservation as the API server answers its create (labels,
// annotation and managed fields as the agent's writes leave them).
const serverReservation = `{"apiVersion":"ipam.tenure.dev/v1alpha1","kind":"IPReservation","metadata":{"annotations":{"ipam.tenure.dev/spec-summary":"kind=Pod\u0026namespace=ns\u0026name=p\u0026range=10.84.0.0%2F24"},"creationTimestamp":"2026-12-02T10:31:10Z","generation":1,"labels":{"ipam.tenure.dev/block":"a1b2","ipam.tenure.dev/network":"n1","ipam.tenure.dev/owner-uid":"uid-1","ipam.tenure.dev/spec-summary":"v1"},"managedFields":[{"apiVersion":"ipam.tenure.dev/v1alpha1","fieldsType":"FieldsV1","fieldsV1":{"f:metadata":{"f:annotations":{".":{},"f:ipam.tenure.dev/spec-summary":{}},"f:labels":{".":{},"f:ipam.tenure.dev/block":{}}},"f:spec":{".":{},"f:address":{},"f:owner":{".":{},"f:kind":{}}}},"manager":"tenure-agent","operation":"Update","time":"2026-12-02T10:31:10Z"}],"name":"n1-10.84.0.7","resourceVersion":"4711","uid":"9a8b7c6d-0000-4000-8000-000000000001"},"spec":{"address":"10.84.0.7","kind":"Address","network":"n1","owner":{"kind":"Pod","name":"p","namespace":"ns","podName":"p","podUID":"uid-1","uid":"uid-1"},"range":"10.84.0.0/24"}}`

func seedInputs() []string {
	list := `{"apiVersion":"ipam.tenure.dev/v1alpha1","items":[` + serverReservation + `,` + serverReservation + `],"kind":"IPReservationList","metadata":{"continue":"","resourceVersion":"4712"}}`
	return []string{
		serverReservation,
		`{"type":"ADDED","object":` + serverReservation + `}`,
		`{"type":"DELETED","object":` + serverReservation + `}` + "\n",
		`{"type":"BOOKMARK","object":{"kind":"IPReservation","apiVersion":"ipam.tenure.dev/v1alpha1","metadata":{"resourceVersion":"4712","creationTimestamp":null,"annotations":{"k8s.io/initial-events-end":"true"}},"spec":{"network":"","kind":"","address":"","owner":{"kind":"","namespace":"","name":"","uid":""}}}}`,
		`{"type":"BOOKMARK","object":{"kind":"IPReservation","apiVersion":"ipam.tenure.dev/v1alpha1","metadata":{"resourceVersion":"4712","annotations":{"k8s.io/initial-events-end":"true"}},"spec":{"network":"","kind":"","address":"","owner":{"kind":"","namespace":"","name":"","uid":""}}}}`,
		`{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"too old resource version: 1 (4711)","reason":"Expired","code":410}}`,
		list,
		`{"apiVersion":"ipam.tenure.dev/v1alpha1","items":[],"kind":"IPReservationList","metadata":{"resourceVersion":"1","remainingItemCount":3,"continue":"abc"}}`,
		`{"apiVersion":"ipam.tenure.dev/v1alpha1","kind":"IPReservation","metadata":{"name":"a","name":"b"},"spec":{}}`,
		`{"apiVersion":"ipam.tenure.dev/v1alpha1","kind":"IPReservation","metadata":{"n\u0061me":"a\ud83d\ude00\ud800x\u00e9","labels":{"a":"1","a":"2"}},"spec":{}}`,
		`{"apiVersion":"ipam.tenure.dev/v1alpha1","Kind":"IPReservation","metadata":{},"spec":{}}`,
		`{"apiVersion":"ipam.tenure.dev/v1alpha1","kind":"IPReservation","metadata":{"generation":1e3,"finalizers":["x",null]},"spec":{}}`,
		`{"apiVersion":"ipam.tenure.dev/v1alpha1","kind":"IPReservation","metadata":{"deletionTimestamp":"2026-12-02T10:31:10+02:00","deletionGracePeriodSeconds":-0,"finalizers":[],"ownerReferences":[{"apiVersion":"v1","kind":"Pod","name":"p","uid":"u","controller":true,"blockOwnerDeletion":false}]},"spec":{"owner":{"node":"n\u00001"}}}`,
		` {"apiVersion" : "ipam.tenure.dev/v1alpha1",` + "\n\t" + `"kind":"IPReservation","metadata":{"uid":"\"\\\/\b\f\n\r\t\u2028\xff"},"spec":{"pool":"p","cniNetwork":"c","range":"r","owner":{"containerID":"c","interface":"eth0"}}} `,
		`{"apiVersion":"ipam.tenure.dev/v1alpha1","kind":"IPReservation","metadata":{"managedFields":[{"fieldsV1":{"k:{\"a\":1}":[1.5e-3,true,false,null,"x"],"k:{\"a\":1}":{}},"subresource":"status"}]},"spec":{}}`,
		`{"apiVersion":"ipam.tenure.dev/v1alpha1","kind":"IPReservation","metadata":{},"spec":{},"status":{}}`,
		`{"type":"ADDED","object":null}`,
		`{"type":"ADDED"}`,
		`{"apiVersion":"ipam.tenure.dev/v1alpha1","kind":"IPReservation","metadata":{},"spec":{}}x`,
		`{"apiVersion":"ipam.tenure.dev/v1alpha1","kind":"IPReservation","metadata":{"generation":9223372036854775808},"spec":{}}`,
	}
}

// intos are the targets client-go decodes into: nil (a watch event's
// object), and fresh lists, reservations and watch events.
func intos() []func() runtime.Object {
	return []func() runtime.Object{
		func() runtime.Object { return nil },
		func() runtime.Object { return &tenurev1alpha1.IPReservation{} },
		func() runtime.Object { return &tenurev1alpha1.IPReservationList{} },
		func() runtime.Object { return &metav1.WatchEvent{} },
	}
}

// checkDecode holds the fast decoder to the standard one on data: for
// each target it declines or decodes what the standard decoder decodes,
// deep-equal, with the same kind, and sharing no bytes with data; for a
// watch event, the object decoded again from the event's Raw (from the
// envelope's pass or afresh) too.
// It returns how many targets the fast path took.
func checkDecode(t *testing.T, data []byte) int {
	t.Helper()
	taken := 0
	for _, newInto := range intos() {
		fast := newReservationJSON(stdJSON)
		buf := bytes.Clone(data)
		obj, gvk, ok := fast.fastDecode(buf, newInto())
		if !ok {
			continue
		}
		// client-go reuses its frame buffer: nothing decoded may alias it.
		for i := range buf {
			buf[i] = 'x'
		}
		taken++
		want, wantGVK, err := stdJSON.Decode(bytes.Clone(data), nil, newInto())
		if err != nil {
			t.Fatalf("fast decoded %T from %q; the standard decoder fails: %v", obj, data, err)
		}
		if !reflect.DeepEqual(obj, want) {
			t.Fatalf("decoded %q\nfast:     %#v\nstandard: %#v", data, obj, want)
		}
		if *gvk != *wantGVK {
			t.Fatalf("decoded %q: kind %v, standard %v", data, gvk, wantGVK)
		}
		e, ok := obj.(*metav1.WatchEvent)
		if !ok || e.Object.Raw == nil {
			continue
		}
		want, wantGVK, err = stdJSON.Decode(e.Object.Raw, nil, nil)
		for _, raw := range [][]byte{e.Object.Raw, bytes.Clone(e.Object.Raw), e.Object.Raw} {
			got, gvk, gotErr := fast.Decode(raw, nil, nil)
			if (err != nil) != (gotErr != nil) || !reflect.DeepEqual(got, want) || (err == nil && *gvk != *wantGVK) {
				t.Fatalf("event object %q\nfast:     %#v %v\nstandard: %#v %v", raw, got, gotErr, want, err)
			}
		}
		// The same event after an answer carried its object: the answer's
		// copy stands in for the object's decode, and must equal it.
		primed := newReservationJSON(stdJSON)
		if _, _, ok := primed.fastDecode(bytes.Clone(e.Object.Raw), &tenurev1alpha1.IPReservation{}); !ok {
			continue
		}
		buf = bytes.Clone(data)
		again, _, ok := primed.fastDecode(buf, &metav1.WatchEvent{})
		for i := range buf {
			buf[i] = 'x'
		}
		if !ok || !reflect.DeepEqual(again, obj) {
			t.Fatalf("event %q after its object's answer\nfast:     %#v (taken %v)\nunprimed: %#v", data, again, ok, obj)
		}
		if got, _, gotErr := primed.Decode(again.(*metav1.WatchEvent).Object.Raw, nil, nil); gotErr != nil || !reflect.DeepEqual(got, want) {
			t.Fatalf("event object %q after its answer\nfast:     %#v %v\nstandard: %#v", data, got, gotErr, want)
		}
	}
	return taken
}

func TestReservationJSONDecodesAsTheStandardDecoder(t *testing.T) {
	seeds := seedInputs()
	for _, s := range seeds {
		checkDecode(t, []byte(s))
	}
	// The server's own shapes are taken, not declined: a reservation, an
	// event of one, a list of them, a bookmark.
	for _, i := range []int{0, 1, 2, 3, 4, 6, 7} {
		if checkDecode(t, []byte(seeds[i])) == 0 {
			t.Errorf("fast path declined %q", seeds[i])
		}
	}
}

// The API server's own answers (captured by test/e2e's
// TestReservationsInOnePassJSONAsControllerRuntimeReadsThem into the
// fuzz corpus) are decoded by the fast path, not declined, but for the
// Status of a delete, which is no reservation.
func TestReservationJSONTakesTheAPIServersAnswers(t *testing.T) {
	files, err := filepath.Glob("testdata/fuzz/FuzzReservationJSONDecode/server-*")
	if err != nil || len(files) < 5 {
		t.Fatalf("server seeds %v, %v", files, err)
	}
	for _, file := range files {
		raw, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		_, lit, _ := strings.Cut(strings.TrimSpace(string(raw)), "\n[]byte(")
		data, err := strconv.Unquote(strings.TrimSuffix(lit, ")"))
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		taken := checkDecode(t, []byte(data))
		if want := !strings.HasSuffix(file, "-status"); (taken > 0) != want {
			t.Errorf("%s: fast path took it %d times, want it taken: %v", file, taken, want)
		}
	}
}

// TestReservationJSONHandsACreatesEventItsAnswer: the watch event of a
// create carries the object in the bytes of the Create's answer; its
// decode is handed a copy of the answer's object, taken once, equal to
// what the standard decoder makes of the event and sharing nothing with
// the answer's object or the event's bytes.
func TestReservationJSONHandsACreatesEventItsAnswer(t *testing.T) {
	fast := newReservationJSON(stdJSON)
	answer := &tenurev1alpha1.IPReservation{}
	if _, _, err := fast.Decode([]byte(serverReservation+"\n"), nil, answer); err != nil {
		t.Fatal(err)
	}
	if len(fast.answered) != 1 {
		t.Fatalf("after the answer %d kept, want 1", len(fast.answered))
	}
	event := []byte(`{"type":"ADDED","object":` + serverReservation + `}` + "\n")
	decodeEvent := func() *tenurev1alpha1.IPReservation {
		t.Helper()
		buf := bytes.Clone(event)
		e := &metav1.WatchEvent{}
		if _, _, err := fast.Decode(buf, nil, e); err != nil {
			t.Fatal(err)
		}
		obj, _, err := fast.Decode(e.Object.Raw, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		for i := range buf {
			buf[i] = 'x'
		}
		return obj.(*tenurev1alpha1.IPReservation)
	}
	got := decodeEvent()
	if len(fast.answered) != 0 {
		t.Fatalf("the event left %d kept, want its answer taken", len(fast.answered))
	}
	want, _, err := stdJSON.Decode([]byte(serverReservation), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("event object\nfast:     %#v\nstandard: %#v", got, want)
	}
	answer.Labels["changed"] = "by the caller"
	answer.ManagedFields[0].Manager = "changed"
	if !reflect.DeepEqual(got, want) {
		t.Fatal("the event's object shares the answer's labels or managed fields")
	}
	// A second event of the same bytes (a relist) is read afresh.
	if again := decodeEvent(); again == got || !reflect.DeepEqual(again, want) {
		t.Fatalf("a second event of the same bytes: %p (first %p), equal to the standard's: %v", again, got, reflect.DeepEqual(again, want))
	}
}

// Answers past maxAnswered push the oldest out: the map stays bounded.
func TestReservationJSONKeepsBoundedAnswers(t *testing.T) {
	fast := newReservationJSON(stdJSON)
	for i := range maxAnswered + 10 {
		data := strings.Replace(serverReservation, `"resourceVersion":"4711"`, fmt.Sprintf(`"resourceVersion":"%d"`, i), 1)
		if _, _, err := fast.Decode([]byte(data), nil, &tenurev1alpha1.IPReservation{}); err != nil {
			t.Fatal(err)
		}
	}
	if len(fast.answered) != maxAnswered {
		t.Fatalf("%d answers kept, want %d", len(fast.answered), maxAnswered)
	}
	if _, ok := fast.answered[strings.Replace(serverReservation, `"resourceVersion":"4711"`, `"resourceVersion":"0"`, 1)]; ok {
		t.Fatal("the oldest answer is still kept")
	}
}

func FuzzReservationJSONDecode(f *testing.F) {
	for _, s := range seedInputs() {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		checkDecode(t, data)
	})
}

// fuzzReservation builds an IPReservation from fuzz input: its strings
// are the NUL-separated parts of s, in field order.
func fuzzReservation(s string, n1, n2 int64, flags uint16) *tenurev1alpha1.IPReservation {
	parts := strings.Split(s, "\x00")
	next := func() string {
		if len(parts) == 0 {
			return ""
		}
		p := parts[0]
		parts = parts[1:]
		return p
	}
	r := &tenurev1alpha1.IPReservation{}
	r.Kind, r.APIVersion = next(), next()
	m := &r.ObjectMeta
	m.Name, m.GenerateName, m.Namespace = next(), next(), next()
	m.SetSelfLink(next())
	m.UID, m.ResourceVersion = types.UID(next()), next()
	if flags&1 != 0 {
		m.Generation = n1
	}
	if flags&2 != 0 {
		m.CreationTimestamp = metav1.NewTime(time.Unix(0, n2).In(time.FixedZone("z", int(n1%86400))))
	}
	if flags&4 != 0 {
		ts := metav1.NewTime(time.Unix(n1, 0))
		if flags&8 != 0 {
			ts = metav1.Time{}
		}
		m.DeletionTimestamp = &ts
	}
	if flags&16 != 0 {
		m.DeletionGracePeriodSeconds = &n2
	}
	if flags&32 != 0 {
		m.Labels = map[string]string{}
	}
	if flags&64 != 0 {
		m.Finalizers = []string{next(), next()}
	}
	if flags&128 != 0 {
		m.Finalizers = []string{}
	}
	s_ := &r.Spec
	s_.Network, s_.Kind, s_.Address, s_.Range, s_.Pool, s_.CNINetwork = next(), tenurev1alpha1.ReservationKind(next()), next(), next(), next(), next()
	o := &s_.Owner
	o.Kind, o.Namespace, o.Name, o.UID = tenurev1alpha1.OwnerKind(next()), next(), next(), next()
	o.PodName, o.PodUID, o.ContainerID, o.Interface, o.Node = next(), next(), next(), next(), next()
	for len(parts) > 0 {
		k, v := next(), next()
		if flags&256 != 0 {
			if m.Annotations == nil {
				m.Annotations = map[string]string{}
			}
			m.Annotations[k] = v
		} else {
			if m.Labels == nil {
				m.Labels = map[string]string{}
			}
			m.Labels[k] = v
		}
		flags ^= 256
	}
	return r
}

// checkEncode holds the fast encoder to the standard one on r: the same
// bytes, and those bytes decode (fast or standard) to the same object.
func checkEncode(t *testing.T, r *tenurev1alpha1.IPReservation) {
	t.Helper()
	var want, got bytes.Buffer
	if err := stdJSON.Encode(r, &want); err != nil {
		t.Fatalf("standard encoder: %v", err)
	}
	if _, ok := appendReservation(nil, r); !ok {
		t.Fatalf("fast encoder declined %#v", r)
	}
	if err := newReservationJSON(stdJSON).Encode(r, &got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Bytes(), want.Bytes()) {
		t.Fatalf("encoded %#v\nfast:     %s\nstandard: %s", r, got.Bytes(), want.Bytes())
	}
	checkDecode(t, got.Bytes())
}

func TestReservationJSONEncodesAsTheStandardEncoder(t *testing.T) {
	r := reservation.New(reservation.Spec{Network: "n1", Kind: tenurev1alpha1.KindAddress, Item: netip.MustParsePrefix("10.84.0.7/32"), Range: "10.84.0.0/24",
		Owner: tenurev1alpha1.ReservationOwner{Kind: tenurev1alpha1.OwnerPod, Namespace: "ns", Name: "p<&>", UID: "uid-1", PodName: "p", PodUID: "uid-1", Node: "n1"}})
	checkEncode(t, r)
	for _, s := range fuzzEncodeSeeds {
		checkEncode(t, fuzzReservation(s.s, s.n1, s.n2, s.flags))
	}
	// What it does not write goes to the standard encoder.
	r.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "m"}}
	var want, got bytes.Buffer
	_ = stdJSON.Encode(r, &want)
	if err := newReservationJSON(stdJSON).Encode(r, &got); err != nil || !bytes.Equal(got.Bytes(), want.Bytes()) {
		t.Fatalf("managed fields: %s, %v; want %s", got.Bytes(), err, want.Bytes())
	}
}

var fuzzEncodeSeeds = []struct {
	s      string
	n1, n2 int64
	flags  uint16
}{
	{"IPReservation\x00ipam.tenure.dev/v1alpha1\x00n1-10.0.0.1\x00\x00\x00\x00u\x00rv\x00net\x00Address\x0010.0.0.1", 1, 1764671470000000000, 0xffff},
	{"\x00\x00a\"b\\c\x00<&>\x00\u2028\u2029\x00\xff\xfe\x00\x01\x1f\x7f\x00é", -1, -1, 0x1ff},
	{"", 0, 0, 0},
	{strings.Repeat("x\x00", 40), 253402300800, -62135596800, 0x7f},
}

func FuzzReservationJSONEncode(f *testing.F) {
	for _, s := range fuzzEncodeSeeds {
		f.Add(s.s, s.n1, s.n2, s.flags)
	}
	f.Fuzz(func(t *testing.T, s string, n1, n2 int64, flags uint16) {
		checkEncode(t, fuzzReservation(s, n1, n2, flags))
	})
}

// benchList is a list of n reservations as the API server writes it.
func benchList(n int) []byte {
	var b bytes.Buffer
	b.WriteString(`{"apiVersion":"ipam.tenure.dev/v1alpha1","items":[`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strings.ReplaceAll(serverReservation, "10.84.0.7", fmt.Sprintf("10.84.%d.%d", i/256, i%256)))
	}
	b.WriteString(`],"kind":"IPReservationList","metadata":{"continue":"","resourceVersion":"4712"}}`)
	return b.Bytes()
}

// BenchmarkReservationJSON compares the standard serializer with the
// fast one on what the agent decodes and encodes: one watch event (its
// envelope, then its object, as client-go asks), a list of 1000, and one
// create's body.
func BenchmarkReservationJSON(b *testing.B) {
	event := []byte(`{"type":"ADDED","object":` + serverReservation + `}`)
	list := benchList(1000)
	create := reservation.New(reservation.Spec{Network: "n1", Kind: tenurev1alpha1.KindAddress, Item: netip.MustParsePrefix("10.84.0.7/32"), Range: "10.84.0.0/24",
		Owner: tenurev1alpha1.ReservationOwner{Kind: tenurev1alpha1.OwnerPod, Namespace: "ns", Name: "p", UID: "uid-1", PodName: "p", PodUID: "uid-1", ContainerID: strings.Repeat("c", 64), Interface: "net1", Node: "n1"}})
	for _, s := range []struct {
		name string
		s    runtime.Serializer
	}{{"standard", stdJSON}, {"fast", newReservationJSON(stdJSON)}} {
		b.Run("event/"+s.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(event)))
			for b.Loop() {
				var e metav1.WatchEvent
				if _, _, err := s.s.Decode(event, nil, &e); err != nil {
					b.Fatal(err)
				}
				if _, _, err := s.s.Decode(e.Object.Raw, nil, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
		// A create's answer and then its event: what an agent decodes
		// per ADD.
		b.Run("answer+event/"+s.name, func(b *testing.B) {
			b.ReportAllocs()
			answer := []byte(serverReservation)
			b.SetBytes(int64(len(answer) + len(event)))
			for b.Loop() {
				if _, _, err := s.s.Decode(answer, nil, &tenurev1alpha1.IPReservation{}); err != nil {
					b.Fatal(err)
				}
				var e metav1.WatchEvent
				if _, _, err := s.s.Decode(event, nil, &e); err != nil {
					b.Fatal(err)
				}
				if _, _, err := s.s.Decode(e.Object.Raw, nil, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("list1000/"+s.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(list)))
			for b.Loop() {
				if _, _, err := s.s.Decode(list, nil, &tenurev1alpha1.IPReservationList{}); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("create/"+s.name, func(b *testing.B) {
			b.ReportAllocs()
			var buf bytes.Buffer
			for b.Loop() {
				buf.Reset()
				if err := s.s.Encode(create, &buf); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
