#!/usr/bin/env bash
# Builds the reference CNI plugins (bridge, macvlan, loopback) that the
# end-to-end tests and the demo drive with tenure as IPAM, and host-local,
# the local node's cluster-network IPAM (dev/devnode), into a cache
# directory keyed by version. Prints the directory.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
version=$(sed -n "s/^require github.com\/containernetworking\/plugins \(v[^ ]*\)$/\1/p; s/^\tgithub.com\/containernetworking\/plugins \(v[^ ]*\)$/\1/p" "$root/tools/cni-plugins/go.mod" | head -1)
[[ -n "$version" ]] || { echo "no containernetworking/plugins version in tools/cni-plugins/go.mod" >&2; exit 1; }
dir=${TENURE_CACHE_DIR:-$HOME/.cache/tenure}/cni-plugins-$version
if [[ ! -x "$dir/bridge" || ! -x "$dir/macvlan" || ! -x "$dir/loopback" || ! -x "$dir/host-local" ]]; then
  echo "building reference CNI plugins $version -> $dir" >&2
  mkdir -p "$dir"
  (cd "$root/tools/cni-plugins" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$dir/" \
    github.com/containernetworking/plugins/plugins/main/bridge \
    github.com/containernetworking/plugins/plugins/main/macvlan \
    github.com/containernetworking/plugins/plugins/main/loopback \
    github.com/containernetworking/plugins/plugins/ipam/host-local)
fi
echo "$dir"
