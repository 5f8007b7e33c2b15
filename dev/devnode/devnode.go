// Package devnode runs a real Kubernetes node on this machine for the local
// control plane: containerd (with runc) and a kubelet registered to the API
// server, with a bridge cluster network that gives the host no address. It
// is what `tenurectl dev up --node` and test/node run on; docs/real-node.md
// has the facts it rests on.
//
// Everything the node starts lives in one cgroup of its own (kubelet,
// containerd, the runc shims and every container), its files live in one
// directory, and the few host paths the kubelet and CNI hard-code are
// recorded in the directory's state file. Stop, given only the directory,
// kills the cgroup's processes and takes away every mount, cgroup, bridge,
// network namespace and host file the node made; Leftovers checks that.
package devnode

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/tenure-ipam/tenure/dev/image"
	"github.com/tenure-ipam/tenure/test/controlplane"
	"github.com/tenure-ipam/tenure/test/progress"
)

// DefaultNodeName is the name of a node of its own (no Options.NodeName).
const DefaultNodeName = "tenure-dev-node"

// Options for Start. Dir, Kubeconfig, BinDir and CNIBinDir are required.
type Options struct {
	// Dir holds everything the node writes: configs, containerd's root and
	// state, the kubelet's root, logs, pod logs, network namespaces.
	Dir string
	// Kubeconfig is an administrator's credential for the API server (the
	// local control plane's admin kubeconfig): Multus' on a node of its
	// own, and what Start waits for the Node with.
	Kubeconfig string
	// KubeletKubeconfig is the kubelet's credential on a node of its own:
	// a client certificate system:node:NAME in system:nodes
	// (controlplane.KubeletConfig), which the Node authorizer and
	// NodeRestriction hold to the node. Empty: Kubeconfig. A Cluster's
	// node takes NodeNet.Kubeconfig.
	KubeletKubeconfig string
	// BinDir holds kubelet, containerd, containerd-shim-runc-v2, ctr and
	// pause (hack/build-node.sh's output).
	BinDir string
	// CNIBinDir holds the reference plugins the node offers: bridge,
	// macvlan, host-local, loopback (hack/build-cni-plugins.sh's output).
	// They are linked into HostCNIBinDir with Multus.
	CNIBinDir string
	// NodeName defaults to DefaultNodeName.
	NodeName string
	// PodCIDR is the cluster network's range; default 10.244.0.0/24. The
	// host gets no address in it.
	PodCIDR string
	// Runc defaults to runc on PATH (Debian's package).
	Runc string
	// Net, when set, runs the node as one of a Cluster's: in its network
	// namespace, in a mount namespace of its own where the host paths the
	// node's programs hard-code are private directories of Dir, as a
	// client of the API server with its own certificate. Without it the
	// node runs on the host's namespaces, alone on the host.
	Net *NodeNet
	// Multus is how Multus runs on the node: MultusThin (the default) or
	// MultusThick. Thin: the multus plugin and its configuration are
	// installed with the node. Thick (a Cluster's node only): the node
	// starts with its cluster network alone, and Multus' DaemonSet
	// (dev/localnode) installs multus-shim and its
	// configuration.
	Multus MultusMode
}

// MultusMode is how Multus runs on a node: its thin plugin, or its thick
// plugin (multus-daemon, and multus-shim as the CNI plugin).
type MultusMode string

const (
	MultusThin  MultusMode = "thin"
	MultusThick MultusMode = "thick"
)

// ParseMultusMode reads a MultusMode; empty is MultusThin.
func ParseMultusMode(s string) (MultusMode, error) {
	switch m := MultusMode(s); m {
	case "", MultusThin:
		return MultusThin, nil
	case MultusThick:
		return m, nil
	}
	return "", fmt.Errorf("multus mode %q: %q or %q", s, MultusThin, MultusThick)
}

// ClusterNetworkConfFile is the name of the node's cluster network
// configuration in HostCNIConfDir, as a cluster's primary network installs
// its own. Containerd reads only the first file (Multus' 00-multus.conf
// sorts first); Multus' thick configuration names this file as its
// clusterNetwork.
const ClusterNetworkConfFile = "10-cluster-network.conflist"

// NodeNet is where a Cluster's node lives and how it reaches the API
// server.
type NodeNet struct {
	// Netns is the path of the node's network namespace: its host
	// network, where the DaemonSet's hostNetwork pods run.
	Netns string
	// IP is the node's InternalIP, on its eth0: the kubelet listens there
	// and the API server reaches it there.
	IP string
	// Kubeconfig is the kubelet's: its client certificate
	// (system:node:NAME), the API server at its fabric address.
	Kubeconfig string
	// MultusKubeconfig is Multus' credential, the API server at its
	// fabric address.
	MultusKubeconfig string
	// ClientCAFile authenticates the API server's client certificate
	// to the kubelet.
	ClientCAFile string
}

// The node's CNI directories are the standard host paths, because that is
// where deploy/'s DaemonSet installs tenure's shim and flat configuration
// and where the shim looks for its flat configuration. Start refuses a host
// where either holds anything (a host with CNI of its own), makes them, and
// Stop removes them; network namespaces are made in the shared
// HostNetnsDir, where the DaemonSet mounts them from, and Stop removes the
// node's.
const (
	HostCNIBinDir  = "/opt/cni/bin"
	HostCNIConfDir = "/etc/cni/net.d"
	HostNetnsDir   = "/run/netns"
)

// CNIPluginsDir is where hack/build-cni-plugins.sh puts the reference
// plugins, in the cache directory; the newest version when several are.
func CNIPluginsDir() (string, error) {
	cache, err := controlplane.CacheDir()
	if err != nil {
		return "", err
	}
	dirs, _ := filepath.Glob(filepath.Join(cache, "cni-plugins-*", "macvlan"))
	if len(dirs) == 0 {
		return "", fmt.Errorf("devnode: no reference CNI plugins in %s: make cni-plugins builds them", cache)
	}
	return filepath.Dir(dirs[len(dirs)-1]), nil
}

// nodeCNIPlugins are linked from Options.CNIBinDir into HostCNIBinDir.
var nodeCNIPlugins = []string{"bridge", "macvlan", "host-local", "loopback"}

// PauseImage is the sandbox image the node imports and pins: the static
// pause program of hack/pause.
const PauseImage = "localhost/tenure/pause:dev"

// stateFile, inside Dir, records what Stop must undo; Stop renames it
// stoppedFile for Leftovers.
const (
	// StateFile, in a running node's directory, records it.
	StateFile   = "devnode.json"
	stateFile   = StateFile
	stoppedFile = "devnode.stopped.json"
)

// layout is the node's state file (JSON with the field names as keys):
// every name derived from Dir and every host change to undo.
type layout struct {
	Dir         string
	NodeName    string
	NetworkName string
	Bridge      string
	// CgroupPath is the node's cgroup, the same path in every hierarchy;
	// it is also the kubelet's cgroupRoot.
	CgroupPath string
	// CreatedCgroups are directories made to reach CgroupPath, outermost
	// first, in every hierarchy.
	CreatedCgroups []string
	// CreatedHostDirs are host directories outside Dir that did not exist
	// before the node started (the kubelet and libcni make them).
	CreatedHostDirs []string
	// EmptiedHostDirs are the CNI directories that existed, empty, before
	// the node started: Stop empties them again.
	EmptiedHostDirs []string
	// PreexistingNetns are the entries of HostNetnsDir that are not the
	// node's.
	PreexistingNetns []string
	// NetnsDirShared: the host's HostNetnsDir did not propagate mounts,
	// and the node bound it on itself, shared (shareNetnsDir).
	NetnsDirShared bool `json:",omitempty"`
	// Sysctls are the values the kubelet changes, as they were before.
	Sysctls map[string]string
	// Isolated: the node runs in namespaces of its own (Options.Net),
	// Netns its network namespace, Holder the pid of the process that
	// holds its mount namespace (the node's programs join both).
	Isolated bool   `json:",omitempty"`
	Netns    string `json:",omitempty"`
	Holder   int    `json:",omitempty"`
}

// privateHostPaths are the host paths an isolated node's programs write
// whatever their configuration says, or that deploy/'s DaemonSet mounts:
// in the node's mount namespace each is a private directory of the node's.
var privateHostPaths = []string{
	HostCNIBinDir, HostCNIConfDir, HostNetnsDir,
	"/var/lib/kubelet", // device-plugins/kubelet.sock among others
	"/run/containerd",  // the shims' sockets
	"/var/lib/cni",     // libcni's cache
	"/var/log/pods", "/var/log/containers",
	"/run/tenure", // deploy/'s agent socket
	"/run/multus", // Multus' thick daemon's socket
}

// hostPath is where the node's view of the host path p lives, seen from
// the host: p itself, or for an isolated node its private directory.
func (n *layout) hostPath(p string) string {
	if !n.Isolated {
		return p
	}
	return n.path("host", strings.ReplaceAll(strings.Trim(p, "/"), "/", "-"))
}

func (n *layout) path(elem ...string) string {
	return filepath.Join(append([]string{n.Dir}, elem...)...)
}
func (n *layout) staticPodDir() string     { return n.path("kubelet", "manifests") }
func (n *layout) containerdRoot() string   { return n.path("containerd", "root") }
func (n *layout) containerdState() string  { return n.path("containerd", "state") }
func (n *layout) containerdSocket() string { return n.path("containerd", "containerd.sock") }

func (n *layout) save() error {
	return writeState(n.Dir, stateFile, n)
}

func loadLayout(dir string) (*layout, error) {
	return loadLayoutFile(filepath.Join(dir, stateFile))
}

func loadLayoutFile(file string) (*layout, error) {
	return readState[layout](file)
}

// writeState writes v, as JSON, to the state file name in dir: whole or
// not at all (a temporary file renamed).
func writeState(dir, name string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, name+".tmp")
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, name))
}

// readState reads a state file writeState wrote.
func readState[T any](file string) (*T, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var v T
	if err := json.Unmarshal(data, &v); err != nil {
		return nil, fmt.Errorf("devnode: %s: %w", file, err)
	}
	return &v, nil
}

// Host paths the kubelet or libcni write whatever their configuration says.
var hardCodedHostDirs = []string{
	"/var/lib/kubelet",    // device-plugins/kubelet.sock, whatever --root-dir says
	"/var/log/containers", // the kubelet's links to container logs
	"/var/lib/cni",        // libcni's cache of ADD results, in containerd
	sharedShimSocketDir,   // the runc shims' sockets, whatever containerd's state dir is
	"/run/tenure",         // deploy/'s agent socket (a hostPath the kubelet creates)
}

// sharedShimSocketDir holds every containerd's shim sockets (s/<hash>):
// Stop removes the node's sockets and the directory only if empty.
const sharedShimSocketDir = "/run/containerd"

// Sysctls the kubelet sets at start (unless protectKernelDefaults, which
// makes it refuse to start instead).
var kubeletSysctls = []string{
	"vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops",
	"kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes",
}

// Node is a running node.
type Node struct {
	// Name is the Node object's name.
	Name string
	// Dir is Options.Dir, absolute.
	Dir    string
	layout *layout
	binDir string
	opts   Options
}

// Start brings up containerd and the kubelet and returns once the Node is
// Ready. On failure it stops what it started.
func Start(ctx context.Context, opts Options) (_ *Node, err error) {
	if err := checkOptions(opts); err != nil {
		return nil, err
	}
	node, err := prepare(ctx, &opts)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			if stopErr := Stop(node.Dir); stopErr != nil {
				err = fmt.Errorf("%w (and stopping: %v)", err, stopErr)
			}
		}
	}()
	if err := node.startRuntime(ctx, opts); err != nil {
		return nil, err
	}
	if err := node.startKubelet(ctx, opts); err != nil {
		return nil, err
	}
	return node, nil
}

// checkOptions refuses, before anything is made, options without a
// required field or a binary.
func checkOptions(opts Options) error {
	if opts.Dir == "" || opts.Kubeconfig == "" || opts.BinDir == "" || opts.CNIBinDir == "" {
		return errors.New("devnode: Dir, Kubeconfig, BinDir and CNIBinDir are required")
	}
	if _, err := ParseMultusMode(string(opts.Multus)); err != nil {
		return fmt.Errorf("devnode: Multus: %w", err)
	}
	for _, b := range []string{"kubelet", "containerd", "containerd-shim-runc-v2", "ctr", "pause", "multus"} {
		if _, err := os.Stat(filepath.Join(opts.BinDir, b)); err != nil {
			return fmt.Errorf("devnode: %w (hack/build-node.sh builds it)", err)
		}
	}
	for _, b := range nodeCNIPlugins {
		if _, err := os.Stat(filepath.Join(opts.CNIBinDir, b)); err != nil {
			return fmt.Errorf("devnode: %w (hack/build-cni-plugins.sh builds it)", err)
		}
	}
	return nil
}

// prepare completes opts and records the node's state file,
// before anything is made on the host.
func prepare(ctx context.Context, opts *Options) (_ *Node, err error) {
	dir, err := filepath.Abs(opts.Dir)
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(filepath.Join(dir, stateFile)); err == nil {
		return nil, fmt.Errorf("devnode: %s already records a node; Stop it first", dir)
	}
	if opts.Net == nil && opts.Multus == MultusThick {
		// The daemon would make its socket and cache directories on the
		// host, and its HostToContainer mount of / needs / shared.
		return nil, fmt.Errorf("devnode: Multus %s runs only on a Cluster's nodes, in namespaces of their own", opts.Multus)
	}
	if opts.NodeName == "" {
		opts.NodeName = DefaultNodeName
	}
	if opts.PodCIDR == "" {
		opts.PodCIDR = "10.244.0.0/24"
	}
	if opts.Runc == "" {
		if opts.Runc, err = exec.LookPath("runc"); err != nil {
			return nil, fmt.Errorf("devnode: %w (apt-get install runc)", err)
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	if opts.Net == nil {
		// A Cluster holds the host for its nodes.
		if err := lockHost(ctx, dir); err != nil {
			return nil, err
		}
		defer func() {
			if err != nil {
				unlockHost(dir)
			}
		}()
	}

	// Names unique to the directory, so that two nodes never share one.
	sum := sha256.Sum256([]byte(dir))
	id := hex.EncodeToString(sum[:])[:8]
	memCgroup, err := ownMemoryCgroup()
	if err != nil {
		return nil, err
	}
	n := &layout{
		Dir:         dir,
		NodeName:    opts.NodeName,
		NetworkName: "tenure-devnode-" + id,
		Bridge:      "tnd" + id, // at most 15 bytes (IFNAMSIZ)
		CgroupPath:  path.Join(memCgroup, "tenure-devnode-"+id),
		Sysctls:     map[string]string{},
	}
	if opts.Net != nil {
		// Nothing of the host's to record: the Cluster records the sysctls
		// its kubelets change and the mount points it makes.
		n.Isolated, n.Netns, n.Sysctls = true, opts.Net.Netns, nil
		if err := n.save(); err != nil {
			return nil, err
		}
		return &Node{Name: opts.NodeName, Dir: dir, layout: n, binDir: opts.BinDir, opts: *opts}, nil
	}
	for _, d := range hardCodedHostDirs {
		if _, err := os.Lstat(d); errors.Is(err, fs.ErrNotExist) {
			n.CreatedHostDirs = append(n.CreatedHostDirs, d)
		}
	}
	for _, d := range []string{HostCNIBinDir, HostCNIConfDir} {
		entries, err := os.ReadDir(d)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			n.CreatedHostDirs = append(n.CreatedHostDirs, outermostMissing(d))
		case err != nil:
			return nil, err
		case len(entries) > 0:
			return nil, fmt.Errorf("devnode: %s holds %s: this host has a CNI setup of its own, which the node would take over", d, entries[0].Name())
		default:
			n.EmptiedHostDirs = append(n.EmptiedHostDirs, d)
		}
	}
	netns, err := os.ReadDir(HostNetnsDir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	for _, e := range netns {
		n.PreexistingNetns = append(n.PreexistingNetns, e.Name())
	}
	for _, s := range kubeletSysctls {
		v, err := os.ReadFile("/proc/sys/" + s)
		if err != nil {
			return nil, err
		}
		n.Sysctls[s] = strings.TrimSpace(string(v))
	}
	// Recorded before anything is made, so a Stop after a crash finds it.
	if err := n.save(); err != nil {
		return nil, err
	}
	return &Node{Name: opts.NodeName, Dir: dir, layout: n, binDir: opts.BinDir, opts: *opts}, nil
}

// startRuntime makes the node's cgroups, writes the CNI and containerd
// configs, starts containerd and imports the sandbox image.
func (node *Node) startRuntime(ctx context.Context, opts Options) error {
	n := node.layout
	hs, err := hierarchies()
	if err != nil {
		return err
	}
	for _, sub := range []string{"runtime", "kubelet"} {
		created, err := createCgroup(hs, path.Join(n.CgroupPath, sub))
		n.CreatedCgroups = append(n.CreatedCgroups, created...)
		if saveErr := n.save(); err == nil {
			err = saveErr
		}
		if err != nil {
			return fmt.Errorf("devnode: cgroup %s: %w", n.CgroupPath, err)
		}
	}
	for _, d := range []string{n.hostPath(HostCNIBinDir), n.hostPath(HostCNIConfDir), n.path("containerd"), n.path("logs"), n.path("kubelet", "root"), n.path("images"), n.path("multus")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	if n.Isolated {
		if err := node.startHolder(ctx, hs); err != nil {
			return err
		}
	} else if err := n.shareNetnsDir(); err != nil {
		return err
	}
	if err := node.installCNI(opts); err != nil {
		return err
	}
	if err := os.WriteFile(n.path("containerd", "config.toml"), n.containerdConfig(PauseImage, opts.Runc), 0o644); err != nil {
		return err
	}
	if err := node.runContainerd(ctx, hs); err != nil {
		return err
	}

	pauseTar := n.path("images", "pause.tar")
	if err := writePauseImage(filepath.Join(opts.BinDir, "pause"), pauseTar); err != nil {
		return err
	}
	if err := node.ImportImage(ctx, pauseTar); err != nil {
		return err
	}

	return nil
}

// installCNI does what Multus' DaemonSet and a cluster network's would:
// the plugins into HostCNIBinDir (copies of the built ones), the cluster
// network's configuration into HostCNIConfDir as ClusterNetworkConfFile,
// and, for thin Multus, Multus' plugin (a link: only the node's runtime
// runs it) and configuration delegating to it. Thick Multus' DaemonSet
// installs its shim and configuration itself.
func (node *Node) installCNI(opts Options) error {
	n := node.layout
	// Copies, as a cluster's installers make: thick Multus' daemon looks
	// the plugins up in its container, where a link to this host's build
	// cache leads nowhere.
	for _, p := range nodeCNIPlugins {
		if err := copyExecutable(filepath.Join(opts.CNIBinDir, p), filepath.Join(n.hostPath(HostCNIBinDir), p)); err != nil {
			return err
		}
	}
	if opts.Multus != MultusThick {
		target, err := filepath.Abs(filepath.Join(opts.BinDir, "multus"))
		if err != nil {
			return err
		}
		if err := os.Symlink(target, filepath.Join(n.hostPath(HostCNIBinDir), "multus")); err != nil {
			return err
		}
	}
	cluster, err := n.cniConfList(n.Bridge, opts.PodCIDR)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(n.hostPath(HostCNIConfDir), ClusterNetworkConfFile), cluster, 0o644); err != nil {
		return err
	}
	if opts.Multus == MultusThick {
		return nil
	}
	// Multus reads the API with its own copy of the credential, as its
	// DaemonSet writes one for it.
	multusKubeconfig := opts.Kubeconfig
	if opts.Net != nil {
		multusKubeconfig = opts.Net.MultusKubeconfig
	}
	kubeconfig, err := os.ReadFile(multusKubeconfig)
	if err != nil {
		return err
	}
	if err := os.WriteFile(n.path("multus", "kubeconfig"), kubeconfig, 0o600); err != nil {
		return err
	}
	conf, err := n.multusConfig(cluster, n.path("multus", "kubeconfig"))
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(n.hostPath(HostCNIConfDir), "00-multus.conf"), conf, 0o644)
}

// copyExecutable copies the file src (a link followed) to dst, mode 0755.
func copyExecutable(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// outermostMissing is the outermost directory of p that does not exist:
// what removing all that was made to reach p takes away.
func outermostMissing(p string) string {
	for {
		parent := filepath.Dir(p)
		if parent == p {
			return p
		}
		if _, err := os.Lstat(parent); err == nil {
			return p
		}
		p = parent
	}
}

// startKubelet starts the kubelet and waits for its Node to be Ready.
func (node *Node) startKubelet(ctx context.Context, opts Options) error {
	n := node.layout
	hs, err := hierarchies()
	if err != nil {
		return err
	}
	address, port := "127.0.0.1", 0
	if opts.Net != nil {
		// The node's own address in its own namespace: the port is its.
		address, port = opts.Net.IP, 10250
	} else if port, err = freeLoopbackPort(); err != nil {
		return err
	}
	kcfg, err := n.kubeletConfig(address, port, opts.Net)
	if err != nil {
		return err
	}
	if err := os.WriteFile(n.path("kubelet", "config.yaml"), kcfg, 0o644); err != nil {
		return err
	}
	if err := os.MkdirAll(n.staticPodDir(), 0o755); err != nil {
		return err
	}
	return node.runKubelet(ctx, hs)
}

// runContainerd starts containerd with the configuration startRuntime
// wrote and waits until it answers.
func (node *Node) runContainerd(ctx context.Context, hs []hierarchy) error {
	n := node.layout
	if err := n.spawn(hs, "runtime", "containerd", filepath.Join(node.binDir, "containerd"), "--config", n.path("containerd", "config.toml")); err != nil {
		return err
	}
	if err := poll(ctx, 60*time.Second, "containerd to answer", func() error {
		_, err := node.ctr(ctx, "version")
		return err
	}); err != nil {
		return fmt.Errorf("%w\n%s", err, tailFile(n.path("logs", "containerd.log")))
	}
	return nil
}

// runKubelet starts the kubelet with the configuration startKubelet wrote
// and waits for its Node to be Ready.
func (node *Node) runKubelet(ctx context.Context, hs []hierarchy) error {
	n := node.layout
	kubeconfig, nodeIP := node.opts.Kubeconfig, []string(nil)
	if node.opts.KubeletKubeconfig != "" {
		kubeconfig = node.opts.KubeletKubeconfig
	}
	if net := node.opts.Net; net != nil {
		kubeconfig, nodeIP = net.Kubeconfig, []string{"--node-ip=" + net.IP}
	}
	if err := n.spawn(hs, "kubelet", "kubelet", filepath.Join(node.binDir, "kubelet"), append([]string{
		"--config=" + n.path("kubelet", "config.yaml"),
		"--kubeconfig=" + kubeconfig,
		"--root-dir=" + n.path("kubelet", "root"),
		"--cert-dir=" + n.path("kubelet", "pki"),
		"--hostname-override=" + node.Name,
		"--v=2",
	}, nodeIP...)...); err != nil {
		return err
	}
	if err := waitNodeReady(ctx, node.opts.Kubeconfig, node.Name, 3*time.Minute); err != nil {
		return fmt.Errorf("%w\n%s", err, tailFile(n.path("logs", "kubelet.log")))
	}
	return nil
}

// Lose kills the kubelet and containerd (SIGKILL), as a node that stops
// answering would: the containers and their shims keep running, the Node
// stops reporting. Return brings it back.
func (node *Node) Lose() error {
	hs, err := hierarchies()
	if err != nil {
		return err
	}
	var killed []int
	for _, pid := range cgroupProcs(node.layout.cgroupDirs(hs)) {
		comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		if err != nil {
			continue
		}
		if c := strings.TrimSpace(string(comm)); c == "kubelet" || c == "containerd" {
			if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
				return err
			}
			killed = append(killed, pid)
		}
	}
	if len(killed) != 2 {
		return fmt.Errorf("devnode: found %d of kubelet and containerd to kill (pids %v)", len(killed), killed)
	}
	return nil
}

// Processes lists the pids of the node's processes (kubelet, containerd,
// the shims, every container's) whose command name is comm.
func (node *Node) Processes(comm string) ([]int, error) {
	hs, err := hierarchies()
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, pid := range cgroupProcs(node.layout.cgroupDirs(hs)) {
		c, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		if err == nil && strings.TrimSpace(string(c)) == comm {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

// Return restarts containerd and the kubelet after Lose and waits for the
// Node to be Ready again.
func (node *Node) Return(ctx context.Context) error {
	hs, err := hierarchies()
	if err != nil {
		return err
	}
	if err := node.runContainerd(ctx, hs); err != nil {
		return err
	}
	return node.runKubelet(ctx, hs)
}

// spawn starts a process in the node's cgroup sub, its output in logs/.
// It is not waited for: Stop kills it through the cgroup, whoever calls
// Stop.
func (n *layout) spawn(hs []hierarchy, sub, name, binary string, args ...string) error {
	_, err := n.spawnPid(hs, sub, name, binary, args...)
	return err
}

// spawnPid is spawn, returning the process's pid.
func (n *layout) spawnPid(hs []hierarchy, sub, name, binary string, args ...string) (int, error) {
	logf, err := os.OpenFile(n.path("logs", name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return 0, err
	}
	defer logf.Close() // the child has its own descriptor
	if n.Isolated && n.Holder != 0 {
		// Into the node's namespaces; nsenter execs binary, which keeps
		// the cgroup it is born in.
		args = append([]string{"--target", fmt.Sprint(n.Holder), "--mount", "--net", "--", binary}, args...)
		binary = "nsenter"
	}
	cmd := exec.Command(binary, args...)
	cmd.Dir = n.Dir
	cmd.Stdout, cmd.Stderr = logf, logf
	// Its own session: a signal to the caller's process group (^C in a
	// terminal) does not reach the node; Stop ends it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	err = startInCgroup(hs, path.Join(n.CgroupPath, sub), func(fd int) {
		cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, fd
	}, cmd.Start)
	if err != nil {
		return 0, fmt.Errorf("devnode: starting %s: %w", name, err)
	}
	// Reap it if it exits while this process lives; nothing waits on it
	// otherwise.
	go func() { _ = cmd.Wait() }()
	return cmd.Process.Pid, nil
}

// ctr runs containerd's CLI against the node's containerd, in the
// namespace the CRI uses.
func (node *Node) ctr(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(node.binDir, "ctr"),
		append([]string{"--address", node.layout.containerdSocket(), "--namespace", "k8s.io"}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("ctr %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// StaticPodDir is the kubelet's staticPodPath, as the host opens it: a
// pod manifest written there runs on the node, and the kubelet creates
// its mirror pod.
func (node *Node) StaticPodDir() string { return node.layout.staticPodDir() }

// LogTail is the end of the log of one of the node's programs: "kubelet",
// "containerd", "multus".
func (node *Node) LogTail(name string) string {
	return tailFile(node.layout.path("logs", name+".log"))
}

// LogLines are the lines of one of the node's program logs ("kubelet",
// "containerd", "multus") that contain match, the last max of them.
func (node *Node) LogLines(name, match string, max int) []string {
	data, err := os.ReadFile(node.layout.path("logs", name+".log"))
	if err != nil {
		return nil
	}
	var out []string
	for line := range strings.SplitSeq(string(data), "\n") {
		if strings.Contains(line, match) {
			out = append(out, line)
		}
	}
	if len(out) > max {
		out = out[len(out)-max:]
	}
	return out
}

// TagImage gives the image src the further name dst in the node's
// containerd, as a push of the same image under a new tag would.
func (node *Node) TagImage(ctx context.Context, src, dst string) error {
	_, err := node.ctr(ctx, "images", "tag", "--force", src, dst)
	return err
}

// NetworkNamespaces lists the paths of the pods' network namespaces, as
// the host opens them.
func (node *Node) NetworkNamespaces() []string {
	n := node.layout
	if !n.Isolated {
		return n.netns()
	}
	// In the node's mount namespace only: reached through its holder's
	// root.
	var paths []string
	for _, p := range n.netns() {
		paths = append(paths, filepath.Join(fmt.Sprintf("/proc/%d/root", n.Holder), HostNetnsDir, filepath.Base(p)))
	}
	return paths
}

// IP is the node's InternalIP: for a Cluster's node its address on the
// fabric, else empty (the host's).
func (node *Node) IP() string {
	if node.opts.Net == nil {
		return ""
	}
	return node.opts.Net.IP
}

// Netns is the path of the node's network namespace, empty for a node on
// the host's.
func (node *Node) Netns() string { return node.layout.Netns }

// ImportImage imports an OCI or Docker image tarball into the node's
// containerd, where pods with imagePullPolicy Never find it.
func (node *Node) ImportImage(ctx context.Context, tarball string) error {
	progress.Waiting(ctx, "node "+node.Name+"'s containerd to import "+tarball)
	_, err := node.ctr(ctx, "images", "import", tarball)
	if err == nil {
		progress.Done(ctx)
	}
	return err
}

// Stop stops the node recorded in dir. Crashed, half-started or never
// started, it leaves nothing behind: see Leftovers.
func Stop(dir string) error {
	return stop(dir)
}

// Stop stops the node; see the package function Stop.
func (node *Node) Stop() error {
	return Stop(node.Dir)
}

func writePauseImage(pauseBinary, out string) error {
	img, err := image.Build(image.Pause(pauseBinary))
	if err != nil {
		return err
	}
	ref, err := pauseTag()
	if err != nil {
		return err
	}
	return image.WriteFile(out, ref, img)
}

func waitNodeReady(ctx context.Context, kubeconfig, name string, timeout time.Duration) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	return poll(ctx, timeout, "node "+name+" to be Ready", func() error {
		node, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, c := range node.Status.Conditions {
			if c.Type == corev1.NodeReady {
				if c.Status == corev1.ConditionTrue {
					return nil
				}
				return fmt.Errorf("condition Ready=%s: %s", c.Status, c.Message)
			}
		}
		return errors.New("no Ready condition yet")
	})
}

// poll calls check every 250 ms until it returns nil or timeout passes; the
// error names what was awaited and check's last answer.
func poll(ctx context.Context, timeout time.Duration, what string, check func() error) error {
	var last error
	progress.Waiting(ctx, what)
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		last = check()
		if last != nil {
			progress.Observe(ctx, last.Error())
		}
		return last == nil, nil
	})
	if err != nil {
		return fmt.Errorf("devnode: waiting for %s: %w (last: %v)", what, err, last)
	}
	progress.Done(ctx)
	return nil
}

// freeLoopbackPort is a TCP port free on 127.0.0.1 right now.
func freeLoopbackPort() (int, error) {
	l, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return 0, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	return port, l.Close()
}

// tailFile is the end of a log, for errors.
func tailFile(p string) string {
	data, err := os.ReadFile(p)
	if err != nil {
		return ""
	}
	const max = 4 << 10
	if len(data) > max {
		data = data[len(data)-max:]
	}
	return p + ":\n" + string(data)
}
