//go:build integration

package controlplane

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// Stop on an attached control plane signals a pid only while it still runs
// exactly what was recorded: a reused pid is never touched.
func TestAttachedStopSparesOtherProcesses(t *testing.T) {
	sleep := exec.Command("sleep", "300")
	if err := sleep.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = sleep.Wait(); close(exited) }()
	t.Cleanup(func() { _ = sleep.Process.Kill(); <-exited })
	pid := sleep.Process.Pid
	// Until exec completes, /proc shows the test binary's command line.
	if err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		raw, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
		return string(raw) == "sleep\x00300\x00", nil
	}); err != nil {
		t.Fatal("sleep did not start")
	}
	startTime, err := procStartTime(pid)
	if err != nil {
		t.Fatal(err)
	}

	stopWith := func(p *proc) {
		t.Helper()
		dir := t.TempDir()
		data, err := json.Marshal(state{Version: stateVersion, URL: "https://127.0.0.1:1", Processes: []*proc{p}})
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, StateFile), data, 0o600); err != nil {
			t.Fatal(err)
		}
		cp, err := Attach(dir)
		if err != nil {
			t.Fatal(err)
		}
		if err := cp.Stop(); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(filepath.Join(dir, StateFile)); !os.IsNotExist(err) {
			t.Errorf("state file left after Stop: %v", err)
		}
	}
	alive := func() bool {
		select {
		case <-exited:
			return false
		case <-time.After(100 * time.Millisecond):
			return true
		}
	}

	stopWith(&proc{Name: "kube-apiserver", Pid: pid, Binary: "/opt/kube-apiserver", Args: []string{"300"}, StartTime: startTime})
	if !alive() {
		t.Fatal("Stop killed a pid whose command line names another binary")
	}
	stopWith(&proc{Name: "etcd", Pid: pid, Binary: "sleep", Args: []string{"300", "--data-dir=x"}, StartTime: startTime})
	if !alive() {
		t.Fatal("Stop killed a pid whose arguments differ")
	}
	stopWith(&proc{Name: "etcd", Pid: pid, Binary: "sleep", Args: []string{"300"}, StartTime: startTime + 1})
	if !alive() {
		t.Fatal("Stop killed a pid with another start time")
	}
	stopWith(&proc{Name: "etcd", Pid: pid, Binary: "sleep", Args: []string{"300"}, StartTime: startTime})
	select {
	case <-exited:
	case <-time.After(5 * time.Second):
		t.Fatal("Stop did not stop the recorded process")
	}
}
