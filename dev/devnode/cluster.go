package devnode

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sync/errgroup"
	"golang.org/x/sys/unix"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// A Cluster is up to MaxNodes nodes on this machine, each in namespaces of
// its own (NodeNet), joined by a fabric: a network namespace with two
// bridges.
//   - "fabric0" carries FabricSubnet: the API server's address for the
//     nodes (FabricAPIServer) and each node's InternalIP on its eth0.
//   - "san0" is a bare L2 segment (the SAN): one leg per node, named
//     SANLink in the node, a master for macvlan or bridge networks, so
//     pods on different nodes reach each other over tenure's addresses.
//
// The API server stays on the host's loopback. A proxy in the host's
// network namespace, holding a listening socket in the fabric's, carries
// the nodes' connections to it, and the API server's to the kubelets (HTTP
// CONNECT on a Unix socket, controlplane.NodeAccess.EgressSocket). Every
// address is in a namespace the cluster made; the host gets none.
//
// Cluster addresses, as constants: the namespaces are the cluster's own,
// so they collide with nothing on the host.
const (
	MaxNodes     = 3
	FabricSubnet = "10.99.0.0/24"
	// FabricAPIServer is where the nodes reach the API server.
	FabricAPIServer     = "10.99.0.1"
	FabricAPIServerPort = 6443
	// SANLink is the name of each node's leg of the SAN, in its
	// namespace.
	SANLink = "san0"
	// ClusterStateFile, in a cluster's directory, records it.
	ClusterStateFile   = "cluster.json"
	clusterStoppedFile = "cluster.stopped.json"
)

// NodeIP is the InternalIP of node i (from 1).
func NodeIP(i int) string { return fmt.Sprintf("10.99.0.%d", 10+i) }

// EgressSocket is the proxy's HTTP CONNECT socket for a cluster in dir:
// give it to controlplane.NodeAccess before the cluster starts. An
// abstract socket (Go dials "@name" so): a path under dir may pass the
// 108 bytes a socket path may have, and it leaves no file.
func EgressSocket(dir string) string {
	return "@tenure-egress-" + clusterID(dir)
}

// clusterID is 8 hex digits of dir's absolute path.
func clusterID(dir string) string {
	dir, _ = filepath.Abs(dir)
	sum := sha256.Sum256([]byte(dir))
	return hex.EncodeToString(sum[:])[:8]
}

// ClusterOptions for StartCluster. All but Nodes are required.
type ClusterOptions struct {
	// Dir holds the cluster: the fabric's files and node-1 ... node-N.
	Dir string
	// Nodes is how many, 1 to MaxNodes.
	Nodes int
	// Kubeconfig is the admin kubeconfig, on the host's loopback.
	Kubeconfig string
	// CAFile is the control plane's CA (its pki/ca.crt).
	CAFile string
	// IssueClientCert signs a client certificate for user cn in groups
	// orgs (controlplane.ControlPlane.IssueClientCert).
	IssueClientCert func(cn string, orgs ...string) (certPEM, keyPEM []byte, err error)
	// ProxyCommand runs ServeProxy with the configuration file appended
	// as its last argument (tenurectl dev fabric-proxy).
	ProxyCommand []string
	// BinDir and CNIBinDir as in Options.
	BinDir, CNIBinDir string
	// Multus as in Options, for every node.
	Multus MultusMode
}

// Cluster is a running cluster.
type Cluster struct {
	Dir   string
	Nodes []*Node
}

// clusterLayout is the cluster's state file: what Stop must undo.
type clusterLayout struct {
	Dir string
	// FabricNetns and NodeNetns are the network namespaces it made,
	// bound in HostNetnsDir.
	FabricNetns string
	NodeNetns   []string
	NodeDirs    []string
	// CgroupPath holds the proxy; CreatedCgroups as in layout.
	CgroupPath     string
	CreatedCgroups []string
	// CreatedHostDirs are mount points for privateHostPaths made on the
	// host (a bind needs one); Stop removes them, empty.
	CreatedHostDirs []string
	Sysctls         map[string]string
	// GuestNetns are the network namespaces of the SAN guests
	// (Cluster.PlugSAN) not yet unplugged, bound in HostNetnsDir.
	GuestNetns []string
}

func (c *clusterLayout) save() error {
	return writeState(c.Dir, ClusterStateFile, c)
}

// StartCluster starts the fabric, the proxy and the nodes, and returns
// once every node is Ready. On failure it stops what it started.
func StartCluster(ctx context.Context, opts ClusterOptions) (_ *Cluster, err error) {
	if opts.Nodes < 1 || opts.Nodes > MaxNodes {
		return nil, fmt.Errorf("devnode: Nodes %d: from 1 to %d on this machine", opts.Nodes, MaxNodes)
	}
	if opts.Dir == "" || opts.Kubeconfig == "" || opts.CAFile == "" || opts.IssueClientCert == nil || len(opts.ProxyCommand) == 0 {
		return nil, errors.New("devnode: ClusterOptions: Dir, Kubeconfig, CAFile, IssueClientCert and ProxyCommand are required")
	}
	if err := checkOptions(Options{Dir: opts.Dir, Kubeconfig: opts.Kubeconfig, BinDir: opts.BinDir, CNIBinDir: opts.CNIBinDir, Multus: opts.Multus}); err != nil {
		return nil, err
	}
	dir, err := filepath.Abs(opts.Dir)
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(filepath.Join(dir, ClusterStateFile)); err == nil {
		return nil, fmt.Errorf("devnode: %s already records a cluster; StopCluster it first", dir)
	}
	if err := os.MkdirAll(filepath.Join(dir, "fabric"), 0o755); err != nil {
		return nil, err
	}
	// One cluster or node per host: they would share sysctls, and the
	// mount points made here.
	if err := lockHost(ctx, dir); err != nil {
		return nil, err
	}
	c, err := prepareCluster(dir, opts.Nodes)
	if err != nil {
		unlockHost(dir)
		return nil, err
	}
	defer func() {
		if err != nil {
			if stopErr := StopCluster(dir); stopErr != nil {
				err = fmt.Errorf("%w (and stopping: %v)", err, stopErr)
			}
		}
	}()
	for _, d := range privateHostPaths {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	if err := c.makeFabric(); err != nil {
		return nil, fmt.Errorf("devnode: fabric: %w", err)
	}
	if err := c.startProxy(ctx, opts); err != nil {
		return nil, err
	}
	admin, err := clientcmd.LoadFromFile(opts.Kubeconfig)
	if err != nil {
		return nil, err
	}
	cluster := &Cluster{Dir: dir, Nodes: make([]*Node, opts.Nodes)}
	g, gctx := errgroup.WithContext(ctx)
	for i := range opts.Nodes {
		g.Go(func() error {
			node, err := c.startNode(gctx, opts, admin, i)
			cluster.Nodes[i] = node
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return cluster, nil
}

func prepareCluster(dir string, nodes int) (*clusterLayout, error) {
	// A host with a CNI setup of its own is refused: the nodes' programs
	// would see it until their private binds hide it, and its owner
	// expects the host's.
	for _, d := range []string{HostCNIBinDir, HostCNIConfDir} {
		if entries, _ := os.ReadDir(d); len(entries) > 0 {
			return nil, fmt.Errorf("devnode: %s holds %s: this host has a CNI setup of its own", d, entries[0].Name())
		}
	}
	id := clusterID(dir)
	memCgroup, err := ownMemoryCgroup()
	if err != nil {
		return nil, err
	}
	c := &clusterLayout{
		Dir:         dir,
		FabricNetns: filepath.Join(HostNetnsDir, "tenure-"+id+"-fabric"),
		CgroupPath:  path.Join(memCgroup, "tenure-fabric-"+id),
		Sysctls:     map[string]string{},
	}
	for i := 1; i <= nodes; i++ {
		c.NodeNetns = append(c.NodeNetns, filepath.Join(HostNetnsDir, fmt.Sprintf("tenure-%s-node-%d", id, i)))
		c.NodeDirs = append(c.NodeDirs, filepath.Join(dir, fmt.Sprintf("node-%d", i)))
	}
	for _, d := range privateHostPaths {
		if _, err := os.Lstat(d); errors.Is(err, fs.ErrNotExist) {
			c.CreatedHostDirs = append(c.CreatedHostDirs, outermostMissing(d))
		}
	}
	if _, err := os.Lstat(HostNetnsDir); errors.Is(err, fs.ErrNotExist) && !slices.Contains(c.CreatedHostDirs, HostNetnsDir) {
		c.CreatedHostDirs = append(c.CreatedHostDirs, HostNetnsDir)
	}
	for _, s := range kubeletSysctls {
		v, err := os.ReadFile("/proc/sys/" + s)
		if err != nil {
			return nil, err
		}
		c.Sysctls[s] = strings.TrimSpace(string(v))
	}
	return c, c.save()
}

// makeFabric makes the namespaces, the bridges and the links.
func (c *clusterLayout) makeFabric() error {
	if err := newNamedNetns(c.FabricNetns); err != nil {
		return err
	}
	fab, err := netnsHandle(c.FabricNetns)
	if err != nil {
		return err
	}
	defer fab.Close()
	if err := linkUp(fab, "lo"); err != nil {
		return err
	}
	for _, br := range []string{"fabric0", "san0"} {
		if err := fab.LinkAdd(&netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: br}}); err != nil {
			return fmt.Errorf("bridge %s: %w", br, err)
		}
		if err := linkUp(fab, br); err != nil {
			return err
		}
	}
	if err := addAddr(fab, "fabric0", FabricAPIServer+"/24"); err != nil {
		return err
	}
	for i, nsPath := range c.NodeNetns {
		if err := newNamedNetns(nsPath); err != nil {
			return err
		}
		if err := c.plugNode(fab, i+1, nsPath); err != nil {
			return fmt.Errorf("node %d: %w", i+1, err)
		}
	}
	return nil
}

// plugNode gives node i its eth0 on fabric0 and its SANLink on san0.
func (c *clusterLayout) plugNode(fab *netlink.Handle, i int, nsPath string) error {
	nsf, err := netns.GetFromPath(nsPath)
	if err != nil {
		return err
	}
	defer nsf.Close()
	for _, leg := range []struct{ bridge, outer, inner string }{
		{"fabric0", fmt.Sprintf("fab-n%d", i), "eth0"},
		{"san0", fmt.Sprintf("san-n%d", i), SANLink},
	} {
		br, err := fab.LinkByName(leg.bridge)
		if err != nil {
			return err
		}
		veth := &netlink.Veth{
			LinkAttrs: netlink.LinkAttrs{Name: leg.outer, MasterIndex: br.Attrs().Index},
			PeerName:  leg.inner, PeerNamespace: netlink.NsFd(nsf),
		}
		if err := fab.LinkAdd(veth); err != nil {
			return fmt.Errorf("veth %s: %w", leg.outer, err)
		}
		if err := linkUp(fab, leg.outer); err != nil {
			return err
		}
	}
	h, err := netlink.NewHandleAt(nsf)
	if err != nil {
		return err
	}
	defer h.Close()
	for _, l := range []string{"lo", "eth0", SANLink} {
		if err := linkUp(h, l); err != nil {
			return err
		}
	}
	return addAddr(h, "eth0", NodeIP(i)+"/24")
}

func (c *clusterLayout) startProxy(ctx context.Context, opts ClusterOptions) error {
	u, err := apiServerHostPort(opts.Kubeconfig)
	if err != nil {
		return err
	}
	cfg := ProxyConfig{
		FabricNetns:  c.FabricNetns,
		Listen:       net.JoinHostPort(FabricAPIServer, fmt.Sprint(FabricAPIServerPort)),
		Upstream:     u,
		EgressSocket: EgressSocket(c.Dir),
		Allow:        FabricSubnet,
	}
	data, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return err
	}
	file := filepath.Join(c.Dir, "fabric", "proxy.json")
	if err := os.WriteFile(file, data, 0o644); err != nil {
		return err
	}
	hs, err := hierarchies()
	if err != nil {
		return err
	}
	created, err := createCgroup(hs, c.CgroupPath)
	c.CreatedCgroups = append(c.CreatedCgroups, created...)
	if saveErr := c.save(); err == nil {
		err = saveErr
	}
	if err != nil {
		return fmt.Errorf("devnode: cgroup %s: %w", c.CgroupPath, err)
	}
	// spawn's logs and cgroup, as a layout of the fabric's own.
	l := &layout{Dir: filepath.Join(c.Dir, "fabric"), CgroupPath: c.CgroupPath}
	if err := os.MkdirAll(l.path("logs"), 0o755); err != nil {
		return err
	}
	args := append(append([]string{}, opts.ProxyCommand[1:]...), file)
	if err := startInCgroupDir(hs, l, "proxy", opts.ProxyCommand[0], args...); err != nil {
		return err
	}
	return poll(ctx, 30*time.Second, "the fabric proxy", func() error {
		conn, err := net.Dial("unix", cfg.EgressSocket)
		if err != nil {
			return fmt.Errorf("%w\n%s", err, tailFile(l.path("logs", "proxy.log")))
		}
		return conn.Close()
	})
}

// startInCgroupDir spawns into the cgroup of l itself (no sub-cgroup).
func startInCgroupDir(hs []hierarchy, l *layout, name, binary string, args ...string) error {
	parent := *l
	parent.CgroupPath = path.Dir(l.CgroupPath)
	_, err := parent.spawnPid(hs, path.Base(l.CgroupPath), name, binary, args...)
	return err
}

func apiServerHostPort(kubeconfig string) (string, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return "", err
	}
	h := strings.TrimPrefix(cfg.Host, "https://")
	if _, _, err := net.SplitHostPort(h); err != nil {
		return "", fmt.Errorf("devnode: API server %s: %w", cfg.Host, err)
	}
	return h, nil
}

// startNode writes node i's credentials and starts it (i from 0).
func (c *clusterLayout) startNode(ctx context.Context, opts ClusterOptions, admin *clientcmdapi.Config, i int) (*Node, error) {
	dir := c.NodeDirs[i]
	name := fmt.Sprintf("tenure-dev-node-%d", i+1)
	if err := os.MkdirAll(filepath.Join(dir, "kubelet"), 0o755); err != nil {
		return nil, err
	}
	server := fmt.Sprintf("https://%s", net.JoinHostPort(FabricAPIServer, fmt.Sprint(FabricAPIServerPort)))
	cert, key, err := opts.IssueClientCert("system:node:"+name, "system:nodes")
	if err != nil {
		return nil, err
	}
	ca, err := os.ReadFile(opts.CAFile)
	if err != nil {
		return nil, err
	}
	kubelet := clientcmdapi.Config{
		Clusters:       map[string]*clientcmdapi.Cluster{"tenure-dev": {Server: server, CertificateAuthorityData: ca}},
		AuthInfos:      map[string]*clientcmdapi.AuthInfo{name: {ClientCertificateData: cert, ClientKeyData: key}},
		Contexts:       map[string]*clientcmdapi.Context{"tenure-dev": {Cluster: "tenure-dev", AuthInfo: name}},
		CurrentContext: "tenure-dev",
	}
	multus := admin.DeepCopy()
	for _, cl := range multus.Clusters {
		cl.Server = server
	}
	files := map[string]*clientcmdapi.Config{
		filepath.Join(dir, "kubelet", "kubeconfig"):        &kubelet,
		filepath.Join(dir, "kubelet", "multus.kubeconfig"): multus,
	}
	for f, cfg := range files {
		if err := clientcmd.WriteToFile(*cfg, f); err != nil {
			return nil, err
		}
	}
	caFile := filepath.Join(dir, "kubelet", "client-ca.crt")
	if err := os.WriteFile(caFile, ca, 0o644); err != nil {
		return nil, err
	}
	return Start(ctx, Options{
		Dir: dir, Kubeconfig: opts.Kubeconfig, BinDir: opts.BinDir, CNIBinDir: opts.CNIBinDir, NodeName: name, Multus: opts.Multus,
		// A range per node, as a cluster's IPAM gives: pod IPs stay unique.
		PodCIDR: fmt.Sprintf("10.244.%d.0/24", i+1),
		Net: &NodeNet{
			Netns: c.NodeNetns[i], IP: NodeIP(i + 1),
			Kubeconfig:       filepath.Join(dir, "kubelet", "kubeconfig"),
			MultusKubeconfig: filepath.Join(dir, "kubelet", "multus.kubeconfig"),
			ClientCAFile:     caFile,
		},
	})
}

// Stop stops the cluster; see StopCluster.
func (cl *Cluster) Stop() error { return StopCluster(cl.Dir) }

// FabricNetns is the path of the fabric's network namespace, where the
// SAN bridge san0 is: a guest plugged into san0 there is on the SAN.
func (cl *Cluster) FabricNetns() (string, error) {
	c, err := loadCluster(filepath.Join(cl.Dir, ClusterStateFile))
	if err != nil {
		return "", err
	}
	return c.FabricNetns, nil
}

// A SANGuest is a host plugged into the SAN by hand, outside every node:
// a network namespace of the cluster's own whose Link is a veth on the SAN
// bridge, with no address (its user gives it one, or none: an ARP probe
// needs none).
type SANGuest struct {
	// Netns is the path of its network namespace.
	Netns string
	// Link is its leg of the SAN, in Netns.
	Link    string
	cluster string
}

// validGuestName says whether name may name a SAN guest: short enough
// for its veth's name on the bridge (sg-NAME, at most 15 bytes).
func validGuestName(name string) bool {
	if name == "" || len(name) > 12 {
		return false
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-') {
			return false
		}
	}
	return true
}

// PlugSAN plugs a SANGuest called name into the SAN: a network namespace
// with its link "eth0" up on the SAN bridge. The cluster records it, so
// StopCluster removes it if Unplug is never called.
func (cl *Cluster) PlugSAN(name string) (_ *SANGuest, err error) {
	if !validGuestName(name) {
		return nil, fmt.Errorf("devnode: SAN guest name %q: 1 to 12 of a-z, 0-9 and -", name)
	}
	file := filepath.Join(cl.Dir, ClusterStateFile)
	c, err := loadCluster(file)
	if err != nil {
		return nil, err
	}
	g := &SANGuest{Netns: filepath.Join(HostNetnsDir, "tenure-"+clusterID(cl.Dir)+"-guest-"+name), Link: "eth0", cluster: cl.Dir}
	if slices.Contains(c.GuestNetns, g.Netns) {
		return nil, fmt.Errorf("devnode: SAN guest %s is plugged already", name)
	}
	if err := newNamedNetns(g.Netns); err != nil {
		return nil, err
	}
	c.GuestNetns = append(c.GuestNetns, g.Netns)
	if err := c.save(); err != nil {
		_ = removeNetns(g.Netns)
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = g.Unplug()
		}
	}()
	fab, err := netnsHandle(c.FabricNetns)
	if err != nil {
		return nil, err
	}
	defer fab.Close()
	br, err := fab.LinkByName("san0")
	if err != nil {
		return nil, err
	}
	nsf, err := netns.GetFromPath(g.Netns)
	if err != nil {
		return nil, err
	}
	defer nsf.Close()
	outer := "sg-" + name
	veth := &netlink.Veth{
		LinkAttrs: netlink.LinkAttrs{Name: outer, MasterIndex: br.Attrs().Index},
		PeerName:  g.Link, PeerNamespace: netlink.NsFd(nsf),
	}
	if err := fab.LinkAdd(veth); err != nil {
		return nil, fmt.Errorf("devnode: veth %s: %w", outer, err)
	}
	if err := linkUp(fab, outer); err != nil {
		return nil, err
	}
	h, err := netlink.NewHandleAt(nsf)
	if err != nil {
		return nil, err
	}
	defer h.Close()
	for _, l := range []string{"lo", g.Link} {
		if err := linkUp(h, l); err != nil {
			return nil, err
		}
	}
	return g, nil
}

// Unplug removes the guest's namespace (its veth goes with it) and the
// cluster's record of it.
func (g *SANGuest) Unplug() error {
	if err := removeNetns(g.Netns); err != nil {
		return err
	}
	file := filepath.Join(g.cluster, ClusterStateFile)
	c, err := loadCluster(file)
	if errors.Is(err, fs.ErrNotExist) {
		return nil // the cluster is stopped, and its guests with it
	}
	if err != nil {
		return err
	}
	c.GuestNetns = slices.DeleteFunc(c.GuestNetns, func(p string) bool { return p == g.Netns })
	return c.save()
}

// StopCluster stops the cluster recorded in dir: every node, the proxy,
// the namespaces (their links and bridges go with them), the mount points
// and the sysctls. Crashed, half-started or never started, it leaves
// nothing: see ClusterLeftovers.
func StopCluster(dir string) error {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	c, err := loadCluster(filepath.Join(dir, ClusterStateFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var errs []error
	for _, d := range c.NodeDirs {
		if err := Stop(d); err != nil {
			errs = append(errs, err)
		}
	}
	hs, err := hierarchies()
	if err != nil {
		return err
	}
	cg := (&layout{CgroupPath: c.CgroupPath}).cgroupDirs(hs)
	if err := killCgroup(cg); err != nil {
		errs = append(errs, err)
	}
	for _, d := range cg {
		if err := removeCgroupTree(d); err != nil {
			errs = append(errs, err)
		}
	}
	for i := len(c.CreatedCgroups) - 1; i >= 0; i-- {
		if err := unix.Rmdir(c.CreatedCgroups[i]); err != nil && !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.EBUSY) {
			errs = append(errs, fmt.Errorf("rmdir %s: %w", c.CreatedCgroups[i], err))
		}
	}
	for _, nsPath := range slices.Concat(c.GuestNetns, c.NodeNetns, []string{c.FabricNetns}) {
		if err := removeNetns(nsPath); err != nil {
			errs = append(errs, err)
		}
	}
	for i := len(c.CreatedHostDirs) - 1; i >= 0; i-- {
		if err := removeEmptyDirs(c.CreatedHostDirs[i]); err != nil {
			errs = append(errs, err)
		}
	}
	if err := finishStop(dir, ClusterStateFile, clusterStoppedFile, c.Sysctls, errs); err != nil {
		return fmt.Errorf("devnode: stopping the cluster in %s: %w", dir, err)
	}
	return nil
}

func loadCluster(file string) (*clusterLayout, error) {
	return readState[clusterLayout](file)
}

// ClusterRecorded reports whether dir records a running (or crashed)
// cluster.
func ClusterRecorded(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, ClusterStateFile))
	return err == nil
}

// ClusterLeftovers lists what the cluster recorded in dir left on the host:
// each node's Leftovers, the proxy's processes and cgroup, the network
// namespaces (bound in HostNetnsDir, or alive in any process), mounts of
// them, bridges and links of the fabric, the mount points made, the
// sysctls, the host lock. Empty after a clean StopCluster.
func ClusterLeftovers(dir string) ([]string, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	c, err := loadCluster(filepath.Join(dir, ClusterStateFile))
	if errors.Is(err, fs.ErrNotExist) {
		c, err = loadCluster(filepath.Join(dir, clusterStoppedFile))
	}
	if err != nil {
		return nil, err
	}
	var found []string
	for _, d := range c.NodeDirs {
		left, err := Leftovers(d)
		if errors.Is(err, fs.ErrNotExist) {
			continue // never started
		}
		if err != nil {
			return nil, err
		}
		for _, l := range left {
			found = append(found, filepath.Base(d)+": "+l)
		}
	}
	hs, err := hierarchies()
	if err != nil {
		return nil, err
	}
	cg := (&layout{CgroupPath: c.CgroupPath}).cgroupDirs(hs)
	if pids := cgroupProcs(cg); len(pids) > 0 {
		found = append(found, fmt.Sprintf("processes in the fabric's cgroup: %v", pids))
	}
	for _, d := range append(cg, c.CreatedCgroups...) {
		if _, err := os.Stat(d); err == nil {
			found = append(found, "cgroup "+d)
		}
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		data, err := os.ReadFile(p)
		if err == nil && strings.Contains(string(data), dir+"/") {
			found = append(found, fmt.Sprintf("process %s: %s", filepath.Base(filepath.Dir(p)), strings.ReplaceAll(string(data), "\x00", " ")))
		}
	}
	all := slices.Concat(c.GuestNetns, c.NodeNetns, []string{c.FabricNetns})
	for _, nsPath := range all {
		if _, err := os.Lstat(nsPath); err == nil {
			found = append(found, "network namespace "+nsPath)
		}
	}
	// A namespace whose file is gone lives on while a mount or a process
	// holds it: known by the fabric's bridges, which live only in it.
	mounts, err := mountsUnder(HostNetnsDir)
	if err != nil {
		return nil, err
	}
	for _, m := range mounts {
		if slices.Contains(all, m) {
			found = append(found, "mount "+m)
		}
	}
	found = append(found, fabricBridgesAlive()...)
	if c, err := net.Dial("unix", EgressSocket(dir)); err == nil {
		c.Close()
		found = append(found, "socket "+EgressSocket(dir)+" answers")
	}
	for _, d := range c.CreatedHostDirs {
		if _, err := os.Lstat(d); err == nil {
			found = append(found, "host directory "+d)
		}
	}
	if owner, _ := os.ReadFile(hostLock); string(owner) == dir {
		found = append(found, "host lock "+hostLock)
	}
	for s, v := range c.Sysctls {
		if cur, err := os.ReadFile("/proc/sys/" + s); err == nil && strings.TrimSpace(string(cur)) != v {
			found = append(found, fmt.Sprintf("sysctl %s = %s, was %s", s, strings.TrimSpace(string(cur)), v))
		}
	}
	return found, nil
}

// fabricBridgesAlive looks in the network namespace of every process for
// the fabric's bridges: a namespace held by a process outlives its file.
func fabricBridgesAlive() []string {
	var found []string
	seen := map[string]bool{}
	nss, _ := filepath.Glob("/proc/[0-9]*/ns/net")
	for _, p := range nss {
		id, err := os.Readlink(p)
		if err != nil || seen[id] {
			continue
		}
		seen[id] = true
		nsf, err := netns.GetFromPath(p)
		if err != nil {
			continue
		}
		h, err := netlink.NewHandleAt(nsf)
		nsf.Close()
		if err != nil {
			continue
		}
		for _, name := range []string{"fabric0", "fab-n1"} {
			if l, err := h.LinkByName(name); err == nil && (l.Type() == "bridge" || l.Type() == "veth") {
				found = append(found, fmt.Sprintf("link %s in %s (%s)", name, id, p))
			}
		}
		h.Close()
	}
	return found
}

// newNamedNetns makes a network namespace bound at path, without moving
// the caller into it: netns.NewNamed moves its thread into the new
// namespace, so it runs in ns.Do of the caller's own namespace, which
// puts the thread back afterwards (or discards it).
func newNamedNetns(p string) error {
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	here, err := ns.GetCurrentNS()
	if err != nil {
		return err
	}
	defer here.Close()
	return here.Do(func(ns.NetNS) error {
		made, err := netns.NewNamed(filepath.Base(p))
		if err == nil {
			made.Close()
		}
		return err
	})
}

func netnsHandle(p string) (*netlink.Handle, error) {
	target, err := netns.GetFromPath(p)
	if err != nil {
		return nil, err
	}
	defer target.Close()
	return netlink.NewHandleAt(target)
}

func linkUp(h *netlink.Handle, name string) error {
	l, err := h.LinkByName(name)
	if err != nil {
		return fmt.Errorf("link %s: %w", name, err)
	}
	return h.LinkSetUp(l)
}

func addAddr(h *netlink.Handle, name, cidr string) error {
	l, err := h.LinkByName(name)
	if err != nil {
		return err
	}
	a, err := netlink.ParseAddr(cidr)
	if err != nil {
		return err
	}
	return h.AddrAdd(l, a)
}

// removeNetns unbinds the network namespace at p and removes its file;
// the namespace goes once no process is in it.
func removeNetns(p string) error {
	if err := unix.Unmount(p, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("unmount %s: %w", p, err)
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}
