// Package guest runs a real VM for the tests: Debian's qemu-system-x86_64
// booting a small Linux guest that hack/build-guest.sh assembles from Debian
// packages (a kernel, busybox, ISC dhclient) into the tool cache.
//
// The guest brings up eth0 (a virtio-net NIC with the MAC it is given),
// takes an IPv4 address from its kernel command line, and runs dhclient -6
// for an address (IA_NA) and a prefix (IA_PD) with a DUID-LL of its MAC. It
// puts the address on eth0 and the prefix's first address (PREFIX::1/64) on
// pd0, a dummy interface of its own, and its kernel answers pings on all
// three. dhclient's messages (XMT:/RCV: lines) and the guest's own reports
// ("tenure-guest: ...") are written to the serial console, which the VM
// records line by line with the time each line arrived (Console).
//
// QEMU is driven over QMP (digitalocean/go-qemu): its status, live
// migration (Migrate, or MigrateConn into a TCP connection, on a target
// started with Config.Incoming) and its migration statistics.
package guest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/digitalocean/go-qemu/qmp"
)

// QEMU is the emulator's binary (Debian's qemu-system-x86).
const QEMU = "qemu-system-x86_64"

// Image is the guest's kernel and initramfs.
type Image struct {
	Dir, Kernel, Initrd string
}

// Build assembles the guest once into the tool cache (hack/build-guest.sh;
// make guest) and returns it.
func Build(ctx context.Context) (Image, error) {
	script := filepath.Join(repoRoot(), "hack", "build-guest.sh")
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "bash", script)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return Image{}, fmt.Errorf("guest: hack/build-guest.sh: %w: %s", err, stderr.Bytes())
	}
	dir := strings.TrimSpace(string(out))
	img := Image{Dir: dir, Kernel: filepath.Join(dir, "vmlinuz"), Initrd: filepath.Join(dir, "initrd.img")}
	for _, f := range []string{img.Kernel, img.Initrd} {
		if _, err := os.Stat(f); err != nil {
			return Image{}, fmt.Errorf("guest: hack/build-guest.sh left no %w", err)
		}
	}
	return img, nil
}

func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// Config is one QEMU process of a VM.
type Config struct {
	Image Image
	// Dir holds the QMP socket and QEMU's log.
	Dir string
	// Netns is the path of the network namespace QEMU runs in; "" runs it
	// in the caller's.
	Netns string
	// Tap is the tap interface (in Netns) the NIC is plugged into: the
	// caller creates it, as KubeVirt's virt-handler does.
	Tap string
	// MAC is the NIC's, and so the guest's DUID-LL.
	MAC net.HardwareAddr
	// IPv4 is eth0's IPv4 address, GatewayV4 its default route; optional.
	IPv4      netip.Prefix
	GatewayV4 netip.Addr
	// GatewayV6 is the guest's IPv6 default route (a link-local address of
	// the segment); optional.
	GatewayV6 netip.Addr
	// Incoming, when set, starts QEMU waiting for a live migration on that
	// URI (QEMU's -incoming, e.g. "tcp:[::]:4444") instead of booting.
	Incoming string
	// Accel is "kvm" or "tcg"; "" picks with Accel.
	Accel string
	// MemoryMiB is the guest's memory, 256 when 0.
	MemoryMiB int
}

// VM is one running QEMU process.
type VM struct {
	cfg     Config
	cmd     *exec.Cmd
	mon     *qmp.SocketMonitor
	console *Console
	done    chan struct{}
	waitErr error
	stop    sync.Once
}

// args is QEMU's command line for cfg. The device model is what a target
// must repeat for a migration to load: same machine, memory and NIC.
func (cfg Config) args(qmpSocket string) ([]string, error) {
	if len(cfg.MAC) != 6 {
		return nil, fmt.Errorf("guest: Config.MAC %q is no Ethernet MAC", cfg.MAC)
	}
	if cfg.Tap == "" {
		return nil, errors.New("guest: Config.Tap is empty")
	}
	if cfg.Accel != "kvm" && cfg.Accel != "tcg" {
		return nil, fmt.Errorf("guest: Config.Accel %q is neither kvm nor tcg", cfg.Accel)
	}
	mem := cfg.MemoryMiB
	if mem == 0 {
		mem = 256
	}
	cmdline := []string{"console=ttyS0", "quiet", "panic=-1"}
	if cfg.IPv4.IsValid() {
		cmdline = append(cmdline, "tenure.ip4="+cfg.IPv4.String())
	}
	if cfg.GatewayV4.IsValid() {
		cmdline = append(cmdline, "tenure.gw4="+cfg.GatewayV4.String())
	}
	if cfg.GatewayV6.IsValid() {
		cmdline = append(cmdline, "tenure.gw6="+cfg.GatewayV6.String())
	}
	args := []string{
		"-machine", "q35,accel=" + cfg.Accel, "-m", fmt.Sprint(mem), "-smp", "1",
		"-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
		"-chardev", "stdio,id=console,signal=off", "-serial", "chardev:console",
		"-qmp", "unix:" + qmpSocket + ",server=on,wait=off",
		"-kernel", cfg.Image.Kernel, "-initrd", cfg.Image.Initrd, "-append", strings.Join(cmdline, " "),
		"-netdev", "tap,id=net0,ifname=" + cfg.Tap + ",script=no,downscript=no",
		// No option ROM: the guest boots its kernel directly, and source and
		// target then need no iPXE image to agree on.
		"-device", "virtio-net-pci,netdev=net0,mac=" + cfg.MAC.String() + ",romfile=",
	}
	if cfg.Incoming != "" {
		args = append(args, "-incoming", cfg.Incoming)
	}
	return args, nil
}

// Start starts QEMU and connects to its QMP socket. The VM ends with ctx
// (killed), or with Stop.
func Start(ctx context.Context, cfg Config) (*VM, error) {
	if cfg.Accel == "" {
		a, err := Accel(ctx, cfg.Image)
		if err != nil {
			return nil, err
		}
		cfg.Accel = a
	}
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, err
	}
	qmpSocket := filepath.Join(cfg.Dir, "qmp.sock")
	_ = os.Remove(qmpSocket)
	args, err := cfg.args(qmpSocket)
	if err != nil {
		return nil, err
	}
	logf, err := os.Create(filepath.Join(cfg.Dir, "qemu.log"))
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	cmd := exec.CommandContext(ctx, QEMU, args...)
	cmd.Stderr = logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := startIn(cfg.Netns, cmd); err != nil {
		return nil, fmt.Errorf("guest: starting %s: %w", QEMU, err)
	}
	v := &VM{cfg: cfg, cmd: cmd, console: newConsole(stdout), done: make(chan struct{})}
	go func() {
		<-v.console.closed
		v.waitErr = cmd.Wait()
		close(v.done)
	}()
	if err := v.connect(ctx, qmpSocket); err != nil {
		v.Kill()
		log, _ := os.ReadFile(filepath.Join(cfg.Dir, "qemu.log"))
		return nil, fmt.Errorf("guest: QMP: %w; QEMU's log: %s", err, log)
	}
	return v, nil
}

// startIn starts cmd in the network namespace at path ("" for the
// caller's): the child inherits the namespace of the thread that forks it.
func startIn(path string, cmd *exec.Cmd) error {
	if path == "" {
		return cmd.Start()
	}
	return ns.WithNetNSPath(path, func(ns.NetNS) error { return cmd.Start() })
}

// connect waits for QEMU's QMP socket and completes the handshake.
func (v *VM) connect(ctx context.Context, socket string) error {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		mon, err := qmp.NewSocketMonitor("unix", socket, 5*time.Second)
		if err == nil {
			if err := mon.Connect(); err != nil {
				return err
			}
			v.mon = mon
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %v)", ctx.Err(), err)
		case <-v.done:
			return fmt.Errorf("QEMU exited: %v", v.waitErr)
		case <-tick.C:
		}
	}
}

// Console is the guest's serial console as recorded.
func (v *VM) Console() *Console { return v.console }

// Accel is the accelerator this VM runs with.
func (v *VM) Accel() string { return v.cfg.Accel }

// Done is closed when QEMU has exited.
func (v *VM) Done() <-chan struct{} { return v.done }

// Pid is QEMU's process ID.
func (v *VM) Pid() int { return v.cmd.Process.Pid }

// run sends one QMP command and decodes its "return" into out (when not
// nil).
func (v *VM) run(command string, arguments any, out any) error {
	return v.runWithFile(command, arguments, nil, out)
}

// runWithFile is run passing file (when not nil) beside the command, as
// QMP getfd takes one.
func (v *VM) runWithFile(command string, arguments any, file *os.File, out any) error {
	c := map[string]any{"execute": command}
	if arguments != nil {
		c["arguments"] = arguments
	}
	b, err := json.Marshal(c)
	if err != nil {
		return err
	}
	type result struct {
		raw []byte
		err error
	}
	rc := make(chan result, 1)
	go func() {
		raw, err := v.mon.RunWithFile(b, file)
		rc <- result{raw, err}
	}()
	var r result
	select {
	case r = <-rc:
	case <-v.done:
		return fmt.Errorf("guest: QMP %s: QEMU exited: %v", command, v.waitErr)
	}
	if r.err != nil {
		return fmt.Errorf("guest: QMP %s: %w", command, r.err)
	}
	if out == nil {
		return nil
	}
	var resp struct {
		Return json.RawMessage `json:"return"`
	}
	if err := json.Unmarshal(r.raw, &resp); err != nil {
		return fmt.Errorf("guest: QMP %s: %w", command, err)
	}
	return json.Unmarshal(resp.Return, out)
}

// Status is QMP query-status's status: "running", "inmigrate",
// "postmigrate", "paused", ...
func (v *VM) Status() (string, error) {
	var s struct {
		Status string `json:"status"`
	}
	err := v.run("query-status", nil, &s)
	return s.Status, err
}

// Migrate starts a live migration to uri (a target's Config.Incoming, with
// the target's address).
func (v *VM) Migrate(uri string) error {
	return v.run("migrate", map[string]any{"uri": uri}, nil)
}

// Migration is what QMP query-migrate reports.
type Migration struct {
	Status string `json:"status"` // "active", "completed", "failed", ...
	// Downtime is QEMU's measure of the guest's pause at the switchover
	// (ms), TotalTime the migration's (ms); both once completed.
	Downtime  int64  `json:"downtime"`
	TotalTime int64  `json:"total-time"`
	Error     string `json:"error-desc"`
}

// MigrationInfo is query-migrate.
func (v *VM) MigrationInfo() (Migration, error) {
	var m Migration
	err := v.run("query-migrate", nil, &m)
	return m, err
}

// WaitMigration polls query-migrate until the migration completed, with
// its figures, or failed (an error naming QEMU's reason).
func (v *VM) WaitMigration(ctx context.Context) (Migration, error) {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		m, err := v.MigrationInfo()
		if err != nil {
			return m, err
		}
		switch m.Status {
		case "completed":
			// QEMU's migration thread sets the status before it computes
			// the total time and the downtime: until then query-migrate
			// reports both as 0.
			if m.TotalTime > 0 {
				return m, nil
			}
		case "failed", "cancelled":
			return m, fmt.Errorf("guest: migration %s: %s", m.Status, m.Error)
		}
		select {
		case <-ctx.Done():
			return m, fmt.Errorf("guest: migration still %s: %w", m.Status, ctx.Err())
		case <-tick.C:
		}
	}
}

// WaitStatus polls query-status until it reports want.
func (v *VM) WaitStatus(ctx context.Context, want string) error {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		s, err := v.Status()
		if err != nil {
			return err
		}
		if s == want {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("guest: status %s, want %s: %w", s, want, ctx.Err())
		case <-tick.C:
		}
	}
}

// Stop ends QEMU (QMP quit, then SIGKILL after 5 s) and waits for it.
func (v *VM) Stop() {
	v.stop.Do(func() {
		if v.mon != nil {
			_ = v.run("quit", nil, nil)
		}
		select {
		case <-v.done:
		case <-time.After(5 * time.Second):
			_ = syscall.Kill(-v.cmd.Process.Pid, syscall.SIGKILL)
			<-v.done
		}
		if v.mon != nil {
			_ = v.mon.Disconnect()
		}
	})
}

// Kill ends QEMU at once (SIGKILL), as a crash would, and waits for it.
func (v *VM) Kill() {
	v.stop.Do(func() {
		_ = syscall.Kill(-v.cmd.Process.Pid, syscall.SIGKILL)
		<-v.done
		if v.mon != nil {
			_ = v.mon.Disconnect()
		}
	})
}
