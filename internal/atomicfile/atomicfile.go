// Package atomicfile replaces files so that a reader sees either the whole
// old content or the whole new content, and so that the new content
// survives a crash of the machine once the call has returned.
//
// The new content goes to a temporary file in the target's own directory
// (a rename is atomic only within one file system), which is given its final
// mode, synced and renamed over the target; then the directory is synced, so
// the rename itself is on disk too.
package atomicfile

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
)

// WriteFile writes data to path with mode perm, atomically and durably.
// Temporary files are named "." + base + ".tmp-*".
func WriteFile(path string, data []byte, perm os.FileMode) error {
	return Write(path, bytes.NewReader(data), perm, "")
}

// Write writes everything r yields to path with mode perm (exactly perm:
// the umask does not apply), atomically and durably. The temporary file is
// named tempPrefix + base + "-*" in path's directory, so a caller can
// recognise the leftovers of a process killed mid-write; "" means
// "." + base + ".tmp". On any error path is unchanged and the temporary file
// is gone. The directory must exist.
func Write(path string, r io.Reader, perm os.FileMode, tempPrefix string) (err error) {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	pattern := "." + base + ".tmp-*"
	if tempPrefix != "" {
		pattern = tempPrefix + base + "-*"
	}
	tmp, err := os.CreateTemp(dir, pattern)
	if err != nil {
		return err
	}
	renamed := false
	defer func() {
		if !renamed {
			_ = tmp.Close()
			_ = os.Remove(tmp.Name())
		}
	}()
	if _, err := io.Copy(tmp, r); err != nil {
		return fmt.Errorf("writing %s: %w", tmp.Name(), err)
	}
	// CreateTemp makes the file 0600; the mode is set before the file
	// becomes visible under its name.
	if err := tmp.Chmod(perm); err != nil {
		return err
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("syncing %s: %w", tmp.Name(), err)
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	renamed = true
	return syncDir(dir)
}

// syncDir makes the directory's entries durable. File systems that cannot
// sync a directory say EINVAL (or ENOTSUP); there is nothing more to do
// on those.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOTSUP) {
		return fmt.Errorf("syncing directory %s: %w", dir, err)
	}
	return nil
}
