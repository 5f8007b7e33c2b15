#!/usr/bin/env bash
# Builds helm (hack/control-plane-versions.sh's HELM_VERSION, pinned in
# tools/helm/go.mod) from the Go module proxy into the tool cache
# ($TENURE_CACHE_DIR/bin, default ~/.cache/tenure/bin) as helm-VERSION and a
# helm link, once. The chart's tests (test/chart) run it. Prints the path.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
. "$root/hack/control-plane-versions.sh"
bin=$(tool_bin_dir)
out="$bin/helm-$HELM_VERSION"
if [[ ! -x "$out" ]]; then
  echo "building helm $HELM_VERSION -> $out" >&2
  cd "$root/tools/helm"
  CGO_ENABLED=0 go build -trimpath \
    -ldflags "-s -w -X helm.sh/helm/v4/internal/version.version=$HELM_VERSION" \
    -o "$out.tmp" helm.sh/helm/v4/cmd/helm
  mv "$out.tmp" "$out"
fi
ln -sf "helm-$HELM_VERSION" "$bin/helm"
echo "$out"
