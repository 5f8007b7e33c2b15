# tenure: cluster-wide IPAM for Kubernetes secondary networks.
#
#   make demo    start a local control plane and show tenure at work
#   make test    every test (builds the local control plane once, cached)
#   make build   binaries into bin/
#   make image   the tenure image, without docker, into bin/tenure-image.tar
#   make bench   the benchmark (see docs/performance.md); make bench-quick: its
#                500-ADD concurrency-50 scenario only, under two minutes;
#                make bench-vm: its real VM's ten migrations back and forth
#                between real nodes, each outage's distribution

SHELL := /bin/bash
GO ?= go
BIN := $(CURDIR)/bin
LDFLAGS := -s -w
export CGO_ENABLED := 0

.PHONY: all build image generate verify lint test-deps control-plane node-tools cni-plugins whereabouts helm guest test test-unit test-e2e demo bench bench-quick bench-vm clean

all: build

# The product's binaries, then tenurectl again from the developer module
# (dev/): the same commands plus dev, demo and bench. The image ships the
# product's.
build:
	$(GO) build -trimpath -ldflags "$(LDFLAGS)" -o $(BIN)/ ./cmd/...
	$(GO) -C dev build -trimpath -ldflags "$(LDFLAGS)" -o $(BIN)/ ./cmd/tenurectl
	cp -f $(BIN)/tenurectl $(BIN)/kubectl-tenure

# The image the Dockerfile describes, built without docker as an OCI tarball
# (ctr -n k8s.io images import bin/tenure-image.tar; crane push
# bin/tenure-image.tar REF). Its binaries are the product's ./cmd/... with
# the Dockerfile's flags (its tenurectl has no dev, demo or bench). bin/image
# is emptied first so that it holds exactly the binaries of ./cmd/..., like
# the Dockerfile's /out/. The writer is the developer module's.
image:
	rm -rf $(BIN)/image
	$(GO) build -trimpath -ldflags "-s -w -buildid=" -o $(BIN)/image/ ./cmd/...
	$(GO) -C dev run ./hack/image --bin $(BIN)/image --out $(BIN)/tenure-image.tar --kustomization $(CURDIR)/deploy/kustomization.yaml

generate:
	$(GO) generate ./api/...

test-deps:
	@bash hack/test-deps.sh

control-plane:
	@bash hack/build-control-plane.sh >/dev/null

# The local node's programs (kubelet, kube-controller-manager,
# kube-scheduler, containerd, Multus, pause), cached like the control plane.
node-tools:
	@bash hack/build-node.sh >/dev/null

cni-plugins:
	@bash hack/build-cni-plugins.sh >/dev/null

# whereabouts' CNI plugin and its CRDs: what the end-to-end switch test
# migrates from.
whereabouts:
	@bash hack/build-whereabouts.sh >/dev/null

# helm, for the chart's tests (test/deploy/chart_test.go): built from the
# Go module proxy at tools/helm's pinned version, cached like the rest.
helm:
	@bash hack/build-helm.sh >/dev/null

# The test guest (test/guest): a kernel and an initramfs assembled
# from Debian packages (apt-get download), cached like the tools.
guest:
	@bash hack/build-guest.sh >/dev/null

# Tests that need built binaries (kube-apiserver and etcd, the reference
# CNI plugins, tenure's own binaries, controller-gen) carry the build tag
# `integration`; every other test is a unit test and runs without them.
# Unit and package tests run with the race detector (the race detector
# needs cgo); the end-to-end packages drive separate processes and run
# without it.
# TENURE_TEST_EVERYTHING=1: a test that would skip here for a missing
# privilege, tool or binary fails instead (testbed.SkipUnlessEverything).
# The suites that start real nodes run one after the other: a host runs
# one dev node at a time (devnode's host lock), and a suite that waited for
# the other's whole run would spend its set-up's deadline waiting.
# They and the demo's suite are the developer module's (dev/test/).
REAL_NODE_SUITES := github.com/tenure-ipam/tenure/dev/test/node github.com/tenure-ipam/tenure/dev/test/nodes
# The fakes and the harness under test/ are packages with unit tests of
# their own: they run with the race detector beside the product's.
HARNESS_PKGS := $(addprefix github.com/tenure-ipam/tenure/test/,kubefake controlplane controlplane/cptest testbed progress guest localoverlay)
# The developer module's packages besides its suites: the developer
# environment, bench, demo, the image writer and the full tenurectl.
DEV_PKGS := ./bench/... ./cmd/... ./demo/... ./devnode/... ./hack/... ./image/... ./localnode/... ./nodetest/...

test: export TENURE_TEST_EVERYTHING := 1
test: test-deps control-plane node-tools cni-plugins whereabouts helm guest build image lint
	CGO_ENABLED=1 $(GO) test -race -count=1 -timeout 20m -tags integration ./api/... ./internal/... ./cmd/... $(HARNESS_PKGS)
	CGO_ENABLED=1 $(GO) -C dev test -race -count=1 -timeout 20m -tags integration $(DEV_PKGS)
	TENURE_BIN_DIR=$(BIN) $(GO) test -count=1 -timeout 40m -tags integration $(filter-out $(HARNESS_PKGS),$(shell $(GO) list -tags integration ./test/...))
	TENURE_BIN_DIR=$(BIN) $(GO) -C dev test -count=1 -timeout 40m -tags integration $(filter-out $(REAL_NODE_SUITES),$(shell $(GO) -C dev list -tags integration ./test/...))
	TENURE_BIN_DIR=$(BIN) $(GO) -C dev test -count=1 -p 1 -timeout 40m -tags integration $(REAL_NODE_SUITES)

# go vet and staticcheck (v0.8.2, its current release) on both modules'
# test builds (which hold every non-test file too).
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2
lint:
	$(GO) vet -tags integration ./...
	$(GO) -C dev vet -tags integration ./...
	$(GO) run $(STATICCHECK) -tags integration ./...
	$(GO) -C dev run $(STATICCHECK) -tags integration ./...

# Every test that needs no built binary: what the build tag leaves out.
test-unit:
	CGO_ENABLED=1 $(GO) test -race -count=1 ./...
	CGO_ENABLED=1 $(GO) -C dev test -race -count=1 ./...

test-e2e: test-deps control-plane cni-plugins whereabouts build
	TENURE_BIN_DIR=$(BIN) $(GO) test -count=1 -timeout 30m -tags integration -v ./test/...
	TENURE_BIN_DIR=$(BIN) $(GO) -C dev test -count=1 -timeout 30m -tags integration -v ./test/...

demo: control-plane cni-plugins build
	$(BIN)/tenurectl demo

# The pod-start scenario runs on the real node (root): its own control plane
# with controllers, the node, tenure rolled out from the image. Then the
# real VM's migrations (bench-vm).
bench: test-deps control-plane node-tools cni-plugins whereabouts helm guest build image
	$(BIN)/tenurectl bench
	$(BIN)/tenurectl bench --scenario pod-start --out out/bench-pod-start
	$(BENCH_VM)

# The real VM part of dev/test/nodes (three real nodes, root) with ten
# migrations more than its three, alternating between nodes 1 and 2: each
# migration's loss windows per phase and address and QEMU's figures into
# out/bench-vm/migrations.json, their distribution into migrations.md
# (docs/performance.md). The Helm part runs first, as in the suite's own
# order; the real-node lock waits for any other real-node run on this host.
BENCH_VM = TENURE_TEST_EVERYTHING=1 TENURE_BIN_DIR=$(BIN) TENURE_REALVM_MIGRATIONS=10 \
	TENURE_REALVM_OUT=$(CURDIR)/out/bench-vm/migrations.json \
	flock /tmp/tenure-realnode.lock $(GO) -C dev test -tags integration -count=1 -timeout 60m ./test/nodes \
	-run 'TestThreeNodes/(HelmUpgradeFromPreviousReleaseWhilePodsRunKeepsEveryAddress|RealVMMigratesBetweenTwoNodesWithItsAddressPrefixAndRoute)$$' -v

bench-vm: test-deps control-plane node-tools cni-plugins helm guest build image
	$(BENCH_VM)

bench-quick: control-plane build
	$(BIN)/tenurectl bench --quick

clean:
	rm -rf $(BIN)
