package config

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"sync"
)

// val is the value of one key, decoded as T, with the key's path and its
// value as written: messages quote both. An unset key (absent or null) is
// T's zero value.
//
// T is a string, a bool, an int64, a number, an objectMembers, a slice (a
// JSON array: each element decoded as the slice's element type) or a
// struct (a JSON object: the members its fields' json tags name, spelt
// exactly; any other member is an unknown key unless the struct is an
// openObject). decodeConfig decodes a whole config into these in one pass,
// visiting each struct's members in field order, so of several faults it
// always reports the same one; the checks then only read decoded values.
type val[T any] struct {
	field
	v T
}

// number is a JSON number that must be an integer, for keys whose messages
// ask for "a number" (whereabouts' ints).
type number int64

// objectMembers is a JSON object's non-null members by key.
type objectMembers map[string]field

// openObject is a struct whose JSON object may hold other keys, those of
// other plugins.
type openObject interface{ open() }

type setter interface{ set(field) error }

// set decodes f, and every value inside it, as T.
func (v *val[T]) set(f field) error {
	v.field = f
	if !v.ok() {
		return nil // unset: the zero value
	}
	var err error
	switch p := any(&v.v).(type) { // the common cases, without reflection
	case *string:
		*p, err = v.str()
		v.text = *p
	case *bool:
		*p, err = v.boolean()
	case *int64:
		*p, err = v.integer()
	default:
		err = decode(f, reflect.ValueOf(&v.v).Elem())
	}
	return err
}

// ok reports whether the key is set to something other than null.
func (v *val[T]) ok() bool { return v.raw != nil }

// get returns the decoded value.
func (v *val[T]) get() T { return v.v }

// decodeKeys decodes f into a new T, the whole of it.
func decodeKeys[T any](f field) (T, error) {
	var t T
	err := decode(f, reflect.ValueOf(&t).Elem())
	return t, err
}

var (
	numberType        = reflect.TypeFor[number]()
	objectMembersType = reflect.TypeFor[objectMembers]()
	openType          = reflect.TypeFor[openObject]()
)

// decode decodes f into dst (addressable).
func decode(f field, dst reflect.Value) error {
	if s, ok := dst.Addr().Interface().(setter); ok {
		return s.set(f)
	}
	switch {
	case dst.Type() == numberType:
		if err := f.wantKind(kindNumber, "a number"); err != nil {
			return err
		}
		n, err := f.integer()
		dst.SetInt(n)
		return err
	case dst.Type() == objectMembersType:
		m, err := f.object()
		dst.Set(reflect.ValueOf(objectMembers(m)))
		return err
	}
	switch dst.Kind() {
	case reflect.String:
		s, err := f.str()
		dst.SetString(s)
		return err
	case reflect.Bool:
		b, err := f.boolean()
		dst.SetBool(b)
		return err
	case reflect.Int64:
		n, err := f.integer()
		dst.SetInt(n)
		return err
	case reflect.Slice:
		elems, err := f.array()
		if err != nil {
			return err
		}
		dst.Set(reflect.MakeSlice(dst.Type(), len(elems), len(elems)))
		for i, e := range elems {
			if err := decode(e, dst.Index(i)); err != nil {
				return err
			}
		}
		return nil
	case reflect.Struct:
		m, err := f.object()
		if err != nil {
			return err
		}
		return decodeMembers(m, dst)
	}
	panic("config: cannot decode into " + dst.Type().String())
}

// decodeMembers sets dst's fields from the members their json tags name;
// with dst not open, a member no field names is an unknown key. Members are
// checked in key order, so the first fault reported is always the same.
func decodeMembers(m map[string]field, dst reflect.Value) error {
	keys := keysOf(dst.Type())
	if !dst.Type().Implements(openType) {
		if err := checkKeys(m, keys); err != nil {
			return err
		}
	}
	for i, k := range keys {
		if f, ok := m[k]; ok {
			if err := decode(f, dst.Field(i)); err != nil {
				return err
			}
		}
	}
	return nil
}

var keyCache sync.Map // reflect.Type → []string

// keysOf returns the json tags of t's fields, in field order: the keys
// "did you mean" suggests from, first best first.
func keysOf(t reflect.Type) []string {
	if k, ok := keyCache.Load(t); ok {
		return k.([]string)
	}
	keys := make([]string, t.NumField())
	for i := range keys {
		keys[i] = t.Field(i).Tag.Get("json")
	}
	keyCache.Store(t, keys)
	return keys
}

func checkKeys(m map[string]field, allowed []string) error {
	for _, k := range sortedKeys(m) {
		if !slices.Contains(allowed, k) {
			return unknownKey(m[k], k, allowed)
		}
	}
	return nil
}

func sortedKeys(m map[string]field) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

type jsonKind int

const (
	kindNull jsonKind = iota
	kindString
	kindNumber
	kindBool
	kindObject
	kindArray
)

func kindOf(raw json.RawMessage) jsonKind {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return kindNull
	}
	switch raw[0] {
	case '"':
		return kindString
	case '{':
		return kindObject
	case '[':
		return kindArray
	case 't', 'f':
		return kindBool
	case 'n':
		return kindNull
	}
	return kindNumber
}

func (k jsonKind) String() string {
	return [...]string{"null", "a string", "a number", "a boolean", "an object", "an array"}[k]
}

func (f field) isNull() bool { return kindOf(f.raw) == kindNull }

func (f field) wantKind(k jsonKind, what string) error {
	if got := kindOf(f.raw); got != k {
		return f.errorf("must be %s, not %s", what, got)
	}
	return nil
}

func (f field) str() (string, error) {
	if err := f.wantKind(kindString, "a string"); err != nil {
		return "", err
	}
	var s string
	if err := json.Unmarshal(f.raw, &s); err != nil {
		return "", f.errorf("invalid string: %v", err)
	}
	return s, nil
}

func (f field) boolean() (bool, error) {
	if err := f.wantKind(kindBool, "true or false"); err != nil {
		return false, err
	}
	return bytes.Equal(bytes.TrimSpace(f.raw), []byte("true")), nil
}

func (f field) integer() (int64, error) {
	if err := f.wantKind(kindNumber, "an integer"); err != nil {
		return 0, err
	}
	n, err := strconv.ParseInt(string(bytes.TrimSpace(f.raw)), 10, 64)
	if err != nil {
		return 0, f.errorf("must be an integer")
	}
	return n, nil
}

// object decodes a JSON object into its members, with paths under f.path.
// Members whose value is null are dropped, as encoding/json (and so
// whereabouts) treats them as absent.
func (f field) object() (map[string]field, error) {
	if err := f.wantKind(kindObject, "an object"); err != nil {
		return nil, err
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(f.raw, &m); err != nil {
		return nil, f.errorf("invalid object: %v", err)
	}
	out := make(map[string]field, len(m))
	for k, v := range m {
		p := k
		if f.path != "" {
			p = f.path + "." + k
		}
		c := field{path: p, raw: v}
		if !c.isNull() {
			out[k] = c
		}
	}
	return out, nil
}

func (f field) array() ([]field, error) {
	if err := f.wantKind(kindArray, "an array"); err != nil {
		return nil, err
	}
	var a []json.RawMessage
	if err := json.Unmarshal(f.raw, &a); err != nil {
		return nil, f.errorf("invalid array: %v", err)
	}
	out := make([]field, len(a))
	for i, v := range a {
		out[i] = field{path: fmt.Sprintf("%s[%d]", f.path, i), raw: v}
	}
	return out, nil
}
