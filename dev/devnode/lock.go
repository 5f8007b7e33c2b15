package devnode

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"
)

// hostLock makes a node the only one on its host: nodes share the standard
// CNI directories, the kubelet's device-plugin socket and the host's
// sysctls. It holds the directory of the node that owns the host; Stop
// removes it. A node recorded in no state file (it crashed before
// recording, or was stopped) holds nothing.
const hostLock = "/run/tenure-devnode.lock"

// lockHost takes the host for dir, waiting (until ctx ends) while another
// node runs.
func lockHost(ctx context.Context, dir string) error {
	var holder string
	err := poll(ctx, 24*time.Hour, "the dev node in the host lock "+hostLock+" to stop", func() error {
		f, err := os.OpenFile(hostLock, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
		if err == nil {
			_, err = f.WriteString(dir)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			return err
		}
		if !errors.Is(err, fs.ErrExist) {
			return err
		}
		data, err := os.ReadFile(hostLock)
		if err != nil {
			return err // removed meanwhile: try again
		}
		holder = string(data)
		if holder == dir {
			return nil
		}
		if !recorded(holder) {
			// Stale: its node is stopped or was never recorded.
			_ = os.Remove(hostLock)
			return errors.New("removed a stale lock")
		}
		return fmt.Errorf("the node in %s runs on this host", holder)
	})
	if err != nil {
		return fmt.Errorf("%w (stop it: tenurectl dev down --dir %s)", err, holder)
	}
	return nil
}

// unlockHost gives the host back, if dir holds it.
func unlockHost(dir string) {
	if data, err := os.ReadFile(hostLock); err == nil && string(data) == dir {
		_ = os.Remove(hostLock)
	}
}

// recorded reports whether dir records a running node or cluster.
func recorded(dir string) bool {
	for _, f := range []string{stateFile, ClusterStateFile} {
		if _, err := os.Stat(filepath.Join(dir, f)); !errors.Is(err, fs.ErrNotExist) {
			return true
		}
	}
	return false
}
