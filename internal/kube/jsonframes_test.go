package kube

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/framer"
)

// readFrames reads every frame of r with a caller's slice of size n, as
// the streaming decoder does: a short buffer is grown and read into again.
func readFrames(r io.ReadCloser, n int) (frames []string, err error) {
	buf := make([]byte, n)
	for {
		got, err := r.Read(buf)
		frame := append([]byte(nil), buf[:got]...)
		for errors.Is(err, io.ErrShortBuffer) {
			got, err = r.Read(buf)
			frame = append(frame, buf[:got]...)
		}
		if err != nil {
			return frames, err
		}
		frames = append(frames, string(frame))
	}
}

// oneByte hands out its stream a byte per Read: frames cross every
// boundary of the read-ahead buffer.
type oneByte struct{ r io.Reader }

func (o oneByte) Read(p []byte) (int, error) {
	if len(p) > 1 {
		p = p[:1]
	}
	return o.r.Read(p)
}

// checkFrames: on a stream of JSON objects and arrays, jsonFrames cuts the
// frames the API machinery's JSON framer cuts, whatever the caller's
// slice and however the stream arrives.
func checkFrames(t *testing.T, stream []byte) {
	t.Helper()
	// Only a stream the standard framer reads to its end, of objects and
	// arrays, is one the two must agree on.
	want, err := readFrames(framer.NewJSONFramedReader(io.NopCloser(bytes.NewReader(stream))), 1<<16)
	if err != io.EOF {
		return
	}
	for _, w := range want {
		if w[0] != '{' && w[0] != '[' {
			return
		}
	}
	for _, n := range []int{1, 7, 64, 1 << 16} {
		for _, src := range []io.Reader{bytes.NewReader(stream), oneByte{bytes.NewReader(stream)}} {
			got, err := readFrames(jsonFramer{}.NewFrameReader(io.NopCloser(src)), n)
			if err != io.EOF {
				t.Fatalf("slice %d: ended with %v after %d frames, want io.EOF after %d", n, err, len(got), len(want))
			}
			if strings.Join(got, "\x00") != strings.Join(want, "\x00") {
				t.Fatalf("slice %d: frames\n%q\nwant\n%q", n, got, want)
			}
		}
	}
}

func TestJSONFramesCutWhatTheStandardFramerCuts(t *testing.T) {
	var stream bytes.Buffer
	for _, s := range seedInputs() {
		if json.Valid([]byte(s)) {
			stream.WriteString(s)
			stream.WriteString("\n")
		}
	}
	stream.WriteString(` [1,{"a":"}]\"{["}] {"b":[[],{}]}` + "\r\n\t")
	checkFrames(t, stream.Bytes())
	if n := strings.Count(stream.String(), "\n"); n < 10 {
		t.Fatalf("the stream holds %d frames, want the seeds' at least", n)
	}
}

// A stream cut inside a frame is an unexpected end, as encoding/json says.
func TestJSONFramesEndingInsideAFrame(t *testing.T) {
	for _, s := range []string{`{"a":`, `{"a":"}`, `{"type":"ADDED"} {`} {
		_, err := readFrames(jsonFramer{}.NewFrameReader(io.NopCloser(strings.NewReader(s))), 64)
		if err != io.ErrUnexpectedEOF {
			t.Errorf("%q: %v, want io.ErrUnexpectedEOF", s, err)
		}
	}
	if _, err := readFrames(jsonFramer{}.NewFrameReader(io.NopCloser(strings.NewReader(`{} 12`))), 64); !errors.Is(err, errNotAnObject) {
		t.Errorf("a number for a frame: %v, want errNotAnObject", err)
	}
}

func FuzzJSONFrames(f *testing.F) {
	for _, s := range seedInputs() {
		f.Add([]byte(s + "\n" + s))
	}
	f.Fuzz(func(t *testing.T, stream []byte) {
		checkFrames(t, stream)
	})
}

// BenchmarkWatchFramer: one watch event of a reservation, framed.
func BenchmarkWatchFramer(b *testing.B) {
	ev := []byte(`{"type":"ADDED","object":` + serverReservation + "}\n")
	for _, fr := range []struct {
		name string
		new  func(io.ReadCloser) io.ReadCloser
	}{{"standard", framer.NewJSONFramedReader}, {"jsonFrames", jsonFramer{}.NewFrameReader}} {
		b.Run(fr.name, func(b *testing.B) {
			stream := bytes.Repeat(ev, b.N)
			r := fr.new(io.NopCloser(bytes.NewReader(stream)))
			buf := make([]byte, 64<<10)
			b.SetBytes(int64(len(ev)))
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := r.Read(buf); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
