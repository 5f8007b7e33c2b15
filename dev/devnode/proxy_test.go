//go:build integration

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
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The fabric proxy in a network namespace of the test's own: the
// listener in the fabric reaches a server on the host's loopback, and
// CONNECT reaches a server in the fabric at an allowed address only. A
// name is refused, never looked up; so is an address outside the range,
// and any method but CONNECT.
func TestFabricProxyCarriesBothWaysAndRefusesNamesAndOtherAddresses(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("network namespaces need root: run the integration tests as root")
	}
	dir := t.TempDir()
	fabric := filepath.Join(HostNetnsDir, fmt.Sprintf("tenure-proxytest-%d", os.Getpid()))
	if err := newNamedNetns(fabric); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = removeNetns(fabric) })
	h, err := netnsHandle(fabric)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if err := linkUp(h, "lo"); err != nil {
		t.Fatal(err)
	}
	if err := addAddr(h, "lo", "10.99.0.50/32"); err != nil {
		t.Fatal(err)
	}

	// Upstream on the host's loopback; a "kubelet" in the fabric.
	host, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer host.Close()
	go serveLine(host, "host")
	var kubelet net.Listener
	if err := inNetns(fabric, func() error {
		var err error
		kubelet, err = net.Listen("tcp", "10.99.0.50:10250")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer kubelet.Close()
	go serveLine(kubelet, "fabric")

	cfg := ProxyConfig{FabricNetns: fabric, Listen: "10.99.0.50:6443", Upstream: host.Addr().String(),
		EgressSocket: fmt.Sprintf("@tenure-proxytest-%d", os.Getpid()), Allow: "10.99.0.0/24"}
	data, _ := json.Marshal(cfg)
	file := filepath.Join(dir, "proxy.json")
	if err := os.WriteFile(file, data, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ServeProxy(ctx, file) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	if err := poll(ctx, 10*time.Second, "the egress socket", func() error {
		c, err := net.Dial("unix", cfg.EgressSocket)
		if err == nil {
			c.Close()
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}

	// The nodes' way in: dialled from inside the fabric.
	var got string
	if err := inNetns(fabric, func() error {
		c, err := net.DialTimeout("tcp", cfg.Listen, 5*time.Second)
		if err != nil {
			return err
		}
		defer c.Close()
		got, err = bufio.NewReader(c).ReadString('\n')
		return err
	}); err != nil || got != "host\n" {
		t.Errorf("from the fabric to %s: %q, %v; want the host's server", cfg.Listen, got, err)
	}

	for _, c := range []struct {
		req, status, body string
	}{
		{"CONNECT 10.99.0.50:10250 HTTP/1.1\r\nHost: 10.99.0.50:10250\r\n\r\n", "200", "fabric\n"},
		{"CONNECT tenure-dev-node-1:10250 HTTP/1.1\r\nHost: tenure-dev-node-1:10250\r\n\r\n", "403", ""},
		{"CONNECT 127.0.0.1:10250 HTTP/1.1\r\nHost: 127.0.0.1:10250\r\n\r\n", "403", ""},
		{"GET http://10.99.0.50:10250/ HTTP/1.1\r\nHost: 10.99.0.50:10250\r\n\r\n", "405", ""},
	} {
		conn, err := net.Dial("unix", cfg.EgressSocket)
		if err != nil {
			t.Fatal(err)
		}
		_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.WriteString(conn, c.req); err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(conn)
		resp, err := http.ReadResponse(br, nil)
		line := strings.SplitN(c.req, "\r\n", 2)[0]
		if err != nil {
			t.Errorf("%s: %v", line, err)
			conn.Close()
			continue
		}
		if got := fmt.Sprint(resp.StatusCode); got != c.status {
			t.Errorf("%s: status %s, want %s", line, got, c.status)
		}
		if c.body != "" {
			if got, err := br.ReadString('\n'); got != c.body {
				t.Errorf("%s: read %q (%v), want %q", line, got, err, c.body)
			}
		}
		conn.Close()
	}
}

func serveLine(l net.Listener, line string) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		_, _ = io.WriteString(c, line+"\n")
		c.Close()
	}
}
