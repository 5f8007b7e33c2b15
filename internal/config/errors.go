package config

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// Error is the only error type Parse and ApplyPool return. It always names
// the offending key, as a path such as "ipam.ipRanges[1].range",
// "flatfile.exclude[0]" (a key the flat configuration file supplied) or
// "IPPool blue spec.ranges[0].range", and the value as written. A CNI plugin
// maps it to error code 7 (invalid network config).
type Error struct {
	Key    string // path of the key
	Value  string // the value as written (JSON text, strings quoted); "" if absent
	Reason string // what is wrong; names the other key for contradictions
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.Key)
	if e.Value != "" {
		b.WriteString(": ")
		b.WriteString(e.Value)
	}
	b.WriteString(": ")
	b.WriteString(e.Reason)
	return b.String()
}

const maxShown = 200

// show renders a JSON value for a message: compacted and truncated.
func show(raw json.RawMessage) string {
	var buf bytes.Buffer
	s := string(raw)
	if json.Compact(&buf, raw) == nil {
		s = buf.String()
	}
	return truncate(s)
}

func truncate(s string) string {
	if len(s) > maxShown {
		s = strings.ToValidUTF8(s[:maxShown], "") + "…"
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}

// quote renders a Go string the way show renders a JSON string.
func quote(s string) string { return truncate(strconv.Quote(s)) }

// field is one JSON value with the path of its key.
type field struct {
	path string
	raw  json.RawMessage
}

func (f field) errorf(format string, args ...any) *Error {
	return &Error{Key: f.path, Value: show(f.raw), Reason: fmt.Sprintf(format, args...)}
}

func (f field) show() string { return show(f.raw) }

// jsonString makes a field from a Go string (used for IPPool specs).
func jsonString(path, s string) field {
	raw, _ := json.Marshal(s)
	return field{path: path, raw: raw}
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

func (f field) strList() ([]string, error) {
	elems, err := f.array()
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(elems))
	for _, e := range elems {
		s, err := e.str()
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

// unknownKey reports a key that is not allowed at this place, with a
// suggestion when the key is close to a known one.
func unknownKey(f field, key string, known []string) *Error {
	reason := "unknown key"
	if s := suggest(key, known); s != "" {
		reason += fmt.Sprintf(" (did you mean %q?)", s)
	}
	return f.errorf("%s", reason)
}

func suggest(key string, known []string) string {
	best, bestD := "", 3
	for _, k := range known {
		if strings.EqualFold(k, key) {
			return k
		}
		if d := editDistance(strings.ToLower(key), strings.ToLower(k), bestD); d < bestD {
			best, bestD = k, d
		}
	}
	return best
}

// editDistance is the optimal-string-alignment distance (Levenshtein with
// transpositions) of a and b, or max when it is at
// least max.
func editDistance(a, b string, max int) int {
	if len(a) > 64 || len(b) > 64 {
		return max
	}
	prev2 := make([]int, len(b)+1)
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1) // transposition
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return min(prev[len(b)], max)
}
