package agent

import (
	"bytes"
	"encoding/json"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/tenure-ipam/tenure/internal/cniwire"
)

// serveOn serves h's agent on a fresh socket with the request budget b.
func serveOn(t *testing.T, h *harness, b *requestBudget) string {
	t.Helper()
	h.agent.server.requests = b
	return serve(t, h)
}

// bigRequest is an ADD of size bytes on the wire, all but its last byte
// and the last byte.
func bigRequest(size int) (body []byte, last byte) {
	pad := size - len(`{"command":"ADD","stdinData":""}`)
	pad -= pad % 4 // whole base64 quanta
	b := []byte(`{"command":"ADD","stdinData":"` + strings.Repeat("A", pad) + `"}`)
	return b[:len(b)-1], b[len(b)-1]
}

// answer reads a response to its end and decodes its CNI error (nil on
// success).
func answer(t *testing.T, conn net.Conn) *types.Error {
	t.Helper()
	resp, err := io.ReadAll(conn)
	if err != nil {
		t.Errorf("reading the answer: %v", err)
		return nil
	}
	status, payload, err := cniwire.ParseResponse(resp)
	if err != nil {
		t.Errorf("answer %q: %v", resp, err)
		return nil
	}
	if status == cniwire.StatusOK {
		return nil
	}
	var e types.Error
	if err := json.Unmarshal(payload, &e); err != nil {
		t.Errorf("error answer %s: %v", payload, err)
	}
	return &e
}

// Ten parallel large requests must not all be held at once. Each
// client sends all of its request but the last byte, and only once every
// client has done so sends the rest: the requests the agent admitted are
// then all in memory together. At most two fit the budget; the others are
// answered "try again" (11), and the bytes in flight never pass the bound.
func TestConcurrentLargeRequestsGetTryAgain(t *testing.T) {
	const (
		n        = 10
		size     = 1 << 20
		headSize = 64 << 10
	)
	h := startAgent(t)
	b := newRequestBudget(headSize, 4*headSize, 5*size/2)
	socket := serveOn(t, h, b)

	var written, finish sync.WaitGroup
	written.Add(n)
	finish.Add(1)
	codes := make([]*types.Error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conn, err := net.Dial("unix", socket)
			if err != nil {
				written.Done()
				t.Error(err)
				return
			}
			defer conn.Close()
			body, last := bigRequest(size)
			_, err = conn.Write(body)
			written.Done()
			if err != nil {
				t.Errorf("client %d: %v", i, err)
				return
			}
			finish.Wait()
			if _, err := conn.Write([]byte{last}); err != nil {
				t.Errorf("client %d: %v", i, err)
				return
			}
			_ = conn.(*net.UnixConn).CloseWrite()
			codes[i] = answer(t, conn)
		}()
	}
	written.Wait()
	finish.Done()
	wg.Wait()

	busy, served := 0, 0
	for i, e := range codes {
		switch {
		case e != nil && e.Code == types.ErrTryAgainLater:
			busy++
			if !strings.Contains(e.Msg, "try again") {
				t.Errorf("client %d: code 11 with %q, want it to say try again", i, e.Msg)
			}
		default:
			served++ // the agent read it whole and answered it (an ADD of no pod)
		}
	}
	if busy < n-2 || served < 1 {
		t.Errorf("%d of %d requests answered 11 and %d served, want at least %d answered 11 and at least one served", busy, n, served, n-2)
	}
	if b.Peak() > b.limit {
		t.Errorf("bytes in flight peaked at %d, over the bound %d", b.Peak(), b.limit)
	}
	if b.InFlight() != 0 {
		t.Errorf("%d bytes still charged after every request was answered", b.InFlight())
	}
	if b.busy.Load() != int64(busy) {
		t.Errorf("busy counter %d, %d answers of 11", b.busy.Load(), busy)
	}
	t.Logf("%d requests of %d bytes: %d answered 11, %d served; peak %d bytes in flight, bound %d", n, size, busy, served, b.Peak(), b.limit)
}

// A large request filling the budget's tail does not turn away an ordinary
// call: each connection's first bytes come from a pool of their own.
func TestOrdinaryCallServedBesideALargeOne(t *testing.T) {
	const size = 1 << 20
	h := startAgent(t, pod("p1", thisNode, nil))
	b := newRequestBudget(64<<10, 256<<10, size)
	socket := serveOn(t, h, b)

	big, err := net.Dial("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	defer big.Close()
	body, _ := bigRequest(size)
	// All but 16 KiB of a request as large as the tail, still unfinished:
	// the tail is as full as it gets.
	if _, err := big.Write(body[:size-16<<10]); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for b.InFlight() < size-(64<<10)-(16<<10) {
		if time.Now().After(deadline) {
			t.Fatalf("the agent holds %d bytes of the large request, want it all", b.InFlight())
		}
		time.Sleep(time.Millisecond)
	}
	req := cniwire.AppendRequest(nil, &cniwire.Request{Command: "ADD", ContainerID: "c1", IfName: "net1", Netns: "/var/run/netns/c1",
		Args: "IgnoreUnknown=1;K8S_POD_NAMESPACE=ns;K8S_POD_NAME=p1;K8S_POD_UID=uid-p1", StdinData: []byte(san29)})
	status, payload, err := cniwire.Call(socket, req, 5*time.Second, 30*time.Second)
	if err != nil || status != cniwire.StatusOK || !bytes.Contains(payload, []byte(`"10.0.0.`)) {
		t.Fatalf("ordinary ADD beside a large request: status %c, %s, %v; want an address", status, payload, err)
	}
}

// The accounting itself: a connection's first bytes come from the head
// pool, the rest from the tail; a take that does not fit charges nothing.
func TestChargeAccounting(t *testing.T) {
	b := newRequestBudget(10, 15, 20)
	c1, c2 := &charge{b: b}, &charge{b: b}
	if !c1.take(25) || c1.head != 10 || c1.tail != 15 {
		t.Fatalf("c1 after 25: head %d tail %d, want 10 and 15", c1.head, c1.tail)
	}
	if c2.take(10) || b.InFlight() != 25 {
		t.Fatalf("c2 took 10 with only 5 left in the tail: in flight %d", b.InFlight())
	}
	if !c2.take(5) || c2.head != 5 || c2.tail != 0 {
		t.Fatalf("c2 after 5: head %d tail %d, want 5 and 0", c2.head, c2.tail)
	}
	if c2.take(6) || c2.head != 5 || b.InFlight() != 30 {
		t.Fatalf("c2 took 6 though its next 5 bytes come from the spent head pool: head %d, in flight %d", c2.head, b.InFlight())
	}
	c1.give(10)
	if c1.tail != 5 || c1.head != 10 {
		t.Fatalf("c1 gave 10: head %d tail %d, want the tail returned first", c1.head, c1.tail)
	}
	c1.release()
	c2.release()
	if b.InFlight() != 0 || b.Peak() != 30 || !b.head.TryAcquire(15) || !b.tail.TryAcquire(20) {
		t.Fatalf("after release: in flight %d, peak %d, pools not whole", b.InFlight(), b.Peak())
	}
}
