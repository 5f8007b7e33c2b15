package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
)

// call is one CNI invocation of the shim for a pod.
type call struct {
	pod       benchPod
	command   string
	conf      []byte
	wantIPs   int    // addresses the result must hold (ADD)
	wantAddrs string // exact addresses expected (migration), "" when any
}

// callOutcome is what one shim execution did.
type callOutcome struct {
	dur    time.Duration
	cpu    time.Duration
	minflt int64 // minor page faults of the child
	addrs  []string
	err    error
	code   uint // the CNI error code the shim printed; 0 when none
}

// execShim runs the tenure binary once, as a runtime does (the same
// environment as testbed.ExecShim), and keeps the child's CPU time from
// its rusage.
func execShim(ctx context.Context, shim string, c call) callOutcome {
	cmd := exec.CommandContext(ctx, shim)
	cmd.Env = []string{
		"CNI_COMMAND=" + c.command, "CNI_CONTAINERID=" + c.pod.containerID, "CNI_NETNS=/var/run/netns/none",
		"CNI_IFNAME=net1", "CNI_ARGS=" + c.pod.args(), "CNI_PATH=" + filepath.Dir(shim),
	}
	cmd.Stdin = bytes.NewReader(c.conf)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	begin := time.Now()
	err := cmd.Run()
	out := callOutcome{dur: time.Since(begin)}
	if ps := cmd.ProcessState; ps != nil {
		out.cpu = ps.UserTime() + ps.SystemTime()
		if ru, ok := ps.SysUsage().(*syscall.Rusage); ok {
			out.minflt = ru.Minflt
		}
	}
	if err != nil {
		var exitErr *exec.ExitError
		var cniErr types.Error
		if errors.As(err, &exitErr) && json.Unmarshal(stdout.Bytes(), &cniErr) == nil && cniErr.Code != 0 {
			out.err, out.code = fmt.Errorf("%s %s: CNI error %d: %s %s", c.command, c.pod.name, cniErr.Code, cniErr.Msg, cniErr.Details), cniErr.Code
		} else {
			out.err = fmt.Errorf("%s %s: shim: %v: stdout %q stderr %q", c.command, c.pod.name, err, stdout.String(), strings.TrimSpace(stderr.String()))
		}
		return out
	}
	if c.command != "ADD" {
		return out
	}
	r := &current.Result{}
	if err := json.Unmarshal(stdout.Bytes(), r); err != nil {
		out.err = fmt.Errorf("ADD %s: result %q: %v", c.pod.name, stdout.String(), err)
		return out
	}
	for _, ip := range r.IPs {
		out.addrs = append(out.addrs, ip.Address.IP.String())
	}
	switch {
	case len(out.addrs) != c.wantIPs:
		out.err = fmt.Errorf("ADD %s: %d addresses %v, want %d", c.pod.name, len(out.addrs), out.addrs, c.wantIPs)
	case c.wantAddrs != "" && strings.Join(out.addrs, ",") != c.wantAddrs:
		out.err = fmt.Errorf("ADD %s: got %v, the claim holds %s", c.pod.name, out.addrs, c.wantAddrs)
	}
	return out
}

// runResult is a batch of calls.
type runResult struct {
	wall     time.Duration
	lat      []time.Duration // successful and failed calls alike
	cpu      []float64       // ms
	outcomes []callOutcome
	failures int
	dups     int
	errs     []string
}

// run executes calls at concurrency conc (the calls in flight at once,
// across all nodes).
func (e *env) run(ctx context.Context, calls []call, conc int, checkDuplicates bool) runResult {
	res := runResult{outcomes: make([]callOutcome, len(calls))}
	waiter := e.waiterBin()
	twins := make([]float64, len(calls)) // CPU of call i's twin, ms; 0: none
	sem := make(chan struct{}, conc)
	var wg sync.WaitGroup
	begin := time.Now()
	for i, c := range calls {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
			defer cancel()
			var tw *twin
			if waiter != "" && i%pairEvery == 0 {
				tw, _ = startTwin(waiter)
			}
			res.outcomes[i] = execShim(cctx, e.bins.Shim, c)
			if tw != nil {
				twins[i] = tw.done()
			}
		}()
	}
	wg.Wait()
	res.wall = time.Since(begin)
	owner := map[string]int{}
	for i, o := range res.outcomes {
		res.lat = append(res.lat, o.dur)
		ms := float64(o.cpu) / float64(time.Millisecond)
		res.cpu = append(res.cpu, ms)
		if o.err != nil {
			res.failures++
			if len(res.errs) < 5 {
				res.errs = append(res.errs, o.err.Error())
			}
			continue
		}
		if checkDuplicates {
			for _, a := range o.addrs {
				if j, dup := owner[a]; dup && calls[j].pod.uid != calls[i].pod.uid {
					res.dups++
					res.failures++
					if len(res.errs) < 5 {
						res.errs = append(res.errs, fmt.Sprintf("%s handed to %s and %s", a, calls[j].pod.name, calls[i].pod.name))
					}
				}
				owner[a] = i
			}
		}
	}
	var faults int64
	var pairs []cpuPair
	for i, o := range res.outcomes {
		faults += o.minflt
		if twins[i] > 0 && o.err == nil {
			pairs = append(pairs, cpuPair{shim: res.cpu[i], twin: twins[i]})
		}
	}
	e.cpuMu.Lock()
	e.shimPairs = append(e.shimPairs, pairs...)
	e.shimCPU = append(e.shimCPU, res.cpu...)
	e.shimMinflt += faults
	e.cpuMu.Unlock()
	return res
}
