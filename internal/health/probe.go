// Package health probes the node agent over its unix socket: the
// DaemonSet's exec probes and the tests' readiness waits use it. It is apart
// from package agent so that callers need none of the agent's dependencies.
package health

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/tenure-ipam/tenure/internal/cniwire"
)

// Paths the agent serves on its socket.
const (
	PathHealthz = "/healthz"
	PathReadyz  = "/readyz"
)

// Probe GETs a health path of the agent on its socket.
func Probe(ctx context.Context, socket, path string) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", socket)
	}}
	defer tr.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://tenure-agent"+path, nil)
	if err != nil {
		return err
	}
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		return fmt.Errorf("%w at %s: %v", cniwire.ErrAgentUnreachable, socket, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return fmt.Errorf("agent at %s: %s: %s", socket, resp.Status, bytes.TrimSpace(b))
	}
	return nil
}
