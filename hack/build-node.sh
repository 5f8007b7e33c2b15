#!/usr/bin/env bash
# Builds the local node's programs into the cache directory and prints it:
# kubelet, kube-controller-manager and kube-scheduler (tools/kubernetes, the
# module kube-apiserver is built from), containerd with its runc shim and ctr
# (tools/containerd), Multus (tools/multus: the thin CNI plugin, and the thick
# plugin's multus-daemon, multus-shim, install_multus and passthru-cni, in one
# build that shares their packages) and the sandbox's
# pause program (hack/pause). runc itself comes from the distribution
# (`apt-get install runc`). Cache: $TENURE_CACHE_DIR (default ~/.cache/tenure);
# each binary is bin/NAME-VERSION with bin/NAME linked to it, so a version bump
# never reuses a stale build and a present one is never rebuilt.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
. "$root/hack/control-plane-versions.sh"
bin=$(tool_bin_dir)
export CGO_ENABLED=0

# missing VERSION NAME...: true when any NAME-VERSION is not built yet.
missing() {
  local version=$1 name; shift
  for name; do [[ -x "$bin/$name-$version" ]] || return 0; done
  return 1
}

# build MODULE_DIR VERSION LDFLAGS TAGS PACKAGE...: one `go build` for all the
# packages, so the work they share is compiled once, then each binary moved
# to bin/NAME-VERSION.
build() {
  local dir=$1 version=$2 ldflags=$3 tags=$4; shift 4
  local out="$bin/.build-$version.$$" started=$SECONDS pkg name
  rm -rf "$out"
  (cd "$dir" && go build -trimpath -tags "$tags" -ldflags "-s -w $ldflags" -o "$out/" "$@")
  for pkg; do
    name=${pkg##*/}
    mv "$out/$name" "$bin/$name-$version"
  done
  rmdir "$out"
  echo "  built in $((SECONDS - started))s" >&2
}

link() {
  local version=$1 name; shift
  for name; do ln -sf "$name-$version" "$bin/$name"; done
}

containerd=(containerd containerd-shim-runc-v2 ctr)
if missing "$CONTAINERD_VERSION" "${containerd[@]}"; then
  echo "building containerd ${CONTAINERD_VERSION} -> $bin" >&2
  # no_btrfs: the btrfs snapshotter needs cgo; the node uses overlayfs.
  build "$root/tools/containerd" "$CONTAINERD_VERSION" \
    "-X github.com/containerd/containerd/v2/version.Version=${CONTAINERD_VERSION}" no_btrfs \
    "${containerd[@]/#/github.com/containerd/containerd/v2/cmd/}"
fi
link "$CONTAINERD_VERSION" "${containerd[@]}"

multus=(multus multus-daemon multus-shim install_multus passthru-cni)
if missing "$MULTUS_VERSION" "${multus[@]}"; then
  echo "building ${multus[*]} ${MULTUS_VERSION} -> $bin" >&2
  build "$root/tools/multus" "$MULTUS_VERSION" \
    "-X gopkg.in/k8snetworkplumbingwg/multus-cni.v4/pkg/multus.version=${MULTUS_VERSION}" "" \
    "${multus[@]/#/gopkg.in/k8snetworkplumbingwg/multus-cni.v4/cmd/}"
fi
link "$MULTUS_VERSION" "${multus[@]}"

# pause lives in this repository: its version is its source's hash.
pause_version=$(cat "$root/hack/pause/"*.go | sha256sum | cut -c1-12)
if missing "$pause_version" pause; then
  echo "building pause $pause_version -> $bin" >&2
  build "$root" "$pause_version" "" "" ./hack/pause
fi
link "$pause_version" pause

kube=(kubelet kube-controller-manager kube-scheduler)
# Last: the longest, and it shares most of its compile work with a
# kube-apiserver build that may still be filling the Go build cache.
if missing "$KUBE_VERSION" "${kube[@]}"; then
  echo "building ${kube[*]} ${KUBE_VERSION} (cold: 15 to 25 min on 2 cores) -> $bin" >&2
  build "$root/tools/kubernetes" "$KUBE_VERSION" "$(kube_version_ldflags)" "" "${kube[@]/#/k8s.io/kubernetes/cmd/}"
fi
link "$KUBE_VERSION" "${kube[@]}"

command -v runc >/dev/null || echo "runc is not installed (apt-get install runc); containerd needs it" >&2
echo "$bin"
