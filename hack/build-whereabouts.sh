#!/usr/bin/env bash
# Builds whereabouts' CNI IPAM plugin, the IPAM tenure migrates from, into a
# cache directory keyed by version, with the CRDs its plugin writes
# (IPPool, OverlappingRangeIPReservation, and NodeSlicePool, which it reads
# for node_slice_size) taken from the same module's
# doc/crds: the end-to-end switch test (test/e2e/whereabouts_test.go)
# installs them and lets this binary allocate as a runtime would run it.
# The version is hack/control-plane-versions.sh's WHEREABOUTS_VERSION
# (tools/whereabouts/go.mod, hack/gen-tool-modules.sh). Prints the
# directory.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
mod=github.com/k8snetworkplumbingwg/whereabouts
. "$root/hack/control-plane-versions.sh"
version=$WHEREABOUTS_VERSION
dir=${TENURE_CACHE_DIR:-$HOME/.cache/tenure}/whereabouts-$version
crds=(whereabouts.cni.cncf.io_ippools.yaml whereabouts.cni.cncf.io_overlappingrangeipreservations.yaml whereabouts.cni.cncf.io_nodeslicepools.yaml)
missing=0
[[ -x "$dir/whereabouts" ]] || missing=1
for c in "${crds[@]}"; do [[ -f "$dir/crds/$c" ]] || missing=1; done
if ((missing)); then
  echo "building whereabouts $version -> $dir" >&2
  mkdir -p "$dir/crds"
  cd "$root/tools/whereabouts"
  # The binary's name is the package directory's (cmd); a runtime finds
  # the plugin by its ipam type, whereabouts.
  CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X $mod/pkg/version.Version=$version" -o "$dir/whereabouts.tmp" "$mod/cmd"
  mv "$dir/whereabouts.tmp" "$dir/whereabouts"
  src=$(go list -m -f '{{.Dir}}' "$mod")
  for c in "${crds[@]}"; do install -m 0644 "$src/doc/crds/$c" "$dir/crds/$c"; done
fi
echo "$dir"
