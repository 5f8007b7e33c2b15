package shim

import (
	"errors"
	"unicode/utf16"
	"unicode/utf8"
)

// configKeys are the IPAM keys the shim needs before it can reach the agent.
type configKeys struct {
	agentSocket       string
	configurationPath string
}

// ipamKeys reads ipam.agent_socket and ipam.configuration_path from a
// network configuration. It checks the JSON syntax of the whole document,
// so a configuration encoding/json would refuse is refused here too; a key
// given twice counts as encoding/json counts it, the last one.
func ipamKeys(conf []byte) (configKeys, error) {
	var k configKeys
	s := scanner{b: conf}
	err := s.document(func(key string) error {
		if key != "ipam" {
			return s.skipValue()
		}
		k = configKeys{} // a later "ipam" replaces an earlier one whole
		if s.peek() != '{' {
			return s.skipValue()
		}
		return s.object(func(key string) error {
			switch key {
			case "agent_socket":
				return s.stringInto(&k.agentSocket)
			case "configuration_path":
				return s.stringInto(&k.configurationPath)
			}
			return s.skipValue()
		})
	})
	return k, err
}

// topLevelString reads one string member of a JSON object; "" when absent
// or not a string.
func topLevelString(doc []byte, name string) (string, error) {
	var v string
	s := scanner{b: doc}
	err := s.document(func(key string) error {
		if key == name {
			return s.stringInto(&v)
		}
		return s.skipValue()
	})
	return v, err
}

type scanner struct {
	b     []byte
	i     int
	depth int
}

// maxDepth is encoding/json's nesting limit.
const maxDepth = 10000

type syntaxError struct {
	msg    string
	offset int
}

func (e *syntaxError) Error() string {
	return string(appendUint([]byte("invalid JSON at offset "), uint(e.offset))) + ": " + e.msg
}

func (s *scanner) errorf(msg string) error { return &syntaxError{msg: msg, offset: s.i} }

func (s *scanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

func (s *scanner) peek() byte {
	s.ws()
	if s.i < len(s.b) {
		return s.b[s.i]
	}
	return 0
}

// document scans a whole document that must be one object.
func (s *scanner) document(member func(key string) error) error {
	if s.peek() != '{' {
		return s.errorf("the network configuration must be a JSON object")
	}
	if err := s.object(member); err != nil {
		return err
	}
	if s.ws(); s.i != len(s.b) {
		return s.errorf("data after the top-level object")
	}
	return nil
}

// object scans {...}; member is called at each value and must consume it.
func (s *scanner) object(member func(key string) error) error {
	if s.depth++; s.depth > maxDepth {
		return s.errorf("exceeded max depth")
	}
	defer func() { s.depth-- }()
	s.i++ // '{'
	if s.peek() == '}' {
		s.i++
		return nil
	}
	for {
		if s.peek() != '"' {
			return s.errorf("expected a member name")
		}
		key, err := s.str()
		if err != nil {
			return err
		}
		if s.peek() != ':' {
			return s.errorf("expected ':'")
		}
		s.i++
		s.ws()
		if err := member(key); err != nil {
			return err
		}
		switch s.peek() {
		case ',':
			s.i++
		case '}':
			s.i++
			return nil
		default:
			return s.errorf("expected ',' or '}'")
		}
	}
}

func (s *scanner) stringInto(dst *string) error {
	if s.peek() != '"' {
		if err := s.skipValue(); err != nil {
			return err
		}
		*dst = "" // encoding/json would refuse a non-string; the agent reports it
		return nil
	}
	v, err := s.str()
	*dst = v
	return err
}

func (s *scanner) skipValue() error {
	switch c := s.peek(); {
	case c == '{':
		return s.object(func(string) error { return s.skipValue() })
	case c == '[':
		if s.depth++; s.depth > maxDepth {
			return s.errorf("exceeded max depth")
		}
		defer func() { s.depth-- }()
		s.i++
		if s.peek() == ']' {
			s.i++
			return nil
		}
		for {
			if err := s.skipValue(); err != nil {
				return err
			}
			switch s.peek() {
			case ',':
				s.i++
			case ']':
				s.i++
				return nil
			default:
				return s.errorf("expected ',' or ']'")
			}
		}
	case c == '"':
		_, err := s.str()
		return err
	case c == 't':
		return s.literal("true")
	case c == 'f':
		return s.literal("false")
	case c == 'n':
		return s.literal("null")
	case c == '-' || c >= '0' && c <= '9':
		return s.number()
	default:
		return s.errorf("expected a value")
	}
}

func (s *scanner) literal(lit string) error {
	if len(s.b)-s.i < len(lit) || string(s.b[s.i:s.i+len(lit)]) != lit {
		return s.errorf("invalid literal")
	}
	s.i += len(lit)
	return nil
}

// number follows the JSON grammar: -?(0|[1-9]\d*)(\.\d+)?([eE][+-]?\d+)?
func (s *scanner) number() error {
	if s.b[s.i] == '-' {
		s.i++
	}
	digits := func() int {
		n := 0
		for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
			s.i++
			n++
		}
		return n
	}
	if s.i < len(s.b) && s.b[s.i] == '0' {
		s.i++
	} else if digits() == 0 {
		return s.errorf("invalid number")
	}
	if s.i < len(s.b) && s.b[s.i] == '.' {
		s.i++
		if digits() == 0 {
			return s.errorf("invalid number")
		}
	}
	if s.i < len(s.b) && (s.b[s.i] == 'e' || s.b[s.i] == 'E') {
		s.i++
		if s.i < len(s.b) && (s.b[s.i] == '+' || s.b[s.i] == '-') {
			s.i++
		}
		if digits() == 0 {
			return s.errorf("invalid number")
		}
	}
	return nil
}

var errUnterminated = errors.New("unterminated string")

// str decodes the string at s.i, escapes included.
func (s *scanner) str() (string, error) {
	s.i++ // '"'
	start := s.i
	// Fast path: no escapes.
	for s.i < len(s.b) {
		c := s.b[s.i]
		if c == '"' {
			v := string(s.b[start:s.i])
			s.i++
			return v, nil
		}
		if c == '\\' {
			break
		}
		if c < 0x20 {
			return "", s.errorf("control character in string")
		}
		s.i++
	}
	out := append([]byte(nil), s.b[start:s.i]...)
	for s.i < len(s.b) {
		c := s.b[s.i]
		switch {
		case c == '"':
			s.i++
			return string(out), nil
		case c < 0x20:
			return "", s.errorf("control character in string")
		case c != '\\':
			out = append(out, c)
			s.i++
			continue
		}
		if s.i+1 >= len(s.b) {
			return "", errUnterminated
		}
		e := s.b[s.i+1]
		s.i += 2
		switch e {
		case '"', '\\', '/':
			out = append(out, e)
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			r, ok := s.hex4()
			if !ok {
				return "", s.errorf("invalid \\u escape")
			}
			if utf16.IsSurrogate(r) {
				save := s.i
				if s.i+1 < len(s.b) && s.b[s.i] == '\\' && s.b[s.i+1] == 'u' {
					s.i += 2
					if r2, ok := s.hex4(); ok {
						if dec := utf16.DecodeRune(r, r2); dec != utf8.RuneError {
							out = utf8.AppendRune(out, dec)
							continue
						}
					}
				}
				s.i = save
				r = utf8.RuneError
			}
			out = utf8.AppendRune(out, r)
		default:
			return "", s.errorf("invalid escape")
		}
	}
	return "", errUnterminated
}

func (s *scanner) hex4() (rune, bool) {
	if len(s.b)-s.i < 4 {
		return 0, false
	}
	var r rune
	for _, c := range s.b[s.i : s.i+4] {
		switch {
		case c >= '0' && c <= '9':
			r = r<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	s.i += 4
	return r, true
}
