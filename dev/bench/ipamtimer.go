package bench

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// ipamTimerType is the IPAM type a pod-start network names: the runtime
// (Multus, then macvlan) execs the timer as the IPAM plugin, and the timer
// execs the real one. Every IPAM is timed through it, so its own exec
// (about an empty Go program's) is the same for all three.
const ipamTimerType = "tenure-bench-ipam-timer"

// ipamTimerSource is the timer: it reads the network configuration, takes
// its keys out of the ipam section (timed_type, the real plugin's type,
// timed_log, where to write, and optionally timed_name, the name its lines
// carry when two networks run one plugin, and timed_bin, the binary to run
// instead of timed_type's on CNI_PATH: an older build's shim, which its
// agent accepts only under the type "tenure"), puts timed_type back as the
// type, runs the real plugin with that configuration and the same
// environment, and appends one JSON line: the name (timed_type without
// timed_name), the command, the
// wall time from fork to exit and the child's CPU (user+system, wait4's
// rusage). stdout, stderr and the exit code are the plugin's. It uses the
// standard library only and is built at run time (buildIPAMTimer), so no
// binary of the tree carries it.
const ipamTimerSource = `package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

func main() { os.Exit(run()) }

func fail(format string, args ...any) int {
	msg := fmt.Sprintf(format, args...)
	json.NewEncoder(os.Stdout).Encode(map[string]any{"cniVersion": "1.0.0", "code": 999, "msg": "ipam timer: " + msg})
	return 1
}

func run() int {
	in, err := io.ReadAll(os.Stdin)
	if err != nil {
		return fail("reading stdin: %v", err)
	}
	var conf map[string]json.RawMessage
	if err := json.Unmarshal(in, &conf); err != nil {
		return fail("config: %v", err)
	}
	var ipam map[string]json.RawMessage
	if err := json.Unmarshal(conf["ipam"], &ipam); err != nil {
		return fail("config ipam: %v", err)
	}
	var real, logPath string
	if err := json.Unmarshal(ipam["timed_type"], &real); err != nil || real == "" || strings.ContainsAny(real, "/") {
		return fail("ipam.timed_type %s: want a plugin name", ipam["timed_type"])
	}
	if err := json.Unmarshal(ipam["timed_log"], &logPath); err != nil || logPath == "" {
		return fail("ipam.timed_log %s: want a file", ipam["timed_log"])
	}
	name := real
	if raw, ok := ipam["timed_name"]; ok {
		if err := json.Unmarshal(raw, &name); err != nil || name == "" {
			return fail("ipam.timed_name %s: want a name", raw)
		}
	}
	bin := ""
	if raw, ok := ipam["timed_bin"]; ok {
		if err := json.Unmarshal(raw, &bin); err != nil || !filepath.IsAbs(bin) {
			return fail("ipam.timed_bin %s: want an absolute path", raw)
		}
	}
	delete(ipam, "timed_type")
	delete(ipam, "timed_log")
	delete(ipam, "timed_name")
	delete(ipam, "timed_bin")
	ipam["type"], _ = json.Marshal(real)
	conf["ipam"], _ = json.Marshal(ipam)
	out, _ := json.Marshal(conf)
	for _, dir := range filepath.SplitList(os.Getenv("CNI_PATH")) {
		if bin != "" {
			break
		}
		if fi, err := os.Stat(filepath.Join(dir, real)); err == nil && !fi.IsDir() {
			bin = filepath.Join(dir, real)
		}
	}
	if bin == "" {
		return fail("no %s on CNI_PATH %s", real, os.Getenv("CNI_PATH"))
	}
	cmd := exec.Command(bin)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = bytes.NewReader(out), os.Stdout, os.Stderr
	begin := time.Now()
	err = cmd.Run()
	wall := time.Since(begin)
	code := 0
	if cmd.ProcessState == nil {
		return fail("running %s: %v", bin, err)
	}
	code = cmd.ProcessState.ExitCode()
	cpu := cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	line, _ := json.Marshal(map[string]any{
		"ipam": name, "command": os.Getenv("CNI_COMMAND"), "container": os.Getenv("CNI_CONTAINERID"),
		"wall_ms": float64(wall) / 1e6, "cpu_ms": float64(cpu) / 1e6, "exit": code,
	})
	if f, err := os.OpenFile(logPath, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644); err == nil {
		f.Write(append(line, '\n'))
		f.Close()
	}
	return code
}
`

// buildIPAMTimer builds the timer as make build builds the shim (static,
// -trimpath, -s -w) into dir.
func buildIPAMTimer(dir string) (string, error) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("the IPAM timer needs a Go toolchain: %w", err)
	}
	src := filepath.Join(dir, "ipamtimer-src")
	if err := os.MkdirAll(src, 0o755); err != nil {
		return "", err
	}
	for name, content := range map[string]string{"go.mod": "module ipamtimer\n\ngo 1.22\n", "main.go": ipamTimerSource} {
		if err := os.WriteFile(filepath.Join(src, name), []byte(content), 0o644); err != nil {
			return "", err
		}
	}
	bin := filepath.Join(dir, ipamTimerType)
	cmd := exec.Command(goBin, "build", "-trimpath", "-ldflags", "-s -w", "-o", bin, ".")
	cmd.Dir = src
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=-mod=mod", "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building the IPAM timer: %v: %s", err, out)
	}
	return bin, nil
}

// ipamTiming is one line of the timer's log.
type ipamTiming struct {
	IPAM      string  `json:"ipam"`
	Command   string  `json:"command"`
	Container string  `json:"container"`
	WallMs    float64 `json:"wall_ms"`
	CPUMs     float64 `json:"cpu_ms"`
	Exit      int     `json:"exit"`
}

// readIPAMTimings reads the timer's log from byte offset off; it returns
// the lines and the offset after the last whole line.
func readIPAMTimings(path string, off int64) ([]ipamTiming, int64, error) {
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil, off, nil
	}
	if err != nil {
		return nil, off, err
	}
	defer f.Close()
	if _, err := f.Seek(off, 0); err != nil {
		return nil, off, err
	}
	var out []ipamTiming
	r := bufio.NewReader(f)
	for {
		line, err := r.ReadBytes('\n')
		if err != nil {
			break // a partial last line is read next time
		}
		off += int64(len(line))
		var t ipamTiming
		if json.Unmarshal(line, &t) == nil {
			out = append(out, t)
		}
	}
	return out, off, nil
}
