// Package cniwire is the protocol between the CNI shim (the `tenure` binary
// the runtime executes) and the node agent: one request and one response per
// connection on a unix socket.
//
// The runtime starts the shim for every attachment, and on a small node
// that process start is most of an ADD's CPU: every package the shim links
// adds page faults at start (docs/performance.md has the cost of each).
// So this package imports no
// reflection, no net and no fmt: requests are JSON written by hand, the
// response is the bytes the shim prints, and the socket is driven with
// syscalls.
package cniwire

import (
	"encoding/base64"
	"errors"
	"strconv"
	"syscall"
	"time"
	"unicode/utf8"
)

// DefaultSocket is where the agent listens unless the IPAM config's
// agent_socket says otherwise.
const DefaultSocket = "/run/tenure/agent.sock"

// FlatConfigRel is the flat configuration file's path relative to the host's
// CNI configuration directory, where the installer writes it. It lives in a
// subdirectory so runtimes, which load net.d's *.conf files as network
// configurations, never mistake it for one.
const FlatConfigRel = "tenure.d/tenure.conf"

// DefaultFlatConfig is the flat configuration file the shim reads when the
// IPAM config names no configuration_path, as whereabouts reads
// /etc/cni/net.d/whereabouts.d/whereabouts.conf.
const DefaultFlatConfig = "/etc/cni/net.d/" + FlatConfigRel

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

// A response is one status byte, a newline, and what the shim prints on
// stdout: the result (ADD) or nothing on success, the CNI error object on
// failure, when the shim exits 1.
const (
	StatusOK    byte = '0'
	StatusError byte = '1'
)

// AppendRequest appends req as the JSON object encoding/json writes for it,
// byte for byte (the agent decodes it with encoding/json).
func AppendRequest(b []byte, req *Request) []byte {
	b = append(b, `{"command":`...)
	b = AppendString(b, req.Command)
	b = appendOptional(b, "containerID", req.ContainerID)
	b = appendOptional(b, "netns", req.Netns)
	b = appendOptional(b, "ifName", req.IfName)
	b = appendOptional(b, "args", req.Args)
	b = appendOptional(b, "path", req.Path)
	b = append(b, `,"stdinData":`...)
	b = appendBytes(b, req.StdinData)
	if len(req.FlatConfig) > 0 {
		b = append(b, `,"flatConfig":`...)
		b = appendBytes(b, req.FlatConfig)
	}
	b = appendOptional(b, "flatConfigPath", req.FlatConfigPath)
	return append(b, '}')
}

// appendOptional writes an omitempty string member.
func appendOptional(b []byte, key, val string) []byte {
	if val == "" {
		return b
	}
	b = append(b, ',', '"')
	b = append(b, key...)
	b = append(b, '"', ':')
	return AppendString(b, val)
}

// appendBytes writes a []byte as encoding/json does: base64, null for nil.
func appendBytes(b, v []byte) []byte {
	if v == nil {
		return append(b, "null"...)
	}
	b = append(b, '"')
	b = base64.StdEncoding.AppendEncode(b, v)
	return append(b, '"')
}

const hexDigits = "0123456789abcdef"

// AppendString appends s as a JSON string. Invalid UTF-8 becomes U+FFFD,
// as encoding/json writes it, so the output is always valid JSON.
func AppendString(b []byte, s string) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				b = append(b, '\\', c)
			case c == '\n':
				b = append(b, '\\', 'n')
			case c == '\r':
				b = append(b, '\\', 'r')
			case c == '\t':
				b = append(b, '\\', 't')
			case c == '\b':
				b = append(b, '\\', 'b')
			case c == '\f':
				b = append(b, '\\', 'f')
			case c < 0x20 || c == '<' || c == '>' || c == '&':
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			default:
				b = append(b, c)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(b, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
		default:
			b = append(b, s[i:i+size]...)
		}
		i += size
	}
	return append(b, '"')
}

// ErrAgentUnreachable is what every CallError wraps: connecting to the
// agent, sending the request or reading its answer to the end failed. An
// answer read whole but malformed is not one of them (Call returns that
// error bare); the shim reports every Call error alike.
var ErrAgentUnreachable = errors.New("tenure agent unreachable")

// CallError says which step of a call failed and how.
type CallError struct {
	Socket string
	Step   string // "connect", "send", "receive"
	Err    error
}

func (e *CallError) Error() string {
	return ErrAgentUnreachable.Error() + " at " + e.Socket + ": " + e.Step + ": " + e.Err.Error()
}

func (e *CallError) Unwrap() []error { return []error{ErrAgentUnreachable, e.Err} }

// Call sends one request on the agent's socket and returns its response:
// status and payload. Connecting is bounded by dialTimeout (a missing or
// wedged agent must fail fast), each later read or write by ioTimeout.
func Call(socket string, request []byte, dialTimeout, ioTimeout time.Duration) (status byte, payload []byte, err error) {
	fail := func(step string, err error) (byte, []byte, error) {
		return 0, nil, &CallError{Socket: socket, Step: step, Err: err}
	}
	addr := &syscall.SockaddrUnix{Name: socket}
	fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return fail("connect", err)
	}
	defer syscall.Close(fd)
	// A unix-socket connect waits for the listener's backlog up to the send
	// timeout.
	if err := setTimeout(fd, syscall.SO_SNDTIMEO, dialTimeout); err != nil {
		return fail("connect", err)
	}
	if err := retryEINTR(func() error { return syscall.Connect(fd, addr) }); err != nil {
		return fail("connect", err)
	}
	for _, opt := range []int{syscall.SO_SNDTIMEO, syscall.SO_RCVTIMEO} {
		if err := setTimeout(fd, opt, ioTimeout); err != nil {
			return fail("connect", err)
		}
	}
	if err := WriteAll(fd, request); err != nil {
		return fail("send", err)
	}
	_ = syscall.Shutdown(fd, syscall.SHUT_WR)
	resp, err := ReadAll(fd)
	if err != nil {
		return fail("receive", err)
	}
	return ParseResponse(resp)
}

var (
	errTooLarge  = errors.New("larger than the wire limit of " + strconv.Itoa(MaxMessage) + " bytes")
	errMalformed = errors.New("malformed response")
)

// ParseResponse splits a response into its status and payload.
func ParseResponse(resp []byte) (status byte, payload []byte, err error) {
	if len(resp) < 2 || resp[1] != '\n' || (resp[0] != StatusOK && resp[0] != StatusError) {
		return 0, nil, errMalformed
	}
	return resp[0], resp[2:], nil
}

// AppendResponse appends a response with status and payload.
func AppendResponse(b []byte, status byte, payload []byte) []byte {
	b = append(b, status, '\n')
	return append(b, payload...)
}

// ReadAll reads fd to its end, at most MaxMessage bytes.
func ReadAll(fd int) ([]byte, error) {
	b := make([]byte, 0, 4096)
	for {
		if len(b) == cap(b) {
			if len(b) >= MaxMessage {
				return nil, errTooLarge
			}
			b = append(b, 0)[:len(b)]
		}
		n, err := syscall.Read(fd, b[len(b):cap(b)])
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return nil, err
		}
		if n == 0 {
			return b, nil
		}
		b = b[:len(b)+n]
	}
}

// WriteAll writes all of b to fd.
func WriteAll(fd int, b []byte) error {
	for len(b) > 0 {
		n, err := syscall.Write(fd, b)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		b = b[n:]
	}
	return nil
}

func setTimeout(fd, opt int, d time.Duration) error {
	tv := syscall.NsecToTimeval(d.Nanoseconds())
	return syscall.SetsockoptTimeval(fd, syscall.SOL_SOCKET, opt, &tv)
}

func retryEINTR(f func() error) error {
	for {
		if err := f(); err != syscall.EINTR {
			return err
		}
	}
}
