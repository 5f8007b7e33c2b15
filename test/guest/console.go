package guest

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/netip"
	"regexp"
	"strings"
	"sync"
	"time"
)

// Line is one line of the serial console and when it arrived.
type Line struct {
	Time time.Time
	Text string
}

// Console records a guest's serial console.
type Console struct {
	mu      sync.Mutex
	lines   []Line
	changed chan struct{} // closed and replaced at each new line
	closed  chan struct{} // closed when the console's stream ended
}

func newConsole(r io.Reader) *Console {
	c := &Console{changed: make(chan struct{}), closed: make(chan struct{})}
	go func() {
		defer close(c.closed)
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			text := strings.TrimRight(sc.Text(), "\r")
			c.mu.Lock()
			c.lines = append(c.lines, Line{Time: time.Now(), Text: text})
			close(c.changed)
			c.changed = make(chan struct{})
			c.mu.Unlock()
		}
	}()
	return c
}

// Lines returns the lines so far.
func (c *Console) Lines() []Line {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Line(nil), c.lines...)
}

// String is the console so far, one line per line.
func (c *Console) String() string {
	var b strings.Builder
	for _, l := range c.Lines() {
		fmt.Fprintf(&b, "%s %s\n", l.Time.Format("15:04:05.000"), l.Text)
	}
	return b.String()
}

// Wait returns the first line at index from or later that matches re, and
// its index; it waits for one until ctx ends or the console closes.
func (c *Console) Wait(ctx context.Context, from int, re *regexp.Regexp) (Line, int, error) {
	for {
		c.mu.Lock()
		for i := from; i < len(c.lines); i++ {
			if re.MatchString(c.lines[i].Text) {
				l := c.lines[i]
				c.mu.Unlock()
				return l, i, nil
			}
		}
		from = max(from, len(c.lines))
		changed := c.changed
		c.mu.Unlock()
		select {
		case <-changed:
		case <-c.closed:
			// Lines that arrived before the close are matched above once more.
			c.mu.Lock()
			n := len(c.lines)
			c.mu.Unlock()
			if from >= n {
				return Line{}, -1, fmt.Errorf("guest: the console closed with no line matching %q", re)
			}
		case <-ctx.Done():
			return Line{}, -1, fmt.Errorf("guest: no console line matching %q: %w", re, ctx.Err())
		}
	}
}

// Lease is one report of the guest's dhclient script: an address or a
// prefix it was given (reason BOUND6, RENEW6, REBIND6, REBOOT6) or lost.
type Lease struct {
	Time   time.Time
	Reason string
	// Address is the IA_NA address; zero in a prefix's report.
	Address netip.Addr
	// Prefix is the IA_PD prefix and PrefixAddress the address the guest
	// put on pd0 from it; zero in an address's report.
	Prefix        netip.Prefix
	PrefixAddress netip.Addr
}

var reLease = regexp.MustCompile(`^tenure-guest: lease reason=(\S+)(?: address=(\S*))?(?: prefix=(\S*))?(?: prefix-address=(\S+))?$`)

// ReLease matches the guest's lease reports.
var ReLease = regexp.MustCompile(`^tenure-guest: lease `)

// ParseLease reads a lease report line; false for any other line.
func ParseLease(l Line) (Lease, bool) {
	m := reLease.FindStringSubmatch(l.Text)
	if m == nil {
		return Lease{}, false
	}
	out := Lease{Time: l.Time, Reason: m[1]}
	if m[2] != "" {
		a, err := netip.ParseAddr(m[2])
		if err != nil {
			return Lease{}, false
		}
		out.Address = a
	}
	if m[3] != "" {
		p, err := netip.ParsePrefix(m[3])
		if err != nil {
			return Lease{}, false
		}
		out.Prefix = p
	}
	if m[4] != "" {
		a, err := netip.ParseAddr(m[4])
		if err != nil {
			return Lease{}, false
		}
		out.PrefixAddress = a
	}
	return out, true
}

// Leases are the lease reports so far.
func (c *Console) Leases() []Lease {
	var out []Lease
	for _, l := range c.Lines() {
		if lease, ok := ParseLease(l); ok {
			out = append(out, lease)
		}
	}
	return out
}

// reExchange matches dhclient's lines for a message sent or received
// ("XMT: Forming Solicit", "RCV: Reply message on eth0 from ...").
var reExchange = regexp.MustCompile(`^(XMT: Forming \S+|RCV: \S+ message on)`)

// Exchanges are dhclient's lines for the DHCPv6 messages it sent and
// received, and the lease reports, in order.
func (c *Console) Exchanges() []Line {
	var out []Line
	for _, l := range c.Lines() {
		if reExchange.MatchString(l.Text) || ReLease.MatchString(l.Text) {
			out = append(out, l)
		}
	}
	return out
}
