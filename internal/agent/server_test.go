package agent

import (
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tenure-ipam/tenure/internal/cniwire"
)

// TestServeAnswersAnOversizeRequest: a request over the
// wire limit gets a CNI error naming the limit, read by the caller rather
// than a broken pipe, and a line in the agent's log.
func TestServeAnswersAnOversizeRequest(t *testing.T) {
	h := startAgent(t)
	socket := filepath.Join(t.TempDir(), "agent.sock")
	l, err := Listen(socket)
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = h.agent.Serve(h.ctx, l) }()

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
