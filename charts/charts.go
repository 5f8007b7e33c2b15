// Package charts carries the Helm chart charts/tenure into the binaries,
// so `tenurectl dev up --install helm` installs exactly the chart that
// ships.
package charts

import "embed"

// Tenure holds charts/tenure without its deploy/ (a link to the
// repository's deploy/, which go:embed does not follow): write it out
// with the manifests of deploy.Manifests under tenure/deploy/.
//
//go:embed tenure/Chart.yaml tenure/values.yaml tenure/.helmignore tenure/templates/* tenure/crds/*.yaml
var Tenure embed.FS
