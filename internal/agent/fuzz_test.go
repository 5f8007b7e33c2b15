package agent

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"

	ipamclaimsv1alpha1 "github.com/tenure-ipam/tenure/api/ipamclaims/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/cniwire"
)

// fuzzDeadline bounds one exchange: the agent's own read deadline is 30 s,
// but the shim closes its side once the request is written, so an agent
// that still has not answered or closed after this long hangs.
const fuzzDeadline = 30 * time.Second

// fuzzRequest is a valid call from the shim, as it frames it.
func fuzzRequest(cmd, ctr string, flat []byte) []byte {
	return cniwire.AppendRequest(nil, &cniwire.Request{
		Command: cmd, ContainerID: ctr, Netns: "/var/run/netns/" + ctr, IfName: "net1", Path: "/opt/cni/bin",
		Args:      "IgnoreUnknown=1;K8S_POD_NAMESPACE=ns;K8S_POD_NAME=p1;K8S_POD_UID=uid-p1",
		StdinData: []byte(san29), FlatConfig: flat,
	})
}

// FuzzServe writes arbitrary bytes on a connection to the agent's socket,
// as the shim does (then shuts down its writing side), and reads the answer.
// The agent runs on a kubefake API with a pod and a pod presenting an
// IPAMClaim; no API server is involved.
// Whatever the bytes:
//   - the agent does not panic, and answers or closes within fuzzDeadline;
//   - a connection starting with '{' (a cniwire request) gets a well-formed
//     response: status '0' with nothing or JSON, or status '1' with a CNI
//     error object (a code and a message);
//   - any other first byte goes to the health endpoints' HTTP server, which
//     answers with an HTTP response or closes;
//   - a valid request followed by the bytes gets the answer the valid
//     request gets alone: nothing after the request changes it.
func FuzzServe(f *testing.F) {
	for _, seed := range [][]byte{
		fuzzRequest("ADD", "c1", nil),
		fuzzRequest("DEL", "c1", nil),
		fuzzRequest("CHECK", "c1", nil),
		fuzzRequest("ADD", "c2", []byte(`{"exclude":["10.0.0.1"],"gateway":"10.0.0.6"}`)),
		fuzzRequest("ADD", "c3", []byte(`{"range":1}`)),
		fuzzRequest("GC", "c1", nil),
		fuzzRequest("STATUS", "", nil),
		fuzzRequest("VERSION", "c1", nil),
		[]byte(`{"command":"ADD"}`),
		[]byte(`{"command":"ADD","stdinData":"not base64"}`),
		[]byte(`{"command":"ADD","stdinData":null,"flatConfig":"e30="}`),
		[]byte(`{"command":5}`),
		[]byte(`{"command":"ADD","containerID":"c1","ifName":"net1","stdinData":"e30="}{"command":"DEL"}`),
		[]byte(`{`),
		[]byte(`{}`),
		[]byte(`{"command":"ADD","stdinData":"` + string(bytes.Repeat([]byte("A"), 4096)) + `"`),
		[]byte("GET /healthz HTTP/1.1\r\nHost: tenure\r\n\r\n"),
		[]byte("GET /readyz HTTP/1.1\r\nHost: tenure\r\n\r\nGET /healthz HTTP/1.1\r\nHost: tenure\r\n\r\n"),
		[]byte("POST /healthz HTTP/1.0\r\nContent-Length: 5\r\n\r\n{}"),
		[]byte(" {\"command\":\"ADD\"}"),
		[]byte("\x00"),
		{},
	} {
		f.Add(seed)
	}
	h := startAgentWith(f, Options{NodeName: thisNode, Logger: slog.New(slog.DiscardHandler), PodWait: time.Millisecond},
		pod("p1", thisNode, nil), claimPod("virt-launcher", "vm1"), ipamClaim("vm1", "vm-net", ipamclaimsv1alpha1.IPAMClaimStatus{}))
	socket := filepath.Join(f.TempDir(), "agent.sock")
	l, err := Listen(socket)
	if err != nil {
		f.Fatal(err)
	}
	go func() { _ = h.agent.Serve(h.ctx, l) }()
	valid := fuzzRequest("ADD", "c-fuzz", nil)

	f.Fuzz(func(t *testing.T, data []byte) {
		checkAnswer(t, data, exchange(t, socket, data))
		alone := exchange(t, socket, valid)
		checkAnswer(t, valid, alone)
		if followed := exchange(t, socket, append(valid[:len(valid):len(valid)], data...)); !bytes.Equal(alone, followed) {
			t.Fatalf("a valid request answered\n%s\nalone and\n%s\nfollowed by %q", alone, followed, data)
		}
	})
}

// exchange sends data on a new connection, shuts down the writing side and
// reads everything the agent writes until it closes.
func exchange(t *testing.T, socket string, data []byte) []byte {
	t.Helper()
	c, err := net.Dial("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	conn := c.(*net.UnixConn)
	if err := conn.SetDeadline(time.Now().Add(fuzzDeadline)); err != nil {
		t.Fatal(err)
	}
	// The agent may answer and close before it has read everything (an HTTP
	// error, or bytes after a request): a failed write is not a failure.
	_, _ = conn.Write(data)
	_ = conn.CloseWrite()
	resp, err := io.ReadAll(conn)
	switch {
	case errors.Is(err, syscall.ECONNRESET):
		// Closed with bytes of ours unread: what was answered came first.
	case errors.Is(err, os.ErrDeadlineExceeded):
		t.Fatalf("no answer and no close within %v for %q; got %q so far", fuzzDeadline, data, resp)
	case err != nil:
		t.Fatalf("reading the answer to %q: %v", data, err)
	}
	return resp
}

// checkAnswer checks the answer to data is well-formed for the protocol its
// first byte selects.
func checkAnswer(t *testing.T, data, resp []byte) {
	t.Helper()
	if len(data) == 0 || data[0] != '{' {
		if len(resp) == 0 {
			return
		}
		r, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(resp)), nil)
		if err != nil {
			t.Fatalf("answer to %q is neither a close nor an HTTP response: %v\n%q", data, err, resp)
		}
		r.Body.Close()
		return
	}
	status, payload, err := cniwire.ParseResponse(resp)
	if err != nil {
		t.Fatalf("answer to %q is not a cniwire response: %v\n%q", data, err, resp)
	}
	if status == cniwire.StatusOK {
		if len(payload) > 0 && !json.Valid(payload) {
			t.Fatalf("answer to %q: status OK with a result that is not JSON: %q", data, payload)
		}
		return
	}
	var e types.Error
	if err := json.Unmarshal(payload, &e); err != nil || e.Code == 0 || e.Msg == "" {
		t.Fatalf("answer to %q: status error without a CNI error object (%v): %q", data, err, payload)
	}
}
