package devnode

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
)

// ProxyConfig is the fabric proxy's configuration file (JSON, these field
// names). The proxy runs in the host's network namespace and holds sockets
// in the fabric's, so the API server stays on the host's loopback and no
// address is added outside the namespaces the cluster made.
type ProxyConfig struct {
	// FabricNetns is the path of the fabric's network namespace.
	FabricNetns string
	// Listen is where, in the fabric, the nodes reach the API server
	// (host:port).
	Listen string
	// Upstream is the API server on the host's loopback (host:port).
	Upstream string
	// EgressSocket is the Unix socket the API server sends its cluster
	// traffic to, as HTTP CONNECT (controlplane.NodeAccess).
	EgressSocket string
	// Allow is the range CONNECT may reach in the fabric: the nodes'
	// addresses. Anything else is refused.
	Allow string
}

// ServeProxy runs the fabric proxy of the configuration file until ctx
// ends: TCP from Listen (in the fabric) to Upstream (on the host), and
// HTTP CONNECT from EgressSocket to addresses in Allow (dialled in the
// fabric).
func ServeProxy(ctx context.Context, configFile string) error {
	data, err := os.ReadFile(configFile)
	if err != nil {
		return err
	}
	var cfg ProxyConfig
	if err := json.Unmarshal(data, &cfg); err != nil {
		return fmt.Errorf("devnode: %s: %w", configFile, err)
	}
	_, allow, err := net.ParseCIDR(cfg.Allow)
	if err != nil {
		return fmt.Errorf("devnode: %s: Allow %q: %w", configFile, cfg.Allow, err)
	}
	var tcp net.Listener
	if err := inNetns(cfg.FabricNetns, func() error {
		var err error
		tcp, err = net.Listen("tcp", cfg.Listen)
		return err
	}); err != nil {
		return fmt.Errorf("devnode: listening on %s in %s: %w", cfg.Listen, cfg.FabricNetns, err)
	}
	uds, err := net.Listen("unix", cfg.EgressSocket)
	if err != nil {
		tcp.Close()
		return err
	}
	go func() {
		<-ctx.Done()
		tcp.Close()
		uds.Close()
	}()
	errc := make(chan error, 2)
	go func() {
		errc <- acceptLoop(tcp, func(c net.Conn) {
			up, err := net.DialTimeout("tcp", cfg.Upstream, 10*time.Second)
			if err != nil {
				c.Close()
				return
			}
			pipe(c, up, nil)
		})
	}()
	go func() {
		errc <- acceptLoop(uds, func(c net.Conn) { serveConnect(c, cfg.FabricNetns, allow) })
	}()
	err = <-errc
	if ctx.Err() != nil {
		return nil
	}
	return err
}

func acceptLoop(l net.Listener, handle func(net.Conn)) error {
	for {
		c, err := l.Accept()
		if err != nil {
			return err
		}
		go handle(c)
	}
}

// serveConnect answers one HTTP CONNECT, the API server's egress protocol.
func serveConnect(c net.Conn, fabric string, allow *net.IPNet) {
	br := bufio.NewReader(c)
	req, err := http.ReadRequest(br)
	if err != nil {
		c.Close()
		return
	}
	refuse := func(code int, msg string) {
		fmt.Fprintf(c, "HTTP/1.1 %d %s\r\nContent-Length: %d\r\n\r\n%s", code, http.StatusText(code), len(msg), msg)
		c.Close()
	}
	if req.Method != http.MethodConnect {
		refuse(http.StatusMethodNotAllowed, "CONNECT only")
		return
	}
	host, _, err := net.SplitHostPort(req.Host)
	ip := net.ParseIP(host)
	if err != nil || ip == nil || !allow.Contains(ip) {
		refuse(http.StatusForbidden, fmt.Sprintf("%s is not a node's address (%s)", req.Host, allow))
		return
	}
	var up net.Conn
	err = inNetns(fabric, func() error {
		var err error
		up, err = net.DialTimeout("tcp", req.Host, 10*time.Second)
		return err
	})
	if err != nil {
		refuse(http.StatusBadGateway, err.Error())
		return
	}
	if _, err := io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		c.Close()
		up.Close()
		return
	}
	pipe(c, up, br)
}

// pipe copies both ways until either side ends; buffered holds what was
// read from a past its request already.
func pipe(a, b net.Conn, buffered *bufio.Reader) {
	var from io.Reader = a
	if buffered != nil {
		from = buffered
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		_, _ = io.Copy(b, from)
		closeWrite(b)
	}()
	go func() {
		defer wg.Done()
		_, _ = io.Copy(a, b)
		closeWrite(a)
	}()
	wg.Wait()
	a.Close()
	b.Close()
}

func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
}

// inNetns runs f in the network namespace at path; sockets f makes stay
// there.
func inNetns(path string, f func() error) error {
	return ns.WithNetNSPath(path, func(ns.NetNS) error { return f() })
}
