// Package install puts tenure's CNI shim and its flat configuration on a
// node: the work of the agent DaemonSet's init container
// (`tenure-agent install`), which sees the host's /opt/cni/bin and
// /etc/cni/net.d under /host.
//
// Every file is replaced atomically: the new content is written to a
// temporary file in the target's own directory, synced, given its mode and
// renamed over the target, so a container runtime executing the plugin (or
// the shim reading its flat config) sees either the complete old file or the
// complete new one, never a partial write, whatever instant the installer is
// killed at. A target that already holds the same content and mode is left
// alone (not even its mtime changes), so running the installer again is a
// no-op.
package install

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/tenure-ipam/tenure/internal/atomicfile"
	"github.com/tenure-ipam/tenure/internal/cniwire"
	"github.com/tenure-ipam/tenure/internal/config"
)

// Defaults for the init container, which mounts the host's directories under
// /host.
const (
	DefaultCNIBinDir  = "/host/opt/cni/bin"
	DefaultCNIConfDir = "/host/etc/cni/net.d"
)

// ShimName is the file name of the CNI shim: the ipam "type" the runtime
// looks up in its plugin directories.
const ShimName = config.PluginType

// Modes of the installed files.
const (
	BinaryMode     fs.FileMode = 0o755
	FlatConfigMode fs.FileMode = 0o644
	dirMode        fs.FileMode = 0o755
)

// tempPrefix starts the name of every temporary file the installer makes;
// leftovers of a killed installer are recognised by it and removed once
// they are older than staleAfter (younger ones may belong to an installer
// running right now).
const (
	tempPrefix = ".tenure-install-"
	staleAfter = 10 * time.Minute
)

// Options says what to install where.
type Options struct {
	// Source is the shim binary to copy; required.
	Source string
	// CNIBinDir receives Source as ShimName; DefaultCNIBinDir if empty.
	CNIBinDir string
	// CNIConfDir receives FlatConfig as cniwire.FlatConfigRel, which the
	// shim reads as cniwire.DefaultFlatConfig; DefaultCNIConfDir if
	// empty.
	CNIConfDir string
	// FlatConfig is the flat configuration file's content. When nil no flat
	// file is written and an existing one is left as it is.
	FlatConfig []byte
	// Log receives one line per file; slog.Default() if nil.
	Log *slog.Logger
}

// Result tells what Install did.
type Result struct {
	Binary        string // path of the installed shim
	BinaryChanged bool   // false: it already had this content
	FlatConfig    string // path of the flat config, "" if none was written
	ConfigChanged bool
}

// Install copies the shim binary and writes the flat configuration. Bad
// input (a missing or empty source, a flat config that does not parse) is
// refused before anything on the host is touched.
func Install(o Options) (Result, error) {
	var res Result
	if o.CNIBinDir == "" {
		o.CNIBinDir = DefaultCNIBinDir
	}
	if o.CNIConfDir == "" {
		o.CNIConfDir = DefaultCNIConfDir
	}
	log := o.Log
	if log == nil {
		log = slog.Default()
	}
	if o.Source == "" {
		return res, errors.New("install: no source binary given")
	}
	fi, err := os.Stat(o.Source)
	if err != nil {
		return res, fmt.Errorf("install: source binary: %w", err)
	}
	if !fi.Mode().IsRegular() || fi.Size() == 0 {
		return res, fmt.Errorf("install: source binary %s is not a non-empty regular file", o.Source)
	}
	if o.FlatConfig != nil {
		if err := ValidateFlatConfig(o.FlatConfig); err != nil {
			return res, err
		}
	}

	res.Binary = filepath.Join(o.CNIBinDir, ShimName)
	if res.BinaryChanged, err = CopyFile(res.Binary, o.Source, BinaryMode); err != nil {
		return res, err
	}
	logResult(log, res.Binary, res.BinaryChanged)

	if o.FlatConfig != nil {
		res.FlatConfig = filepath.Join(o.CNIConfDir, cniwire.FlatConfigRel)
		if res.ConfigChanged, err = WriteFile(res.FlatConfig, o.FlatConfig, FlatConfigMode); err != nil {
			return res, err
		}
		logResult(log, res.FlatConfig, res.ConfigChanged)
	}
	return res, nil
}

func logResult(log *slog.Logger, path string, changed bool) {
	if changed {
		log.Info("installed", "path", path)
	} else {
		log.Info("already up to date", "path", path)
	}
}

// ValidateFlatConfig checks that data is a flat configuration the agent will
// accept: a JSON object with only known keys, each valid on its own. A bad
// flat config would fail every attachment on the node, so the installer
// refuses it instead; the error names the key.
func ValidateFlatConfig(data []byte) error {
	if len(data) > config.MaxFlatFileSize {
		return fmt.Errorf("install: flat config: larger than %d bytes", config.MaxFlatFileSize)
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(data, &top); err != nil || top == nil {
		if err == nil {
			err = errors.New("must be a JSON object")
		}
		return fmt.Errorf("install: flat config: %w", err)
	}
	// Parse the flat config under a netconf that brings only the ipam type.
	// When the flat config has no ranges of its own, the netconf names a pool
	// so that the range checks (the NAD's business) are left out but every
	// other key is still checked.
	ipam := `{"type":"tenure"}`
	hasRanges := false
	for _, k := range []string{"range", "ipRanges", "pool"} {
		if _, ok := top[k]; ok {
			hasRanges = true
		}
	}
	if !hasRanges {
		ipam = `{"type":"tenure","pool":"tenure-install-check"}`
	}
	netconf := `{"cniVersion":"1.0.0","name":"tenure-install-check","ipam":` + ipam + `}`
	if _, err := config.Parse([]byte(netconf), data); err != nil {
		return fmt.Errorf("install: flat config: %w", err)
	}
	return nil
}

// ReadFlatConfigArg turns the --flat-config argument into the file's
// content: JSON given inline (it starts with '{'), or the path of a file
// holding it. An empty argument yields nil: no flat config.
func ReadFlatConfigArg(arg string) ([]byte, error) {
	s := strings.TrimSpace(arg)
	if s == "" {
		return nil, nil
	}
	if strings.HasPrefix(s, "{") {
		return []byte(s), nil
	}
	f, err := os.Open(s)
	if err != nil {
		return nil, fmt.Errorf("install: --flat-config: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, config.MaxFlatFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("install: --flat-config %s: %w", s, err)
	}
	if len(data) > config.MaxFlatFileSize {
		return nil, fmt.Errorf("install: --flat-config %s: larger than %d bytes", s, config.MaxFlatFileSize)
	}
	return data, nil
}

// CopyFile copies the file src to dst atomically with mode perm. It
// returns false, touching nothing, when dst already has src's content and
// perm.
func CopyFile(dst, src string, perm fs.FileMode) (changed bool, err error) {
	in, err := os.Open(src)
	if err != nil {
		return false, fmt.Errorf("install: %w", err)
	}
	defer in.Close()
	want, err := hashReader(in)
	if err != nil {
		return false, fmt.Errorf("install: reading %s: %w", src, err)
	}
	if same(dst, want, perm) {
		return false, nil
	}
	if _, err := in.Seek(0, io.SeekStart); err != nil {
		return false, fmt.Errorf("install: %w", err)
	}
	got, err := replace(dst, in, perm)
	if err != nil {
		return false, err
	}
	if got != want {
		// src changed while it was copied: what was installed is whole,
		// but not what was checked. Say so rather than carry on.
		return true, fmt.Errorf("install: %s changed while being copied to %s", src, dst)
	}
	return true, nil
}

// WriteFile writes data to path atomically with mode perm. It returns false,
// touching nothing, when path already has this content and perm.
func WriteFile(path string, data []byte, perm fs.FileMode) (changed bool, err error) {
	if same(path, sha256.Sum256(data), perm) {
		return false, nil
	}
	if _, err := replace(path, bytes.NewReader(data), perm); err != nil {
		return false, err
	}
	return true, nil
}

// same reports whether path is a regular file with content hash want and
// permission bits perm.
func same(path string, want [sha256.Size]byte, perm fs.FileMode) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != perm {
		return false
	}
	got, err := hashReader(f)
	return err == nil && got == want
}

func hashReader(r io.Reader) ([sha256.Size]byte, error) {
	h := sha256.New()
	var sum [sha256.Size]byte
	if _, err := io.Copy(h, r); err != nil {
		return sum, err
	}
	copy(sum[:], h.Sum(nil))
	return sum, nil
}

// replace writes r atomically and durably to path (see package atomicfile)
// with mode perm, making path's directory first. On any error path is
// unchanged and the temporary file is gone. It returns the SHA-256 of what
// was written.
func replace(path string, r io.Reader, perm fs.FileMode) (sum [sha256.Size]byte, err error) {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	if err := os.MkdirAll(dir, dirMode); err != nil {
		return sum, fmt.Errorf("install: %w", err)
	}
	removeStale(dir, base)
	h := sha256.New()
	if err := atomicfile.Write(path, io.TeeReader(r, h), perm, tempPrefix); err != nil {
		return sum, fmt.Errorf("install: %w", err)
	}
	copy(sum[:], h.Sum(nil))
	return sum, nil
}

// removeStale deletes temporary files of base that an installer killed
// mid-write left in dir.
func removeStale(dir, base string) {
	matches, _ := filepath.Glob(filepath.Join(dir, tempPrefix+base+"-*"))
	for _, m := range matches {
		if fi, err := os.Lstat(m); err == nil && fi.Mode().IsRegular() && time.Since(fi.ModTime()) > staleAfter {
			_ = os.Remove(m)
		}
	}
}
