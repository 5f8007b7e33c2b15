# Versions of the local control plane used by tests, the demo and benchmarks.
# Sourced by hack/build-control-plane.sh; keep in step with tools/*/go.mod.
KUBE_VERSION=v1.37.2
KUBE_STAGING_VERSION=v0.37.2
ETCD_VERSION=v3.7.3
