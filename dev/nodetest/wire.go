package nodetest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/mdlayher/arp"
	"github.com/mdlayher/ethernet"
	"github.com/mdlayher/packet"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// A WireSampler asks a segment, every Interval, who answers for each
// address of a prefix: it sends an ARP probe (RFC 5227: sender IP
// 0.0.0.0, so no neighbour's cache learns anything) for each, and records
// every MAC that claims an address during the round: any ARP packet whose
// sender IP is the address (a reply to the probe, an announcement, a
// host's own request), from a MAC other than the sampler's. All of a
// round's claims are kept, not the first: two hosts answering for one
// address show as two MACs in one round.
type WireSampler struct {
	prefix netip.Prefix
	mac    net.HardwareAddr
	conn   *packet.Conn
	cancel context.CancelFunc
	done   sync.WaitGroup
	// closing is set before Stop closes the socket: the read or the
	// round's write that fails then is no error.
	closing atomic.Bool

	mu      sync.Mutex
	rounds  []WireRound
	errs    []error
	stopped bool
}

// A WireRound is one round of probes: when it began, and the MACs that
// claimed each address until the next began.
type WireRound struct {
	At      time.Time
	Answers map[netip.Addr][]string
}

// StartWireSampler starts sampling prefix's IPv4 addresses every interval
// from interface ifName of the network namespace at netnsPath (a host of
// the segment's own, outside every node: devnode.Cluster.PlugSAN).
func StartWireSampler(netnsPath, ifName string, prefix netip.Prefix, interval time.Duration) (*WireSampler, error) {
	if !prefix.Addr().Is4() || prefix.Bits() < 24 {
		return nil, fmt.Errorf("wire sampler: prefix %s: an IPv4 prefix of at most 256 addresses", prefix)
	}
	s := &WireSampler{prefix: prefix.Masked()}
	err := ns.WithNetNSPath(netnsPath, func(ns.NetNS) error {
		link, err := netlink.LinkByName(ifName)
		if err != nil {
			return fmt.Errorf("wire sampler: interface %s: %w", ifName, err)
		}
		a := link.Attrs()
		s.mac = a.HardwareAddr
		s.conn, err = packet.Listen(&net.Interface{Index: a.Index, Name: a.Name, HardwareAddr: a.HardwareAddr, MTU: a.MTU, Flags: a.Flags},
			packet.Datagram, unix.ETH_P_ARP, nil)
		return err
	})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	s.done.Add(2)
	go s.listen()
	go s.probe(ctx, interval)
	return s, nil
}

func (s *WireSampler) probe(ctx context.Context, interval time.Duration) {
	defer s.done.Done()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		s.mu.Lock()
		s.rounds = append(s.rounds, WireRound{At: time.Now(), Answers: map[netip.Addr][]string{}})
		s.mu.Unlock()
		for a := s.prefix.Addr(); s.prefix.Contains(a); a = a.Next() {
			req, err := arp.NewPacket(arp.OperationRequest, s.mac, netip.IPv4Unspecified(), ethernet.Broadcast, a)
			if err == nil {
				req.TargetHardwareAddr = make(net.HardwareAddr, 6)
				var b []byte
				if b, err = req.MarshalBinary(); err == nil {
					_, err = s.conn.WriteTo(b, &packet.Addr{HardwareAddr: ethernet.Broadcast})
				}
			}
			if s.closing.Load() {
				return // Stop closed the socket under this round
			}
			if err != nil {
				s.fail(fmt.Errorf("probing %s: %w", a, err))
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func (s *WireSampler) listen() {
	defer s.done.Done()
	buf := make([]byte, 1500)
	for {
		n, _, err := s.conn.ReadFrom(buf)
		if err != nil {
			if !s.closing.Load() {
				s.fail(fmt.Errorf("reading: %w", err))
			}
			return
		}
		var p arp.Packet
		if p.UnmarshalBinary(buf[:n]) != nil || !s.prefix.Contains(p.SenderIP) || string(p.SenderHardwareAddr) == string(s.mac) {
			continue
		}
		mac := p.SenderHardwareAddr.String()
		s.mu.Lock()
		if len(s.rounds) > 0 {
			r := s.rounds[len(s.rounds)-1]
			if !slices.Contains(r.Answers[p.SenderIP], mac) {
				r.Answers[p.SenderIP] = append(r.Answers[p.SenderIP], mac)
			}
		}
		s.mu.Unlock()
	}
}

func (s *WireSampler) fail(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.errs) < 10 {
		s.errs = append(s.errs, err)
	}
}

// Stop ends the sampling, and returns what went wrong sending or reading.
func (s *WireSampler) Stop() error {
	s.cancel()
	s.closing.Store(true)
	_ = s.conn.Close()
	s.done.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopped = true
	return errors.Join(s.errs...)
}

// Rounds returns a copy of the rounds since since: every round but the
// one under way.
func (s *WireSampler) Rounds(since time.Time) []WireRound {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []WireRound
	for i, r := range s.rounds {
		if i == len(s.rounds)-1 && !s.stopped {
			break // under way: more may answer
		}
		if r.At.Before(since) {
			continue
		}
		c := WireRound{At: r.At, Answers: map[netip.Addr][]string{}}
		for a, macs := range r.Answers {
			c.Answers[a] = slices.Clone(macs)
		}
		out = append(out, c)
	}
	return out
}

// Conflicts describes every round in which an address was claimed by two
// MACs or more.
func Conflicts(rounds []WireRound) []string {
	var out []string
	for _, r := range rounds {
		for a, macs := range r.Answers {
			if len(macs) > 1 {
				out = append(out, fmt.Sprintf("%s at %s: %s", a, r.At.Format(time.RFC3339), strings.Join(macs, ", ")))
			}
		}
	}
	slices.Sort(out)
	return out
}

// AnsweredBy counts the rounds in which addr was claimed by mac.
func AnsweredBy(rounds []WireRound, addr netip.Addr, mac string) int {
	n := 0
	for _, r := range rounds {
		if slices.Contains(r.Answers[addr], mac) {
			n++
		}
	}
	return n
}

// LinkMAC is the MAC of ifname in the network namespace at path.
func LinkMAC(path, ifname string) (string, error) {
	ns, err := netns.GetFromPath(path)
	if err != nil {
		return "", err
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		return "", err
	}
	defer h.Close()
	l, err := h.LinkByName(ifname)
	if err != nil {
		return "", fmt.Errorf("%s in %s: %w", ifname, path, err)
	}
	return l.Attrs().HardwareAddr.String(), nil
}
