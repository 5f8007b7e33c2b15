package kube

import (
	"bytes"
	"io"
	"reflect"
	"slices"
	"strconv"
	"sync"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
)

// reservationJSON is the JSON serializer of the agent's reservation
// traffic. The standard one (the codec factory's) reads a watch event
// five times over: the framer, the envelope's kind and then its fields,
// the object's kind and then its fields by reflection. This one reads an
// IPReservation, an IPReservationList or a watch event holding an
// IPReservation in one pass, and writes an IPReservation by hand.
//
// It is exact or it declines: whatever it does not fully understand (an
// unknown field, a duplicate key, a null, a number or a shape it does not
// expect, invalid JSON, any other type) goes to the standard serializer,
// so what it returns is always what the standard one returns for the same
// bytes (FuzzReservationJSON holds it to that).
type reservationJSON struct {
	std runtime.Serializer
	// eventGVK is what the standard serializer reports for a watch
	// event's envelope, which names no kind: the scheme's first kind of
	// metav1.WatchEvent.
	eventGVK schema.GroupVersionKind

	// A watch event's object is decoded with its envelope; client-go then
	// asks for the object again from the envelope's Raw, and gets it from
	// here. Raw is the decoder's own copy and is compared whole, so a hit
	// is the object those very bytes decode to.
	mu     sync.Mutex
	recent [8]decodedObject
	next   int

	// answered holds a copy of each reservation an answer carried whole
	// (a Create's, a Get's), by its bytes. The node's watch delivers a
	// create's object in the very bytes of the Create's answer, and that
	// event is handed the copy rather than read again. Each is taken
	// once; past maxAnswered the oldest goes (answeredKeys, a ring).
	answered     map[string]*tenurev1alpha1.IPReservation
	answeredKeys [maxAnswered]string
	answeredNext int
}

// maxAnswered bounds answered: more than the creates an agent has in
// flight, whose events arrive within milliseconds of their answers.
const maxAnswered = 128

type decodedObject struct {
	raw []byte
	obj *tenurev1alpha1.IPReservation
}

var (
	reservationGVK     = tenurev1alpha1.GroupVersion.WithKind("IPReservation")
	reservationListGVK = tenurev1alpha1.GroupVersion.WithKind("IPReservationList")
	reservationAPIVer  = tenurev1alpha1.GroupVersion.String()
)

func newReservationJSON(std runtime.Serializer) *reservationJSON {
	s := &reservationJSON{std: std}
	if kinds, _, err := Scheme.ObjectKinds(&metav1.WatchEvent{}); err == nil && len(kinds) > 0 {
		s.eventGVK = kinds[0]
	}
	return s
}

// Identifier is the standard serializer's: the bytes are the same.
func (s *reservationJSON) Identifier() runtime.Identifier { return s.std.Identifier() }

// Encode writes an IPReservation as encoding/json does (the standard
// serializer's encoder), anything else through the standard serializer.
func (s *reservationJSON) Encode(obj runtime.Object, w io.Writer) error {
	if r, ok := obj.(*tenurev1alpha1.IPReservation); ok && r != nil {
		buf := encodeBuffers.Get().(*[]byte)
		defer encodeBuffers.Put(buf)
		if b, ok := appendReservation((*buf)[:0], r); ok {
			*buf = append(b, '\n')
			_, err := w.Write(*buf)
			return err
		}
	}
	return s.std.Encode(obj, w)
}

var encodeBuffers = sync.Pool{New: func() any { b := make([]byte, 0, 2048); return &b }}

// Decode decodes data into a fresh IPReservation, IPReservationList or
// WatchEvent (into nil or a zero one of those) in one pass, or lets the
// standard serializer do it.
func (s *reservationJSON) Decode(data []byte, defaults *schema.GroupVersionKind, into runtime.Object) (runtime.Object, *schema.GroupVersionKind, error) {
	if defaults == nil {
		if obj, gvk, ok := s.fastDecode(data, into); ok {
			return obj, gvk, nil
		}
	}
	return s.std.Decode(data, defaults, into)
}

func (s *reservationJSON) fastDecode(data []byte, into runtime.Object) (runtime.Object, *schema.GroupVersionKind, bool) {
	switch t := into.(type) {
	case nil:
		if r := s.take(data); r != nil {
			gvk := reservationGVK
			return r, &gvk, true
		}
		r := &tenurev1alpha1.IPReservation{}
		if !decodeTop(data, func(d *decoder) { d.reservation(r) }) || r.APIVersion != reservationAPIVer || r.Kind != reservationGVK.Kind {
			return nil, nil, false
		}
		gvk := reservationGVK
		return r, &gvk, true
	case *tenurev1alpha1.IPReservation:
		if t == nil || !reflect.ValueOf(*t).IsZero() {
			return nil, nil, false
		}
		var r tenurev1alpha1.IPReservation
		if !decodeTop(data, func(d *decoder) { d.reservation(&r) }) || r.APIVersion != reservationAPIVer || r.Kind != reservationGVK.Kind {
			return nil, nil, false
		}
		s.remember(data, r.DeepCopy())
		*t = r
		gvk := reservationGVK
		return t, &gvk, true
	case *tenurev1alpha1.IPReservationList:
		if t == nil || !reflect.ValueOf(*t).IsZero() {
			return nil, nil, false
		}
		var l tenurev1alpha1.IPReservationList
		if !decodeTop(data, func(d *decoder) { d.reservationList(&l) }) || l.APIVersion != reservationAPIVer || l.Kind != reservationListGVK.Kind {
			return nil, nil, false
		}
		*t = l
		gvk := reservationListGVK
		return t, &gvk, true
	case *metav1.WatchEvent:
		if t == nil || t.Type != "" || t.Object.Raw != nil || t.Object.Object != nil || s.eventGVK.Kind == "" {
			return nil, nil, false
		}
		var e metav1.WatchEvent
		var obj *tenurev1alpha1.IPReservation
		if !decodeTop(data, func(d *decoder) { d.answered = s.takeAnswered; obj = d.event(&e) }) {
			return nil, nil, false
		}
		*t = e
		if obj != nil {
			s.keep(e.Object.Raw, obj)
		}
		gvk := s.eventGVK
		return t, &gvk, true
	}
	return nil, nil, false
}

// keep remembers obj as what raw decodes to.
func (s *reservationJSON) keep(raw []byte, obj *tenurev1alpha1.IPReservation) {
	s.mu.Lock()
	s.recent[s.next] = decodedObject{raw: raw, obj: obj}
	s.next = (s.next + 1) % len(s.recent)
	s.mu.Unlock()
}

// take returns, once, the object kept for these very bytes.
func (s *reservationJSON) take(data []byte) *tenurev1alpha1.IPReservation {
	if len(data) == 0 {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range s.recent {
		e := &s.recent[i]
		if len(e.raw) == len(data) && &e.raw[0] == &data[0] {
			obj := e.obj
			same := bytes.Equal(e.raw, data)
			*e = decodedObject{}
			if !same {
				return nil
			}
			return obj
		}
	}
	return nil
}

// remember keeps obj as what the answer data decodes to.
func (s *reservationJSON) remember(data []byte, obj *tenurev1alpha1.IPReservation) {
	key := string(bytes.TrimSpace(data))
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.answered == nil {
		s.answered = make(map[string]*tenurev1alpha1.IPReservation, maxAnswered)
	}
	if old := s.answeredKeys[s.answeredNext]; old != "" {
		delete(s.answered, old)
	}
	s.answered[key] = obj
	s.answeredKeys[s.answeredNext] = key
	s.answeredNext = (s.answeredNext + 1) % maxAnswered
}

// takeAnswered returns, once, the copy kept of an answer of these very
// bytes.
func (s *reservationJSON) takeAnswered(raw []byte) *tenurev1alpha1.IPReservation {
	s.mu.Lock()
	defer s.mu.Unlock()
	obj, ok := s.answered[string(raw)]
	if ok {
		delete(s.answered, string(raw))
	}
	return obj
}

// decoder reads JSON as sigs.k8s.io/json (case-sensitive encoding/json)
// does into the reservation types, and gives up (bad) at anything it
// would have to interpret otherwise.
type decoder struct {
	b   []byte
	i   int
	bad bool
	// scratch holds unescaped strings and keys.
	scratch []byte
	// lastTime is what metav1.Time made of lastTimeLit: an object's
	// managed fields are mostly stamped with its creation time.
	lastTime    *metav1.Time
	lastTimeLit []byte
	// answered, if set, returns what an event's object decodes to when
	// its bytes are an answer's (reservationJSON.takeAnswered).
	answered func(raw []byte) *tenurev1alpha1.IPReservation
}

// decodeTop decodes one JSON value with f and allows only whitespace
// after it.
func decodeTop(data []byte, f func(*decoder)) bool {
	d := &decoder{b: data}
	d.ws()
	f(d)
	if d.bad {
		return false
	}
	d.ws()
	return d.i == len(d.b)
}

func (d *decoder) ws() {
	for d.i < len(d.b) {
		switch d.b[d.i] {
		case ' ', '\t', '\n', '\r':
			d.i++
		default:
			return
		}
	}
}

// peek returns the next non-space byte, 0 at the end.
func (d *decoder) peek() byte {
	d.ws()
	if d.i < len(d.b) {
		return d.b[d.i]
	}
	return 0
}

func (d *decoder) fail() { d.bad = true }

// untracked is what an object's field callback returns for a key whose
// repetition it checks itself (a map's) or allows (a skipped value's).
const untracked = 64

// object reads an object, calling field for each key with the decoder at
// its value. field returns the key's number, below 64, so that a key seen
// twice is given up on (encoding/json would merge or overwrite), untracked,
// or -1 for a key it does not know.
func (d *decoder) object(field func(key []byte) int) {
	if d.bad || d.peek() != '{' {
		d.fail()
		return
	}
	d.i++
	if d.peek() == '}' {
		d.i++
		return
	}
	var seen uint64
	for !d.bad {
		if d.peek() != '"' {
			d.fail()
			return
		}
		key := d.stringBytes()
		if d.bad || d.peek() != ':' {
			d.fail()
			return
		}
		d.i++
		d.ws()
		switch bit := field(key); {
		case bit == untracked:
		case bit < 0 || bit > untracked || seen&(1<<bit) != 0:
			d.fail()
			return
		default:
			seen |= 1 << bit
		}
		switch d.peek() {
		case ',':
			d.i++
		case '}':
			d.i++
			return
		default:
			d.fail()
			return
		}
	}
}

// array reads an array, calling elem with the decoder at each element.
func (d *decoder) array(elem func()) {
	if d.bad || d.peek() != '[' {
		d.fail()
		return
	}
	d.i++
	if d.peek() == ']' {
		d.i++
		return
	}
	for !d.bad {
		d.ws()
		elem()
		if d.bad {
			return
		}
		switch d.peek() {
		case ',':
			d.i++
		case ']':
			d.i++
			return
		default:
			d.fail()
			return
		}
	}
}

// stringBytes reads a string and returns its value, unescaped as
// encoding/json unescapes it; the bytes are valid until the next call.
func (d *decoder) stringBytes() []byte {
	if d.bad || d.i >= len(d.b) || d.b[d.i] != '"' {
		d.fail()
		return nil
	}
	start := d.i + 1
	for j := start; j < len(d.b); j++ {
		c := d.b[j]
		if c == '"' {
			d.i = j + 1
			return d.b[start:j]
		}
		if c == '\\' || c < 0x20 || c >= utf8.RuneSelf {
			return d.slowString(start)
		}
	}
	d.fail()
	return nil
}

// slowString reads a string with escapes or non-ASCII bytes from start
// (after the quote): the literal must be what encoding/json's scanner
// accepts, and its value is what encoding/json's unquote makes of it.
func (d *decoder) slowString(start int) []byte {
	end := -1
	for j := start; j < len(d.b); {
		c := d.b[j]
		switch {
		case c == '"':
			end = j
		case c == '\\':
			if j+1 >= len(d.b) {
				d.fail()
				return nil
			}
			switch d.b[j+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				j += 2
			case 'u':
				if getu4(d.b[j:]) < 0 {
					d.fail()
					return nil
				}
				j += 6
			default:
				d.fail()
				return nil
			}
			continue
		case c < 0x20:
			d.fail()
			return nil
		default:
			j++
			continue
		}
		break
	}
	if end < 0 {
		d.fail()
		return nil
	}
	d.i = end + 1
	s := d.b[start:end]
	b := d.scratch[:0]
	for r := 0; r < len(s); {
		c := s[r]
		switch {
		case c == '\\':
			switch s[r+1] {
			case 'b':
				b = append(b, '\b')
			case 'f':
				b = append(b, '\f')
			case 'n':
				b = append(b, '\n')
			case 'r':
				b = append(b, '\r')
			case 't':
				b = append(b, '\t')
			case 'u':
				rr := getu4(s[r:])
				r += 6
				if utf16.IsSurrogate(rr) {
					rr1 := getu4(s[r:])
					if dec := utf16.DecodeRune(rr, rr1); dec != unicode.ReplacementChar {
						r += 6
						b = utf8.AppendRune(b, dec)
						continue
					}
					rr = unicode.ReplacementChar
				}
				b = utf8.AppendRune(b, rr)
				continue
			default: // '"', '\\', '/'
				b = append(b, s[r+1])
			}
			r += 2
		case c < utf8.RuneSelf:
			b = append(b, c)
			r++
		default:
			rr, size := utf8.DecodeRune(s[r:])
			r += size
			b = utf8.AppendRune(b, rr)
		}
	}
	d.scratch = b
	return b
}

// getu4 decodes \uXXXX from the beginning of s, or returns -1.
func getu4(s []byte) rune {
	if len(s) < 6 || s[0] != '\\' || s[1] != 'u' {
		return -1
	}
	var r rune
	for _, c := range s[2:6] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			c = c - 'A' + 10
		default:
			return -1
		}
		r = r*16 + rune(c)
	}
	return r
}

func (d *decoder) str() string {
	if d.peek() != '"' {
		d.fail()
		return ""
	}
	b := d.stringBytes()
	if s, ok := interned[string(b)]; ok {
		return s
	}
	return string(b)
}

// interned are strings most reservations carry, shared rather than
// allocated for each (the node cache holds every one of them).
var interned = func() map[string]string {
	m := map[string]string{}
	for _, s := range []string{
		reservationAPIVer, reservationGVK.Kind, reservationListGVK.Kind,
		string(tenurev1alpha1.KindAddress), string(tenurev1alpha1.KindDelegatedPrefix),
		string(tenurev1alpha1.OwnerPod), string(tenurev1alpha1.OwnerIPAMClaim),
		string(metav1.ManagedFieldsOperationUpdate), string(metav1.ManagedFieldsOperationApply), "FieldsV1",
		"ipam.tenure.dev/block", "ipam.tenure.dev/network", "ipam.tenure.dev/node", "ipam.tenure.dev/owner-uid",
		"ipam.tenure.dev/spec-summary", "v1", metav1.InitialEventsAnnotationKey, "true",
		"tenure-agent", "tenure-controller",
	} {
		m[s] = s
	}
	return m
}()

// int64 reads an integer in JSON's grammar that fits an int64 (a
// fraction, an exponent or an overflow is an error encoding/json reports
// after decoding the rest: given up on here).
func (d *decoder) int64() int64 {
	start := d.i
	j := d.i
	if j < len(d.b) && d.b[j] == '-' {
		j++
	}
	switch {
	case j < len(d.b) && d.b[j] == '0':
		j++
	case j < len(d.b) && d.b[j] >= '1' && d.b[j] <= '9':
		for j < len(d.b) && d.b[j] >= '0' && d.b[j] <= '9' {
			j++
		}
	default:
		d.fail()
		return 0
	}
	if j < len(d.b) && (d.b[j] == '.' || d.b[j] == 'e' || d.b[j] == 'E') {
		d.fail()
		return 0
	}
	n, err := strconv.ParseInt(string(d.b[start:j]), 10, 64)
	if err != nil {
		d.fail()
		return 0
	}
	d.i = j
	return n
}

func (d *decoder) bool() bool {
	switch {
	case bytes.HasPrefix(d.b[d.i:], []byte("true")):
		d.i += 4
		return true
	case bytes.HasPrefix(d.b[d.i:], []byte("false")):
		d.i += 5
		return false
	}
	d.fail()
	return false
}

// time reads a string, or null, through metav1.Time's own UnmarshalJSON
// (encoding/json hands it null too: the field is no pointer).
func (d *decoder) time() metav1.Time {
	start := d.i
	if bytes.HasPrefix(d.b[d.i:], []byte("null")) {
		d.i += 4
	} else {
		d.stringBytes()
	}
	if d.bad {
		return metav1.Time{}
	}
	lit := d.b[start:d.i]
	if d.lastTime != nil && bytes.Equal(lit, d.lastTimeLit) {
		return *d.lastTime
	}
	var t metav1.Time
	if t.UnmarshalJSON(lit) != nil {
		d.fail()
		return t
	}
	d.lastTime, d.lastTimeLit = &t, lit
	return t
}

// ptrTime reads a *metav1.Time's string (null, which leaves the pointer
// nil, is given up on).
func (d *decoder) ptrTime() metav1.Time {
	if d.peek() != '"' {
		d.fail()
		return metav1.Time{}
	}
	return d.time()
}

// skip reads any JSON value encoding/json's scanner accepts and returns
// its bytes.
func (d *decoder) skip(depth int) []byte {
	start := d.i
	if depth > 1000 {
		d.fail()
		return nil
	}
	switch c := d.peek(); {
	case c == '{':
		d.object(func([]byte) int { d.skip(depth + 1); return untracked })
	case c == '[':
		d.array(func() { d.skip(depth + 1) })
	case c == '"':
		d.stringBytes()
	case c == 't' && bytes.HasPrefix(d.b[d.i:], []byte("true")):
		d.i += 4
	case c == 'f' && bytes.HasPrefix(d.b[d.i:], []byte("false")):
		d.i += 5
	case c == 'n' && bytes.HasPrefix(d.b[d.i:], []byte("null")):
		d.i += 4
	case c == '-' || (c >= '0' && c <= '9'):
		d.number()
	default:
		d.fail()
	}
	if d.bad {
		return nil
	}
	return d.b[start:d.i]
}

// number reads a number in JSON's grammar.
func (d *decoder) number() {
	j := d.i
	digits := func() bool {
		k := j
		for j < len(d.b) && d.b[j] >= '0' && d.b[j] <= '9' {
			j++
		}
		return j > k
	}
	if j < len(d.b) && d.b[j] == '-' {
		j++
	}
	switch {
	case j < len(d.b) && d.b[j] == '0':
		j++
	case j < len(d.b) && d.b[j] >= '1' && d.b[j] <= '9':
		digits()
	default:
		d.fail()
		return
	}
	if j < len(d.b) && d.b[j] == '.' {
		j++
		if !digits() {
			d.fail()
			return
		}
	}
	if j < len(d.b) && (d.b[j] == 'e' || d.b[j] == 'E') {
		j++
		if j < len(d.b) && (d.b[j] == '+' || d.b[j] == '-') {
			j++
		}
		if !digits() {
			d.fail()
			return
		}
	}
	d.i = j
}

func (d *decoder) stringMap() map[string]string {
	m := map[string]string{}
	d.object(func(key []byte) int {
		k, ok := interned[string(key)]
		if !ok {
			k = string(key)
		}
		if _, dup := m[k]; dup {
			return -1
		}
		m[k] = d.str()
		return untracked
	})
	return m
}

func (d *decoder) stringSlice() []string {
	s := []string{}
	d.array(func() { s = append(s, d.str()) })
	return s
}

func (d *decoder) reservation(r *tenurev1alpha1.IPReservation) {
	d.object(func(key []byte) int {
		switch string(key) {
		case "apiVersion":
			r.APIVersion = d.str()
			return 0
		case "kind":
			r.Kind = d.str()
			return 1
		case "metadata":
			d.objectMeta(&r.ObjectMeta)
			return 2
		case "spec":
			d.spec(&r.Spec)
			return 3
		}
		return -1
	})
}

func (d *decoder) reservationList(l *tenurev1alpha1.IPReservationList) {
	d.object(func(key []byte) int {
		switch string(key) {
		case "apiVersion":
			l.APIVersion = d.str()
			return 0
		case "kind":
			l.Kind = d.str()
			return 1
		case "metadata":
			d.object(func(key []byte) int {
				switch string(key) {
				case "selfLink":
					l.SetSelfLink(d.str())
					return 0
				case "resourceVersion":
					l.ResourceVersion = d.str()
					return 1
				case "continue":
					l.Continue = d.str()
					return 2
				case "remainingItemCount":
					n := d.int64()
					l.RemainingItemCount = &n
					return 3
				}
				return -1
			})
			return 2
		case "items":
			items := []tenurev1alpha1.IPReservation{}
			d.array(func() {
				items = append(items, tenurev1alpha1.IPReservation{})
				d.reservation(&items[len(items)-1])
			})
			l.Items = items
			return 3
		}
		return -1
	})
}

// event reads a watch event's envelope and its object, which it returns
// when it is an IPReservation (and gives up otherwise).
func (d *decoder) event(e *metav1.WatchEvent) *tenurev1alpha1.IPReservation {
	var obj *tenurev1alpha1.IPReservation
	d.object(func(key []byte) int {
		switch string(key) {
		case "type":
			e.Type = d.str()
			return 0
		case "object":
			start := d.i
			if obj = d.answeredObject(); obj != nil {
				e.Object.Raw = bytes.Clone(d.b[start:d.i])
				return 1
			}
			obj = &tenurev1alpha1.IPReservation{}
			d.reservation(obj)
			if obj.APIVersion != reservationAPIVer || obj.Kind != reservationGVK.Kind {
				d.fail()
			}
			if !d.bad {
				e.Object.Raw = bytes.Clone(d.b[start:d.i])
			}
			return 1
		}
		return -1
	})
	return obj
}

// answeredObject is the object of an event that is the envelope's last
// value (as the API server writes it) when its bytes are an answer's:
// then the decoder is moved past them. The bytes decode exactly as they
// did in the answer, so its copy is what they decode to.
func (d *decoder) answeredObject() *tenurev1alpha1.IPReservation {
	if d.answered == nil {
		return nil
	}
	end := len(bytes.TrimRight(d.b, " \t\r\n")) - 1 // the envelope's closing brace
	if end <= d.i || d.b[end] != '}' {
		return nil
	}
	obj := d.answered(d.b[d.i:end])
	if obj != nil {
		d.i = end
	}
	return obj
}

func (d *decoder) objectMeta(m *metav1.ObjectMeta) {
	d.object(func(key []byte) int {
		switch string(key) {
		case "name":
			m.Name = d.str()
			return 0
		case "generateName":
			m.GenerateName = d.str()
			return 1
		case "namespace":
			m.Namespace = d.str()
			return 2
		case "selfLink":
			m.SetSelfLink(d.str())
			return 3
		case "uid":
			m.UID = types.UID(d.str())
			return 4
		case "resourceVersion":
			m.ResourceVersion = d.str()
			return 5
		case "generation":
			m.Generation = d.int64()
			return 6
		case "creationTimestamp":
			m.CreationTimestamp = d.time()
			return 7
		case "deletionTimestamp":
			t := d.ptrTime()
			m.DeletionTimestamp = &t
			return 8
		case "deletionGracePeriodSeconds":
			n := d.int64()
			m.DeletionGracePeriodSeconds = &n
			return 9
		case "labels":
			m.Labels = d.stringMap()
			return 10
		case "annotations":
			m.Annotations = d.stringMap()
			return 11
		case "ownerReferences":
			refs := []metav1.OwnerReference{}
			d.array(func() {
				refs = append(refs, metav1.OwnerReference{})
				d.ownerReference(&refs[len(refs)-1])
			})
			m.OwnerReferences = refs
			return 12
		case "finalizers":
			m.Finalizers = d.stringSlice()
			return 13
		case "managedFields":
			mf := []metav1.ManagedFieldsEntry{}
			d.array(func() {
				mf = append(mf, metav1.ManagedFieldsEntry{})
				d.managedFields(&mf[len(mf)-1])
			})
			m.ManagedFields = mf
			return 14
		}
		return -1
	})
}

func (d *decoder) ownerReference(o *metav1.OwnerReference) {
	d.object(func(key []byte) int {
		switch string(key) {
		case "apiVersion":
			o.APIVersion = d.str()
			return 0
		case "kind":
			o.Kind = d.str()
			return 1
		case "name":
			o.Name = d.str()
			return 2
		case "uid":
			o.UID = types.UID(d.str())
			return 3
		case "controller":
			v := d.bool()
			o.Controller = &v
			return 4
		case "blockOwnerDeletion":
			v := d.bool()
			o.BlockOwnerDeletion = &v
			return 5
		}
		return -1
	})
}

func (d *decoder) managedFields(e *metav1.ManagedFieldsEntry) {
	d.object(func(key []byte) int {
		switch string(key) {
		case "manager":
			e.Manager = d.str()
			return 0
		case "operation":
			e.Operation = metav1.ManagedFieldsOperationType(d.str())
			return 1
		case "apiVersion":
			e.APIVersion = d.str()
			return 2
		case "time":
			t := d.ptrTime()
			e.Time = &t
			return 3
		case "fieldsType":
			e.FieldsType = d.str()
			return 4
		case "fieldsV1":
			// FieldsV1 keeps the value's bytes as they are (its own
			// UnmarshalJSON); null would leave the pointer nil.
			if d.peek() == 'n' {
				d.fail()
				return 5
			}
			raw := d.skip(0)
			e.FieldsV1 = metav1.NewFieldsV1(string(raw))
			return 5
		case "subresource":
			e.Subresource = d.str()
			return 6
		}
		return -1
	})
}

func (d *decoder) spec(s *tenurev1alpha1.IPReservationSpec) {
	d.object(func(key []byte) int {
		switch string(key) {
		case "network":
			s.Network = d.str()
			return 0
		case "kind":
			s.Kind = tenurev1alpha1.ReservationKind(d.str())
			return 1
		case "address":
			s.Address = d.str()
			return 2
		case "range":
			s.Range = d.str()
			return 3
		case "pool":
			s.Pool = d.str()
			return 4
		case "cniNetwork":
			s.CNINetwork = d.str()
			return 5
		case "owner":
			d.owner(&s.Owner)
			return 6
		}
		return -1
	})
}

func (d *decoder) owner(o *tenurev1alpha1.ReservationOwner) {
	d.object(func(key []byte) int {
		switch string(key) {
		case "kind":
			o.Kind = tenurev1alpha1.OwnerKind(d.str())
			return 0
		case "namespace":
			o.Namespace = d.str()
			return 1
		case "name":
			o.Name = d.str()
			return 2
		case "uid":
			o.UID = d.str()
			return 3
		case "podName":
			o.PodName = d.str()
			return 4
		case "podUID":
			o.PodUID = d.str()
			return 5
		case "containerID":
			o.ContainerID = d.str()
			return 6
		case "interface":
			o.Interface = d.str()
			return 7
		case "node":
			o.Node = d.str()
			return 8
		}
		return -1
	})
}

// appendReservation appends r as encoding/json writes it; false for what
// it does not write (owner references, managed fields).
func appendReservation(b []byte, r *tenurev1alpha1.IPReservation) ([]byte, bool) {
	m := &r.ObjectMeta
	if len(m.OwnerReferences) > 0 || len(m.ManagedFields) > 0 {
		return nil, false
	}
	w := objWriter{b: append(b, '{')}
	w.optString("kind", r.Kind)
	w.optString("apiVersion", r.APIVersion)
	w.key("metadata")
	w.b = append(w.b, '{')
	mw := objWriter{b: w.b}
	mw.optString("name", m.Name)
	mw.optString("generateName", m.GenerateName)
	mw.optString("namespace", m.Namespace)
	mw.optString("selfLink", m.GetSelfLink())
	mw.optString("uid", string(m.UID))
	mw.optString("resourceVersion", m.ResourceVersion)
	if m.Generation != 0 {
		mw.key("generation")
		mw.b = strconv.AppendInt(mw.b, m.Generation, 10)
	}
	if !m.CreationTimestamp.IsZero() {
		mw.key("creationTimestamp")
		mw.time(m.CreationTimestamp)
	}
	if m.DeletionTimestamp != nil {
		mw.key("deletionTimestamp")
		mw.time(*m.DeletionTimestamp)
	}
	if m.DeletionGracePeriodSeconds != nil {
		mw.key("deletionGracePeriodSeconds")
		mw.b = strconv.AppendInt(mw.b, *m.DeletionGracePeriodSeconds, 10)
	}
	mw.stringMap("labels", m.Labels)
	mw.stringMap("annotations", m.Annotations)
	if len(m.Finalizers) > 0 {
		mw.key("finalizers")
		mw.b = append(mw.b, '[')
		for i, f := range m.Finalizers {
			if i > 0 {
				mw.b = append(mw.b, ',')
			}
			mw.b = appendString(mw.b, f)
		}
		mw.b = append(mw.b, ']')
	}
	w.b = append(mw.b, '}')
	s := &r.Spec
	w.key("spec")
	w.b = append(w.b, '{')
	sw := objWriter{b: w.b}
	sw.string("network", s.Network)
	sw.string("kind", string(s.Kind))
	sw.string("address", s.Address)
	sw.optString("range", s.Range)
	sw.optString("pool", s.Pool)
	sw.optString("cniNetwork", s.CNINetwork)
	sw.key("owner")
	o := &s.Owner
	ow := objWriter{b: append(sw.b, '{')}
	ow.string("kind", string(o.Kind))
	ow.optString("namespace", o.Namespace)
	ow.string("name", o.Name)
	ow.string("uid", o.UID)
	ow.optString("podName", o.PodName)
	ow.optString("podUID", o.PodUID)
	ow.optString("containerID", o.ContainerID)
	ow.optString("interface", o.Interface)
	ow.optString("node", o.Node)
	w.b = append(ow.b, '}', '}', '}')
	return w.b, true
}

// objWriter writes an object's members, the commas between them.
type objWriter struct {
	b    []byte
	more bool
}

// key writes a key known to need no escaping.
func (w *objWriter) key(k string) {
	if w.more {
		w.b = append(w.b, ',')
	}
	w.more = true
	w.b = append(w.b, '"')
	w.b = append(w.b, k...)
	w.b = append(w.b, '"', ':')
}

func (w *objWriter) string(k, v string) {
	w.key(k)
	w.b = appendString(w.b, v)
}

func (w *objWriter) optString(k, v string) {
	if v != "" {
		w.string(k, v)
	}
}

// time writes t as metav1.Time's MarshalJSON does (encoding/json copies
// it: an RFC 3339 string has nothing to escape).
func (w *objWriter) time(t metav1.Time) {
	if t.IsZero() {
		w.b = append(w.b, "null"...)
		return
	}
	w.b = append(w.b, '"')
	w.b = t.UTC().AppendFormat(w.b, "2006-01-02T15:04:05Z07:00")
	w.b = append(w.b, '"')
}

// htmlSafe are the ASCII bytes encoding/json writes as they are (with
// HTML escaping on, as the standard serializer's encoder has it).
var htmlSafe = func() (t [utf8.RuneSelf]bool) {
	for c := byte(0x20); c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\' && c != '<' && c != '>' && c != '&'
	}
	return t
}()

const hexDigits = "0123456789abcdef"

// appendString appends s as encoding/json writes a string: invalid UTF-8
// as U+FFFD, U+2028 and U+2029 and HTML's <, > and & escaped.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if htmlSafe[c] {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// stringMap writes m with its keys sorted, as encoding/json does; an
// empty map is left out (omitempty).
func (w *objWriter) stringMap(k string, m map[string]string) {
	if len(m) == 0 {
		return
	}
	w.key(k)
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	w.b = append(w.b, '{')
	for i, k := range keys {
		if i > 0 {
			w.b = append(w.b, ',')
		}
		w.b = appendString(w.b, k)
		w.b = append(w.b, ':')
		w.b = appendString(w.b, m[k])
	}
	w.b = append(w.b, '}')
}
