//go:build tools

// Package tools pins helm's command (hack/build-helm.sh), which the chart's
// tests run: helm lint, helm template against kustomize's build of deploy/,
// and helm install --dry-run=server against a local control plane.
package tools

import _ "helm.sh/helm/v4/cmd/helm"
