package controlplane

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/util/wait"
)

const tailBytes = 6 << 10

// proc is one process of the control plane. The exported fields are what
// the state file records; the rest exist only in the process that started
// it.
type proc struct {
	Name   string   `json:"name"`
	Pid    int      `json:"pid"`
	Binary string   `json:"binary"` // absolute, symlinks resolved: argv[0]
	Args   []string `json:"args"`
	// StartTime is field 22 of /proc/PID/stat (clock ticks since boot): a
	// pid reused by another process has another start time.
	StartTime uint64 `json:"startTime"`
	LogPath   string `json:"logPath,omitempty"`

	cmd     *exec.Cmd
	done    chan struct{} // closed once cmd.Wait returned
	waitErr error
	tail    *tailBuffer
}

func (p *proc) start(dir string, opts Options) error {
	cmd := exec.Command(p.Binary, p.Args...)
	cmd.Dir = dir
	if opts.Log != nil && !opts.Detach {
		p.tail = &tailBuffer{max: tailBytes}
		w := io.MultiWriter(&prefixWriter{w: opts.Log, prefix: []byte("[" + p.Name + "] ")}, p.tail)
		cmd.Stdout, cmd.Stderr = w, w
	} else {
		p.LogPath = filepath.Join(dir, p.Name+".log")
		f, err := os.OpenFile(p.LogPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
		if err != nil {
			return err
		}
		defer f.Close() // the child has its own descriptor
		cmd.Stdout, cmd.Stderr = f, f
	}
	var err error
	if opts.Detach {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		err = cmd.Start()
	} else {
		// Die with us, even on a panic or a test timeout.
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		err = startOnLockedThread(cmd)
	}
	if err != nil {
		return fmt.Errorf("controlplane: starting %s: %w", p.Name, err)
	}
	p.cmd = cmd
	p.Pid = cmd.Process.Pid
	p.StartTime, _ = procStartTime(p.Pid)
	p.done = make(chan struct{})
	go func() {
		p.waitErr = cmd.Wait()
		close(p.done)
	}()
	return nil
}

// Pdeathsig fires when the *thread* that forked the child exits, and the Go
// runtime does end threads (a goroutine that exits while locked to its
// thread, as netns code does on purpose). So children are forked from one
// goroutine that stays locked to its thread for the life of the process.
var (
	spawnOnce sync.Once
	spawnReqs chan spawnReq
)

type spawnReq struct {
	cmd *exec.Cmd
	res chan error
}

func startOnLockedThread(cmd *exec.Cmd) error {
	spawnOnce.Do(func() {
		spawnReqs = make(chan spawnReq)
		go func() {
			runtime.LockOSThread() // never unlocked: this thread lives as long as the process
			for r := range spawnReqs {
				r.res <- r.cmd.Start()
			}
		}()
	})
	res := make(chan error, 1)
	spawnReqs <- spawnReq{cmd: cmd, res: res}
	return <-res
}

// exited is closed when a child of this process has exited; nil (never
// ready) for an attached process.
func (p *proc) exited() <-chan struct{} {
	return p.done
}

func (p *proc) exitErr() error {
	if p.waitErr == nil {
		return errors.New("exit status 0")
	}
	return p.waitErr
}

// alive reports whether the process still runs.
func (p *proc) alive() bool {
	if p.done != nil {
		select {
		case <-p.done:
			return false
		default:
			return true
		}
	}
	return p.isOurs()
}

// isOurs reports whether /proc/PID is, right now, a live (not zombie)
// process with the recorded start time and exactly the recorded command
// line.
func (p *proc) isOurs() bool {
	st, start, err := procStat(p.Pid)
	if err != nil || st == 'Z' || st == 'X' {
		return false
	}
	if p.StartTime != 0 && start != p.StartTime {
		return false
	}
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(p.Pid) + "/cmdline")
	if err != nil {
		return false
	}
	argv := strings.Split(strings.TrimSuffix(string(raw), "\x00"), "\x00")
	return slices.Equal(argv, append([]string{p.Binary}, p.Args...))
}

// stop sends SIGTERM, then SIGKILL after timeout, and waits for the exit.
func (p *proc) stop(timeout time.Duration) error {
	if p.cmd != nil {
		return p.stopChild(timeout)
	}
	return p.stopByPid(timeout)
}

func (p *proc) stopChild(timeout time.Duration) error {
	select {
	case <-p.done:
		return nil
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return nil
	case <-time.After(timeout):
	}
	_ = p.cmd.Process.Kill()
	select {
	case <-p.done:
		return nil
	case <-time.After(killTimeout):
		return fmt.Errorf("controlplane: %s (pid %d) did not exit after SIGKILL", p.Name, p.Pid)
	}
}

// stopByPid stops a process that is not our child. A pidfd is opened first
// and the identity checked after, so the signal can only reach the process
// that was checked: if the pid was reused in between, the check fails.
func (p *proc) stopByPid(timeout time.Duration) error {
	fd, err := unix.PidfdOpen(p.Pid, 0)
	if errors.Is(err, unix.ESRCH) {
		return nil
	}
	if err != nil {
		return p.stopByPidNoFd(timeout) // kernel without pidfd_open
	}
	defer unix.Close(fd)
	if !p.isOurs() {
		return nil // gone, or the pid now belongs to someone else
	}
	if err := unix.PidfdSendSignal(fd, unix.SIGTERM, nil, 0); err != nil {
		if errors.Is(err, unix.ESRCH) {
			return nil
		}
		return fmt.Errorf("controlplane: signalling %s (pid %d): %w", p.Name, p.Pid, err)
	}
	if pidfdExited(fd, timeout) {
		return nil
	}
	if err := unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0); err != nil && !errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("controlplane: killing %s (pid %d): %w", p.Name, p.Pid, err)
	}
	if pidfdExited(fd, killTimeout) {
		return nil
	}
	return fmt.Errorf("controlplane: %s (pid %d) did not exit after SIGKILL", p.Name, p.Pid)
}

// pidfdExited waits until the process behind fd has exited (a pidfd becomes
// readable then, reaped or not).
func pidfdExited(fd int, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for {
		left := time.Until(deadline)
		if left < 0 {
			left = 0
		}
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, int(left.Milliseconds()))
		if err == nil && n > 0 {
			return true
		}
		if err != nil && !errors.Is(err, unix.EINTR) {
			return false
		}
		if left == 0 {
			return false
		}
	}
}

func (p *proc) stopByPidNoFd(timeout time.Duration) error {
	signal := func(sig syscall.Signal) bool {
		return p.isOurs() && syscall.Kill(p.Pid, sig) == nil
	}
	gone := func(d time.Duration) bool {
		err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, d, true, func(context.Context) (bool, error) {
			return !p.isOurs(), nil
		})
		return err == nil || !p.isOurs()
	}
	if !signal(syscall.SIGTERM) || gone(timeout) {
		return nil
	}
	if !signal(syscall.SIGKILL) || gone(killTimeout) {
		return nil
	}
	return fmt.Errorf("controlplane: %s (pid %d) did not exit after SIGKILL", p.Name, p.Pid)
}

// logTail returns the end of the process's output, for error messages.
func (p *proc) logTail() string {
	var b []byte
	where := p.Name + " output"
	if p.tail != nil {
		b = p.tail.Bytes()
	} else if p.LogPath != "" {
		where = p.LogPath
		f, err := os.Open(p.LogPath)
		if err != nil {
			return fmt.Sprintf("(no log: %v)", err)
		}
		defer f.Close()
		if fi, err := f.Stat(); err == nil && fi.Size() > tailBytes {
			_, _ = f.Seek(fi.Size()-tailBytes, io.SeekStart)
		}
		b, _ = io.ReadAll(f)
	}
	if i := bytes.IndexByte(b, '\n'); len(b) >= tailBytes && i >= 0 {
		b = b[i+1:] // start at a line boundary
	}
	return fmt.Sprintf("--- tail of %s ---\n%s", where, strings.TrimRight(string(b), "\n"))
}

func procStartTime(pid int) (uint64, error) {
	_, start, err := procStat(pid)
	return start, err
}

// procStat returns the state letter and start time of /proc/PID/stat.
func procStat(pid int) (byte, uint64, error) {
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, err
	}
	// The command name (field 2) is in parentheses and may hold anything.
	i := bytes.LastIndexByte(raw, ')')
	if i < 0 {
		return 0, 0, fmt.Errorf("malformed /proc/%d/stat", pid)
	}
	f := strings.Fields(string(raw[i+1:]))
	// f[0] is field 3 (state); field 22 (starttime) is f[19].
	if len(f) < 20 || len(f[0]) != 1 {
		return 0, 0, fmt.Errorf("malformed /proc/%d/stat", pid)
	}
	start, err := strconv.ParseUint(f[19], 10, 64)
	if err != nil {
		return 0, 0, fmt.Errorf("malformed /proc/%d/stat: %w", pid, err)
	}
	return f[0][0], start, nil
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (t *tailBuffer) Write(b []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, b...)
	if len(t.buf) > t.max {
		t.buf = append(t.buf[:0], t.buf[len(t.buf)-t.max:]...)
	}
	return len(b), nil
}

func (t *tailBuffer) Bytes() []byte {
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Clone(t.buf)
}

// prefixWriter writes whole lines to w, each starting with prefix; writers
// sharing one w do not interleave within a line.
type prefixWriter struct {
	w       io.Writer
	prefix  []byte
	partial []byte
}

var logMu sync.Mutex

func (pw *prefixWriter) Write(b []byte) (int, error) {
	n := len(b)
	pw.partial = append(pw.partial, b...)
	var out []byte
	for {
		i := bytes.IndexByte(pw.partial, '\n')
		if i < 0 {
			break
		}
		out = append(out, pw.prefix...)
		out = append(out, pw.partial[:i+1]...)
		pw.partial = pw.partial[i+1:]
	}
	if len(pw.partial) > 64<<10 { // a very long line: flush it anyway
		out = append(append(append(out, pw.prefix...), pw.partial...), '\n')
		pw.partial = nil
	}
	pw.partial = slices.Clip(pw.partial)
	if len(out) == 0 {
		return n, nil
	}
	logMu.Lock()
	defer logMu.Unlock()
	if _, err := pw.w.Write(out); err != nil {
		return 0, err
	}
	return n, nil
}
