package guest

import (
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"sync"

	"github.com/vishvananda/netns"
)

// migrationFD is the name the source QEMU knows the migration's socket by
// (QMP getfd).
const migrationFD = "migration"

// MigrateConn starts a live migration into conn, a TCP connection the
// caller dialled to the target (DialIn), as KubeVirt's source virt-handler
// connects the source to the target node: QEMU writes the stream into
// that socket itself (QMP getfd, then migrate "fd:").
func (v *VM) MigrateConn(conn *net.TCPConn) error {
	f, err := conn.File()
	if err != nil {
		return err
	}
	// QEMU holds its own copy of the descriptor once getfd returns.
	defer f.Close()
	if err := v.runWithFile("getfd", map[string]any{"fdname": migrationFD}, f, nil); err != nil {
		return err
	}
	return v.run("migrate", map[string]any{"uri": "fd:" + migrationFD}, nil)
}

// inNetns runs f on a thread in the network namespace at path; sockets f
// makes stay in that namespace after the thread leaves it.
func inNetns(path string, f func() error) error {
	target, err := netns.GetFromPath(path)
	if err != nil {
		return err
	}
	defer target.Close()
	errc := make(chan error, 1)
	go func() {
		// Left locked if it cannot go back: Go ends the thread.
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			errc <- err
			return
		}
		defer orig.Close()
		if err := netns.Set(target); err != nil {
			errc <- err
			return
		}
		ferr := f()
		if err := netns.Set(orig); err != nil {
			errc <- errors.Join(ferr, err)
			return
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}

// DialIn dials TCP addr (host:port) from the network namespace at path.
func DialIn(path, addr string) (*net.TCPConn, error) {
	var c net.Conn
	err := inNetns(path, func() error {
		var err error
		c, err = net.Dial("tcp", addr)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("guest: dial %s in %s: %w", addr, path, err)
	}
	return c.(*net.TCPConn), nil
}

// MigrationProxy is the target node's end of a migration, as KubeVirt's
// target virt-handler runs it: a TCP listener on the node's address (in
// the node's network namespace) whose connections it joins to the target
// QEMU's incoming Unix socket (Config.Incoming "unix:PATH") in the
// launcher.
type MigrationProxy struct {
	l      net.Listener
	socket string
	mu     sync.Mutex
	conns  []net.Conn
	wg     sync.WaitGroup
}

// ServeMigration listens on addr (host:port; port 0 picks one) in the
// network namespace at path and joins each connection to the Unix socket.
func ServeMigration(path, addr, socket string) (*MigrationProxy, error) {
	var l net.Listener
	if err := inNetns(path, func() error {
		var err error
		l, err = net.Listen("tcp", addr)
		return err
	}); err != nil {
		return nil, fmt.Errorf("guest: listen on %s in %s: %w", addr, path, err)
	}
	p := &MigrationProxy{l: l, socket: socket}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is where the proxy listens (host:port).
func (p *MigrationProxy) Addr() string { return p.l.Addr().String() }

func (p *MigrationProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.l.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial("unix", p.socket)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, up)
		p.mu.Unlock()
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			join(c, up)
		}()
	}
}

// join copies both ways; when either way ends both connections close, so
// a target that dies fails the source's migration at once.
func join(a, b net.Conn) {
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(b, a); done <- struct{}{} }()
	go func() { _, _ = io.Copy(a, b); done <- struct{}{} }()
	<-done
	a.Close()
	b.Close()
	<-done
}

// Stop closes the listener and every connection, and waits for them.
func (p *MigrationProxy) Stop() {
	p.l.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}
