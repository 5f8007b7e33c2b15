//go:build integration

package guest_test

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/tenure-ipam/tenure/test/guest"
	"github.com/tenure-ipam/tenure/test/testbed"
)

// The target node's end of a migration carries the stream from a TCP
// connection dialled in another network namespace to the target's Unix
// socket, byte for byte, and when the target's socket closes (its QEMU
// killed) the source's connection fails at once rather than hang.
func TestMigrationProxyJoinsTCPToTheTargetsSocketAndFailsTheSourceWhenTheTargetDies(t *testing.T) {
	testbed.NeedPlumb(t)
	sfx := strconv.Itoa(os.Getpid())
	nodePath, rmNode, err := testbed.AddNetns("tg-mnode-" + sfx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rmNode)
	srcPath, rmSrc, err := testbed.AddNetns("tg-msrc-" + sfx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rmSrc)
	for _, c := range [][]string{
		{"tg-mnode-" + sfx, "link", "add", "fab0", "type", "veth", "peer", "name", "fab0", "netns", "tg-msrc-" + sfx},
		{"tg-mnode-" + sfx, "addr", "add", "10.98.0.2/24", "dev", "fab0"},
		{"tg-msrc-" + sfx, "addr", "add", "10.98.0.1/24", "dev", "fab0"},
		{"tg-mnode-" + sfx, "link", "set", "fab0", "up"},
		{"tg-msrc-" + sfx, "link", "set", "fab0", "up"},
	} {
		if out, err := testbed.IPIn(c[0], c[1:]...); err != nil {
			t.Fatalf("ip -n %s %v: %v: %s", c[0], c[1:], err, out)
		}
	}

	// The target QEMU's incoming socket, played by a Unix listener.
	sock := filepath.Join(t.TempDir(), "migrate.sock")
	target, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer target.Close()
	proxy, err := guest.ServeMigration(nodePath, "10.98.0.2:0", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Stop()
	if host, _, _ := net.SplitHostPort(proxy.Addr()); host != "10.98.0.2" {
		t.Fatalf("the proxy listens on %s, want the node's address 10.98.0.2", proxy.Addr())
	}
	conn, err := guest.DialIn(srcPath, proxy.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if host, _, _ := net.SplitHostPort(conn.LocalAddr().String()); host != "10.98.0.1" {
		t.Fatalf("the source dialled from %s, want its own address 10.98.0.1", conn.LocalAddr())
	}
	in, err := target.Accept()
	if err != nil {
		t.Fatal(err)
	}

	stream := bytes.Repeat([]byte("QEVM"), 1<<18) // 1 MiB
	go func() { _, _ = conn.Write(stream) }()
	got := make([]byte, len(stream))
	if err := in.SetReadDeadline(time.Now().Add(30 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(in, got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, stream) {
		t.Fatal("the target read other bytes than the source wrote")
	}

	// The target dies: the source's next writes fail.
	in.Close()
	deadline := time.Now().Add(10 * time.Second)
	// A proxy that kept the connection open would block the writes once
	// the buffers fill: the deadline ends them as a timeout.
	if err := conn.SetWriteDeadline(deadline); err != nil {
		t.Fatal(err)
	}
	var werr error
	for time.Now().Before(deadline) {
		if _, werr = conn.Write(make([]byte, 64<<10)); werr != nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if werr == nil {
		t.Fatal("the source still writes 10 s after the target's socket closed")
	}
	if !errors.Is(werr, syscall.EPIPE) && !errors.Is(werr, syscall.ECONNRESET) {
		t.Errorf("the source's write failed with %v, want a broken pipe or a reset", werr)
	}
}
