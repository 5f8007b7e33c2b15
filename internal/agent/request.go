package agent

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"io"
	"sync"

	"github.com/tenure-ipam/tenure/internal/cniwire"
)

// decodeRequest reads raw, one JSON object, into req as encoding/json
// reads it, when it is written as the shim writes it (cniwire.AppendRequest):
// known keys, strings of printable ASCII without escapes, base64 without
// padding errors. False for anything else, which encoding/json then reads
// or refuses; req is then untouched. encoding/json's reflection was the
// largest part of reading a call.
func decodeRequest(raw []byte, req *cniwire.Request) bool {
	var out cniwire.Request
	r := requestReader{b: raw}
	r.ws()
	if !r.byte('{') {
		return false
	}
	r.ws()
	if r.byte('}') {
		*req = out
		return r.end()
	}
	for {
		key, ok := r.str()
		if !ok {
			return false
		}
		r.ws()
		if !r.byte(':') {
			return false
		}
		r.ws()
		v, ok := r.str()
		if !ok {
			return false
		}
		switch string(key) {
		case "command":
			out.Command = string(v)
		case "containerID":
			out.ContainerID = string(v)
		case "netns":
			out.Netns = string(v)
		case "ifName":
			out.IfName = string(v)
		case "args":
			out.Args = string(v)
		case "path":
			out.Path = string(v)
		case "flatConfigPath":
			out.FlatConfigPath = string(v)
		case "stdinData":
			if out.StdinData, ok = decodeBase64(v); !ok {
				return false
			}
		case "flatConfig":
			if out.FlatConfig, ok = decodeBase64(v); !ok {
				return false
			}
		default:
			return false
		}
		r.ws()
		if r.byte('}') {
			*req = out
			return r.end()
		}
		if !r.byte(',') {
			return false
		}
		r.ws()
	}
}

// decodeBase64 is how encoding/json reads a []byte.
func decodeBase64(v []byte) ([]byte, bool) {
	b := make([]byte, base64.StdEncoding.DecodedLen(len(v)))
	n, err := base64.StdEncoding.Decode(b, v)
	return b[:n], err == nil
}

type requestReader struct {
	b []byte
	i int
}

func (r *requestReader) ws() {
	for r.i < len(r.b) {
		switch r.b[r.i] {
		case ' ', '\t', '\n', '\r':
			r.i++
		default:
			return
		}
	}
}

func (r *requestReader) byte(c byte) bool {
	if r.i < len(r.b) && r.b[r.i] == c {
		r.i++
		return true
	}
	return false
}

// end says whether nothing but whitespace follows.
func (r *requestReader) end() bool {
	r.ws()
	return r.i == len(r.b)
}

// str reads a string of printable ASCII without escapes, the string
// itself as encoding/json would read it.
func (r *requestReader) str() ([]byte, bool) {
	if !r.byte('"') {
		return nil, false
	}
	start := r.i
	for r.i < len(r.b) {
		switch c := r.b[r.i]; {
		case c == '"':
			r.i++
			return r.b[start : r.i-1], true
		case c < 0x20 || c == '\\' || c >= 0x80:
			return nil, false
		}
		r.i++
	}
	return nil, false
}

// readRequest reads one request from r as json.NewDecoder(r).Decode(req)
// does (the first JSON value; what follows it is left unread or ignored),
// by decodeRequest when the request is written as the shim writes it.
func readRequest(r io.Reader, req *cniwire.Request) error {
	pb := requestBuffers.Get().(*[]byte)
	buf := (*pb)[:0]
	defer func() {
		// decodeRequest and encoding/json copy out what they keep.
		if cap(buf) <= maxPooledRequest {
			*pb = buf
			requestBuffers.Put(pb)
		}
	}()
	scanned, inString, started := 0, false, false
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		// The first '}' outside a string ends an object with no object or
		// array in it, the only shape decodeRequest reads.
		for ; scanned < len(buf); scanned++ {
			c := buf[scanned]
			switch {
			case inString:
				switch c {
				case '"':
					inString = false
				case '\\':
					return decodeRest(buf, r, req)
				}
			case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			case !started:
				if c != '{' {
					return decodeRest(buf, r, req)
				}
				started = true
			case c == '"':
				inString = true
			case c == '}':
				if decodeRequest(buf[:scanned+1], req) {
					return nil
				}
				return decodeRest(buf, r, req)
			case c == '{' || c == '[':
				return decodeRest(buf, r, req)
			}
		}
		if err != nil {
			if err == io.EOF {
				return decodeRest(buf, r, req)
			}
			return err
		}
	}
}

// requestBuffers hold the bytes of requests being read: a typical one
// fits in 4 KiB, a larger one's buffer is dropped after it.
var requestBuffers = sync.Pool{New: func() any { b := make([]byte, 0, 4<<10); return &b }}

const maxPooledRequest = 64 << 10

// decodeRest reads the request with encoding/json from read, the bytes
// already read, on.
func decodeRest(read []byte, r io.Reader, req *cniwire.Request) error {
	return json.NewDecoder(io.MultiReader(bytes.NewReader(read), r)).Decode(req)
}
