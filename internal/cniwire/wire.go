// Package cniwire is the protocol between the CNI shim (the `tenure` binary
// the runtime executes) and the node agent: one JSON request per CNI call
// over HTTP on a unix socket. It imports nothing from client-go so the shim
// stays small and starts fast.
package cniwire

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/containernetworking/cni/pkg/types"
)

// DefaultSocket is where the agent listens unless the IPAM config's
// agent_socket says otherwise.
const DefaultSocket = "/run/tenure/agent.sock"

// Path is the HTTP path of CNI calls on the agent socket.
const Path = "/v1/cni"

// Request is one CNI invocation as the runtime made it.
type Request struct {
	Command     string `json:"command"`
	ContainerID string `json:"containerID,omitempty"`
	Netns       string `json:"netns,omitempty"`
	IfName      string `json:"ifName,omitempty"`
	Args        string `json:"args,omitempty"`
	Path        string `json:"path,omitempty"`
	StdinData   []byte `json:"stdinData"`
	// FlatConfig is the content of the flat config file the shim read on
	// the host (configuration_path or the default), nil when there is none.
	FlatConfig     []byte `json:"flatConfig,omitempty"`
	FlatConfigPath string `json:"flatConfigPath,omitempty"`
}

// Response carries either the result to print, already encoded in the
// requested cniVersion, or a CNI error.
type Response struct {
	Result json.RawMessage `json:"result,omitempty"`
	Error  *types.Error    `json:"error,omitempty"`
}

// ErrAgentUnreachable wraps every failure to reach the agent, so the shim can
// map it to the CNI code the spec gives for its command.
var ErrAgentUnreachable = errors.New("tenure agent unreachable")

// Client talks to the agent on a unix socket.
type Client struct {
	Socket string
	// DialTimeout bounds connecting; a missing agent must fail fast, never hang.
	DialTimeout time.Duration
}

// Do sends req and returns the agent's response. Transport failures wrap
// ErrAgentUnreachable; the context bounds the whole call.
func (c Client) Do(ctx context.Context, req *Request) (*Response, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	dialTimeout := c.DialTimeout
	if dialTimeout == 0 {
		dialTimeout = 2 * time.Second
	}
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			d := net.Dialer{Timeout: dialTimeout}
			return d.DialContext(ctx, "unix", c.Socket)
		},
		DisableKeepAlives: true,
	}
	defer tr.CloseIdleConnections()
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://tenure-agent"+Path, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	hreq.Header.Set("Content-Type", "application/json")
	hresp, err := (&http.Client{Transport: tr}).Do(hreq)
	if err != nil {
		return nil, fmt.Errorf("%w at %s: %v", ErrAgentUnreachable, c.Socket, err)
	}
	defer hresp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(hresp.Body, 16<<20))
	if err != nil {
		return nil, fmt.Errorf("%w at %s: reading answer: %v", ErrAgentUnreachable, c.Socket, err)
	}
	var resp Response
	if err := json.Unmarshal(data, &resp); err != nil {
		return nil, fmt.Errorf("agent at %s answered %s with undecodable body: %v", c.Socket, hresp.Status, err)
	}
	return &resp, nil
}

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
		return fmt.Errorf("%w at %s: %v", ErrAgentUnreachable, socket, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return fmt.Errorf("agent at %s: %s: %s", socket, resp.Status, bytes.TrimSpace(b))
	}
	return nil
}
