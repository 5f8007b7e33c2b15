// Package testbed runs tenure's real binaries against a real control plane
// for end-to-end tests, the demo and benchmarks: agents as processes posing
// as nodes (with StartNodeAgent, each authenticated as a DaemonSet pod on its
// node would be, so deploy/'s node-restriction policy holds it), the CNI
// shim executed as a runtime executes it (a fresh process per call, CNI_*
// environment, config on stdin), and the Kubernetes objects a kubelet-less
// cluster needs (nodes, pods bound to them).
package testbed

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"

	"github.com/tenure-ipam/tenure/internal/health"
	"github.com/tenure-ipam/tenure/internal/kube"
)

// Binaries are the built tenure commands.
type Binaries struct {
	Dir        string
	Shim       string // tenure
	Agent      string // tenure-agent
	Controller string // tenure-controller, "" if not built
	CLI        string // tenurectl
}

var (
	buildOnce sync.Once
	built     Binaries
	buildErr  error
)

// RepoRoot finds the module root from this source file's location.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// Build compiles every command under cmd/ once per process into dir (a temp
// dir when empty). $TENURE_BIN_DIR, when set, names prebuilt binaries
// (make build's bin/) and skips the build.
func Build(dir string) (Binaries, error) {
	buildOnce.Do(func() {
		if pre := os.Getenv("TENURE_BIN_DIR"); pre != "" {
			built, buildErr = binariesIn(pre)
			return
		}
		if dir == "" {
			dir, buildErr = os.MkdirTemp("", "tenure-bin-")
			if buildErr != nil {
				return
			}
		}
		cmd := exec.Command("go", "build", "-o", dir+"/", "./cmd/...")
		cmd.Dir = RepoRoot()
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build ./cmd/...: %v\n%s", err, out)
			return
		}
		built, buildErr = binariesIn(dir)
	})
	return built, buildErr
}

func binariesIn(dir string) (Binaries, error) {
	b := Binaries{Dir: dir}
	for name, dst := range map[string]*string{"tenure": &b.Shim, "tenure-agent": &b.Agent, "tenure-controller": &b.Controller, "tenurectl": &b.CLI} {
		p := filepath.Join(dir, name)
		if _, err := os.Stat(p); err == nil {
			*dst = p
		}
	}
	if b.Shim == "" || b.Agent == "" {
		return b, fmt.Errorf("%s lacks tenure or tenure-agent", dir)
	}
	return b, nil
}

// Process is a started tenure process.
type Process struct {
	Name string
	Cmd  *exec.Cmd
	Log  string
	done chan struct{}
	err  error
}

// Wait returns when the process has exited.
func (p *Process) Wait() error { <-p.done; return p.err }

// Kill sends SIGKILL, as a node that loses power would, and waits.
func (p *Process) Kill() {
	_ = p.Cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// Stop sends SIGTERM and waits (SIGKILL after 10 s).
func (p *Process) Stop() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		p.Kill()
	}
}

// Running reports whether the process has not exited.
func (p *Process) Running() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// StartProcess runs bin with args, output to logPath.
func StartProcess(name, bin, logPath string, args ...string) (*Process, error) {
	return StartProcessEnv(name, bin, logPath, nil, args...)
}

// StartProcessEnv is StartProcess with the environment env (nil: ours).
func StartProcessEnv(name, bin, logPath string, env []string, args ...string) (*Process, error) {
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = f, f
	// Its own process group, so nothing we signal reaches the test binary.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, err
	}
	p := &Process{Name: name, Cmd: cmd, Log: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	return p, nil
}

// Agent is a tenure-agent process posing as one node.
type Agent struct {
	*Process
	Node   string
	Socket string
	// Kubeconfig is what the agent authenticates with; a restart of the
	// agent on the same node passes it again.
	Kubeconfig string
}

// NoProbe is the agent flag turning the wire check off (StartAgent).
const NoProbe = "--probe=false"

// StartNodeAgent creates node as a Ready Node, gives its agent the
// identity a DaemonSet pod on it would have (NodeAgentKubeconfig, in dir)
// and starts the agent, with extra flags (--metrics-addr ADDR) if any.
// InstallAgentAccess must have run.
func StartNodeAgent(ctx context.Context, bins Binaries, dir string, admin *rest.Config, node string, extra ...string) (*Agent, error) {
	c, err := kube.NewClient(admin)
	if err != nil {
		return nil, err
	}
	if _, err := CreateNode(ctx, c, node); err != nil {
		return nil, err
	}
	kubeconfig, err := NodeAgentKubeconfig(ctx, admin, node, dir)
	if err != nil {
		return nil, err
	}
	return StartAgent(ctx, bins, dir, kubeconfig, node, extra...)
}

// StartAgent starts tenure-agent for node with the credentials of
// kubeconfig and extra flags, and waits until it is ready. The agent
// starts with --probe=false (NoProbe): the harness's CNI calls name
// parent interfaces (a macvlan master eth0) that nothing plugs; a test of
// the wire check passes --probe=true and the namespace its segment is in.
func StartAgent(ctx context.Context, bins Binaries, dir, kubeconfig, node string, extra ...string) (*Agent, error) {
	socket := filepath.Join(dir, node+".sock")
	p, err := StartProcess("agent-"+node, bins.Agent, filepath.Join(dir, node+".log"),
		append([]string{"--node-name", node, "--socket", socket, "--kubeconfig", kubeconfig, NoProbe}, extra...)...)
	if err != nil {
		return nil, err
	}
	a := &Agent{Process: p, Node: node, Socket: socket, Kubeconfig: kubeconfig}
	if err := a.WaitReady(ctx); err != nil {
		p.Kill()
		return nil, err
	}
	return a, nil
}

// WaitReady polls the agent's readiness with ctx's deadline.
func (a *Agent) WaitReady(ctx context.Context) error {
	var last error
	err := wait.PollUntilContextCancel(ctx, 20*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		last = health.Probe(ctx, a.Socket, "/readyz")
		if last != nil && !a.Running() {
			return false, fmt.Errorf("agent %s exited: %v\n%s", a.Node, a.err, tail(a.Log))
		}
		return last == nil, nil
	})
	if wait.Interrupted(err) {
		return fmt.Errorf("agent %s not ready: %v (last: %v)\n%s", a.Node, err, last, tail(a.Log))
	}
	return err
}

func tail(path string) string {
	b, _ := os.ReadFile(path)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// CNICall is one invocation of the shim.
type CNICall struct {
	Command     string
	ContainerID string
	IfName      string
	Netns       string
	Args        string // CNI_ARGS
	Config      []byte // the network config on stdin
	// Env is more of the plugin's environment, as the node's runtime has
	// it (whereabouts reads its node's name from NODENAME).
	Env []string
}

// PodArgs is the CNI_ARGS a kubelet passes for a pod.
func PodArgs(namespace, name, uid string) string {
	s := "IgnoreUnknown=1;K8S_POD_NAMESPACE=" + namespace + ";K8S_POD_NAME=" + name
	if uid != "" {
		s += ";K8S_POD_UID=" + uid
	}
	return s
}

// ExecShim runs the tenure binary once, as a runtime does. A CNI error is
// returned as *types.Error; other errors mean the shim misbehaved.
func ExecShim(ctx context.Context, shim string, c CNICall) ([]byte, error) {
	cmd := exec.CommandContext(ctx, shim)
	netns := c.Netns
	if netns == "" {
		netns = "/var/run/netns/none"
	}
	cmd.Env = []string{
		"CNI_COMMAND=" + c.Command, "CNI_CONTAINERID=" + c.ContainerID, "CNI_NETNS=" + netns,
		"CNI_IFNAME=" + c.IfName, "CNI_ARGS=" + c.Args, "CNI_PATH=" + filepath.Dir(shim),
	}
	cmd.Env = append(cmd.Env, c.Env...)
	cmd.Stdin = bytes.NewReader(c.Config)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err == nil {
		return stdout.Bytes(), nil
	}
	var exitErr *exec.ExitError
	if errors.As(err, &exitErr) {
		var cniErr types.Error
		if jerr := json.Unmarshal(stdout.Bytes(), &cniErr); jerr == nil && cniErr.Code != 0 {
			return nil, &cniErr
		}
	}
	return nil, fmt.Errorf("shim %s: %v: stdout %q stderr %q", c.Command, err, stdout.String(), strings.TrimSpace(stderr.String()))
}

// FreeLoopbackAddr is a 127.0.0.1 address with a port nothing listens on
// now, for a process the test starts to listen on.
func FreeLoopbackAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}
