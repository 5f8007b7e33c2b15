// Package controlplane runs a real kube-apiserver and etcd on 127.0.0.1, for
// `tenurectl dev up`, `tenurectl demo`, the benchmark and tests that need a
// control plane of their own. A test binary that shares one control plane
// among its tests uses package cptest, which runs controller-runtime's
// envtest with the same binaries and APIServerFlags.
//
// The binaries are built by hack/build-control-plane.sh into BinDir(). Start
// launches etcd (temp data dir, no fsync) and kube-apiserver (token auth in
// system:masters, client certificates of its CA, the Node authorizer, RBAC and
// NodeRestriction as a real cluster runs them, generated CA and serving
// cert), waits for /readyz and writes a kubeconfig. With Options.Detach the processes get their own
// session and outlive the caller; Attach finds them again from the state
// file, and Stop only ever signals a pid whose command line and start time
// still match what was started.
//
// Why this is not envtest: the control plane of `tenurectl dev up` outlives
// the command that started it, and `tenurectl dev down`, another process,
// stops it later. That needs what envtest does not do: processes in a
// session of their own, recorded (pid, command line, start time) in a state
// file, found again by Attach, and signalled only while /proc still shows
// what was recorded, never a reused pid. An envtest control plane belongs
// to the Environment value that started it and ends with it. One launcher
// then serves every caller, attached or not: an attached control plane
// dies with its caller (a parent-death signal, from a thread kept for it),
// reports its process ids (the benchmark measures their CPU time), and
// returns the tail of a failing process's output in Start's error.
package controlplane

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/tenure-ipam/tenure/internal/atomicfile"
	"github.com/tenure-ipam/tenure/test/progress"
)

const (
	apiserverName = "kube-apiserver"
	etcdName      = "etcd"

	// StateFile is the name, inside Dir, of the file a detached control
	// plane records its processes in.
	StateFile = "state.json"
	// KubeconfigFile is the name, inside Dir, of the admin kubeconfig.
	KubeconfigFile = "kubeconfig"

	etcdDataDir  = "etcd"
	stateVersion = 1

	etcdReadyTimeout      = 30 * time.Second
	apiserverReadyTimeout = 90 * time.Second
	stopTimeout           = 20 * time.Second
	killTimeout           = 10 * time.Second
	startAttempts         = 3 // a free port can be taken between probe and bind
)

// errPortInUse marks a start that failed because a probed port was taken
// before the process bound it; Start retries with new ports.
var errPortInUse = errors.New("port already in use")

// BinDir returns the directory holding the kube-apiserver and etcd binaries:
// $TENURE_CACHE_DIR/bin, or ~/.cache/tenure/bin. The error names the
// missing files and says how to build them.
func BinDir() (string, error) {
	cache, err := CacheDir()
	if err != nil {
		return "", fmt.Errorf("control plane binaries: %w", err)
	}
	dir := filepath.Join(cache, "bin")
	return dir, checkBinDir(dir)
}

// CacheDir returns $TENURE_CACHE_DIR, or ~/.cache/tenure, as an absolute
// path. It need not exist.
func CacheDir() (string, error) {
	cache := os.Getenv("TENURE_CACHE_DIR")
	if cache == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("no TENURE_CACHE_DIR and no home directory: %w", err)
		}
		cache = filepath.Join(home, ".cache", "tenure")
	}
	return filepath.Abs(cache)
}

func checkBinDir(dir string) error {
	var missing []string
	for _, name := range []string{apiserverName, etcdName} {
		p := filepath.Join(dir, name)
		fi, err := os.Stat(p) // follows the version symlink
		if err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
			missing = append(missing, p)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("control plane binaries missing: %s; run hack/build-control-plane.sh to build kube-apiserver and etcd into %s (or set TENURE_CACHE_DIR)",
			strings.Join(missing, ", "), dir)
	}
	return nil
}

// APIServerFlags returns the kube-apiserver flags, as name=value without
// the leading dashes, that decide what a client may do rather than where
// the server listens or keeps its files. Every control plane tenure's tests
// run gets them: Start's and cptest's.
//
// Kubelets are authorized as a real cluster authorizes them: the Node
// authorizer (what a node may read and write follows from which pods are
// bound to it) and the NodeRestriction admission plugin (a node writes only
// its own Node, its pods' status and mirror pods). KubeletConfig gives a
// test a kubelet's credentials.
func APIServerFlags() []string {
	return []string{
		"authorization-mode=Node,RBAC",
		"enable-admission-plugins=NodeRestriction",
		"service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"service-cluster-ip-range=10.96.0.0/16",
		// Otherwise the server logs that 127.0.0.1 may not be an endpoint.
		"endpoint-reconciler-type=none",
		// Without a controller-manager no "default" ServiceAccount exists,
		// and this admission plugin would refuse every Pod for it.
		disableServiceAccountAdmission,
		"allow-privileged=true",
	}
}

const disableServiceAccountAdmission = "disable-admission-plugins=ServiceAccount"

// Options configure Start.
type Options struct {
	// BinDir holds kube-apiserver and etcd; BinDir() when empty.
	BinDir string
	// Dir is the state directory (certificates, etcd data, logs,
	// kubeconfig). When empty a temp dir is made and removed by Stop.
	Dir string
	// Detach starts the processes in their own session so they survive
	// this process (tenurectl dev up). Requires Dir; output always goes to
	// log files in Dir, and the processes are recorded in Dir/state.json.
	Detach bool
	// Log receives the processes' output, each line prefixed with the
	// process name. When nil (or with Detach) output goes to
	// Dir/etcd.log and Dir/kube-apiserver.log.
	Log io.Writer
	// Controllers also runs kube-controller-manager and kube-scheduler (from
	// BinDir), and admits pods through the ServiceAccount admission plugin,
	// as a cluster with real nodes needs: DaemonSets and Deployments get
	// pods, pods get scheduled and service-account tokens, a node that
	// stops reporting is marked NotReady. Start returns once the
	// "default" ServiceAccount exists.
	Controllers bool
	// Nodes, when set, lets kubelets in network namespaces of their own
	// (devnode's cluster) reach the API server and be reached by it.
	Nodes *NodeAccess
	// APIServerArgs are further kube-apiserver flags (the bench's
	// --feature-gates=CBORServingAndStorage=true).
	APIServerArgs []string
}

// NodeAccess is how kubelets outside the host's network namespace and the
// API server reach each other. The API server stays on 127.0.0.1; a proxy
// of the caller's carries the traffic in both directions.
type NodeAccess struct {
	// SANs are further addresses the serving certificate names: where
	// the nodes reach the API server.
	SANs []net.IP
	// EgressSocket is a Unix socket that serves HTTP CONNECT: the API
	// server sends everything it dials in the cluster (kubelets, the
	// webhooks' endpoints) through it, so it needs no route to the nodes'
	// addresses.
	EgressSocket string
}

// ControlPlane is a running etcd + kube-apiserver pair.
type ControlPlane struct {
	// Dir is the state directory.
	Dir string
	// KubeconfigPath is Dir/kubeconfig: admin token, CA data, server URL.
	KubeconfigPath string
	// URL is https://127.0.0.1:PORT.
	URL string
	// Config talks to the API server as a system:masters user, with client
	// side rate limiting off (QPS -1). Copy it (rest.CopyConfig) before
	// changing it.
	Config *rest.Config
	// AddUser, when set, returns a client config that authenticates as
	// user in groups (cptest sets envtest's, whose client CA it does not
	// share); UserConfig uses it, and otherwise signs a client
	// certificate with Dir/pki/ca.key.
	AddUser func(user string, groups ...string) (*rest.Config, error)

	opts      Options // as Start was given them, for Restart
	token     string
	caPEM     []byte
	procs     []*proc // in start order: etcd, kube-apiserver
	removeDir bool    // Dir is a temp dir made by Start
	ports     statePorts

	mu      sync.Mutex // serializes Stop
	stopped bool
	httpMu  sync.Mutex
	http    *http.Client
}

// state is what Dir/state.json holds for a detached control plane.
type state struct {
	Version   int        `json:"version"`
	URL       string     `json:"url"`
	Token     string     `json:"token"`
	CA        string     `json:"ca"`
	Ports     statePorts `json:"ports"`
	Processes []*proc    `json:"processes"`
}

type statePorts struct {
	EtcdClient int `json:"etcdClient"`
	EtcdPeer   int `json:"etcdPeer"`
	APIServer  int `json:"apiserver"`
	// With Options.Controllers: their health endpoints, on 127.0.0.1.
	ControllerManager int `json:"controllerManager,omitempty"`
	Scheduler         int `json:"scheduler,omitempty"`
}

// Start runs etcd and kube-apiserver and returns once /readyz answers ok. On
// failure everything started is stopped and the error carries the tail of
// the failing process's log.
func Start(ctx context.Context, opts Options) (*ControlPlane, error) {
	if opts.BinDir == "" {
		dir, err := BinDir()
		if err != nil {
			return nil, err
		}
		opts.BinDir = dir
	} else if err := checkBinDir(opts.BinDir); err != nil {
		return nil, err
	}
	apiserverBin, err := resolveBinary(opts.BinDir, apiserverName)
	if err != nil {
		return nil, err
	}
	etcdBin, err := resolveBinary(opts.BinDir, etcdName)
	if err != nil {
		return nil, err
	}

	cp := &ControlPlane{}
	if opts.Dir == "" {
		if opts.Detach {
			return nil, errors.New("controlplane: Detach needs Options.Dir")
		}
		dir, err := os.MkdirTemp("", "tenure-cp-")
		if err != nil {
			return nil, err
		}
		cp.Dir, cp.removeDir = dir, true
	} else {
		dir, err := filepath.Abs(opts.Dir)
		if err != nil {
			return nil, err
		}
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, err
		}
		if err := checkNotRunning(dir); err != nil {
			return nil, err
		}
		cp.Dir = dir
	}
	cp.KubeconfigPath = filepath.Join(cp.Dir, KubeconfigFile)

	cp.opts = opts
	for attempt := 1; ; attempt++ {
		err = cp.start(ctx, opts, etcdBin, apiserverBin)
		if err == nil {
			return cp, nil
		}
		cp.stopProcesses()
		cp.procs = nil
		if !errors.Is(err, errPortInUse) || attempt == startAttempts || ctx.Err() != nil {
			break
		}
	}
	if cp.removeDir {
		_ = os.RemoveAll(cp.Dir)
	} else {
		_ = os.Remove(filepath.Join(cp.Dir, StateFile))
		_ = os.RemoveAll(filepath.Join(cp.Dir, etcdDataDir))
	}
	return nil, err
}

// checkNotRunning refuses a Dir whose state file names live processes, and
// removes a stale one.
func checkNotRunning(dir string) error {
	old, err := Attach(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("controlplane: %s holds an unreadable %s (%v); run Stop on it or remove the file", dir, StateFile, err)
	}
	for _, p := range old.procs {
		if p.alive() {
			return fmt.Errorf("controlplane: a control plane is already running in %s (%s pid %d); Attach to it or Stop it first", dir, p.Name, p.Pid)
		}
	}
	return os.Remove(filepath.Join(dir, StateFile))
}

func resolveBinary(binDir, name string) (string, error) {
	p, err := filepath.EvalSymlinks(filepath.Join(binDir, name))
	if err != nil {
		return "", fmt.Errorf("controlplane: %w", err)
	}
	return filepath.Abs(p)
}

func (cp *ControlPlane) start(ctx context.Context, opts Options, etcdBin, apiserverBin string) error {
	var sans []net.IP
	if opts.Nodes != nil {
		sans = opts.Nodes.SANs
	}
	pk, err := generatePKI(time.Now(), sans...)
	if err != nil {
		return fmt.Errorf("controlplane: generating certificates: %w", err)
	}
	ports, err := freePorts(5)
	if err != nil {
		return fmt.Errorf("controlplane: finding free ports: %w", err)
	}
	cp.ports = statePorts{EtcdClient: ports[0], EtcdPeer: ports[1], APIServer: ports[2]}
	if opts.Controllers {
		cp.ports.ControllerManager, cp.ports.Scheduler = ports[3], ports[4]
	}
	cp.token = randomHex(32)
	cp.caPEM = pk.caPEM
	cp.URL = "https://127.0.0.1:" + strconv.Itoa(cp.ports.APIServer)
	cp.Config = &rest.Config{
		Host:            cp.URL,
		BearerToken:     cp.token,
		TLSClientConfig: rest.TLSClientConfig{CAData: pk.caPEM},
		QPS:             -1,
		Burst:           1000,
	}
	cp.httpMu.Lock()
	cp.http = nil
	cp.httpMu.Unlock()

	pkiDir := filepath.Join(cp.Dir, "pki")
	files := map[string][]byte{
		filepath.Join(pkiDir, "ca.crt"):        pk.caPEM,
		filepath.Join(pkiDir, "ca.key"):        pk.caKeyPEM,
		filepath.Join(pkiDir, "apiserver.crt"): pk.certPEM,
		filepath.Join(pkiDir, "apiserver.key"): pk.keyPEM,
		filepath.Join(pkiDir, "sa.key"):        pk.saKeyPEM,
		filepath.Join(pkiDir, "sa.pub"):        pk.saPubPEM,
		filepath.Join(cp.Dir, "tokens.csv"):    fmt.Appendf(nil, "%s,tenure-admin,tenure-admin,\"system:masters\"\n", cp.token),
	}
	if err := os.MkdirAll(pkiDir, 0o700); err != nil {
		return err
	}
	if opts.Nodes != nil {
		files[filepath.Join(cp.Dir, "egress.yaml")] = egressConfig(opts.Nodes.EgressSocket)
	}
	for name, data := range files {
		if err := os.WriteFile(name, data, 0o600); err != nil {
			return err
		}
	}
	var nodeFlags []string
	if opts.Nodes != nil {
		if nodeFlags, err = nodeAccessFlags(cp.Dir, pkiDir); err != nil {
			return err
		}
	}

	// etcd: a fresh data dir every start; members of an old one would
	// carry the old peer URL.
	dataDir := filepath.Join(cp.Dir, etcdDataDir)
	if err := os.RemoveAll(dataDir); err != nil {
		return err
	}
	clientURL := fmt.Sprintf("http://127.0.0.1:%d", cp.ports.EtcdClient)
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", cp.ports.EtcdPeer)
	etcd := &proc{Name: etcdName, Binary: etcdBin, Args: []string{
		"--name=tenure",
		"--data-dir=" + dataDir,
		"--listen-client-urls=" + clientURL,
		"--advertise-client-urls=" + clientURL,
		"--listen-peer-urls=" + peerURL,
		"--initial-advertise-peer-urls=" + peerURL,
		"--initial-cluster=tenure=" + peerURL,
		"--initial-cluster-state=new",
		"--unsafe-no-fsync=true",
		"--log-level=warn",
	}}
	if err := cp.spawn(etcd, opts); err != nil {
		return err
	}
	if err := waitReady(ctx, etcd, etcdReadyTimeout, func(ctx context.Context) error {
		return getOK(ctx, http.DefaultClient, clientURL+"/health", `"health":"true"`)
	}); err != nil {
		return err
	}

	apiserver := &proc{Name: apiserverName, Binary: apiserverBin, Args: []string{
		"--etcd-servers=" + clientURL,
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(cp.ports.APIServer),
		"--cert-dir=" + pkiDir,
		"--tls-cert-file=" + filepath.Join(pkiDir, "apiserver.crt"),
		"--tls-private-key-file=" + filepath.Join(pkiDir, "apiserver.key"),
		"--token-auth-file=" + filepath.Join(cp.Dir, "tokens.csv"),
		// Kubelets (KubeletConfig, devnode's) authenticate with client
		// certificates of this CA.
		"--client-ca-file=" + filepath.Join(pkiDir, "ca.crt"),
		"--service-account-key-file=" + filepath.Join(pkiDir, "sa.pub"),
		"--service-account-signing-key-file=" + filepath.Join(pkiDir, "sa.key"),
	}}
	for _, f := range APIServerFlags() {
		if opts.Controllers && f == disableServiceAccountAdmission {
			continue // the controller-manager makes the ServiceAccounts it needs
		}
		apiserver.Args = append(apiserver.Args, "--"+f)
	}
	apiserver.Args = append(apiserver.Args, nodeFlags...)
	apiserver.Args = append(apiserver.Args, opts.APIServerArgs...)
	if err := cp.spawn(apiserver, opts); err != nil {
		return err
	}
	hc, err := cp.httpClient()
	if err != nil {
		return err
	}
	if err := waitReady(ctx, apiserver, apiserverReadyTimeout, func(ctx context.Context) error {
		return getOK(ctx, hc, cp.URL+"/readyz", "")
	}); err != nil {
		return err
	}
	// /readyz does not wait for the system namespaces controller; tests
	// that use "default" right away must not race it.
	if err := waitReady(ctx, apiserver, etcdReadyTimeout, func(ctx context.Context) error {
		return getOK(ctx, hc, cp.URL+"/api/v1/namespaces/default", "")
	}); err != nil {
		return err
	}
	if err := cp.writeKubeconfig(); err != nil {
		return err
	}
	if opts.Controllers {
		return cp.startControllers(ctx, opts, pkiDir)
	}
	return nil
}

// spawn starts p and, for a detached control plane, records it in the state
// file at once so a crash of the caller never leaves an unrecorded process.
func (cp *ControlPlane) spawn(p *proc, opts Options) error {
	cp.procs = append(cp.procs, p)
	if err := p.start(cp.Dir, opts); err != nil {
		cp.procs = cp.procs[:len(cp.procs)-1]
		return err
	}
	if opts.Detach {
		return cp.writeState()
	}
	return nil
}

func (cp *ControlPlane) writeState() error {
	data, err := json.MarshalIndent(state{
		Version:   stateVersion,
		URL:       cp.URL,
		Token:     cp.token,
		CA:        string(cp.caPEM),
		Ports:     cp.ports,
		Processes: cp.procs,
	}, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(filepath.Join(cp.Dir, StateFile), data, 0o600)
}

func (cp *ControlPlane) writeKubeconfig() error {
	const name = "tenure-dev"
	kc := clientcmdapi.Config{
		Clusters:       map[string]*clientcmdapi.Cluster{name: {Server: cp.URL, CertificateAuthorityData: cp.caPEM}},
		AuthInfos:      map[string]*clientcmdapi.AuthInfo{"tenure-admin": {Token: cp.token}},
		Contexts:       map[string]*clientcmdapi.Context{name: {Cluster: name, AuthInfo: "tenure-admin", Namespace: "default"}},
		CurrentContext: name,
	}
	data, err := clientcmd.Write(kc)
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(cp.KubeconfigPath, data, 0o600)
}

// Attach returns the detached control plane recorded in dir/state.json. The
// error wraps os.ErrNotExist when there is none. The processes may have
// died since: Healthy says, and Stop cleans up either way.
func Attach(dir string) (*ControlPlane, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	data, err := os.ReadFile(filepath.Join(dir, StateFile))
	if err != nil {
		return nil, fmt.Errorf("controlplane: no control plane recorded in %s: %w", dir, err)
	}
	var st state
	if err := json.Unmarshal(data, &st); err != nil {
		return nil, fmt.Errorf("controlplane: %s: %w", filepath.Join(dir, StateFile), err)
	}
	if st.Version != stateVersion {
		return nil, fmt.Errorf("controlplane: %s has version %d, want %d", filepath.Join(dir, StateFile), st.Version, stateVersion)
	}
	for _, p := range st.Processes {
		if p == nil || p.Pid <= 0 || p.Binary == "" {
			return nil, fmt.Errorf("controlplane: %s: malformed process entry", filepath.Join(dir, StateFile))
		}
	}
	return &ControlPlane{
		Dir:            dir,
		KubeconfigPath: filepath.Join(dir, KubeconfigFile),
		URL:            st.URL,
		Config: &rest.Config{
			Host:            st.URL,
			BearerToken:     st.Token,
			TLSClientConfig: rest.TLSClientConfig{CAData: []byte(st.CA)},
			QPS:             -1,
			Burst:           1000,
		},
		token: st.Token,
		caPEM: []byte(st.CA),
		procs: st.Processes,
		ports: st.Ports,
	}, nil
}

// Crash kills one process of the control plane (etcd, kube-apiserver,
// kube-controller-manager or kube-scheduler) with SIGKILL and starts it
// again with the same arguments, as a supervisor would after a crash; etcd
// keeps its data. It returns once the process is ready again. For fault
// tests; only a control plane started by this process (not Attached) can.
func (cp *ControlPlane) Crash(ctx context.Context, name string) error {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	i := slices.IndexFunc(cp.procs, func(p *proc) bool { return p.Name == name })
	if i < 0 {
		return fmt.Errorf("controlplane: no process %q", name)
	}
	old := cp.procs[i]
	if old.cmd == nil {
		return fmt.Errorf("controlplane: %s was not started by this process", name)
	}
	_ = old.cmd.Process.Kill()
	<-old.done
	p := &proc{Name: old.Name, Binary: old.Binary, Args: old.Args}
	if err := p.start(cp.Dir, cp.opts); err != nil {
		return err
	}
	cp.procs[i] = p
	hc, err := cp.httpClient()
	if err != nil {
		return err
	}
	var ready func(context.Context) error
	switch name {
	case etcdName:
		url := fmt.Sprintf("http://127.0.0.1:%d/health", cp.ports.EtcdClient)
		ready = func(ctx context.Context) error { return getOK(ctx, http.DefaultClient, url, `"health":"true"`) }
	case apiserverName:
		ready = func(ctx context.Context) error { return getOK(ctx, hc, cp.URL+"/readyz", "") }
	default:
		return nil // the controllers answer on their own time
	}
	return waitReady(ctx, p, apiserverReadyTimeout, ready)
}

// Healthy reports whether every process is still running and /readyz
// answers ok.
func (cp *ControlPlane) Healthy(ctx context.Context) error {
	for _, p := range cp.procs {
		if !p.alive() {
			return fmt.Errorf("%s (pid %d) is not running", p.Name, p.Pid)
		}
	}
	hc, err := cp.httpClient()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return getOK(ctx, hc, cp.URL+"/readyz", "")
}

// Pids returns the process ids of etcd and kube-apiserver, in start order.
func (cp *ControlPlane) Pids() []int {
	var pids []int
	for _, p := range cp.procs {
		pids = append(pids, p.Pid)
	}
	return pids
}

// MetricsText returns the API server's /metrics in Prometheus text format.
func (cp *ControlPlane) MetricsText(ctx context.Context) (string, error) {
	hc, err := cp.httpClient()
	if err != nil {
		return "", err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, cp.URL+"/metrics", nil)
	if err != nil {
		return "", err
	}
	req.Header.Set("Accept", "text/plain")
	resp, err := hc.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET /metrics: %s: %s", resp.Status, truncate(body, 512))
	}
	return string(body), nil
}

// Stop stops the processes this control plane started (SIGTERM, SIGKILL
// after a deadline) and waits for them to exit. A temp Dir is removed;
// otherwise Dir stays, minus the etcd data and the state file. On an
// attached control plane a pid is signalled only while /proc/PID still shows
// the command line and start time that were recorded. Stop is idempotent.
func (cp *ControlPlane) Stop() error {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	if cp.stopped {
		return nil
	}
	if err := cp.stopProcesses(); err != nil {
		return err // keep the state file: a retry must find the pids
	}
	cp.stopped = true
	cp.httpMu.Lock()
	if cp.http != nil {
		cp.http.CloseIdleConnections()
	}
	cp.httpMu.Unlock()
	if cp.removeDir {
		return os.RemoveAll(cp.Dir)
	}
	err := os.RemoveAll(filepath.Join(cp.Dir, etcdDataDir))
	if rmErr := os.Remove(filepath.Join(cp.Dir, StateFile)); rmErr != nil && !errors.Is(rmErr, os.ErrNotExist) {
		err = errors.Join(err, rmErr)
	}
	return err
}

// stopProcesses stops the API server first, then etcd.
func (cp *ControlPlane) stopProcesses() error {
	var errs []error
	for i := len(cp.procs) - 1; i >= 0; i-- {
		if err := cp.procs[i].stop(stopTimeout); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (cp *ControlPlane) httpClient() (*http.Client, error) {
	cp.httpMu.Lock()
	defer cp.httpMu.Unlock()
	if cp.http == nil {
		hc, err := rest.HTTPClientFor(cp.Config)
		if err != nil {
			return nil, err
		}
		cp.http = hc
	}
	return cp.http, nil
}

// waitReady polls check until it succeeds, the process exits, or timeout.
func waitReady(ctx context.Context, p *proc, timeout time.Duration, check func(context.Context) error) error {
	var last error
	progress.Waiting(ctx, p.Name+" to be ready")
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		reqCtx, reqCancel := context.WithTimeout(ctx, 2*time.Second)
		last = check(reqCtx)
		reqCancel()
		if last == nil {
			return true, nil
		}
		progress.Observe(ctx, last.Error())
		select {
		case <-p.exited():
			tail := p.logTail()
			err := fmt.Errorf("controlplane: %s exited before it was ready (%v)\n%s", p.Name, p.exitErr(), tail)
			if strings.Contains(tail, "address already in use") {
				err = fmt.Errorf("%w: %w", errPortInUse, err)
			}
			return false, err
		default:
			return false, nil
		}
	})
	if wait.Interrupted(err) {
		return fmt.Errorf("controlplane: %s not ready after %v: %v\n%s", p.Name, timeout, last, p.logTail())
	}
	if err == nil {
		progress.Done(ctx)
	}
	return err
}

// getOK GETs url and wants 200 and, if want is set, a body containing it.
func getOK(ctx context.Context, hc *http.Client, url, want string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s: %s", url, resp.Status, truncate(body, 512))
	}
	if want != "" && !bytes.Contains(body, []byte(want)) {
		return fmt.Errorf("GET %s: %s", url, truncate(body, 512))
	}
	return nil
}

// freePorts returns n distinct ports free on 127.0.0.1 right now.
func freePorts(n int) ([]int, error) {
	var ports []int
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return hex.EncodeToString(b)
}

func truncate(b []byte, n int) string {
	s := strings.TrimSpace(string(b))
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}
