#!/usr/bin/env bash
# Builds kube-apiserver and etcd for the local control plane into a cache
# directory and prints nothing but errors when they are already there.
# Cache: $TENURE_CACHE_DIR (default ~/.cache/tenure); binaries are keyed by
# version so a version bump never reuses a stale build.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
. "$root/hack/control-plane-versions.sh"
bin=$(tool_bin_dir)

apiserver="$bin/kube-apiserver-${KUBE_VERSION}"
etcd="$bin/etcd-${ETCD_VERSION}"

if [[ ! -x "$apiserver" ]]; then
  echo "building kube-apiserver ${KUBE_VERSION} (cold: ~6 min on 2 cores) -> $apiserver" >&2
  ld=$(kube_version_ldflags)
  (cd "$root/tools/kubernetes" && go build -trimpath -ldflags "-s -w $ld" -o "$apiserver.tmp" k8s.io/kubernetes/cmd/kube-apiserver)
  mv "$apiserver.tmp" "$apiserver"
fi

if [[ ! -x "$etcd" ]]; then
  echo "building etcd ${ETCD_VERSION} -> $etcd" >&2
  (cd "$root/tools/etcd" && go build -trimpath -ldflags "-s -w" -o "$etcd.tmp" go.etcd.io/etcd/server/v3)
  mv "$etcd.tmp" "$etcd"
fi

ln -sf "$(basename "$apiserver")" "$bin/kube-apiserver"
ln -sf "$(basename "$etcd")" "$bin/etcd"
echo "$bin"
