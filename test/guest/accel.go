package guest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// EnvAccel ("kvm" or "tcg") overrides Accel's choice.
const EnvAccel = "TENURE_GUEST_ACCEL"

// kvmProbeTimeout bounds the probe boot: under KVM the guest reports within
// a second or two; a KVM that opens but cannot run it (a nested one without
// the CPU features QEMU asks for) stalls.
const kvmProbeTimeout = 20 * time.Second

var (
	accelMu    sync.Mutex
	accelCache = map[string]string{}
)

// Accel is the accelerator the guest runs with: $TENURE_GUEST_ACCEL when
// set; else KVM where /dev/kvm opens and boots the image (a probe boot,
// whose outcome is kept beside the image per host kernel release); else
// TCG.
func Accel(ctx context.Context, img Image) (string, error) {
	switch a := os.Getenv(EnvAccel); a {
	case "kvm", "tcg":
		return a, nil
	case "":
	default:
		return "", fmt.Errorf("guest: %s=%q: want kvm or tcg", EnvAccel, a)
	}
	f, err := os.OpenFile("/dev/kvm", os.O_RDWR, 0)
	if err != nil {
		return "tcg", nil
	}
	f.Close()
	var uts unix.Utsname
	if err := unix.Uname(&uts); err != nil {
		return "", err
	}
	mark := filepath.Join(img.Dir, "kvm-"+unix.ByteSliceToString(uts.Release[:]))
	accelMu.Lock()
	defer accelMu.Unlock()
	if a, ok := accelCache[mark]; ok {
		return a, nil
	}
	if b, err := os.ReadFile(mark); err == nil {
		if a := strings.TrimSpace(string(b)); a == "kvm" || a == "tcg" {
			accelCache[mark] = a
			return a, nil
		}
	}
	a := "tcg"
	if err := probeKVM(ctx, img); err == nil {
		a = "kvm"
	} else if ctx.Err() != nil {
		return "", err
	}
	accelCache[mark] = a
	_ = os.WriteFile(mark, []byte(a+"\n"), 0o644)
	return a, nil
}

var reProbe = regexp.MustCompile(`^tenure-guest: probe$`)

// probeKVM boots the image under KVM with tenure.probe, which reports and
// powers off.
func probeKVM(ctx context.Context, img Image) error {
	ctx, cancel := context.WithTimeout(ctx, kvmProbeTimeout)
	defer cancel()
	cmd := exec.Command(QEMU, "-machine", "q35,accel=kvm", "-m", "256", "-smp", "1",
		"-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
		"-chardev", "stdio,id=console,signal=off", "-serial", "chardev:console",
		"-kernel", img.Kernel, "-initrd", img.Initrd, "-append", "console=ttyS0 quiet tenure.probe")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	c := newConsole(stdout)
	_, _, err = c.Wait(ctx, 0, reProbe)
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	<-c.closed
	_ = cmd.Wait()
	return err
}
