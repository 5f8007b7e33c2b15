package devnode

import (
	"encoding/json"
	"fmt"
	"strconv"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"
)

// containerdConfig is containerd's config (version 3, containerd 2.x). Every
// path it would default to on the host is moved into the node's directory,
// and what would reach past loopback is off.
func (n *layout) containerdConfig(sandboxImage, runc string) []byte {
	q := strconv.Quote
	return fmt.Appendf(nil, `version = 3
root = %s
state = %s

[grpc]
  address = %s

[ttrpc]
  address = ""

[debug]
  address = ""

[metrics]
  address = ""

[plugins]
  [plugins."io.containerd.internal.v1.opt"]
    # Would be /opt/containerd.
    path = %s

  [plugins."io.containerd.nri.v1.nri"]
    # NRI would listen on /var/run/nri/nri.sock.
    disable = true

  [plugins."io.containerd.cri.v1.images"]
    snapshotter = "overlayfs"
    [plugins."io.containerd.cri.v1.images".pinned_images]
      # Imported from a tarball: the node pulls from no registry.
      sandbox = %s

  [plugins."io.containerd.cri.v1.runtime"]
    # Root here lacks CAP_SYS_RESOURCE: without this every sandbox fails
    # with "can't get final child's PID from pipe: EOF".
    restrict_oom_score_adj = true
    # Network namespaces in /var/run/netns, where the tenure agent's
    # DaemonSet mounts them from (DHCPv6 and routes inside pods).
    netns_mounts_under_state_dir = false
    enable_cdi = false
    [plugins."io.containerd.cri.v1.runtime".containerd]
      default_runtime_name = "runc"
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
          BinaryName = %s
          # runc's state, by default under /run/containerd/runc.
          Root = %s
          SystemdCgroup = false
    # The standard paths: deploy/ installs tenure's shim and flat
    # configuration there, and the shim looks for them there.
    [plugins."io.containerd.cri.v1.runtime".cni]
      bin_dirs = [%s]
      conf_dir = %s
      max_conf_num = 1

  [plugins."io.containerd.grpc.v1.cri"]
    disable_tcp_service = true
    stream_server_address = "127.0.0.1"
    stream_server_port = "0"
`, q(n.containerdRoot()), q(n.containerdState()), q(n.containerdSocket()),
		q(n.path("containerd", "opt")), q(sandboxImage), q(runc), q(n.path("runc")),
		q(HostCNIBinDir), q(HostCNIConfDir))
}

// kubeletConfig is the kubelet's configuration file.
func (n *layout) kubeletConfig(address string, port int, net *NodeNet) ([]byte, error) {
	cfg := kubeletv1beta1.KubeletConfiguration{
		TypeMeta: metav1.TypeMeta{APIVersion: "kubelet.config.k8s.io/v1beta1", Kind: "KubeletConfiguration"},
		// Loopback only, or the node's own address in its own namespace:
		// the API server reaches it there, nothing else must.
		Address:      address,
		Port:         int32(port),
		ReadOnlyPort: 0,
		// No healthz server: readiness is the Node's Ready condition.
		HealthzPort: ptr.To(int32(0)),
		Authentication: kubeletv1beta1.KubeletAuthentication{
			Anonymous: kubeletv1beta1.KubeletAnonymousAuthentication{Enabled: ptr.To(false)},
			Webhook:   kubeletv1beta1.KubeletWebhookAuthentication{Enabled: ptr.To(false)},
		},
		Authorization: kubeletv1beta1.KubeletAuthorization{Mode: kubeletv1beta1.KubeletAuthorizationModeAlwaysAllow},
		// This host has cgroups v1 (hybrid) and no systemd managing them.
		CgroupDriver: "cgroupfs",
		FailCgroupV1: ptr.To(false),
		CgroupRoot:   n.CgroupPath,
		FailSwapOn:   ptr.To(false),
		// The host's iptables are not the node's to change.
		MakeIPTablesUtilChains:   ptr.To(false),
		ContainerRuntimeEndpoint: "unix://" + n.containerdSocket(),
		// Defaults that are host paths, moved into the node's directory.
		VolumePluginDir: n.path("kubelet", "volume-plugins"),
		PodLogsDir:      n.path("pod-logs"),
		ResolverConfig:  ptr.To(""),
		// Imported images are pulled from nowhere: never collect them, and
		// never evict for a host disk the node does not own.
		ImageGCHighThresholdPercent: ptr.To(int32(100)),
		ImageGCLowThresholdPercent:  ptr.To(int32(99)),
		EvictionHard: map[string]string{
			"memory.available":  "1Mi",
			"nodefs.available":  "1%",
			"imagefs.available": "1%",
		},
		SerializeImagePulls: ptr.To(false),
		RegisterNode:        ptr.To(true),
		// Static pods, as a node's root may write them: the kubelet runs
		// each manifest there and creates its mirror pod.
		StaticPodPath: n.staticPodDir(),
	}
	if net != nil {
		// The API server comes with its kubelet client certificate (logs,
		// exec, port-forward); nothing else reaches the fabric.
		cfg.Authentication.X509.ClientCAFile = net.ClientCAFile
	}
	return yaml.Marshal(cfg)
}

// cniConfList is the node's cluster network: a bridge that gives the host no
// address and no route (isGateway false, no masquerade), so pod traffic
// stays between the pods, and host-local addresses kept in the node's
// directory.
func (n *layout) cniConfList(bridge, podCIDR string) ([]byte, error) {
	return json.MarshalIndent(map[string]any{
		"cniVersion": "1.0.0",
		"name":       n.NetworkName,
		"plugins": []any{map[string]any{
			"type":             "bridge",
			"bridge":           bridge,
			"isGateway":        false,
			"isDefaultGateway": false,
			"ipMasq":           false,
			"hairpinMode":      false,
			"ipam": map[string]any{
				"type":    "host-local",
				"dataDir": n.path("cni", "host-local"),
				"ranges":  [][]map[string]string{{{"subnet": podCIDR}}},
			},
		}},
	}, "", "  ")
}

// multusConfig is the node's CNI configuration, as Multus' DaemonSet writes
// it for the thin plugin: Multus first, delegating the cluster network
// (cluster, a conflist) and reading NetworkAttachmentDefinitions with
// kubeconfig. Its cache and log live in the node's directory.
func (n *layout) multusConfig(cluster []byte, kubeconfig string) ([]byte, error) {
	return json.MarshalIndent(map[string]any{
		"cniVersion": "1.0.0",
		"name":       "multus-cni-network",
		"type":       "multus",
		"kubeconfig": kubeconfig,
		"cniDir":     n.path("multus", "cache"),
		"confDir":    n.path("multus", "net.d"),
		"binDir":     HostCNIBinDir,
		"logFile":    n.path("logs", "multus.log"),
		"logLevel":   "verbose",
		// No readiness file: the cluster network is configured before the
		// kubelet starts.
		"readinessindicatorfile": "",
		"delegates":              []json.RawMessage{cluster},
	}, "", "  ")
}
