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
	text string // the decoded string, for a string value
}

func (f field) errorf(format string, args ...any) *Error {
	return &Error{Key: f.path, Value: show(f.raw), Reason: fmt.Sprintf(format, args...)}
}

func (f field) show() string { return show(f.raw) }

// jsonString makes a field from a Go string (used for IPPool specs).
func jsonString(path, s string) field {
	raw, _ := json.Marshal(s)
	return field{path: path, raw: raw, text: s}
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
