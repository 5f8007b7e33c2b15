package image

import (
	"archive/tar"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// Annotations on the index entry that name the image: the OCI one holds the
// tag alone, containerd's the whole reference, which `ctr images import`
// takes as the image's name.
const (
	annotationRefName        = "org.opencontainers.image.ref.name"
	annotationContainerdName = "io.containerd.image.name"
)

// WriteFile writes img, named ref, to path as an OCI image layout in a tar
// (oci-layout, index.json, blobs/sha256/...) that also carries Docker's
// manifest.json pointing at the same blobs, as `docker save` writes since
// Docker 25. containerd reads the OCI layout (`ctr -n k8s.io images import`);
// crane and go-containerregistry's tarball package read manifest.json
// (`crane push FILE REF`).
func WriteFile(path string, ref name.Tag, img v1.Image) error {
	dir, err := os.MkdirTemp(filepath.Dir(path), ".image-layout-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)

	lp, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	if err := lp.AppendImage(img, layout.WithAnnotations(map[string]string{
		annotationRefName:        ref.TagStr(),
		annotationContainerdName: ref.Name(),
	})); err != nil {
		return err
	}
	manifest, err := dockerManifest(ref, img)
	if err != nil {
		return err
	}

	tmp := path + ".tmp"
	out, err := os.Create(tmp)
	if err != nil {
		return err
	}
	defer os.Remove(tmp)
	if err := writeTar(out, dir, manifest); err != nil {
		out.Close()
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// dockerManifest is manifest.json for img with the paths its blobs have in
// the OCI layout.
func dockerManifest(ref name.Tag, img v1.Image) ([]byte, error) {
	configName, err := img.ConfigName()
	if err != nil {
		return nil, err
	}
	layers, err := img.Layers()
	if err != nil {
		return nil, err
	}
	entry := tarball.Descriptor{Config: blobPath(configName), RepoTags: []string{ref.Name()}}
	for _, l := range layers {
		digest, err := l.Digest()
		if err != nil {
			return nil, err
		}
		entry.Layers = append(entry.Layers, blobPath(digest))
	}
	return json.Marshal(tarball.Manifest{entry})
}

func blobPath(h v1.Hash) string {
	return "blobs/" + h.Algorithm + "/" + h.Hex
}

// writeTar packs the layout directory in lexical order with fixed owners and
// times (so equal images give equal tarballs), then manifest.json.
func writeTar(w io.Writer, dir string, manifest []byte) error {
	tw := tar.NewWriter(w)
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: rel + "/", Mode: 0o755, ModTime: layerTime})
		}
		if !d.Type().IsRegular() {
			return fmt.Errorf("%s: not a regular file", p)
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		info, err := f.Stat()
		if err != nil {
			return err
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: rel, Mode: 0o644, Size: info.Size(), ModTime: layerTime}); err != nil {
			return err
		}
		_, err = io.Copy(tw, f)
		return err
	})
	if err != nil {
		return err
	}
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "manifest.json", Mode: 0o644, Size: int64(len(manifest)), ModTime: layerTime}); err != nil {
		return err
	}
	if _, err := tw.Write(manifest); err != nil {
		return err
	}
	return tw.Close()
}
