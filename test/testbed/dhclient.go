package testbed

import (
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Dhclient is ISC dhclient running in a network namespace on its eth0,
// asking for an address and a prefix (-N -P) with a DUID-LL (-D LL), as a
// guest does. Its client script records every call (ScriptCalls) and
// installs the address on eth0, as a guest's would. It renews at the T1
// the server gives until Stop.
type Dhclient struct {
	Netns, Dir, Leases string
	cmd                *exec.Cmd
	done               chan error
	stopOnce           sync.Once
}

// DhclientLease is what the lease file holds.
type DhclientLease struct {
	Addr     netip.Addr
	Prefix   netip.Prefix
	DUID     string // default-duid
	ServerID string
}

var (
	reIAAddr   = regexp.MustCompile(`iaaddr ([0-9a-fA-F:]+) \{`)
	reIAPrefix = regexp.MustCompile(`iaprefix ([0-9a-fA-F:]+/[0-9]+) \{`)
	reDUID     = regexp.MustCompile(`default-duid "([^"]*)";`)
	reServerID = regexp.MustCompile(`option dhcp6\.server-id ([^;]+);`)
)

// NeedDhclient fails t when ISC dhclient is not installed: the tests that
// need it do not skip, as make test installs it.
func NeedDhclient(t SkipOrFail) {
	t.Helper()
	if _, err := exec.LookPath("dhclient"); err != nil {
		t.Fatal("no DHCPv6 client: install Debian's isc-dhcp-client (dhclient); make test does (hack/test-deps.sh)")
	}
}

// StartDhclient starts dhclient in the named network namespace, with its
// files in dir.
func StartDhclient(netns, dir string) (*Dhclient, error) {
	ipBin, err := exec.LookPath("ip")
	if err != nil {
		return nil, err
	}
	script := filepath.Join(dir, "script")
	if err := os.WriteFile(script, []byte(`#!/bin/sh
echo "reason=$reason address=$new_ip6_address/$new_ip6_prefixlen prefix=$new_ip6_prefix" >> "`+dir+`/script.log"
case "$reason" in
BOUND6|RENEW6|REBIND6|REBOOT6)
	if [ -n "$new_ip6_address" ]; then
		`+ipBin+` -6 addr replace "$new_ip6_address/${new_ip6_prefixlen:-128}" dev "$interface" nodad
	fi ;;
esac
exit 0
`), 0o755); err != nil {
		return nil, err
	}
	conf := filepath.Join(dir, "dhclient.conf")
	if err := os.WriteFile(conf, nil, 0o644); err != nil {
		return nil, err
	}
	leases := filepath.Join(dir, "dhclient6.leases")
	logf, err := os.Create(filepath.Join(dir, "dhclient.log"))
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	cmd := exec.Command("ip", "netns", "exec", netns, "dhclient", "-6", "-N", "-P", "-D", "LL", "-d", "-v",
		"-cf", conf, "-lf", leases, "-pf", filepath.Join(dir, "dhclient.pid"), "-sf", script, "eth0")
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	d := &Dhclient{Netns: netns, Dir: dir, Leases: leases, cmd: cmd, done: make(chan error, 1)}
	go func() { d.done <- cmd.Wait() }()
	return d, nil
}

// Stop ends the client (SIGTERM, then SIGKILL after 5 s); it may be
// called more than once.
func (d *Dhclient) Stop() {
	d.stopOnce.Do(func() {
		select {
		case err := <-d.done:
			d.done <- err
			return
		default:
		}
		_ = d.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-d.done:
			d.done <- err
		case <-time.After(5 * time.Second):
			_ = d.cmd.Process.Kill()
			d.done <- <-d.done
		}
	})
}

// Exited reports whether the client has exited, and how.
func (d *Dhclient) Exited() (bool, error) {
	select {
	case err := <-d.done:
		d.done <- err
		return true, err
	default:
		return false, nil
	}
}

// Dump is the client's log, its script's calls and its lease file.
func (d *Dhclient) Dump() string {
	l, _ := os.ReadFile(filepath.Join(d.Dir, "dhclient.log"))
	s, _ := os.ReadFile(filepath.Join(d.Dir, "script.log"))
	f, _ := os.ReadFile(d.Leases)
	return fmt.Sprintf("dhclient log:\n%s\nscript log:\n%s\nlease file:\n%s", l, s, f)
}

// ScriptCalls returns the lines the client script logged, one per call.
func (d *Dhclient) ScriptCalls() []string {
	b, _ := os.ReadFile(filepath.Join(d.Dir, "script.log"))
	return strings.Split(strings.TrimSpace(string(b)), "\n")
}

// Lease reads the lease file; ok once it holds an address and a prefix.
func (d *Dhclient) Lease() (lease DhclientLease, ok bool) {
	b, _ := os.ReadFile(d.Leases)
	a, p := reIAAddr.FindSubmatch(b), reIAPrefix.FindSubmatch(b)
	if a == nil || p == nil {
		return lease, false
	}
	lease.Addr, _ = netip.ParseAddr(string(a[1]))
	lease.Prefix, _ = netip.ParsePrefix(string(p[1]))
	if m := reDUID.FindSubmatch(b); m != nil {
		lease.DUID = string(m[1])
	}
	if m := reServerID.FindSubmatch(b); m != nil {
		lease.ServerID = string(m[1])
	}
	return lease, true
}

// Renewals counts the answered Renews (RENEW6) the script was called for
// with addr and with prefix: dhclient reports the address and the prefix
// in calls of their own.
func (d *Dhclient) Renewals(addr netip.Addr, prefix netip.Prefix) (a, p int) {
	for _, l := range d.ScriptCalls() {
		if !strings.HasPrefix(l, "reason=RENEW6 ") {
			continue
		}
		if strings.Contains(l, " address="+addr.String()+"/") {
			a++
		}
		if strings.HasSuffix(l, " prefix="+prefix.String()) {
			p++
		}
	}
	return a, p
}
