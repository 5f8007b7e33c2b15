# Versions of the local cluster used by tests, the demo and benchmarks: the
# control plane (hack/build-control-plane.sh) and the node
# (hack/build-node.sh). Keep in step with tools/*/go.mod
# (hack/gen-tool-modules.sh regenerates them from here).
KUBE_VERSION=v1.37.2
KUBE_STAGING_VERSION=v0.37.2
ETCD_VERSION=v3.7.3
CONTAINERD_VERSION=v2.1.4
MULTUS_VERSION=v4.2.3
# whereabouts, the IPAM the end-to-end switch test migrates from
# (hack/build-whereabouts.sh).
WHEREABOUTS_VERSION=v0.9.4
# helm, which renders and installs charts/tenure in the chart's tests
# (hack/build-helm.sh).
HELM_VERSION=v4.3.2

# kube_version_ldflags prints the -X flags that stamp KUBE_VERSION into a
# Kubernetes binary, as its release build does: without them /version and
# the kubelet's node status report v0.0.0.
kube_version_ldflags() {
  local major=${KUBE_VERSION#v} minor=${KUBE_VERSION#v*.} pkg
  major=${major%%.*}; minor=${minor%%.*}
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    printf ' -X %s.gitVersion=%s -X %s.gitMajor=%s -X %s.gitMinor=%s' \
      "$pkg" "$KUBE_VERSION" "$pkg" "$major" "$pkg" "$minor"
  done
}

# tool_bin_dir creates and prints the cache directory the built binaries
# go to: $TENURE_CACHE_DIR/bin (default ~/.cache/tenure/bin).
tool_bin_dir() {
  local bin="${TENURE_CACHE_DIR:-$HOME/.cache/tenure}/bin"
  mkdir -p "$bin"
  echo "$bin"
}
