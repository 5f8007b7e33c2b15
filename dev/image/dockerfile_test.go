package image

import (
	"archive/tar"
	"io"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/moby/buildkit/frontend/dockerfile/instructions"
	"github.com/moby/buildkit/frontend/dockerfile/linter"
	"github.com/moby/buildkit/frontend/dockerfile/parser"
	"github.com/moby/buildkit/frontend/dockerfile/shell"
)

const repoRoot = "../.."

// dockerfileImage is what the Dockerfile's final stage makes, read with
// BuildKit's own parser: the files each COPY lays down, and the config.
type dockerfileImage struct {
	base       string
	layers     [][]string // per COPY, the files' paths in the image
	env        []string
	user       string
	entrypoint []string
	cmd        []string
	labels     map[string]string
}

// parseDockerfile reads the Dockerfile. A COPY of the build stage's /out/
// stands for the binaries of ./cmd/... (checked against the build stage's
// go build), any other COPY for the one file it names.
func parseDockerfile(t *testing.T, binaries []string) dockerfileImage {
	t.Helper()
	f, err := os.Open(filepath.Join(repoRoot, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ast, err := parser.Parse(f)
	if err != nil {
		t.Fatal(err)
	}
	stages, _, err := instructions.Parse(ast.AST, linter.New(&linter.Config{}))
	if err != nil {
		t.Fatal(err)
	}
	lex := shell.NewLex(ast.EscapeToken)
	expand := func(word string) (string, error) {
		out, _, err := lex.ProcessWord(word, shell.EnvsFromSlice(nil))
		return out, err
	}

	buildOutputs := map[string]string{} // stage name -> directory its go build of ./cmd/... writes
	for _, stage := range stages[:len(stages)-1] {
		for _, c := range stage.Commands {
			if run, ok := c.(*instructions.RunCommand); ok {
				line := strings.Join(run.CmdLine, " ")
				if i := strings.Index(line, " ./cmd/..."); i > 0 && strings.Contains(line, "go build") {
					if fields := strings.Fields(line[:i]); len(fields) >= 2 && fields[len(fields)-2] == "-o" {
						buildOutputs[stage.Name] = fields[len(fields)-1]
					}
				}
			}
		}
	}

	final := stages[len(stages)-1]
	img := dockerfileImage{base: final.BaseName, labels: map[string]string{}}
	for _, c := range final.Commands {
		if e, ok := c.(instructions.SupportsSingleWordExpansion); ok {
			if err := e.Expand(expand); err != nil {
				t.Fatal(err)
			}
		}
		switch c := c.(type) {
		case *instructions.CopyCommand:
			var files []string
			for _, src := range c.SourcePaths {
				switch {
				case c.From != "" && buildOutputs[c.From] != "" && path.Clean(src) == path.Clean(buildOutputs[c.From]):
					for _, b := range binaries {
						files = append(files, path.Join(c.DestPath, b))
					}
				case strings.HasSuffix(c.DestPath, "/"):
					files = append(files, path.Join(c.DestPath, path.Base(src)))
				default:
					files = append(files, c.DestPath)
				}
			}
			sort.Strings(files)
			img.layers = append(img.layers, files)
		case *instructions.EnvCommand:
			for _, kv := range c.Env {
				img.env = append(img.env, kv.Key+"="+kv.Value)
			}
		case *instructions.LabelCommand:
			for _, kv := range c.Labels {
				img.labels[kv.Key] = kv.Value
			}
		case *instructions.UserCommand:
			img.user = c.User
		case *instructions.EntrypointCommand:
			img.entrypoint = c.CmdLine
		case *instructions.CmdCommand:
			img.cmd = c.CmdLine
		default:
			t.Fatalf("Dockerfile's final stage has %q, which this test does not compare with the image builder: teach it", c.Name())
		}
	}
	return img
}

// commandNames are the binaries `go build -o DIR/ ./cmd/...` writes: one per
// directory under cmd/.
func commandNames(t *testing.T) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(repoRoot, "cmd"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		if e.IsDir() {
			names = append(names, e.Name())
		}
	}
	return names
}

// fakeBinaries writes a file for each name into a new directory: the
// builder's layout does not depend on what the binaries hold.
func fakeBinaries(t *testing.T, names []string) (binDir, caBundle string) {
	t.Helper()
	dir := t.TempDir()
	binDir = filepath.Join(dir, "bin")
	if err := os.Mkdir(binDir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if err := os.WriteFile(filepath.Join(binDir, n), []byte("binary "+n), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	caBundle = filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(caBundle, []byte("-----BEGIN CERTIFICATE-----\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return binDir, caBundle
}

// layerFiles lists a layer's regular files by absolute path, with their modes.
func layerFiles(t *testing.T, l v1.Layer) map[string]int64 {
	t.Helper()
	rc, err := l.Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	files := map[string]int64{}
	tr := tar.NewReader(rc)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		if hdr.Uid != 0 || hdr.Gid != 0 {
			t.Errorf("%s owned by %d:%d, COPY without --chown gives root", hdr.Name, hdr.Uid, hdr.Gid)
		}
		if hdr.Typeflag == tar.TypeReg {
			files["/"+hdr.Name] = hdr.Mode
		}
	}
}

func TestTenureImageMatchesDockerfile(t *testing.T) {
	binaries := commandNames(t)
	want := parseDockerfile(t, binaries)
	if want.base != "scratch" {
		t.Fatalf("Dockerfile's final stage is FROM %s; the builder starts from an empty image (scratch)", want.base)
	}

	img := buildTestImage(t, binaries)
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Config.User != want.user {
		t.Errorf("user %q, Dockerfile %q", cfg.Config.User, want.user)
	}
	if !reflect.DeepEqual(cfg.Config.Env, want.env) {
		t.Errorf("env %q, Dockerfile %q", cfg.Config.Env, want.env)
	}
	if !reflect.DeepEqual(cfg.Config.Entrypoint, want.entrypoint) || !reflect.DeepEqual(cfg.Config.Cmd, want.cmd) {
		t.Errorf("entrypoint %q cmd %q, Dockerfile %q %q", cfg.Config.Entrypoint, cfg.Config.Cmd, want.entrypoint, want.cmd)
	}
	if !reflect.DeepEqual(cfg.Config.Labels, want.labels) {
		t.Errorf("labels %q, Dockerfile %q", cfg.Config.Labels, want.labels)
	}
	if cfg.OS != "linux" {
		t.Errorf("os %q", cfg.OS)
	}

	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	if len(layers) != len(want.layers) {
		t.Fatalf("%d layers, Dockerfile has %d COPY instructions", len(layers), len(want.layers))
	}
	for i, l := range layers {
		files := layerFiles(t, l)
		var paths []string
		for p, mode := range files {
			paths = append(paths, p)
			if strings.HasPrefix(p, binDirInImage+"/") && mode&0o111 != 0o111 {
				t.Errorf("%s has mode %o, not executable by all", p, mode)
			}
		}
		sort.Strings(paths)
		if !reflect.DeepEqual(paths, want.layers[i]) {
			t.Errorf("layer %d holds %q, Dockerfile's COPY %d %q", i, paths, i, want.layers[i])
		}
	}
}

func TestTenureRequiresEveryBinaryTheDockerfileChecks(t *testing.T) {
	binDir, caBundle := fakeBinaries(t, []string{"tenure", "tenure-agent", "tenurectl"})
	if _, err := Tenure(binDir, caBundle); err == nil || !strings.Contains(err.Error(), "tenure-controller") {
		t.Fatalf("Tenure without tenure-controller: %v, want an error naming it", err)
	}
}
