package bench

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"
)

// pairEvery: one shim call in so many of the run's calls gets a twin, an
// empty Go program that waits (waiterSource) exec'd in the same goroutine
// at the same moment, whose stdin closes when that shim exits. Both start
// under the same load, live as long, and wait as long; the twins add one
// mostly idle process per pairEvery calls to the load.
const pairEvery = 5

// waiterSource is the twin: a Go program that does nothing but wait,
// blocked in read(2) on its stdin (a unix socket) until the bench shuts
// it, as the shim waits on the agent's socket, and on one P as the shim
// does, so the twin's wait costs it no more than the shim's costs the
// shim.
const waiterSource = `package main

import (
	"runtime"
	"syscall"
)

func main() {
	runtime.GOMAXPROCS(1)
	var b [1]byte
	for {
		n, err := syscall.Read(0, b[:])
		if err != syscall.EINTR && n <= 0 {
			return
		}
	}
}
`

// cpuPair is the CPU of one shim call and of its twin, ms.
type cpuPair struct{ shim, twin float64 }

// pairedRatio is the mean shim CPU of the paired calls over their twins'
// mean, with both means; 0s when no pair has a twin that used CPU.
func pairedRatio(ps []cpuPair) (ratio, shimMs, twinMs float64) {
	if len(ps) == 0 {
		return 0, 0, 0
	}
	for _, p := range ps {
		shimMs += p.shim
		twinMs += p.twin
	}
	shimMs /= float64(len(ps))
	twinMs /= float64(len(ps))
	if twinMs <= 0 {
		return 0, 0, 0
	}
	return shimMs / twinMs, shimMs, twinMs
}

// waiterBin builds the twin once per run; "" when no Go toolchain is
// found (the run then has no paired figure).
func (e *env) waiterBin() string {
	e.waiterOnce.Do(func() {
		bin, err := buildGoProgram("waitgo", waiterSource)
		if err != nil {
			e.logf("no paired empty-Go twin: %v", err)
			return
		}
		e.waiter = bin
	})
	return e.waiter
}

// twin is a started twin; done closes its stdin and returns its CPU in ms
// (-1 when it failed).
type twin struct {
	cmd  *exec.Cmd
	ours *os.File
}

func startTwin(bin string) (*twin, error) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	ours, theirs := os.NewFile(uintptr(fds[0]), "twin"), os.NewFile(uintptr(fds[1]), "twin-stdin")
	defer theirs.Close()
	cmd := exec.Command(bin)
	cmd.Stdin = theirs
	if err := cmd.Start(); err != nil {
		ours.Close()
		return nil, err
	}
	return &twin{cmd: cmd, ours: ours}, nil
}

func (t *twin) done() float64 {
	t.ours.Close()
	if err := t.cmd.Wait(); err != nil || t.cmd.ProcessState == nil {
		return -1
	}
	ps := t.cmd.ProcessState
	return float64(ps.UserTime()+ps.SystemTime()) / float64(time.Millisecond)
}

// buildGoProgram builds a one-file main package as make build builds the
// shim (static, -trimpath, -s -w) and returns the binary's path.
func buildGoProgram(name, source string) (string, error) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		return "", err
	}
	dir, err := os.MkdirTemp("", "tenure-"+name+"-")
	if err != nil {
		return "", err
	}
	for file, content := range map[string]string{"go.mod": "module " + name + "\n", "main.go": source} {
		if err := os.WriteFile(filepath.Join(dir, file), []byte(content), 0o644); err != nil {
			os.RemoveAll(dir)
			return "", err
		}
	}
	bin := filepath.Join(dir, name)
	cmd := exec.Command(goBin, "build", "-trimpath", "-ldflags", "-s -w", "-o", bin, ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=-mod=mod", "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return "", fmt.Errorf("building %s: %v: %s", name, err, out)
	}
	return bin, nil
}
