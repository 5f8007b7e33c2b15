package agent

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"testing"
	"testing/iotest"

	"github.com/tenure-ipam/tenure/internal/cniwire"
)

// What decodeRequest reads, it reads as encoding/json does; what it does
// not, encoding/json reads.
func FuzzRequestReadAsEncodingJSONReadsIt(f *testing.F) {
	for _, r := range []cniwire.Request{
		{Command: "ADD", ContainerID: "c1", Netns: "/var/run/netns/c1", IfName: "net1", Args: "K8S_POD_NAMESPACE=ns;K8S_POD_NAME=p", Path: "/opt/cni/bin", StdinData: []byte(san29)},
		{Command: "DEL", StdinData: []byte{}, FlatConfig: []byte(`{"log_level":"debug"}`), FlatConfigPath: "/etc/cni/net.d/tenure.d/tenure.conf"},
		{Command: "STATUS"},
		{Command: "ADD", Args: "é\n\"<>"},
	} {
		f.Add(cniwire.AppendRequest(nil, &r))
	}
	for _, s := range []string{`{}`, ` { "command" : "ADD" } `, `{"command":"ADD",}`, `{"Command":"ADD"}`, `{"command":"ADD","x":1}`, `{"stdinData":null}`, `{"stdinData":"e30"}`, `{"command":"A\u0044D"}`, `{"command":"ADD"}x`, `[]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		var got cniwire.Request
		if !decodeRequest(raw, &got) {
			return
		}
		var want cniwire.Request
		if err := json.Unmarshal(raw, &want); err != nil {
			t.Fatalf("decodeRequest read %q as %+v; encoding/json refuses it: %v", raw, got, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("decodeRequest read %q as\n%+v\nencoding/json as\n%+v", raw, got, want)
		}
	})
}

// What the shim writes is read without encoding/json.
func TestTheShimsRequestIsReadByHand(t *testing.T) {
	req := cniwire.Request{Command: "ADD", ContainerID: "c1", Netns: "/var/run/netns/c1", IfName: "net1",
		Args: "IgnoreUnknown=1;K8S_POD_NAMESPACE=ns;K8S_POD_NAME=p;K8S_POD_UID=u", Path: "/opt/cni/bin", StdinData: []byte(san29),
		FlatConfig: []byte(`{"agent_socket":"/run/tenure/agent.sock"}`), FlatConfigPath: "/etc/cni/net.d/tenure.d/tenure.conf"}
	var got cniwire.Request
	if !decodeRequest(cniwire.AppendRequest(nil, &req), &got) {
		t.Fatal("decodeRequest refused what AppendRequest writes")
	}
	if !reflect.DeepEqual(got, req) {
		t.Errorf("read %+v, want %+v", got, req)
	}
}

func BenchmarkRequest(b *testing.B) {
	raw := cniwire.AppendRequest(nil, &cniwire.Request{Command: "ADD", ContainerID: "9b2d4f6a8c0e1f3a5b7c9d1e3f5a7b9c1d3e5f7a9b1c3d5e7f9a1b3c5d7e9f1a", Netns: "/var/run/netns/cni-1234", IfName: "net1",
		Args: "IgnoreUnknown=1;K8S_POD_NAMESPACE=ns;K8S_POD_NAME=p;K8S_POD_UID=u", Path: "/opt/cni/bin", StdinData: []byte(san29)})
	b.Run("decodeRequest", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var r cniwire.Request
			_ = decodeRequest(raw, &r)
		}
	})
	b.Run("encoding/json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var r cniwire.Request
			_ = json.Unmarshal(raw, &r)
		}
	})
}

// readRequest reads a connection's bytes as encoding/json's Decoder reads
// them, however the bytes arrive.
func FuzzReadRequestReadsAsTheDecoderDoes(f *testing.F) {
	for _, r := range []cniwire.Request{
		{Command: "ADD", ContainerID: "c1", Netns: "/var/run/netns/c1", IfName: "net1", Args: "K8S_POD_NAMESPACE=ns;K8S_POD_NAME=p", StdinData: []byte(san29)},
		{Command: "ADD", Args: "é\n\"<>", StdinData: []byte(`{}`)},
	} {
		f.Add(cniwire.AppendRequest(nil, &r), false)
	}
	for _, s := range []string{``, ` `, `{`, `{}`, `{} {"command":"DEL"}`, `{"command":"ADD"}trailing`, `{"command":"ADD","x":{"y":[1]}}`, `{"command":"A\"D"}`, `["ADD"]`, `"ADD"`, `{"command":"ADD"`, `{"stdinData":"!!"}`} {
		f.Add([]byte(s), true)
	}
	f.Fuzz(func(t *testing.T, raw []byte, oneByte bool) {
		var src io.Reader = bytes.NewReader(raw)
		if oneByte {
			src = iotest.OneByteReader(src)
		}
		var got cniwire.Request
		err := readRequest(src, &got)
		var want cniwire.Request
		wantErr := json.NewDecoder(bytes.NewReader(raw)).Decode(&want)
		if (err != nil) != (wantErr != nil) || !reflect.DeepEqual(got, want) {
			t.Fatalf("readRequest(%q): %+v, %v\nthe Decoder: %+v, %v", raw, got, err, want, wantErr)
		}
	})
}

// A reader's error (the agent's request budget refusing more bytes) comes
// back as it is.
func TestReadRequestReturnsTheReadersError(t *testing.T) {
	r := io.MultiReader(bytes.NewReader([]byte(`{"command":"A`)), iotest.ErrReader(errBusy))
	var req cniwire.Request
	if err := readRequest(r, &req); !errors.Is(err, errBusy) {
		t.Errorf("got %v, want errBusy", err)
	}
}
