package install

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/tenure-ipam/tenure/internal/config"
)

// bigContent returns n pseudo-random bytes from seed: two contents of the
// same size differ throughout, so a torn read cannot pass for either.
func bigContent(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	b := make([]byte, n)
	for i := 0; i+8 <= n; i += 8 {
		v := r.Uint64()
		for j := range 8 {
			b[i+j] = byte(v >> (8 * j))
		}
	}
	return b
}

func writeSource(t *testing.T, dir, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func inode(t *testing.T, p string) (uint64, time.Time) {
	t.Helper()
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t).Ino, fi.ModTime()
}

func noTempFiles(t *testing.T, dir string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), tempPrefix) {
			t.Errorf("temporary file left behind: %s", filepath.Join(dir, e.Name()))
		}
	}
}

// TestConcurrentReadersSeeWholeFiles replaces the installed binary many
// times with two different contents of several MiB while readers open and
// read it in a loop: every read must be one complete content.
func TestConcurrentReadersSeeWholeFiles(t *testing.T) {
	const size = 6 << 20
	src := t.TempDir()
	a := bigContent(size, 1)
	b := bigContent(size, 2)
	b = b[:size-4096] // different lengths too: a torn read can't be the right size by luck
	srcA := writeSource(t, src, "a", a)
	srcB := writeSource(t, src, "b", b)

	binDir := filepath.Join(t.TempDir(), "opt", "cni", "bin")
	target := filepath.Join(binDir, ShimName)
	if _, err := CopyFile(target, srcA, BinaryMode); err != nil {
		t.Fatal(err)
	}

	const readers = 4
	var (
		stop              atomic.Bool
		wg                sync.WaitGroup
		reads, sawA, sawB atomic.Int64
		errMu             sync.Mutex
		readErr           error
	)
	fail := func(err error) {
		errMu.Lock()
		if readErr == nil {
			readErr = err
		}
		errMu.Unlock()
		stop.Store(true)
	}
	for range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var buf bytes.Buffer
			buf.Grow(size + bytes.MinRead)
			for !stop.Load() {
				f, err := os.Open(target)
				if err != nil {
					fail(err) // the target must exist at every instant
					return
				}
				buf.Reset()
				_, err = buf.ReadFrom(f)
				f.Close()
				got := buf.Bytes()
				if err != nil {
					fail(err)
					return
				}
				reads.Add(1)
				switch {
				case bytes.Equal(got, a):
					sawA.Add(1)
				case bytes.Equal(got, b):
					sawB.Add(1)
				default:
					fail(errors.New("read a file that is neither complete content: " + describe(got, a, b)))
					return
				}
			}
		}()
	}

	const installs = 40
	for i := range installs {
		s := srcB
		if i%2 == 1 {
			s = srcA
		}
		changed, err := CopyFile(target, s, BinaryMode)
		if err != nil {
			stop.Store(true)
			wg.Wait()
			t.Fatal(err)
		}
		if !changed {
			t.Errorf("install %d: content differs from the target but CopyFile reported no change", i)
		}
		if stop.Load() {
			break
		}
	}
	// Let the readers see the last content too.
	_ = wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		return reads.Load() >= installs, nil
	})
	stop.Store(true)
	wg.Wait()
	if readErr != nil {
		t.Fatal(readErr)
	}
	t.Logf("%d installs, %d reads (%d of content A, %d of B)", installs, reads.Load(), sawA.Load(), sawB.Load())
	if reads.Load() == 0 {
		t.Fatal("readers read nothing")
	}
	got, err := os.ReadFile(target)
	if err != nil || !bytes.Equal(got, a) {
		t.Fatalf("final content is not the last installed (err %v)", err)
	}
	fi, _ := os.Stat(target)
	if fi.Mode().Perm() != BinaryMode {
		t.Errorf("mode %v, want %v", fi.Mode().Perm(), BinaryMode)
	}
	noTempFiles(t, binDir)
}

func describe(got, a, b []byte) string {
	first := func(x []byte) int {
		for i := range min(len(got), len(x)) {
			if got[i] != x[i] {
				return i
			}
		}
		return min(len(got), len(x))
	}
	return fmt.Sprintf("len %d, matches A up to byte %d, B up to byte %d", len(got), first(a), first(b))
}

func TestInstallIdempotent(t *testing.T) {
	src := writeSource(t, t.TempDir(), "tenure", bigContent(3<<20, 7))
	bin := t.TempDir()
	conf := t.TempDir()
	flat := []byte(`{"agent_socket": "/run/tenure/agent.sock"}` + "\n")
	opts := Options{Source: src, CNIBinDir: bin, CNIConfDir: conf, FlatConfig: flat}

	res, err := Install(opts)
	if err != nil {
		t.Fatal(err)
	}
	if !res.BinaryChanged || !res.ConfigChanged {
		t.Fatalf("first install: %+v, want both changed", res)
	}
	binIno, binMtime := inode(t, res.Binary)
	confIno, confMtime := inode(t, res.FlatConfig)

	time.Sleep(20 * time.Millisecond) // an mtime change would be visible
	res2, err := Install(opts)
	if err != nil {
		t.Fatal(err)
	}
	if res2.BinaryChanged || res2.ConfigChanged {
		t.Fatalf("second install: %+v, want nothing changed", res2)
	}
	if ino, mt := inode(t, res.Binary); ino != binIno || !mt.Equal(binMtime) {
		t.Errorf("binary replaced by an identical install: inode %d->%d, mtime %v->%v", binIno, ino, binMtime, mt)
	}
	if ino, mt := inode(t, res.FlatConfig); ino != confIno || !mt.Equal(confMtime) {
		t.Errorf("flat config replaced by an identical install: inode %d->%d, mtime %v->%v", confIno, ino, confMtime, mt)
	}

	// A changed mode alone is repaired.
	if err := os.Chmod(res.Binary, 0o644); err != nil {
		t.Fatal(err)
	}
	res3, err := Install(opts)
	if err != nil {
		t.Fatal(err)
	}
	if !res3.BinaryChanged {
		t.Error("a binary with mode 0644 was left as it is")
	}
	if fi, _ := os.Stat(res.Binary); fi.Mode().Perm() != BinaryMode {
		t.Errorf("mode %v after repair", fi.Mode().Perm())
	}
	noTempFiles(t, bin)
}

func TestInstallWritesFlatConfig(t *testing.T) {
	src := writeSource(t, t.TempDir(), "tenure", []byte("#!/bin/true\n"))
	bin := filepath.Join(t.TempDir(), "bin") // missing directories are made
	conf := filepath.Join(t.TempDir(), "net.d")
	flat := []byte(`{"agent_socket": "/run/tenure/agent.sock", "enable_overlapping_ranges": true}`)
	res, err := Install(Options{Source: src, CNIBinDir: bin, CNIConfDir: conf, FlatConfig: flat})
	if err != nil {
		t.Fatal(err)
	}
	want := filepath.Join(conf, "tenure.d", "tenure.conf")
	if res.FlatConfig != want {
		t.Errorf("flat config at %s, want %s", res.FlatConfig, want)
	}
	got, err := os.ReadFile(want)
	if err != nil || !bytes.Equal(got, flat) {
		t.Fatalf("flat config %q (err %v), want %q", got, err, flat)
	}
	if fi, _ := os.Stat(want); fi.Mode().Perm() != FlatConfigMode {
		t.Errorf("flat config mode %v", fi.Mode().Perm())
	}
	// What the shim and agent will read: the file parses as a flat config.
	if _, err := config.Parse([]byte(`{"cniVersion":"1.0.0","name":"n","ipam":{"type":"tenure","range":"192.0.2.0/29"}}`), got); err != nil {
		t.Errorf("installed flat config does not parse: %v", err)
	}
	b, err := os.ReadFile(filepath.Join(bin, "tenure"))
	if err != nil || string(b) != "#!/bin/true\n" {
		t.Errorf("binary %q, err %v", b, err)
	}

	// Changed content replaces the file.
	flat2 := []byte(`{"agent_socket": "/run/tenure/other.sock"}`)
	res, err = Install(Options{Source: src, CNIBinDir: bin, CNIConfDir: conf, FlatConfig: flat2})
	if err != nil {
		t.Fatal(err)
	}
	if res.BinaryChanged || !res.ConfigChanged {
		t.Errorf("result %+v: want only the config changed", res)
	}
	if got, _ := os.ReadFile(want); !bytes.Equal(got, flat2) {
		t.Errorf("flat config %q after change", got)
	}

	// No flat config: an existing one is left alone.
	res, err = Install(Options{Source: src, CNIBinDir: bin, CNIConfDir: conf})
	if err != nil {
		t.Fatal(err)
	}
	if res.FlatConfig != "" || res.ConfigChanged {
		t.Errorf("result %+v without a flat config", res)
	}
	if got, _ := os.ReadFile(want); !bytes.Equal(got, flat2) {
		t.Errorf("flat config %q changed without --flat-config", got)
	}
}

func TestInstallRefusesBadInput(t *testing.T) {
	dir := t.TempDir()
	src := writeSource(t, dir, "tenure", []byte("binary"))
	empty := writeSource(t, dir, "empty", nil)
	for _, tc := range []struct {
		name string
		opts Options
		want []string
	}{
		{"missing source", Options{Source: filepath.Join(dir, "nope")}, []string{"source binary", "no such file"}},
		{"empty source", Options{Source: empty}, []string{"not a non-empty regular file"}},
		{"directory source", Options{Source: dir}, []string{"not a non-empty regular file"}},
		{"flat not JSON", Options{Source: src, FlatConfig: []byte(`{"agent_socket":`)}, []string{"flat config"}},
		{"flat not object", Options{Source: src, FlatConfig: []byte(`[1]`)}, []string{"flat config"}},
		{"flat unknown key", Options{Source: src, FlatConfig: []byte(`{"agent_sockett": "/x"}`)}, []string{"agent_sockett"}},
		{"flat bad socket", Options{Source: src, FlatConfig: []byte(`{"agent_socket": "relative.sock"}`)}, []string{"agent_socket", "absolute path"}},
		{"flat bad gateway", Options{Source: src, FlatConfig: []byte(`{"gateway": "10.0.0.300"}`)}, []string{"gateway", "10.0.0.300"}},
		{"flat bad range", Options{Source: src, FlatConfig: []byte(`{"range": "10.0.0.0/33"}`)}, []string{"range", "10.0.0.0/33"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bin := filepath.Join(t.TempDir(), "bin")
			conf := filepath.Join(t.TempDir(), "conf")
			tc.opts.CNIBinDir, tc.opts.CNIConfDir = bin, conf
			_, err := Install(tc.opts)
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
			// Nothing was touched on the "host".
			for _, d := range []string{bin, conf} {
				if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("%s exists after refused input (err %v)", d, err)
				}
			}
		})
	}
}

// A failure mid-write (here: the source read fails) leaves the target as it
// was and no temporary file behind.
func TestReplaceFailureLeavesTarget(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "tenure")
	old := []byte("old complete content")
	if _, err := WriteFile(target, old, BinaryMode); err != nil {
		t.Fatal(err)
	}
	r := io.MultiReader(bytes.NewReader(bigContent(1<<20, 3)), errReader{})
	if _, err := replace(target, r, BinaryMode); err == nil {
		t.Fatal("replace with a failing reader succeeded")
	}
	got, err := os.ReadFile(target)
	if err != nil || !bytes.Equal(got, old) {
		t.Fatalf("target %q after a failed replace (err %v)", got, err)
	}
	noTempFiles(t, dir)
}

type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, errors.New("disk on fire") }

// Temporary files a killed installer left are removed once stale; a young
// one (maybe another installer's, in flight) is kept.
func TestStaleTempFilesRemoved(t *testing.T) {
	dir := t.TempDir()
	stale := filepath.Join(dir, tempPrefix+"tenure-123")
	young := filepath.Join(dir, tempPrefix+"tenure-456")
	other := filepath.Join(dir, tempPrefix+"bridge-789")
	for _, p := range []string{stale, young, other} {
		if err := os.WriteFile(p, []byte("partial"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	old := time.Now().Add(-time.Hour)
	for _, p := range []string{stale, other} {
		if err := os.Chtimes(p, old, old); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := WriteFile(filepath.Join(dir, "tenure"), []byte("x"), BinaryMode); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(stale); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("stale temp file kept (err %v)", err)
	}
	for _, p := range []string{young, other} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("%s removed: %v", p, err)
		}
	}
}

func TestReadFlatConfigArg(t *testing.T) {
	if b, err := ReadFlatConfigArg("  "); b != nil || err != nil {
		t.Errorf("empty: %q, %v", b, err)
	}
	if b, err := ReadFlatConfigArg(` {"agent_socket":"/run/x.sock"}`); err != nil || string(b) != `{"agent_socket":"/run/x.sock"}` {
		t.Errorf("inline: %q, %v", b, err)
	}
	p := writeSource(t, t.TempDir(), "tenure.conf", []byte(`{"a":1}`))
	if b, err := ReadFlatConfigArg(p); err != nil || string(b) != `{"a":1}` {
		t.Errorf("path: %q, %v", b, err)
	}
	if _, err := ReadFlatConfigArg("/nonexistent/tenure.conf"); err == nil || !strings.Contains(err.Error(), "--flat-config") {
		t.Errorf("missing path: %v", err)
	}
}
