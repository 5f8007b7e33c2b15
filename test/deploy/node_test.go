//go:build integration

package deploy_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	current "github.com/containernetworking/cni/pkg/types/100"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipamclaimsv1alpha1 "github.com/tenure-ipam/tenure/api/ipamclaims/v1alpha1"
	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/cniwire"
	"github.com/tenure-ipam/tenure/test/controlplane/cptest"
	"github.com/tenure-ipam/tenure/test/testbed"
)

// pod simulates one pod of the DaemonSet on this machine: hostRoot stands
// for the node's filesystem, ctrRoot for the container's. Each volume mount
// is a symlink from ctrRoot+mountPath to the volume (a hostPath under
// hostRoot, a ConfigMap's files), the image's binaries are copied to
// ctrRoot/usr/local/bin, and a container's command, args and exec probes
// run with their absolute paths put under ctrRoot and $(VAR) expanded as
// the kubelet does.
type pod struct {
	t                 *testing.T
	spec              *corev1.PodSpec
	hostRoot, ctrRoot string
	nodeName          string
	configMaps        map[string]map[string]string
}

func (p *pod) ctrPath(s string) string { return filepath.Join(p.ctrRoot, s) }

// setUp lays out container c's filesystem.
func (p *pod) setUp(c *corev1.Container, bins testbed.Binaries) {
	t := p.t
	t.Helper()
	if err := os.RemoveAll(p.ctrRoot); err != nil {
		t.Fatal(err)
	}
	bin := p.ctrPath("/usr/local/bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, b := range []string{bins.Shim, bins.Agent} {
		copyFile(t, b, filepath.Join(bin, filepath.Base(b)))
	}
	for _, m := range c.VolumeMounts {
		var vol *corev1.Volume
		for i := range p.spec.Volumes {
			if p.spec.Volumes[i].Name == m.Name {
				vol = &p.spec.Volumes[i]
			}
		}
		if vol == nil {
			t.Fatalf("container %s mounts missing volume %s", c.Name, m.Name)
		}
		var src string
		switch {
		case vol.HostPath != nil:
			src = filepath.Join(p.hostRoot, vol.HostPath.Path)
			if vol.HostPath.Type == nil || *vol.HostPath.Type != corev1.HostPathDirectoryOrCreate {
				t.Fatalf("hostPath volume %s is not DirectoryOrCreate", vol.Name)
			}
			if err := os.MkdirAll(src, 0o755); err != nil {
				t.Fatal(err)
			}
		case vol.ConfigMap != nil:
			data, ok := p.configMaps[vol.ConfigMap.Name]
			if !ok {
				t.Fatalf("volume %s: ConfigMap %s is not in the build", vol.Name, vol.ConfigMap.Name)
			}
			src = filepath.Join(p.hostRoot, "configmaps", vol.ConfigMap.Name)
			if err := os.MkdirAll(src, 0o755); err != nil {
				t.Fatal(err)
			}
			for k, v := range data {
				if err := os.WriteFile(filepath.Join(src, k), []byte(v), 0o644); err != nil {
					t.Fatal(err)
				}
			}
		default:
			t.Fatalf("volume %s: kind not simulated", vol.Name)
		}
		dst := p.ctrPath(m.MountPath)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(src, dst); err != nil {
			t.Fatal(err)
		}
	}
}

// env resolves the container's environment as the kubelet would, for the
// sources the manifests use; anything else is left out, and
// TestAgentPodOnANode checks that nothing is.
func (p *pod) env(c *corev1.Container) map[string]string {
	env := map[string]string{}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			env[e.Name] = e.Value
		case e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "spec.nodeName":
			env[e.Name] = p.nodeName
		case e.ValueFrom.ResourceFieldRef != nil && e.ValueFrom.ResourceFieldRef.ContainerName == c.Name:
			if q, ok := c.Resources.Limits[corev1.ResourceName(strings.TrimPrefix(e.ValueFrom.ResourceFieldRef.Resource, "limits."))]; ok &&
				strings.HasPrefix(e.ValueFrom.ResourceFieldRef.Resource, "limits.") {
				env[e.Name] = strconv.FormatInt(q.Value(), 10)
			}
		}
	}
	return env
}

var kubeletVar = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// argv is what the container runs for cmd (its command+args or a probe's
// command).
func (p *pod) argv(c *corev1.Container, cmd []string) []string {
	env := p.env(c)
	var out []string
	for _, a := range cmd {
		a = kubeletVar.ReplaceAllStringFunc(a, func(m string) string {
			if v, ok := env[m[2:len(m)-1]]; ok {
				return v
			}
			return m
		})
		if strings.HasPrefix(a, "/") {
			a = p.ctrPath(a)
		} else if k, v, ok := strings.Cut(a, "="); ok && strings.HasPrefix(k, "--") && strings.HasPrefix(v, "/") {
			a = k + "=" + p.ctrPath(v)
		}
		out = append(out, a)
	}
	return out
}

func (p *pod) run(ctx context.Context, c *corev1.Container, cmd []string) ([]byte, error) {
	argv := p.argv(c, cmd)
	out, err := exec.CommandContext(ctx, argv[0], argv[1:]...).CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("%q: %v\n%s", argv, err, out)
	}
	return out, nil
}

func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}

func inodeOf(t *testing.T, p string) (uint64, time.Time) {
	t.Helper()
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t).Ino, fi.ModTime()
}

// impersonatingKubeconfig writes a copy of the admin kubeconfig that acts as
// service account sa: the process using it has exactly sa's RBAC. extra is
// what the API server adds to the user of a token bound to a pod (its node
// and pod names), which the agent's node restriction judges by.
func impersonatingKubeconfig(t *testing.T, sa, dir string, extra map[string][]string) string {
	t.Helper()
	cfg, err := clientcmd.LoadFromFile(cptest.Current().KubeconfigPath)
	if err != nil {
		t.Fatal(err)
	}
	user, groups := serviceAccountUser(sa)
	for _, ai := range cfg.AuthInfos {
		ai.Impersonate = user
		ai.ImpersonateGroups = groups
		ai.ImpersonateUserExtra = extra
	}
	p := filepath.Join(dir, sa+".kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, p); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestAgentPodOnANode runs the agent DaemonSet's pod as written, on a
// simulated node: the init container installs the shim and the flat config
// into the node's CNI directories (and, run again, changes nothing); the
// agent container runs with nothing but its ClusterRole (impersonating its
// service account); its exec probes pass; the installed shim then serves
// the example attachments: an address on the storage SAN, released by DEL,
// and the KubeVirt VM network's addresses and delegated prefix recorded in
// the example IPAMClaim.
func TestAgentPodOnANode(t *testing.T) {
	ctx := testContext(t, 4*time.Minute)
	bins, err := testbed.Build("")
	if err != nil {
		t.Fatal(err)
	}
	objs := kustomizeBuild(t)
	ds := typed[appsv1.DaemonSet](t, find(t, objs, "DaemonSet", "tenure-agent"))
	cm, flat := flatConfig(t, objs)

	// Short paths: the agent socket path must fit in a sockaddr_un.
	root, err := os.MkdirTemp("", "tdep")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	const node = "deploy-node"
	p := &pod{
		t: t, spec: &ds.Spec.Template.Spec, nodeName: node,
		hostRoot: filepath.Join(root, "h"), ctrRoot: filepath.Join(root, "c"),
		configMaps: map[string]map[string]string{cm.GetName(): {flatConfigKey: string(flat)}},
	}

	// The init container.
	ic := &p.spec.InitContainers[0]
	p.setUp(ic, bins)
	installCmd := append(slices.Clone(ic.Command), ic.Args...)
	out, err := p.run(ctx, ic, installCmd)
	if err != nil {
		t.Fatalf("init container: %v", err)
	}
	t.Logf("init container:\n%s", out)
	hostShim := filepath.Join(p.hostRoot, "/opt/cni/bin/tenure")
	hostFlat := filepath.Join(p.hostRoot, cniwire.DefaultFlatConfig)
	want, _ := os.ReadFile(bins.Shim)
	if got, err := os.ReadFile(hostShim); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("the node's /opt/cni/bin/tenure is not the shim (err %v)", err)
	}
	if fi, _ := os.Stat(hostShim); fi.Mode().Perm() != 0o755 {
		t.Errorf("shim mode %v", fi.Mode().Perm())
	}
	if got, err := os.ReadFile(hostFlat); err != nil || !bytes.Equal(got, flat) {
		t.Fatalf("the node's flat config %q (err %v), want the ConfigMap's %q", got, err, flat)
	}
	ino, mtime := inodeOf(t, hostShim)
	fino, fmtime := inodeOf(t, hostFlat)
	time.Sleep(20 * time.Millisecond)
	if _, err := p.run(ctx, ic, installCmd); err != nil {
		t.Fatalf("init container, second run: %v", err)
	}
	if i, m := inodeOf(t, hostShim); i != ino || !m.Equal(mtime) {
		t.Error("a second install replaced an identical shim")
	}
	if i, m := inodeOf(t, hostFlat); i != fino || !m.Equal(fmtime) {
		t.Error("a second install replaced an identical flat config")
	}
	ver, err := testbed.ExecShim(ctx, hostShim, testbed.CNICall{Command: "VERSION", Config: []byte(`{"cniVersion":"1.0.0"}`)})
	if err != nil || !bytes.Contains(ver, []byte("supportedVersions")) {
		t.Fatalf("installed shim VERSION: %s, %v", ver, err)
	}

	// The agent container, with its own RBAC only.
	c := adminClient(t)
	applyRBAC(t, ctx, c, objs)
	// The DaemonSet's pod authenticates with the token the kubelet
	// projects, bound to that pod on this node: the API server names both
	// in the user, and the node restriction holds the agent to the node.
	kubeconfig := impersonatingKubeconfig(t, ds.Spec.Template.Spec.ServiceAccountName, root, map[string][]string{
		"authentication.kubernetes.io/node-name": {node},
		"authentication.kubernetes.io/pod-name":  {"tenure-agent-" + node},
	})
	ac := container(t, p.spec.Containers, "agent")
	p.setUp(ac, bins)
	argv := p.argv(ac, append(slices.Clone(ac.Command), ac.Args...))
	// In a pod the agent finds the in-cluster config; here, the
	// impersonating kubeconfig stands in for it.
	argv = append(argv, "--kubeconfig="+kubeconfig)
	// The pod's metrics port is the host's in a hostNetwork pod, and a
	// real node's agent on this machine (test/node's, run beside) may hold
	// it: the simulated one serves its metrics on a free loopback port.
	argv = append(argv, "--metrics-addr=127.0.0.1:0")
	logPath := filepath.Join(root, "agent.log")
	env := p.env(ac)
	if len(env) != len(ac.Env) {
		t.Fatalf("the agent container's env has sources this test cannot resolve: %+v", ac.Env)
	}
	if v, err := strconv.ParseInt(env["GOMEMLIMIT"], 10, 64); err != nil || v != ac.Resources.Limits.Memory().Value() {
		t.Fatalf("GOMEMLIMIT resolves to %q, want the container's memory limit in bytes", env["GOMEMLIMIT"])
	}
	environ := os.Environ()
	for k, v := range env {
		environ = append(environ, k+"="+v)
	}
	proc, err := testbed.StartProcessEnv("agent", argv[0], logPath, environ, argv[1:]...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		proc.Stop()
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("agent log:\n%s", b)
		}
	})

	var probeErr error
	_ = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 90*time.Second, true, func(ctx context.Context) (bool, error) {
		_, probeErr = p.run(ctx, ac, ac.ReadinessProbe.Exec.Command)
		return probeErr == nil || !proc.Running(), nil
	})
	if probeErr != nil {
		b, _ := os.ReadFile(logPath)
		t.Fatalf("readiness probe never passed: %v\nagent log:\n%s", probeErr, b)
	}
	if _, err := p.run(ctx, ac, ac.LivenessProbe.Exec.Command); err != nil {
		t.Fatalf("liveness probe: %v", err)
	}
	socket, _ := flagValue(argv, "socket")

	exs := examples(t)
	ns := fmt.Sprintf("tenure-node-test-%d", time.Now().UnixNano()%1_000_000) // fresh under -count
	if err := testbed.EnsureNamespace(ctx, c, ns); err != nil {
		t.Fatal(err)
	}
	// The example attachment's config as the runtime hands it over: the
	// flat config is the one the init container installed (through
	// configuration_path, since this machine's /etc/cni/net.d is not the
	// simulated node's), the socket the one the agent runs on here.
	netconf := func(nad string) []byte {
		conf, _, _ := unstructured.NestedString(find(t, exs, "NetworkAttachmentDefinition", nad).Object, "spec", "config")
		var m map[string]any
		if err := json.Unmarshal([]byte(conf), &m); err != nil {
			t.Fatal(err)
		}
		ipam := m["ipam"].(map[string]any)
		ipam["configuration_path"] = hostFlat
		ipam["agent_socket"] = socket
		// The simulated node has none of the examples' parent interfaces
		// (macvlan's master eth1.100): the ADD is the shim's alone, no
		// segment exists to probe, so the network opts out as an
		// operator opts out a segment where no probe can work.
		ipam["probe"] = false
		b, _ := json.Marshal(m)
		return b
	}
	cniAdd := func(podObj *corev1.Pod, ifName string, conf []byte) *current.Result {
		t.Helper()
		out, err := testbed.ExecShim(ctx, hostShim, testbed.CNICall{
			Command: "ADD", ContainerID: "sandbox-" + string(podObj.UID), IfName: ifName,
			Args: testbed.PodArgs(podObj.Namespace, podObj.Name, string(podObj.UID)), Config: conf,
		})
		if err != nil {
			t.Fatalf("ADD for pod %s: %v", podObj.Name, err)
		}
		r := &current.Result{}
		if err := json.Unmarshal(out, r); err != nil {
			t.Fatalf("result %s: %v", out, err)
		}
		return r
	}
	ownedBy := func(uid string) []string {
		list := &tenurev1alpha1.IPReservationList{}
		if err := c.List(ctx, list); err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, r := range list.Items {
			if r.Spec.Owner.UID == uid {
				out = append(out, r.Name)
			}
		}
		return out
	}

	// Storage SAN: an address from the /29, not the network, broadcast or
	// excluded array address; DEL gives it back.
	san, err := testbed.CreatePod(ctx, c, ns, "san-client", node, map[string]string{"k8s.v1.cni.cncf.io/networks": "storage-san"})
	if err != nil {
		t.Fatal(err)
	}
	sanConf := netconf("storage-san")
	r := cniAdd(san, "net1", sanConf)
	if len(r.IPs) != 1 {
		t.Fatalf("storage-san ADD: %d addresses", len(r.IPs))
	}
	a, _ := netip.AddrFromSlice(r.IPs[0].Address.IP.To4())
	if !netip.MustParsePrefix("10.100.0.0/29").Contains(a) || slices.Contains([]string{"10.100.0.0", "10.100.0.1", "10.100.0.7"}, a.String()) {
		t.Errorf("storage-san address %s", a)
	}
	if r.IPs[0].Gateway != nil {
		t.Errorf("storage-san result has gateway %s", r.IPs[0].Gateway)
	}
	if held := ownedBy(string(san.UID)); len(held) != 1 {
		t.Errorf("storage-san pod holds %d reservations, want 1: %v", len(held), held)
	}
	if _, err := testbed.ExecShim(ctx, hostShim, testbed.CNICall{
		Command: "DEL", ContainerID: "sandbox-" + string(san.UID), IfName: "net1",
		Args: testbed.PodArgs(ns, san.Name, string(san.UID)), Config: sanConf,
	}); err != nil {
		t.Fatalf("storage-san DEL: %v", err)
	}
	if held := ownedBy(string(san.UID)); len(held) != 0 {
		t.Errorf("after DEL the pod still holds %v", held)
	}

	// KubeVirt: the example claim and the example launcher pod.
	claim := typed[ipamclaimsv1alpha1.IPAMClaim](t, find(t, exs, "IPAMClaim", ""))
	claim.Namespace = ns
	if err := c.Create(ctx, claim); err != nil {
		t.Fatal(err)
	}
	vmPod := typed[corev1.Pod](t, find(t, exs, "Pod", ""))
	vmPod.Namespace, vmPod.Spec.NodeName = ns, node // as scheduled
	if err := c.Create(ctx, vmPod); err != nil {
		t.Fatal(err)
	}
	r = cniAdd(vmPod, claim.Spec.Interface, netconf("vm-net"))
	var v4, v6 int
	for _, ip := range r.IPs {
		if ip.Address.IP.To4() != nil {
			v4++
		} else {
			v6++
		}
	}
	if v4 != 1 || v6 != 1 {
		t.Errorf("vm-net ADD gave %v, want one IPv4 and one IPv6 address", r.IPs)
	}
	got := &ipamclaimsv1alpha1.IPAMClaim{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(claim), got); err != nil {
		t.Fatal(err)
	}
	if len(got.Status.IPs) != 2 || len(got.Status.DelegatedPrefixes) != 1 {
		t.Fatalf("claim status ips %v prefixes %v, want 2 addresses and 1 prefix", got.Status.IPs, got.Status.DelegatedPrefixes)
	}
	pfx, err := netip.ParsePrefix(got.Status.DelegatedPrefixes[0])
	if err != nil || pfx.Bits() != 56 || !netip.MustParsePrefix("2001:db8:100::/40").Contains(pfx.Addr()) {
		t.Errorf("delegated prefix %s (%v), want a /56 of 2001:db8:100::/40", got.Status.DelegatedPrefixes[0], err)
	}
	if got.Status.OwnerPod == nil || got.Status.OwnerPod.Name != vmPod.Name {
		t.Errorf("claim ownerPod %+v, want %s", got.Status.OwnerPod, vmPod.Name)
	}

	// Nothing the agent did was refused.
	logData, _ := os.ReadFile(logPath)
	if bytes.Contains(bytes.ToLower(logData), []byte("forbidden")) {
		t.Errorf("the agent was refused something its work needs:\n%s", logData)
	}
}
