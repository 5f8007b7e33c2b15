# One image for every tenure binary: the CNI shim (tenure), the node agent
# (tenure-agent, which also installs the shim: `tenure-agent install`), the
# controller (tenure-controller) and tenurectl, all in /usr/local/bin.
#
#   docker build -t ghcr.io/tenure-ipam/tenure:v0.1.0 .
#   docker buildx build --platform linux/amd64,linux/arm64 -t ... .
#
# ./cmd/... is the product module's: its tenurectl has the operator commands
# only. The developer commands (dev, demo, bench) and what they link (the
# benchmark, the demo, the test bed, the control-plane launcher) are the
# developer module's (dev/), which `make build`'s bin/tenurectl carries.
#
# The binaries are static (CGO_ENABLED=0): the shim is copied onto every
# node's /opt/cni/bin and must run there whatever the host's libc. The
# runtime image is scratch: nothing but the binaries and a CA bundle, no
# shell, no package manager. The manifests in deploy/ give every container
# its command; the default user is the unprivileged 65532 (the agent's
# DaemonSet runs as root explicitly).

# Fixed Go release, matching go.mod's go line (>= 1.26.0).
FROM --platform=$BUILDPLATFORM golang:1.26.8-trixie AS build
WORKDIR /src
ENV CGO_ENABLED=0 \
    GOFLAGS=-trimpath \
    GOTOOLCHAIN=local
# Modules first: this layer survives source-only changes.
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod \
    go mod download && go mod verify
COPY . .
ARG TARGETOS=linux
ARG TARGETARCH=amd64
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    GOOS=$TARGETOS GOARCH=$TARGETARCH \
    go build -ldflags="-s -w -buildid=" -o /out/ ./cmd/... \
 && for b in tenure tenure-agent tenure-controller tenurectl; do test -x "/out/$b" || { echo "missing /out/$b" >&2; exit 1; }; done \
 && ls -l /out/

FROM scratch
LABEL org.opencontainers.image.title="tenure" \
      org.opencontainers.image.description="Cluster-wide IPAM CNI plugin for Kubernetes secondary networks" \
      org.opencontainers.image.source="https://github.com/tenure-ipam/tenure"
# For a --kubeconfig pointing at an API server with a public CA; in-cluster
# clients use the service account's CA.
COPY --from=build /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY --from=build /out/ /usr/local/bin/
ENV PATH=/usr/local/bin
USER 65532:65532
