package bench

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// clockTick is USER_HZ, the unit of /proc/PID/stat and /proc/stat times;
// 100 on every Linux architecture Go supports.
const clockTick = 100.0

// cpuSample is the CPU used so far (ms) by each group of processes, and
// by the whole machine.
type cpuSample struct {
	groups map[string]float64
	// busy, total and steal are the machine's (all CPUs) busy, total
	// and stolen time.
	busy, total, steal float64
}

// procCPU returns utime+stime of a process (all its threads), in ms.
func procCPU(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	return parseProcStatCPU(string(b))
}

// parseProcStatCPU reads fields 14 and 15 (utime, stime) of a
// /proc/PID/stat line; the command name in parentheses may hold spaces.
func parseProcStatCPU(line string) (float64, error) {
	i := strings.LastIndexByte(line, ')')
	if i < 0 {
		return 0, fmt.Errorf("no command name in %q", line)
	}
	f := strings.Fields(line[i+1:])
	// f[0] is field 3 (state); utime is field 14, stime 15.
	if len(f) < 13 {
		return 0, fmt.Errorf("short stat line %q", line)
	}
	ut, err1 := strconv.ParseFloat(f[11], 64)
	st, err2 := strconv.ParseFloat(f[12], 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("bad utime/stime in %q", line)
	}
	return (ut + st) / clockTick * 1000, nil
}

// parseMachineCPU reads the aggregate "cpu" line of /proc/stat and returns
// busy, total and steal time in ms. Busy excludes idle, iowait and steal
// (the time the hypervisor ran something else while a vCPU had work: no
// process's CPU, though the machine's wall clock runs through it).
func parseMachineCPU(stat string) (busy, total, steal float64, err error) {
	for _, line := range strings.Split(stat, "\n") {
		f := strings.Fields(line)
		if len(f) < 8 || f[0] != "cpu" {
			continue
		}
		var v [10]float64
		for i := 1; i < len(f) && i <= 10; i++ {
			v[i-1], _ = strconv.ParseFloat(f[i], 64)
		}
		// user nice system idle iowait irq softirq steal guest guest_nice;
		// guest time is already counted in user.
		idle := v[3] + v[4]
		b := v[0] + v[1] + v[2] + v[5] + v[6]
		ms := func(ticks float64) float64 { return ticks / clockTick * 1000 }
		return ms(b), ms(b + idle + v[7]), ms(v[7]), nil
	}
	return 0, 0, 0, fmt.Errorf("no cpu line in /proc/stat")
}

// readMachineCPU reads the machine's busy, total and steal time (ms) from
// /proc/stat (parseMachineCPU); zeros when it cannot be read.
func readMachineCPU() (busy, total, steal float64) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0, 0
	}
	busy, total, steal, _ = parseMachineCPU(string(b))
	return busy, total, steal
}

// sampleCPU reads the CPU of the processes this run started.
func (e *env) sampleCPU() cpuSample {
	s := cpuSample{groups: map[string]float64{}}
	add := func(group string, pid int) {
		if pid <= 0 {
			return
		}
		if ms, err := procCPU(pid); err == nil {
			s.groups[group] += ms
		}
	}
	for _, a := range e.agents {
		add("agent", a.Cmd.Process.Pid)
	}
	if e.controller != nil {
		add("controller", e.controller.Cmd.Process.Pid)
	}
	if pids := e.cp.Pids(); len(pids) == 2 {
		add("etcd", pids[0])
		add("kube-apiserver", pids[1])
	}
	add("bench", os.Getpid())
	s.busy, s.total, s.steal = readMachineCPU()
	return s
}

// stolenShare is the share of the machine's time the hypervisor took:
// steal over total, both the difference of two readings of /proc/stat.
func stolenShare(steal, total float64) float64 {
	if total <= 0 {
		return 0
	}
	return steal / total
}

// stolenPct is the share (%) of the machine's time between two samples
// that the hypervisor took.
func stolenPct(before, after cpuSample) float64 {
	return round3(100 * stolenShare(after.steal-before.steal, after.total-before.total))
}

// cpuPerOp turns two samples and the shims' own CPU into ms per op by
// group; "other" is the machine's busy time that none of ours explains
// (other users of the machine). busyPct is the machine's busy share.
func cpuPerOp(before, after cpuSample, shimMs float64, ops int) (perOp map[string]float64, busyPct float64) {
	if ops <= 0 {
		return nil, 0
	}
	perOp = map[string]float64{}
	ours := shimMs
	perOp["shim"] = round3(shimMs / float64(ops))
	for g, v := range after.groups {
		d := v - before.groups[g]
		if d < 0 {
			d = 0 // a process restarted in between
		}
		ours += d
		perOp[g] = round3(d / float64(ops))
	}
	busy := after.busy - before.busy
	if total := after.total - before.total; total > 0 {
		busyPct = round3(100 * busy / total)
	}
	if other := busy - ours; other > 0 {
		perOp["other"] = round3(other / float64(ops))
	} else {
		perOp["other"] = 0
	}
	return perOp, busyPct
}

// procNameGroups are the groups a process of the real node is counted
// in, by the start of its name in /proc/PID/stat (the kernel cuts a name
// at 15 bytes, and the cached binaries' names carry their version:
// "kube-apiserver-", "etcd-v3.7.3"); the first that matches counts, and a
// name none starts is "other".
var procNameGroups = []struct{ prefix, group string }{
	{"kube-apiserver", "kube-apiserver"}, {"etcd", "etcd"},
	{"kube-controller", "kube-controller-manager"}, {"kube-scheduler", "kube-scheduler"},
	{"kubelet", "kubelet"}, {"containerd-shim", "containerd-shim"}, {"containerd", "containerd"},
	{"tenure-agent", "tenure-agent"}, {"tenure-controll", "tenure-controller"},
	{"multus", "multus"}, {"tenurectl", "bench"},
}

func procGroup(name string) string {
	for _, g := range procNameGroups {
		if strings.HasPrefix(name, g.prefix) {
			return g.group
		}
	}
	return "other"
}

// machineCPU is the CPU used so far (ms) by each live process of the
// machine, and the machine's busy and total time.
type machineCPU struct {
	procs              map[int]procCPUUse
	busy, total, steal float64
}

type procCPUUse struct {
	group string
	ms    float64
}

// sampleMachineCPU reads the CPU of every live process of the machine,
// with its group of procNameGroups, and the machine's busy time.
func sampleMachineCPU() machineCPU {
	s := machineCPU{procs: map[int]procCPUUse{}}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue // exited since the listing
		}
		line := string(b)
		ms, err := parseProcStatCPU(line)
		if err != nil {
			continue
		}
		g := "other"
		if i, j := strings.IndexByte(line, '('), strings.LastIndexByte(line, ')'); i >= 0 && j > i {
			g = procGroup(line[i+1 : j])
		}
		s.procs[pid] = procCPUUse{g, ms}
	}
	s.busy, s.total, s.steal = readMachineCPU()
	return s
}

// cpuByGroup is the CPU (ms) each named group used between two samples,
// a process started in between counted whole. A process that exited in
// between is in neither sample (the CNI plugins, runc): "exited or other"
// is the machine's busy time the named groups' live processes do not
// explain.
func cpuByGroup(before, after machineCPU) map[string]float64 {
	d := map[string]float64{}
	var named float64
	for pid, p := range after.procs {
		if p.group == "other" {
			continue
		}
		x := p.ms
		if b, ok := before.procs[pid]; ok && b.group == p.group {
			x -= b.ms
		}
		x = max(x, 0)
		named += x
		d[p.group] += x
	}
	d["exited or other"] = max(after.busy-before.busy-named, 0)
	d["machine busy"] = after.busy - before.busy
	d["steal"] = after.steal - before.steal
	return d
}
