# tenure: cluster-wide IPAM for Kubernetes secondary networks.
#
#   make demo    start a local control plane and show tenure at work
#   make test    every test (builds the local control plane once, cached)
#   make build   binaries into bin/
#   make bench   the benchmark (see docs/performance.md); make bench-quick: its
#                500-ADD concurrency-50 scenario only, under two minutes

SHELL := /bin/bash
GO ?= go
BIN := $(CURDIR)/bin
LDFLAGS := -s -w
export CGO_ENABLED := 0

.PHONY: all build generate verify lint test-deps control-plane cni-plugins test test-unit test-e2e demo bench bench-quick clean

all: build

build:
	$(GO) build -trimpath -ldflags "$(LDFLAGS)" -o $(BIN)/ ./cmd/...
	cp -f $(BIN)/tenurectl $(BIN)/kubectl-tenure

generate:
	$(GO) generate ./api/...

test-deps:
	@bash hack/test-deps.sh

control-plane:
	@bash hack/build-control-plane.sh >/dev/null

cni-plugins:
	@bash hack/build-cni-plugins.sh >/dev/null

# Tests that need built binaries (kube-apiserver and etcd, the reference
# CNI plugins, tenure's own binaries, controller-gen) carry the build tag
# `integration`; every other test is a unit test and runs without them.
# Unit and package tests run with the race detector (the race detector
# needs cgo); the end-to-end packages drive separate processes and run
# without it.
test: test-deps control-plane cni-plugins build lint
	CGO_ENABLED=1 $(GO) test -race -count=1 -timeout 20m -tags integration ./api/... ./internal/... ./cmd/...
	TENURE_BIN_DIR=$(BIN) $(GO) test -count=1 -timeout 30m -tags integration ./test/...

# go vet and staticcheck (v0.6.1 is its 2025.1.1 release) on every build:
# the test build, the default one and the image's.
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.6.1
lint:
	$(GO) vet -tags integration ./...
	$(GO) vet -tags tenure_release ./cmd/...
	$(GO) run $(STATICCHECK) -tags integration ./...
	$(GO) run $(STATICCHECK) -tags tenure_release ./cmd/...

# Every test that needs no built binary: what the build tag leaves out.
test-unit:
	CGO_ENABLED=1 $(GO) test -race -count=1 ./...

test-e2e: test-deps control-plane cni-plugins build
	TENURE_BIN_DIR=$(BIN) $(GO) test -count=1 -timeout 30m -tags integration -v ./test/...

demo: control-plane cni-plugins build
	$(BIN)/tenurectl demo

bench: control-plane build
	$(BIN)/tenurectl bench

bench-quick: control-plane build
	$(BIN)/tenurectl bench --quick

clean:
	rm -rf $(BIN)
