package cniwire

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

func TestAppendRequestIsWhatEncodingJSONWrites(t *testing.T) {
	for _, req := range []Request{
		{Command: "ADD"},
		{Command: "DEL", StdinData: []byte{}},
		{Command: "ADD", ContainerID: "abc", Netns: "/var/run/netns/x", IfName: "net1", Args: "K8S_POD_NAME=a;K8S_POD_NAMESPACE=b",
			Path: "/opt/cni/bin", StdinData: []byte(`{"cniVersion":"1.1.0","name":"n"}`), FlatConfig: []byte(`{"agent_socket":"/s"}`), FlatConfigPath: "/etc/x.conf"},
		{Command: "CHECK", Args: "quote\" backslash\\ newline\n tab\t cr\r ctl\x01\x1f del\x7f", StdinData: []byte{0, 1, 2, 255}},
		{Command: "GC", Args: "<html> & \u2028 \u2029 é 日本 \U0001F600", FlatConfig: []byte{}},
		{Command: "STATUS", Path: "bad utf-8: \xff\xfe \xc3 end", IfName: "\xe2\x82"},
	} {
		want, err := json.Marshal(&req)
		if err != nil {
			t.Fatal(err)
		}
		if got := AppendRequest(nil, &req); !bytes.Equal(got, want) {
			t.Errorf("AppendRequest(%+v)\n got %s\nwant %s", req, got, want)
		}
	}
}

func FuzzAppendString(f *testing.F) {
	for _, s := range []string{"", "plain", "\"\\\n\r\t\x00\x1f", "<>&", "\u2028\u2029", "\xff", "\xed\xa0\x80", "é日\U0001F600"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want, _ := json.Marshal(s)
		if got := AppendString(nil, s); !bytes.Equal(got, want) {
			t.Fatalf("AppendString(%q) = %s, encoding/json writes %s", s, got, want)
		}
	})
}

func TestParseResponse(t *testing.T) {
	for _, tc := range []struct {
		in      string
		status  byte
		payload string
		ok      bool
	}{
		{"0\n", StatusOK, "", true},
		{"0\n{\"ips\":[]}", StatusOK, `{"ips":[]}`, true},
		{"1\n{\"code\":11}", StatusError, `{"code":11}`, true},
		{"", 0, "", false},
		{"0", 0, "", false},
		{"2\n", 0, "", false},
		{"0x", 0, "", false},
		{"HTTP/1.1 400 Bad Request\r\n", 0, "", false},
	} {
		status, payload, err := ParseResponse([]byte(tc.in))
		if (err == nil) != tc.ok || status != tc.status || string(payload) != tc.payload {
			t.Errorf("ParseResponse(%q) = %q, %q, %v", tc.in, status, payload, err)
		}
	}
	if got := AppendResponse(nil, StatusError, []byte("x")); string(got) != "1\nx" {
		t.Errorf("AppendResponse = %q", got)
	}
}

func TestCallRoundTrip(t *testing.T) {
	socket := filepath.Join(t.TempDir(), "agent.sock")
	l, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	got := make(chan Request, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		var req Request
		if err := json.NewDecoder(c).Decode(&req); err != nil {
			t.Errorf("agent side: %v", err)
		}
		got <- req
		_, _ = c.Write(AppendResponse(nil, StatusOK, []byte(`{"cniVersion":"1.1.0"}`)))
	}()
	req := Request{Command: "ADD", ContainerID: "c1", IfName: "net1", StdinData: bytes.Repeat([]byte("x"), 300_000)}
	status, payload, err := Call(socket, AppendRequest(nil, &req), time.Second, 10*time.Second)
	if err != nil || status != StatusOK || string(payload) != `{"cniVersion":"1.1.0"}` {
		t.Fatalf("Call = %q, %q, %v", status, payload, err)
	}
	if r := <-got; r.Command != "ADD" || r.ContainerID != "c1" || !bytes.Equal(r.StdinData, req.StdinData) {
		t.Fatalf("agent received %q %q %d bytes of stdin", r.Command, r.ContainerID, len(r.StdinData))
	}
}

func TestCallFailuresAreAgentUnreachable(t *testing.T) {
	dir := t.TempDir()
	// A listener that closes connections without answering.
	mute := filepath.Join(dir, "mute.sock")
	l, err := net.Listen("unix", mute)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	for _, tc := range []struct {
		socket string
		step   string
		errno  error
	}{
		{filepath.Join(dir, "absent.sock"), "connect", syscall.ENOENT},
		{mute, "", nil},
	} {
		_, _, err := Call(tc.socket, []byte(`{"command":"ADD"}`), time.Second, time.Second)
		var ce *CallError
		if !errors.Is(err, ErrAgentUnreachable) || !errors.As(err, &ce) {
			t.Fatalf("Call(%s) = %v, want an ErrAgentUnreachable CallError", tc.socket, err)
		}
		if tc.step != "" && ce.Step != tc.step || tc.errno != nil && !errors.Is(err, tc.errno) {
			t.Fatalf("Call(%s) = %v, want step %q errno %v", tc.socket, err, tc.step, tc.errno)
		}
	}
}

// An agent that takes the request and never answers: the shim gives up
// after the io timeout with the errno a blocking read with SO_RCVTIMEO
// gives, and says it was receiving.
func TestCallTimesOutWaitingForTheAnswer(t *testing.T) {
	socket := filepath.Join(t.TempDir(), "silent.sock")
	l, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	release := make(chan struct{})
	defer close(release)
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		<-release
	}()
	begin := time.Now()
	_, _, err = Call(socket, []byte(`{"command":"ADD"}`), time.Second, 200*time.Millisecond)
	took := time.Since(begin)
	want := "tenure agent unreachable at " + socket + ": receive: " + syscall.EAGAIN.Error()
	if err == nil || err.Error() != want || !errors.Is(err, syscall.EAGAIN) {
		t.Fatalf("Call = %v, want %q", err, want)
	}
	if took < 200*time.Millisecond || took > 5*time.Second {
		t.Fatalf("Call gave up after %v, want the io timeout of 200ms", took)
	}
}

// The io timeout bounds each wait, not the whole answer: an agent whose
// answer comes in parts, each within the timeout, is read to the end.
func TestCallTimeoutIsPerRead(t *testing.T) {
	socket := filepath.Join(t.TempDir(), "slow.sock")
	l, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	answer := AppendResponse(nil, StatusOK, []byte(`{"cniVersion":"1.1.0"}`))
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		if _, err := io.ReadAll(c); err != nil {
			return
		}
		for i := range answer {
			time.Sleep(40 * time.Millisecond)
			if _, err := c.Write(answer[i : i+1]); err != nil {
				return
			}
		}
	}()
	status, payload, err := Call(socket, []byte(`{"command":"ADD"}`), time.Second, 300*time.Millisecond)
	if err != nil || status != StatusOK || string(payload) != `{"cniVersion":"1.1.0"}` {
		t.Fatalf("Call = %q, %q, %v; want the whole answer", status, payload, err)
	}
}
