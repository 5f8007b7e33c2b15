// Package cniwire is the protocol between the CNI shim (the `tenure` binary
// the runtime executes) and the node agent: one JSON request and one JSON
// response per connection on a unix socket. It deliberately avoids net/http
// and client-go: the runtime starts the shim for every attachment, and their
// package initialisation (TLS, HTTP/2, compression tables) would cost more
// CPU than the call itself.
package cniwire

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/containernetworking/cni/pkg/types"
)

// DefaultSocket is where the agent listens unless the IPAM config's
// agent_socket says otherwise.
const DefaultSocket = "/run/tenure/agent.sock"

// MaxMessage bounds a request or a response.
const MaxMessage = 16 << 20

// Request is one CNI invocation as the runtime made it. On the wire it is a
// JSON object, so the agent tells it from an HTTP request (health probes
// share the socket) by its first byte, '{'.
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
	dialTimeout := c.DialTimeout
	if dialTimeout == 0 {
		dialTimeout = 2 * time.Second
	}
	d := net.Dialer{Timeout: dialTimeout}
	conn, err := d.DialContext(ctx, "unix", c.Socket)
	if err != nil {
		return nil, fmt.Errorf("%w at %s: %v", ErrAgentUnreachable, c.Socket, err)
	}
	defer conn.Close()
	if deadline, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(deadline)
	}
	if err := json.NewEncoder(conn).Encode(req); err != nil {
		return nil, fmt.Errorf("%w at %s: sending: %v", ErrAgentUnreachable, c.Socket, err)
	}
	if uc, ok := conn.(*net.UnixConn); ok {
		_ = uc.CloseWrite()
	}
	var resp Response
	if err := ReadJSON(conn, &resp); err != nil {
		return nil, fmt.Errorf("%w at %s: reading the answer: %v", ErrAgentUnreachable, c.Socket, err)
	}
	return &resp, nil
}

// ReadJSON decodes one bounded JSON value from r.
func ReadJSON(r interface{ Read([]byte) (int, error) }, v any) error {
	return json.NewDecoder(&limited{r: r, n: MaxMessage}).Decode(v)
}

type limited struct {
	r interface{ Read([]byte) (int, error) }
	n int64
}

func (l *limited) Read(p []byte) (int, error) {
	if l.n <= 0 {
		return 0, fmt.Errorf("message larger than %d bytes", MaxMessage)
	}
	if int64(len(p)) > l.n {
		p = p[:l.n]
	}
	n, err := l.r.Read(p)
	l.n -= int64(n)
	return n, err
}
