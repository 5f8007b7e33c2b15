package kube

import (
	"bytes"
	"errors"
	"fmt"
	"io"

	"k8s.io/apimachinery/pkg/runtime"
)

// jsonFramer cuts a JSON watch stream into its events as the API
// machinery's JSON framer does, but by counting brackets outside strings
// rather than running encoding/json's scanner over every byte: the event is
// then read once more, whole, by the decoder (reservationJSON, or the
// standard one it declines to), which is what checks it is JSON. Writing
// is the standard framer's (JSON needs no frame around an object).
type jsonFramer struct{ runtime.Framer }

func (jsonFramer) NewFrameReader(r io.ReadCloser) io.ReadCloser {
	return &jsonFrames{r: r, buf: make([]byte, 0, 4096)}
}

// jsonFrames is one stream's frame reader: a read-ahead buffer, buf[start:],
// and what of the last frame did not fit the caller's slice.
type jsonFrames struct {
	r         io.ReadCloser
	buf       []byte
	start     int
	err       error // the stream's, after what buf holds
	remaining []byte
}

// errNotAnObject ends a stream whose next value is not an object or array.
var errNotAnObject = errors.New("watch stream: a frame does not begin with { or [")

// Read copies the next frame into data, as the JSON framer's Read: a frame
// longer than data fills it and answers io.ErrShortBuffer, and the next
// Reads return the rest.
func (f *jsonFrames) Read(data []byte) (int, error) {
	if len(f.remaining) > 0 {
		n := copy(data, f.remaining)
		f.remaining = f.remaining[n:]
		if len(f.remaining) > 0 {
			return n, io.ErrShortBuffer
		}
		f.remaining = nil
		return n, nil
	}
	frame, err := f.next()
	if err != nil {
		return 0, err
	}
	n := copy(data, frame)
	if n < len(frame) {
		f.remaining = append([]byte(nil), frame[n:]...)
		return n, io.ErrShortBuffer
	}
	return n, nil
}

// next returns the next whole value of the stream, valid until the next
// call: from its first byte past whitespace to its closing bracket.
func (f *jsonFrames) next() ([]byte, error) {
	depth, inString := 0, false
	begin := -1 // offset of the frame's first byte from f.start
	scanned := 0
	for {
		b := f.buf[f.start:]
		for i := scanned; i < len(b); i++ {
			if inString {
				// A string ends at a quote after an even run of
				// backslashes: found by IndexByte, most of an event
				// being strings.
				j := bytes.IndexByte(b[i:], '"')
				if j < 0 {
					break
				}
				i += j
				k := i
				for b[k-1] == '\\' {
					k--
				}
				inString = (i-k)%2 == 1
				continue
			}
			switch c := b[i]; {
			case begin < 0:
				switch c {
				case ' ', '\t', '\r', '\n':
					continue
				case '{', '[':
					begin, depth = i, 1
				default:
					return nil, fmt.Errorf("%w: %q", errNotAnObject, c)
				}
			case c == '"':
				inString = true
			case c == '{' || c == '[':
				depth++
			case c == '}' || c == ']':
				if depth--; depth == 0 {
					frame := b[begin : i+1]
					f.start += i + 1
					return frame, nil
				}
			}
		}
		scanned = len(b)
		if f.err != nil {
			if begin < 0 && f.err == io.EOF {
				return nil, io.EOF
			}
			if f.err == io.EOF {
				return nil, io.ErrUnexpectedEOF
			}
			return nil, f.err
		}
		f.fill()
	}
}

// fill reads more of the stream into buf, first moving what is unread to
// its front (or into a larger buffer when it fills it).
func (f *jsonFrames) fill() {
	unread := len(f.buf) - f.start
	if f.start > 0 {
		copy(f.buf, f.buf[f.start:])
		f.buf, f.start = f.buf[:unread], 0
	}
	if len(f.buf) == cap(f.buf) {
		f.buf = append(make([]byte, 0, 2*cap(f.buf)), f.buf...)
	}
	n, err := f.r.Read(f.buf[len(f.buf):cap(f.buf)])
	f.buf = f.buf[:len(f.buf)+n]
	if err != nil {
		f.err = err
	}
}

func (f *jsonFrames) Close() error { return f.r.Close() }
