package testbed

import (
	"bytes"
	"context"
	"encoding/pem"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"sync"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Fault is what a FaultProxy does with one request.
type Fault int

const (
	// Forward passes the request and its answer through.
	Forward Fault = iota
	// ForwardThenReset forwards the request, lets the API server answer
	// it (a write commits), then resets the client's connection instead of
	// passing the answer on: the client sees EOF or a reset, never the
	// status.
	ForwardThenReset
	// Reset resets the client's connection without forwarding.
	Reset
)

// FaultProxy is a TLS reverse proxy in front of kube-apiserver on
// 127.0.0.1 that applies a Fault, chosen per request by Decide, to each
// request. Point a client at it with Kubeconfig. HTTP/2 is off, so a reset
// ends one request, as a flaky link would.
type FaultProxy struct {
	srv *httptest.Server

	mu     sync.Mutex
	decide func(*http.Request) Fault
	// withheld are the answers ForwardThenReset kept from the client.
	withheld []Withheld
	// onWithheld sees each of them before the client's reset.
	onWithheld func(Withheld)
	// watches cancel the watches being forwarded.
	watches map[*http.Request]context.CancelFunc
}

// Withheld is an answer the proxy did not pass on.
type Withheld struct {
	Method, Path string
	Status       int
	Body         []byte
}

// NewFaultProxy starts a proxy to the API server of upstream (its CA is
// trusted; the client's own credential, its Authorization header, is what
// is forwarded). Close stops it.
func NewFaultProxy(upstream *rest.Config) (*FaultProxy, error) {
	target, err := url.Parse(upstream.Host)
	if err != nil {
		return nil, err
	}
	transport, err := rest.TransportFor(&rest.Config{TLSClientConfig: rest.TLSClientConfig{CAData: upstream.CAData}})
	if err != nil {
		return nil, err
	}
	p := &FaultProxy{watches: map[*http.Request]context.CancelFunc{}}
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.Transport = transport
	rp.FlushInterval = -1 // watches stream
	p.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch p.fault(r) {
		case Reset:
			reset(w)
		case ForwardThenReset:
			rec := httptest.NewRecorder()
			rp.ServeHTTP(rec, r)
			kept := Withheld{Method: r.Method, Path: r.URL.Path, Status: rec.Code, Body: bytes.Clone(rec.Body.Bytes())}
			p.mu.Lock()
			p.withheld = append(p.withheld, kept)
			on := p.onWithheld
			p.mu.Unlock()
			if on != nil {
				on(kept)
			}
			reset(w)
		default:
			if !IsWatch(r) {
				rp.ServeHTTP(w, r)
				return
			}
			ctx, cancel := context.WithCancel(r.Context())
			p.mu.Lock()
			p.watches[r] = cancel
			p.mu.Unlock()
			defer func() {
				p.mu.Lock()
				delete(p.watches, r)
				p.mu.Unlock()
				cancel()
			}()
			rp.ServeHTTP(w, r.WithContext(ctx))
		}
	}))
	p.srv.EnableHTTP2 = false
	p.srv.StartTLS()
	return p, nil
}

// reset closes the client's connection with an RST.
func reset(w http.ResponseWriter) {
	if hj, ok := w.(http.Hijacker); ok {
		if conn, _, err := hj.Hijack(); err == nil {
			if tc, ok := conn.(interface{ NetConn() net.Conn }); ok {
				if tcp, ok := tc.NetConn().(*net.TCPConn); ok {
					_ = tcp.SetLinger(0)
				}
			}
			_ = conn.Close()
			return
		}
	}
	panic(http.ErrAbortHandler)
}

func (p *FaultProxy) fault(r *http.Request) Fault {
	p.mu.Lock()
	decide := p.decide
	p.mu.Unlock()
	if decide == nil {
		return Forward
	}
	return decide(r)
}

// SetDecide sets what the proxy does with each request from now on (nil:
// forward everything). decide is called concurrently.
func (p *FaultProxy) SetDecide(decide func(*http.Request) Fault) {
	p.mu.Lock()
	p.decide = decide
	p.mu.Unlock()
}

// SetOnWithheld sets a function that sees each answer ForwardThenReset
// keeps, after the API server has answered and before the client's
// connection is reset (nil: none): a test can act there, e.g. kill the
// API server between a commit and the client's reset. f is called
// concurrently.
func (p *FaultProxy) SetOnWithheld(f func(Withheld)) {
	p.mu.Lock()
	p.onWithheld = f
	p.mu.Unlock()
}

// BreakWatches ends every watch being forwarded, mid-stream, as an API
// server that goes away does. Whether the clients can watch again is up to
// Decide.
func (p *FaultProxy) BreakWatches() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, cancel := range p.watches {
		cancel()
	}
}

// IsWatch reports whether r is a watch.
func IsWatch(r *http.Request) bool { return r.URL.Query().Get("watch") == "true" }

// Withheld returns the answers ForwardThenReset has kept from clients.
func (p *FaultProxy) Withheld() []Withheld {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Withheld(nil), p.withheld...)
}

// URL is the proxy's https URL.
func (p *FaultProxy) URL() string { return p.srv.URL }

// Close stops the proxy.
func (p *FaultProxy) Close() { p.srv.Close() }

// Kubeconfig writes, into dir, a copy of the kubeconfig at path that
// reaches the API server through the proxy with the same credential.
func (p *FaultProxy) Kubeconfig(path, dir string) (string, error) {
	kc, err := clientcmd.LoadFromFile(path)
	if err != nil {
		return "", err
	}
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: p.srv.Certificate().Raw})
	for _, c := range kc.Clusters {
		c.Server, c.CertificateAuthorityData, c.CertificateAuthority = p.srv.URL, ca, ""
	}
	out := filepath.Join(dir, "faultproxy.kubeconfig")
	if err := clientcmd.WriteToFile(*kc, out); err != nil {
		return "", fmt.Errorf("writing %s: %w", out, err)
	}
	return out, nil
}

// IsCreateOf reports whether r creates an object of the resource (plural
// name), e.g. "ipreservations".
func IsCreateOf(r *http.Request, resource string) bool {
	return r.Method == http.MethodPost && filepath.Base(r.URL.Path) == resource
}
