package image

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"github.com/google/go-containerregistry/pkg/name"
	"sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/yaml"
)

// TenureRepository is the repository the manifests in deploy/ pull the
// tenure image from.
const TenureRepository = "ghcr.io/tenure-ipam/tenure"

// Where the Dockerfile puts things, and the binaries it insists on.
const (
	binDirInImage   = "/usr/local/bin"
	caBundleInImage = "/etc/ssl/certs/ca-certificates.crt"
)

var tenureBinaries = []string{"tenure", "tenure-agent", "tenure-controller", "tenurectl"}

// Tenure is the tenure image as the Dockerfile builds it: the CA bundle in
// one layer, every binary in binDir (the Dockerfile's /out/, built from
// ./cmd/...) under /usr/local/bin in a second, PATH set to it, the
// unprivileged user 65532 and no entrypoint (the manifests give each
// container its command). caBundle is the host's CA bundle file.
func Tenure(binDir, caBundle string) (Spec, error) {
	entries, err := os.ReadDir(binDir)
	if err != nil {
		return Spec{}, err
	}
	var binaries Layer
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		binaries = append(binaries, File{Path: binDirInImage + "/" + e.Name(), Source: filepath.Join(binDir, e.Name()), Mode: 0o755})
	}
	have := map[string]bool{}
	for _, f := range binaries {
		have[filepath.Base(f.Path)] = true
	}
	for _, b := range tenureBinaries {
		if !have[b] {
			return Spec{}, fmt.Errorf("%s: missing %s", binDir, b)
		}
	}
	sort.Slice(binaries, func(i, j int) bool { return binaries[i].Path < binaries[j].Path })
	return Spec{
		Layers: []Layer{
			{{Path: caBundleInImage, Source: caBundle, Mode: 0o644}},
			binaries,
		},
		Env:  []string{"PATH=" + binDirInImage},
		User: "65532:65532",
		Labels: map[string]string{
			"org.opencontainers.image.title":       "tenure",
			"org.opencontainers.image.description": "Cluster-wide IPAM CNI plugin for Kubernetes secondary networks",
			"org.opencontainers.image.source":      "https://github.com/tenure-ipam/tenure",
		},
	}, nil
}

// Pause is a sandbox image holding nothing but the static pause program
// (hack/pause), run as the unprivileged user the upstream pause image uses.
func Pause(pauseBinary string) Spec {
	return Spec{
		Layers:     []Layer{{{Path: "/pause", Source: pauseBinary, Mode: 0o755}}},
		User:       "65535:65535",
		Entrypoint: []string{"/pause"},
	}
}

// DeployedTag is the reference deploy/'s kustomization pins repository to:
// its images entry's newName (if any) and newTag.
func DeployedTag(kustomizationFile, repository string) (name.Tag, error) {
	data, err := os.ReadFile(kustomizationFile)
	if err != nil {
		return name.Tag{}, err
	}
	var k types.Kustomization
	if err := yaml.Unmarshal(data, &k); err != nil {
		return name.Tag{}, fmt.Errorf("%s: %w", kustomizationFile, err)
	}
	for _, img := range k.Images {
		if img.Name != repository {
			continue
		}
		if img.NewTag == "" {
			return name.Tag{}, fmt.Errorf("%s: image %s has no newTag", kustomizationFile, repository)
		}
		repo := repository
		if img.NewName != "" {
			repo = img.NewName
		}
		return name.NewTag(repo+":"+img.NewTag, name.StrictValidation)
	}
	return name.Tag{}, fmt.Errorf("%s: no images entry for %s", kustomizationFile, repository)
}
