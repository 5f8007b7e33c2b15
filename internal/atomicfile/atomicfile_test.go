package atomicfile

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
)

func entries(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range es {
		names = append(names, e.Name())
	}
	return names
}

func TestWriteFileCreatesAndReplaces(t *testing.T) {
	old := syscall.Umask(0o077) // the mode must not depend on the umask
	t.Cleanup(func() { syscall.Umask(old) })
	dir := t.TempDir()
	path := filepath.Join(dir, "state.json")
	for _, c := range []struct {
		data []byte
		perm fs.FileMode
	}{{[]byte("first"), 0o644}, {[]byte("second, longer"), 0o600}, {nil, 0o755}} {
		if err := WriteFile(path, c.data, c.perm); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(path)
		if err != nil || !bytes.Equal(got, c.data) {
			t.Fatalf("content %q (%v), want %q", got, err, c.data)
		}
		fi, err := os.Stat(path)
		if err != nil || fi.Mode().Perm() != c.perm {
			t.Fatalf("mode %v (%v), want %v", fi.Mode().Perm(), err, c.perm)
		}
		if names := entries(t, dir); len(names) != 1 {
			t.Fatalf("directory holds %v, want only the target", names)
		}
	}
}

func TestWriteRelativePath(t *testing.T) {
	t.Chdir(t.TempDir())
	if err := WriteFile("plain", []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile("plain"); err != nil || string(got) != "x" {
		t.Fatalf("content %q (%v)", got, err)
	}
}

type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, errors.New("disk on fire") }

// A failure mid-write leaves the target as it was and no temporary file.
func TestWriteFailureLeavesTarget(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "target")
	if err := WriteFile(path, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := io.MultiReader(strings.NewReader(strings.Repeat("new", 1<<16)), errReader{})
	if err := Write(path, r, 0o644, ""); err == nil || !strings.Contains(err.Error(), "disk on fire") {
		t.Fatalf("Write with a failing reader: %v", err)
	}
	if got, err := os.ReadFile(path); err != nil || string(got) != "old" {
		t.Fatalf("target %q (%v) after a failed write", got, err)
	}
	if names := entries(t, dir); len(names) != 1 {
		t.Fatalf("directory holds %v, want only the target", names)
	}
}

func TestWriteMissingDirectory(t *testing.T) {
	if err := WriteFile(filepath.Join(t.TempDir(), "no", "such"), []byte("x"), 0o600); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("error %v, want ErrNotExist", err)
	}
}

// observingReader records the directory's entries while the temporary file
// is being written.
type observingReader struct {
	dir  string
	seen []string
	done bool
}

func (o *observingReader) Read(p []byte) (int, error) {
	if o.done {
		return 0, io.EOF
	}
	es, _ := os.ReadDir(o.dir)
	for _, e := range es {
		o.seen = append(o.seen, e.Name())
	}
	o.done = true
	return copy(p, "data"), nil
}

func TestWriteTempNames(t *testing.T) {
	for _, c := range []struct{ prefix, want string }{{"", ".bin.tmp-"}, {".tenure-install-", ".tenure-install-bin-"}} {
		dir := t.TempDir()
		o := &observingReader{dir: dir}
		if err := Write(filepath.Join(dir, "bin"), o, 0o755, c.prefix); err != nil {
			t.Fatal(err)
		}
		if len(o.seen) != 1 || !strings.HasPrefix(o.seen[0], c.want) {
			t.Errorf("prefix %q: temporary files %v, want one named %s*", c.prefix, o.seen, c.want)
		}
	}
}

// A reader never sees a partial file, however the writes and reads
// interleave.
func TestReadersSeeWholeContent(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	a, b := bytes.Repeat([]byte("a"), 256<<10), bytes.Repeat([]byte("b"), 128<<10)
	if err := WriteFile(path, a, 0o644); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			got, err := os.ReadFile(path)
			if err != nil || (!bytes.Equal(got, a) && !bytes.Equal(got, b)) {
				t.Errorf("read %d bytes (%v): neither whole content", len(got), err)
				return
			}
		}
	}()
	for i := range 50 {
		data := a
		if i%2 == 0 {
			data = b
		}
		if err := WriteFile(path, data, 0o644); err != nil {
			t.Error(err)
			break
		}
	}
	close(stop)
	wg.Wait()
}
