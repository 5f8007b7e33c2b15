#!/usr/bin/env bash
# Regenerates tools/*/go.mod (kubernetes, etcd, containerd, multus,
# whereabouts, helm) from the
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

# tools_module NAME MODULE VERSION: tools/NAME/go.mod requiring MODULE at
# VERSION, tidied.
tools_module() {
  cd "$root/tools/$1"
  printf 'module github.com/tenure-ipam/tenure/tools/%s\n\ngo 1.26.0\n\nrequire %s %s\n' "$1" "$2" "$3" > go.mod
  GOFLAGS=-mod=mod go mod tidy
}

tools_module etcd go.etcd.io/etcd/server/v3 "$ETCD_VERSION"
tools_module containerd github.com/containerd/containerd/v2 "$CONTAINERD_VERSION"
tools_module multus gopkg.in/k8snetworkplumbingwg/multus-cni.v4 "$MULTUS_VERSION"
tools_module whereabouts github.com/k8snetworkplumbingwg/whereabouts "$WHEREABOUTS_VERSION"
tools_module helm helm.sh/helm/v4 "$HELM_VERSION"
