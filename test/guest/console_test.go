package guest

import (
	"context"
	"io"
	"net"
	"net/netip"
	"regexp"
	"strings"
	"testing"
	"time"
)

func TestParseLease(t *testing.T) {
	for _, c := range []struct {
		text string
		want Lease
		ok   bool
	}{
		{"tenure-guest: lease reason=BOUND6 address=fd00:103::42", Lease{Reason: "BOUND6", Address: netip.MustParseAddr("fd00:103::42")}, true},
		{"tenure-guest: lease reason=RENEW6 prefix=fd00:1030:100::/56 prefix-address=fd00:1030:100::1",
			Lease{Reason: "RENEW6", Prefix: netip.MustParsePrefix("fd00:1030:100::/56"), PrefixAddress: netip.MustParseAddr("fd00:1030:100::1")}, true},
		{"tenure-guest: lease reason=EXPIRE6 address=fd00:103::42 prefix=", Lease{Reason: "EXPIRE6", Address: netip.MustParseAddr("fd00:103::42")}, true},
		{"tenure-guest: lease reason=EXPIRE6 address= prefix=fd00:1030:100::/56", Lease{Reason: "EXPIRE6", Prefix: netip.MustParsePrefix("fd00:1030:100::/56")}, true},
		{"tenure-guest: lease reason=BOUND6 address=not-an-address", Lease{}, false},
		{"tenure-guest: lease reason=BOUND6 prefix=fd00::/300", Lease{}, false},
		{"tenure-guest: up mac=02:00:00:00:97:01 ipv4=", Lease{}, false},
		{"XMT: Forming Renew, 0 ms elapsed.", Lease{}, false},
	} {
		got, ok := ParseLease(Line{Text: c.text})
		if ok != c.ok || got != c.want {
			t.Errorf("ParseLease(%q) = %+v, %v; want %+v, %v", c.text, got, ok, c.want, c.ok)
		}
	}
}

func TestConsoleWaitAndExchanges(t *testing.T) {
	r, w := io.Pipe()
	c := newConsole(r)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	go func() {
		for _, l := range []string{
			"XMT: Forming Solicit, 0 ms elapsed.",
			"XMT:  X-- IA_NA 00:00:97:01",
			"RCV: Advertise message on eth0 from fe80::1.",
			"tenure-guest: lease reason=BOUND6 address=fd00:103::42",
			"some kernel line\r",
		} {
			_, _ = io.WriteString(w, l+"\n")
		}
		w.Close()
	}()
	l, i, err := c.Wait(ctx, 0, regexp.MustCompile(`^some kernel line$`))
	if err != nil || i != 4 || l.Text != "some kernel line" {
		t.Fatalf("Wait: %q at %d, %v; want the fifth line, without its CR", l.Text, i, err)
	}
	if _, _, err := c.Wait(ctx, 0, regexp.MustCompile(`never`)); err == nil || !strings.Contains(err.Error(), "closed") {
		t.Errorf("Wait for a line that never comes on a closed console: %v, want an error saying it closed", err)
	}
	var got []string
	for _, l := range c.Exchanges() {
		got = append(got, l.Text)
	}
	want := []string{"XMT: Forming Solicit, 0 ms elapsed.", "RCV: Advertise message on eth0 from fe80::1.", "tenure-guest: lease reason=BOUND6 address=fd00:103::42"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("Exchanges = %q, want %q", got, want)
	}
}

func TestConfigArgsRefusesBadInput(t *testing.T) {
	good := Config{Tap: "tap0", MAC: net.HardwareAddr{2, 0, 0, 0, 0x97, 1}, Accel: "tcg"}
	for _, c := range []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"no tap", func(c *Config) { c.Tap = "" }, "Config.Tap"},
		{"short MAC", func(c *Config) { c.MAC = net.HardwareAddr{2, 0} }, `Config.MAC "02:00"`},
		{"unknown accelerator", func(c *Config) { c.Accel = "hvf" }, `Config.Accel "hvf"`},
	} {
		cfg := good
		c.edit(&cfg)
		if _, err := cfg.args("/x/qmp.sock"); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error naming %s", c.name, err, c.want)
		}
	}
	args, err := good.args("/x/qmp.sock")
	if err != nil {
		t.Fatal(err)
	}
	line := strings.Join(args, " ")
	for _, want := range []string{"q35,accel=tcg", "mac=02:00:00:00:97:01", "ifname=tap0,script=no", "unix:/x/qmp.sock,server=on"} {
		if !strings.Contains(line, want) {
			t.Errorf("QEMU's arguments %q lack %q", line, want)
		}
	}
	good.Incoming = "tcp:[::]:4444"
	if args, _ := good.args("/x/qmp.sock"); !strings.HasSuffix(strings.Join(args, " "), "-incoming tcp:[::]:4444") {
		t.Errorf("a target's arguments %q lack -incoming", args)
	}
}

func TestOutages(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	probe := func(ms int, answered bool) Probe {
		p := Probe{Sent: at(ms)}
		if answered {
			p.Answered = at(ms + 1)
		}
		return p
	}
	for _, c := range []struct {
		name   string
		probes []Probe
		want   []Outage
	}{
		{"none lost", []Probe{probe(0, true), probe(10, true)}, nil},
		{"one run", []Probe{probe(0, true), probe(10, false), probe(20, false), probe(30, true)},
			[]Outage{{Start: at(10), End: at(30), Lost: 2}}},
		{"two runs", []Probe{probe(0, false), probe(10, true), probe(20, false), probe(30, true)},
			[]Outage{{Start: at(0), End: at(10), Lost: 1}, {Start: at(20), End: at(30), Lost: 1}}},
		{"open at the end", []Probe{probe(0, true), probe(10, false), probe(20, false)},
			[]Outage{{Start: at(10), Lost: 2}}},
		{"no probes", nil, nil},
	} {
		got := Outages(c.probes)
		if len(got) != len(c.want) {
			t.Errorf("%s: Outages = %+v, want %+v", c.name, got, c.want)
			continue
		}
		for i := range got {
			if got[i] != c.want[i] {
				t.Errorf("%s: outage %d = %+v, want %+v", c.name, i, got[i], c.want[i])
			}
		}
	}
	if w := (Outage{Start: at(10), End: at(30)}).Window(at(100)); w != 20*time.Millisecond {
		t.Errorf("closed outage's window %v, want 20ms", w)
	}
	if w := (Outage{Start: at(10)}).Window(at(100)); w != 90*time.Millisecond {
		t.Errorf("open outage's window %v, want 90ms (to the end)", w)
	}
}

// An outage belongs to the span it began in, ends included; one that
// began in none is unattributed.
func TestLostInAndUnattributed(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	outages := []Outage{
		{Start: at(10), End: at(30), Lost: 2}, // in the first span
		{Start: at(50), End: at(60), Lost: 1}, // at the first span's end
		{Start: at(70), End: at(80), Lost: 1}, // between the spans
		{Start: at(200), Lost: 3},             // in the second, open to the end
	}
	spans := []Span{{From: at(0), To: at(50)}, {From: at(100), To: at(300)}}
	if d, n := LostIn(outages, spans[0], at(400)); d != 30*time.Millisecond || n != 3 {
		t.Errorf("LostIn(first) = %v, %d; want 30ms, 3", d, n)
	}
	if d, n := LostIn(outages, spans[1], at(400)); d != 200*time.Millisecond || n != 3 {
		t.Errorf("LostIn(second) = %v, %d; want 200ms, 3", d, n)
	}
	if got := Unattributed(outages, spans); len(got) != 1 || got[0] != outages[2] {
		t.Errorf("Unattributed = %+v, want only the outage at 70 ms", got)
	}
}
