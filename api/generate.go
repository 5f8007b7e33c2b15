// Package api holds tenure's CRD types. The deepcopy functions and the CRD
// manifests under deploy/crds are generated: run `go generate ./api/...`
// (or `make generate`); TestGeneratedFilesAreCurrent fails when they are stale.
package api

//go:generate go run sigs.k8s.io/controller-tools/cmd/controller-gen@v0.23.0 object paths=./... crd:crdVersions=v1 output:crd:artifacts:config=../deploy/crds
