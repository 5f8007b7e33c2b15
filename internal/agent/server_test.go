package agent

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tenure-ipam/tenure/internal/cniwire"
)

// serve serves h's agent on a fresh socket and returns its path.
func serve(t *testing.T, h *harness) string {
	t.Helper()
	socket := filepath.Join(t.TempDir(), "agent.sock")
	l, err := Listen(socket)
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = h.agent.Serve(h.ctx, l) }()
	return socket
}

// TestServeAnswersAnOversizeRequest: a request over the
// wire limit gets a CNI error naming the limit, read by the caller rather
// than a broken pipe, and a line in the agent's log.
func TestServeAnswersAnOversizeRequest(t *testing.T) {
	h := startAgent(t)
	socket := serve(t, h)

	oversize := []byte(`{"command":"ADD","stdinData":"` + strings.Repeat("A", cniwire.MaxMessage) + `"}`)
	status, payload, err := cniwire.Call(socket, oversize, 5*time.Second, time.Minute)
	if err != nil {
		t.Fatalf("the caller got %v, want the agent's answer", err)
	}
	if status != cniwire.StatusError || !strings.Contains(string(payload), "too large") || !strings.Contains(string(payload), strconv.Itoa(cniwire.MaxMessage)) {
		t.Fatalf("answer %c %s, want an error naming the limit %d", status, payload, cniwire.MaxMessage)
	}
	if logs := h.logs.String(); !strings.Contains(logs, "over the size limit") {
		t.Fatalf("the agent logged nothing of it:\n%s", logs)
	}
}

// TestServeMixesCNICallsAndProbesOnOneWorker: calls one after another
// are served by one worker reusing its reader; a probe in between takes
// the reader with it to the HTTP server, and every caller reads its own
// answer.
func TestServeMixesCNICallsAndProbesOnOneWorker(t *testing.T) {
	h := startAgent(t)
	socket := serve(t, h)
	cniCall := func() {
		t.Helper()
		status, payload, err := cniwire.Call(socket, []byte(`{"command":`), 5*time.Second, time.Minute)
		if err != nil || status != cniwire.StatusError || !strings.Contains(string(payload), "decoding request") {
			t.Fatalf("a truncated request: %c %s %v, want the decoding error", status, payload, err)
		}
	}
	probe := func() {
		t.Helper()
		c, err := net.Dial("unix", socket)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := io.WriteString(c, "GET "+PathHealthz+" HTTP/1.1\r\nHost: tenure\r\nConnection: close\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK || string(body) != "ok\n" {
			t.Fatalf("probe: %d %q, want 200 ok", resp.StatusCode, body)
		}
	}
	for range 3 {
		cniCall()
		cniCall()
		probe()
	}
}
