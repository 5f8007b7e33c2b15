#!/usr/bin/env bash
# Regenerates tools/*/go.mod (kubernetes, etcd, containerd, multus) from the
# versions in hack/control-plane-versions.sh. The staging replace list is read
# from the Kubernetes release's own go.mod, not hard-coded, so a version bump
# is this script plus a commit.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
. "$root/hack/control-plane-versions.sh"

kmod=$(go mod download -json "k8s.io/kubernetes@${KUBE_VERSION}" | sed -n 's/^\s*"GoMod": "\(.*\)",$/\1/p')
goline=$(grep -m1 '^go ' "$kmod")

cd "$root/tools/kubernetes"
{
  echo "module github.com/tenure-ipam/tenure/tools/kubernetes"
  echo
  echo "$goline"
  echo
  echo "require k8s.io/kubernetes ${KUBE_VERSION}"
  echo
  echo "replace ("
  grep -E '^\s*k8s.io/[a-z0-9-]+ => ./staging/' "$kmod" | awk -v v="$KUBE_STAGING_VERSION" '{print "\t" $1 " => " $1 " " v}'
  echo ")"
} > go.mod
GOFLAGS=-mod=mod go mod tidy

cd "$root/tools/etcd"
cat > go.mod <<MOD
module github.com/tenure-ipam/tenure/tools/etcd

go 1.26.0

require go.etcd.io/etcd/server/v3 ${ETCD_VERSION}
MOD
GOFLAGS=-mod=mod go mod tidy

cd "$root/tools/containerd"
cat > go.mod <<MOD
module github.com/tenure-ipam/tenure/tools/containerd

go 1.26.0

require github.com/containerd/containerd/v2 ${CONTAINERD_VERSION}
MOD
GOFLAGS=-mod=mod go mod tidy

cd "$root/tools/multus"
cat > go.mod <<MOD
module github.com/tenure-ipam/tenure/tools/multus

go 1.26.0

require gopkg.in/k8snetworkplumbingwg/multus-cni.v4 ${MULTUS_VERSION}
MOD
GOFLAGS=-mod=mod go mod tidy
