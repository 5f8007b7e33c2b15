package image

import (
	"archive/tar"
	"bytes"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// buildTestImage is Tenure's image of fake binaries with the given names.
func buildTestImage(t *testing.T, binaries []string) v1.Image {
	t.Helper()
	binDir, caBundle := fakeBinaries(t, binaries)
	spec, err := Tenure(binDir, caBundle)
	if err != nil {
		t.Fatal(err)
	}
	img, err := Build(spec)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

func digestOf(t *testing.T, d interface{ Digest() (v1.Hash, error) }) v1.Hash {
	t.Helper()
	h, err := d.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// untar lays the regular files of a tarball out below dir.
func untar(t *testing.T, file, dir string) {
	t.Helper()
	content, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{}
	for tr := tar.NewReader(bytes.NewReader(content)); ; {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if hdr.Typeflag == tar.TypeReg {
			if files[hdr.Name], err = io.ReadAll(tr); err != nil {
				t.Fatal(err)
			}
		}
	}
	for name, data := range files {
		target := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(target, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// writeTestImage writes the test image as ghcr.io/tenure-ipam/tenure:v9.9.9.
func writeTestImage(t *testing.T) (img v1.Image, ref name.Tag, file string) {
	t.Helper()
	img = buildTestImage(t, tenureBinaries)
	ref = name.MustParseReference("ghcr.io/tenure-ipam/tenure:v9.9.9").(name.Tag)
	file = filepath.Join(t.TempDir(), "image.tar")
	if err := WriteFile(file, ref, img); err != nil {
		t.Fatal(err)
	}
	return img, ref, file
}

// The tarball is an OCI image layout naming the image the way containerd's
// importer reads it (what `ctr images import` does).
func TestWriteFileIsAnOCILayoutNamingTheImage(t *testing.T) {
	img, _, file := writeTestImage(t)

	dir := t.TempDir()
	untar(t, file, dir)
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Manifests) != 1 {
		t.Fatalf("index has %d manifests, want 1", len(m.Manifests))
	}
	desc := m.Manifests[0]
	if desc.MediaType != types.OCIManifestSchema1 {
		t.Errorf("manifest media type %s, want %s", desc.MediaType, types.OCIManifestSchema1)
	}
	if desc.Digest != digestOf(t, img) {
		t.Errorf("index points at %s, built image is %s", desc.Digest, digestOf(t, img))
	}
	if got := desc.Annotations[annotationContainerdName]; got != "ghcr.io/tenure-ipam/tenure:v9.9.9" {
		t.Errorf("%s = %q", annotationContainerdName, got)
	}
	if got := desc.Annotations[annotationRefName]; got != "v9.9.9" {
		t.Errorf("%s = %q", annotationRefName, got)
	}
	fromLayout, err := idx.Image(desc.Digest)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fromLayout.Layers(); err != nil {
		t.Fatal(err)
	}
}

// The same tarball read as `crane push FILE` reads it (Docker's
// manifest.json) is the same image: same config, same layers.
func TestWriteFileIsADockerTarballOfTheSameImage(t *testing.T) {
	img, ref, file := writeTestImage(t)
	read, err := tarball.ImageFromPath(file, &ref)
	if err != nil {
		t.Fatal(err)
	}
	wantConfig, _ := img.ConfigName()
	gotConfig, err := read.ConfigName()
	if err != nil {
		t.Fatal(err)
	}
	if gotConfig != wantConfig {
		t.Errorf("config %s, built %s", gotConfig, wantConfig)
	}
	want, _ := img.Layers()
	got, err := read.Layers()
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("%d layers, built %d", len(got), len(want))
	}
	for i := range got {
		if digestOf(t, got[i]) != digestOf(t, want[i]) {
			t.Errorf("layer %d: %s, built %s", i, digestOf(t, got[i]), digestOf(t, want[i]))
		}
	}
}

func TestBuildGivesTheSameDigestForTheSameFiles(t *testing.T) {
	if a, b := digestOf(t, buildTestImage(t, tenureBinaries)), digestOf(t, buildTestImage(t, tenureBinaries)); a != b {
		t.Fatalf("two builds of the same files: %s and %s", a, b)
	}
}

// `make image` names the image by deploy/'s kustomization; every manifest
// that names the image itself must agree with it.
func TestDeployedTagIsTheTagTheManifestsPin(t *testing.T) {
	tag, err := DeployedTag(filepath.Join(repoRoot, "deploy", "kustomization.yaml"), TenureRepository)
	if err != nil {
		t.Fatal(err)
	}
	imageLine := regexp.MustCompile(`image:\s*(` + regexp.QuoteMeta(TenureRepository) + `\S*)`)
	found := 0
	err = filepath.WalkDir(filepath.Join(repoRoot, "deploy"), func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".yaml") {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for _, m := range imageLine.FindAllStringSubmatch(string(data), -1) {
			found++
			if m[1] != tag.Name() {
				t.Errorf("%s pins %s, the kustomization %s", p, m[1], tag.Name())
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if found == 0 {
		t.Fatalf("no manifest in deploy/ names %s", TenureRepository)
	}
}
