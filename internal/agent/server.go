package agent

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/tenure-ipam/tenure/internal/cniwire"
	"github.com/tenure-ipam/tenure/internal/health"
)

// Health paths served on the socket next to the CNI calls.
const (
	PathHealthz = health.PathHealthz
	PathReadyz  = health.PathReadyz
)

// Listen opens the unix socket, replacing a stale one left by a killed
// agent (nothing else may own that path).
func Listen(path string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, err
	}
	// Only root (the runtime) may ask for addresses.
	if err := os.Chmod(path, 0o600); err != nil {
		l.Close()
		return nil, err
	}
	return l, nil
}

// socketServer answers CNI calls and the health probes on the agent's
// unix socket.
type socketServer struct {
	log *slog.Logger
	// handle answers one call (Agent.Handle); ready reports whether the
	// caches synced (Agent.Ready).
	handle func(context.Context, *cniwire.Request) *Response
	ready  func() bool
	// arrivals numbers each connection's call as the socket accepted it.
	arrivals *arrivals
	// requests bounds the bytes of CNI requests the socket holds at once.
	requests *requestBudget
	// metrics records each answered call (cniCall); called directly, as
	// an answer passed through a func value would escape to the heap.
	metrics *agentMetrics
}

// serve answers CNI calls on l until ctx ends. A connection whose first
// byte is '{' carries one cniwire request; anything else is HTTP (the
// health probes), served from the same socket.
func (s *socketServer) serve(ctx context.Context, l net.Listener) error {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+PathHealthz, func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	mux.HandleFunc("GET "+PathReadyz, func(w http.ResponseWriter, _ *http.Request) {
		if !s.ready() {
			http.Error(w, "caches not synced", http.StatusServiceUnavailable)
			return
		}
		_, _ = io.WriteString(w, "ok\n")
	})
	httpConns := &connListener{addr: l.Addr(), conns: make(chan net.Conn), done: make(chan struct{})}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(httpConns) }()
	go func() {
		<-ctx.Done()
		_ = l.Close()
		httpConns.Close()
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	handoff := make(chan acceptedConn)
	for {
		conn, err := l.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		c := acceptedConn{s.arrivals.withArrival(ctx), conn}
		select {
		case handoff <- c:
		default:
			go s.connWorker(ctx, c, handoff, httpConns)
		}
	}
}

// acceptedConn is a connection and its call's context, numbered as it
// arrived.
type acceptedConn struct {
	ctx  context.Context
	conn net.Conn
}

// workerIdle is how long a connection worker waits for the next
// connection before it ends.
const workerIdle = time.Minute

// connWorker serves c, then each connection handed to it, until it has
// waited workerIdle for one. A call's stack grows to tens of KiB through
// the API client; a goroutine that serves one call after another keeps
// it, where a new goroutine per call grows (copies) it every time.
func (s *socketServer) connWorker(ctx context.Context, c acceptedConn, handoff <-chan acceptedConn, httpConns *connListener) {
	idle := time.NewTimer(workerIdle)
	defer idle.Stop()
	// One reader for the worker's calls, as its stack is: a call's
	// buffer is the first page it would touch anew.
	var br *bufio.Reader
	for {
		if br == nil {
			br = bufio.NewReader(c.conn)
		} else {
			br.Reset(c.conn)
		}
		if s.serveConn(c.ctx, c.conn, br, httpConns) {
			br = nil // an HTTP connection's now
		}
		idle.Reset(workerIdle)
		select {
		case c = <-handoff:
		case <-idle.C:
			return
		case <-ctx.Done():
			return
		}
	}
}

// serveConn serves one connection read through br; handedOff reports
// that br went with it to the HTTP server.
func (s *socketServer) serveConn(ctx context.Context, conn net.Conn, br *bufio.Reader, httpConns *connListener) (handedOff bool) {
	_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	first, err := br.Peek(1)
	if err != nil {
		conn.Close()
		return false
	}
	if first[0] != '{' {
		httpConns.push(&peekedConn{Conn: conn, r: br})
		return true
	}
	defer conn.Close()
	start := time.Now()
	var req cniwire.Request
	var resp *Response
	ch := &charge{b: s.requests}
	defer ch.release()
	body := &io.LimitedReader{R: &chargedReader{r: br, c: ch}, N: cniwire.MaxMessage + 1}
	// Take in what a refused caller still sends (bounded by the read
	// deadline, and charged to nothing), so that it reads the answer rather
	// than a broken pipe.
	drain := func() {
		ch.release()
		_, _ = io.Copy(io.Discard, io.LimitReader(br, 4*cniwire.MaxMessage))
	}
	if err := json.NewDecoder(body).Decode(&req); body.N <= 0 {
		s.log.Warn("request over the size limit refused", "limit", cniwire.MaxMessage)
		drain()
		resp = &Response{Error: &types.Error{Code: CodeInvalidNetworkConfig,
			Msg: fmt.Sprintf("request too large: over the tenure agent's limit of %d bytes", cniwire.MaxMessage)}}
	} else if errors.Is(err, errBusy) {
		s.requests.busy.Add(1)
		s.log.Warn("request refused: the requests in flight fill the agent's budget", "limit", s.requests.limit)
		drain()
		resp = &Response{Error: &types.Error{Code: CodeTryAgainLater,
			Msg: fmt.Sprintf("the tenure agent is busy: requests in flight fill its budget of %d bytes; try again", s.requests.limit)}}
	} else if err != nil {
		resp = &Response{Error: &types.Error{Code: CodeDecodingFailure, Msg: fmt.Sprintf("decoding request: %v", err)}}
	} else {
		_ = conn.SetReadDeadline(time.Time{})
		resp = s.handle(ctx, &req)
	}
	ch.release()
	_ = conn.SetWriteDeadline(time.Now().Add(30 * time.Second))
	_, _ = conn.Write(encodeResponse(resp))
	s.metrics.cniCall(req.Command, resp, time.Since(start))
	return false
}

// encodeResponse frames resp as the shim prints it: the result, or the
// error object as libcni's skel prints one.
func encodeResponse(resp *Response) []byte {
	if resp.Error != nil {
		data, err := json.MarshalIndent(resp.Error, "", "    ")
		if err != nil {
			data = []byte(`{"code":999,"msg":"encoding the error failed"}`)
		}
		return cniwire.AppendResponse(nil, cniwire.StatusError, data)
	}
	return cniwire.AppendResponse(nil, cniwire.StatusOK, resp.Result)
}

// connListener hands connections already accepted (and sniffed) to an
// http.Server.
type connListener struct {
	addr  net.Addr
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func (l *connListener) push(c net.Conn) {
	select {
	case l.conns <- c:
	case <-l.done:
		c.Close()
	}
}

func (l *connListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *connListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *connListener) Addr() net.Addr { return l.addr }

// peekedConn replays the bytes the sniffing read.
type peekedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *peekedConn) Read(p []byte) (int, error) { return c.r.Read(p) }
