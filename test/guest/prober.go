package guest

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"slices"
	"sync"
	"time"

	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
)

// Probe is one ICMP echo request a Prober sent, and its reply.
type Probe struct {
	Sent time.Time
	// Answered is when its reply arrived; zero when none did.
	Answered time.Time
}

// Outage is a run of unanswered probes between answered ones.
type Outage struct {
	// Start is when the first unanswered probe was sent, End when the
	// first answered one after it was (zero when none was: the outage
	// lasted to the end of the probing).
	Start, End time.Time
	Lost       int
}

// Window is the outage's length: from its first lost probe to the next
// answered one (to the end when there is none, of the interval sent).
func (o Outage) Window(end time.Time) time.Duration {
	if o.End.IsZero() {
		return end.Sub(o.Start)
	}
	return o.End.Sub(o.Start)
}

// Outages finds the runs of unanswered probes in probes (in the order
// sent). A run still open at the end has no End.
func Outages(probes []Probe) []Outage {
	var out []Outage
	var cur *Outage
	for _, p := range probes {
		if p.Answered.IsZero() {
			if cur == nil {
				out = append(out, Outage{Start: p.Sent})
				cur = &out[len(out)-1]
			}
			cur.Lost++
			continue
		}
		if cur != nil {
			cur.End = p.Sent
			cur = nil
		}
	}
	return out
}

// A Span is a stretch of time a migration's losses are counted in: an
// outage belongs to the span it began in.
type Span struct{ From, To time.Time }

// Holds reports whether t falls within s, its ends included.
func (s Span) Holds(t time.Time) bool { return !t.Before(s.From) && !t.After(s.To) }

// LostIn sums the loss windows and the lost probes of the outages that
// began within s; end is when the probing stopped.
func LostIn(outages []Outage, s Span, end time.Time) (time.Duration, int) {
	var d time.Duration
	n := 0
	for _, o := range outages {
		if s.Holds(o.Start) {
			d += o.Window(end)
			n += o.Lost
		}
	}
	return d, n
}

// Unattributed are the outages that began outside every span.
func Unattributed(outages []Outage, spans []Span) []Outage {
	var out []Outage
	for _, o := range outages {
		if !slices.ContainsFunc(spans, func(s Span) bool { return s.Holds(o.Start) }) {
			out = append(out, o)
		}
	}
	return out
}

// Prober sends an ICMP echo request to each of its destinations every
// interval from one network namespace, and records the replies.
type Prober struct {
	dsts     []netip.Addr
	interval time.Duration
	ids      []int // echo identifier per destination
	conns    map[bool]*icmp.PacketConn

	mu     sync.Mutex
	probes [][]Probe // per destination, by sequence number
	errs   []error

	sendStop, stop chan struct{}
	sendWG, wg     sync.WaitGroup
	stopOnce       sync.Once
	stopErr        error
}

// StartProber starts probing dsts every interval from the network
// namespace at path ("" for the caller's).
func StartProber(path string, interval time.Duration, dsts ...netip.Addr) (*Prober, error) {
	if interval <= 0 {
		return nil, fmt.Errorf("guest: prober interval %v is not positive", interval)
	}
	p := &Prober{dsts: dsts, interval: interval, conns: map[bool]*icmp.PacketConn{},
		probes: make([][]Probe, len(dsts)), sendStop: make(chan struct{}), stop: make(chan struct{})}
	base := rand.IntN(0xff00)
	for i, d := range dsts {
		if !d.IsValid() {
			return nil, fmt.Errorf("guest: prober destination %d is no address", i)
		}
		p.ids = append(p.ids, base+i+1)
		v6 := d.Is6() && !d.Is4In6()
		if p.conns[v6] == nil {
			c, err := listenICMP(path, d)
			if err != nil {
				p.closeConns()
				return nil, err
			}
			p.conns[v6] = c
		}
	}
	for v6, c := range p.conns {
		p.wg.Add(1)
		go p.receive(c, v6)
	}
	p.sendWG.Add(1)
	go p.send()
	return p, nil
}

func (p *Prober) closeConns() {
	for _, c := range p.conns {
		c.Close()
	}
}

func (p *Prober) send() {
	defer p.sendWG.Done()
	tick := time.NewTicker(p.interval)
	defer tick.Stop()
	payload := []byte("tenure-prober")
	for {
		for i, d := range p.dsts {
			v6 := d.Is6() && !d.Is4In6()
			var typ icmp.Type = ipv4.ICMPTypeEcho
			if v6 {
				typ = ipv6.ICMPTypeEchoRequest
			}
			p.mu.Lock()
			seq := len(p.probes[i])
			p.probes[i] = append(p.probes[i], Probe{Sent: time.Now()})
			p.mu.Unlock()
			b, err := (&icmp.Message{Type: typ, Body: &icmp.Echo{ID: p.ids[i], Seq: seq & 0xffff, Data: payload}}).Marshal(nil)
			if err == nil {
				_, err = p.conns[v6].WriteTo(b, &net.IPAddr{IP: d.AsSlice()})
			}
			// A send refused (no route, no neighbour yet) is a lost probe.
			_ = err
		}
		select {
		case <-p.sendStop:
			return
		case <-tick.C:
		}
	}
}

func (p *Prober) receive(c *icmp.PacketConn, v6 bool) {
	defer p.wg.Done()
	proto, reply := 1, icmp.Type(ipv4.ICMPTypeEchoReply)
	if v6 {
		proto, reply = 58, ipv6.ICMPTypeEchoReply
	}
	buf := make([]byte, 1500)
	for {
		n, from, err := c.ReadFrom(buf)
		if err != nil {
			select {
			case <-p.stop:
			default:
				p.mu.Lock()
				p.errs = append(p.errs, err)
				p.mu.Unlock()
			}
			return
		}
		now := time.Now()
		m, err := icmp.ParseMessage(proto, buf[:n])
		if err != nil || m.Type != reply {
			continue
		}
		echo, ok := m.Body.(*icmp.Echo)
		if !ok {
			continue
		}
		ip, _ := from.(*net.IPAddr)
		if ip == nil {
			continue
		}
		src, _ := netip.AddrFromSlice(ip.IP)
		p.mu.Lock()
		for i, d := range p.dsts {
			if p.ids[i] != echo.ID || d != src.Unmap() {
				continue
			}
			// The sequence number wraps at 2^16: the latest probe with
			// these low bits is the one answered.
			for seq := len(p.probes[i]) - 1; seq >= 0; seq-- {
				if seq&0xffff == echo.Seq {
					if p.probes[i][seq].Answered.IsZero() {
						p.probes[i][seq].Answered = now
					}
					break
				}
			}
		}
		p.mu.Unlock()
	}
}

// Probes returns the probes of dst so far.
func (p *Prober) Probes(dst netip.Addr) []Probe {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, d := range p.dsts {
		if d == dst {
			return append([]Probe(nil), p.probes[i]...)
		}
	}
	return nil
}

// AnsweredAfter reports whether a probe of dst sent after t was answered.
func (p *Prober) AnsweredAfter(dst netip.Addr, t time.Time) bool {
	probes := p.Probes(dst)
	for i := len(probes) - 1; i >= 0 && probes[i].Sent.After(t); i-- {
		if !probes[i].Answered.IsZero() {
			return true
		}
	}
	return false
}

// replyWait is how long Stop waits for the replies of the last probes.
const replyWait = time.Second

// Stop ends the probing: no more probes are sent, and the replies to those
// of the last replyWait are waited for until they arrive or replyWait has
// passed. It returns the receive errors, if any.
func (p *Prober) Stop() error {
	p.stopOnce.Do(func() {
		close(p.sendStop)
		p.sendWG.Wait()
		deadline := time.Now().Add(replyWait)
		tick := time.NewTicker(10 * time.Millisecond)
		for time.Now().Before(deadline) && p.awaiting(deadline.Add(-2*replyWait)) {
			<-tick.C
		}
		tick.Stop()
		close(p.stop)
		p.closeConns()
		p.wg.Wait()
		p.mu.Lock()
		p.stopErr = errors.Join(p.errs...)
		p.mu.Unlock()
	})
	return p.stopErr
}

// awaiting reports whether a probe sent after t has no reply yet.
func (p *Prober) awaiting(t time.Time) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, probes := range p.probes {
		for i := len(probes) - 1; i >= 0 && probes[i].Sent.After(t); i-- {
			if probes[i].Answered.IsZero() {
				return true
			}
		}
	}
	return false
}
