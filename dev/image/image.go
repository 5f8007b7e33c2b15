// Package image builds container images from files on the host without a
// container engine, and writes them as one tarball that both
// `ctr images import` and `crane push` accept. `make image` uses it for the
// tenure image (the same content as the Dockerfile's, see Tenure), and the
// local node for its sandbox image, so that neither needs docker or a registry.
package image

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"os"
	"path"
	"runtime"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// File is one regular file of a layer.
type File struct {
	// Path is where the file lies in the image: absolute, slash-separated.
	Path string
	// Source is the file on the host whose content is copied.
	Source string
	// Mode is the file's permission bits in the image.
	Mode int64
}

// Layer is what one Dockerfile COPY adds: files at their paths, with the
// directories above them owned by root, as COPY creates them.
type Layer []File

// Spec is everything an image holds: its layers, in order, on an empty base
// (FROM scratch), and its runtime configuration.
type Spec struct {
	Layers     []Layer
	Env        []string
	User       string
	Entrypoint []string
	Cmd        []string
	WorkingDir string
	Labels     map[string]string
	// Architecture defaults to the one this program runs on: the binaries the
	// images carry are built for it.
	Architecture string
}

// layerTime is every entry's modification time, so that the same inputs
// give the same layer digest whenever and wherever they are packed.
var layerTime = time.Unix(0, 0)

// Build assembles the image a Spec describes, with OCI media types.
func Build(spec Spec) (v1.Image, error) {
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	for i, files := range spec.Layers {
		content, err := layerTar(files)
		if err != nil {
			return nil, fmt.Errorf("layer %d: %w", i, err)
		}
		layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
			return io.NopCloser(bytes.NewReader(content)), nil
		}, tarball.WithMediaType(types.OCILayer))
		if err != nil {
			return nil, fmt.Errorf("layer %d: %w", i, err)
		}
		img, err = mutate.Append(img, mutate.Addendum{
			Layer: layer,
			History: v1.History{
				Created:   v1.Time{Time: layerTime},
				CreatedBy: "COPY " + strings.Join(files.paths(), " "),
			},
		})
		if err != nil {
			return nil, err
		}
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cfg = cfg.DeepCopy()
	cfg.OS = "linux"
	cfg.Architecture = spec.Architecture
	if cfg.Architecture == "" {
		cfg.Architecture = runtime.GOARCH
	}
	cfg.Created = v1.Time{Time: layerTime}
	cfg.Config = v1.Config{
		Env:        spec.Env,
		User:       spec.User,
		Entrypoint: spec.Entrypoint,
		Cmd:        spec.Cmd,
		WorkingDir: spec.WorkingDir,
		Labels:     spec.Labels,
	}
	return mutate.ConfigFile(img, cfg)
}

func (l Layer) paths() []string {
	paths := make([]string, len(l))
	for i, f := range l {
		paths[i] = f.Path
	}
	return paths
}

// layerTar packs the files, each directory above them first, sorted so that
// the layer's digest depends on nothing but the files.
func layerTar(files Layer) ([]byte, error) {
	files = append(Layer(nil), files...)
	sort.Slice(files, func(i, j int) bool { return files[i].Path < files[j].Path })
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dirs := map[string]bool{}
	for _, f := range files {
		if !path.IsAbs(f.Path) || path.Clean(f.Path) != f.Path || f.Path == "/" {
			return nil, fmt.Errorf("path %q is not a clean absolute file path", f.Path)
		}
		name := strings.TrimPrefix(f.Path, "/")
		for _, dir := range parents(name) {
			if dirs[dir] {
				continue
			}
			dirs[dir] = true
			if err := tw.WriteHeader(&tar.Header{
				Typeflag: tar.TypeDir, Name: dir + "/", Mode: 0o755, ModTime: layerTime, Format: tar.FormatPAX,
			}); err != nil {
				return nil, err
			}
		}
		content, err := os.ReadFile(f.Source)
		if err != nil {
			return nil, err
		}
		if err := tw.WriteHeader(&tar.Header{
			Typeflag: tar.TypeReg, Name: name, Mode: f.Mode, Size: int64(len(content)), ModTime: layerTime, Format: tar.FormatPAX,
		}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(content); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// parents lists the directories above a relative path, outermost first:
// "usr/local/bin/x" gives usr, usr/local, usr/local/bin.
func parents(name string) []string {
	var dirs []string
	for dir := path.Dir(name); dir != "."; dir = path.Dir(dir) {
		dirs = append([]string{dir}, dirs...)
	}
	return dirs
}
