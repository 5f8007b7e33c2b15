package bench

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestIPAMTimerRunsTimedBinUnderTimedTypeAndLogsTimedName: with timed_bin
// the timer runs that binary, not timed_type's on CNI_PATH, hands it the
// configuration with timed_type as the type and none of its own keys, and
// logs the line under timed_name.
func TestIPAMTimerRunsTimedBinUnderTimedTypeAndLogsTimedName(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no Go toolchain to build the timer")
	}
	dir := t.TempDir()
	timer, err := buildIPAMTimer(dir)
	if err != nil {
		t.Fatal(err)
	}
	plugin := func(name, out string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("#!/bin/sh\ncat > "+out+"\necho '{}'\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cniPath := filepath.Join(dir, "cni")
	if err := os.Mkdir(cniPath, 0o755); err != nil {
		t.Fatal(err)
	}
	onPath := filepath.Join(dir, "on-path.json")
	if err := os.Rename(plugin("tenure", onPath), filepath.Join(cniPath, "tenure")); err != nil {
		t.Fatal(err)
	}
	given := filepath.Join(dir, "given.json")
	old := plugin("tenure-old", given)
	logPath := filepath.Join(dir, "ipam.log")
	conf := `{"cniVersion":"1.0.0","name":"n","ipam":{"type":"timer","timed_type":"tenure","timed_name":"tenure-before","timed_bin":"` + old + `","timed_log":"` + logPath + `","range":"10.0.0.0/24"}}`
	cmd := exec.Command(timer)
	cmd.Stdin = strings.NewReader(conf)
	cmd.Env = append(os.Environ(), "CNI_PATH="+cniPath, "CNI_COMMAND=ADD", "CNI_CONTAINERID=c1")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("timer: %v: %s", err, out)
	}
	if _, err := os.Stat(onPath); err == nil {
		t.Error("the plugin on CNI_PATH ran, not timed_bin")
	}
	b, err := os.ReadFile(given)
	if err != nil {
		t.Fatalf("timed_bin did not run: %v", err)
	}
	var got struct{ IPAM map[string]any }
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if got.IPAM["type"] != "tenure" || got.IPAM["range"] != "10.0.0.0/24" || len(got.IPAM) != 2 {
		t.Errorf("the plugin's ipam: %v, want type tenure and range only", got.IPAM)
	}
	lines, _, err := readIPAMTimings(logPath, 0)
	if err != nil || len(lines) != 1 || lines[0].IPAM != "tenure-before" || lines[0].Command != "ADD" || lines[0].Container != "c1" || lines[0].Exit != 0 {
		t.Errorf("the log: %+v, %v; want one ADD of c1 by tenure-before", lines, err)
	}
}
