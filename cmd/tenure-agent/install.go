package main

import (
	"flag"
	"io"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/tenure-ipam/tenure/internal/cniwire"
	cniinstall "github.com/tenure-ipam/tenure/internal/install"
)

// install is `tenure-agent install`, the agent DaemonSet's init container:
// it copies the CNI shim into the host's CNI binary directory and writes
// the flat configuration file, both atomically and idempotently.
func install(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("tenure-agent install", flag.ContinueOnError)
	fs.SetOutput(stderr)
	binDir := fs.String("cni-bin-dir", cniinstall.DefaultCNIBinDir, "directory the container runtime executes CNI plugins from (the host's /opt/cni/bin)")
	source := fs.String("source", "", "the tenure CNI shim binary to install (default: "+cniinstall.ShimName+" next to this executable)")
	confDir := fs.String("cni-conf-dir", cniinstall.DefaultCNIConfDir, "the host's CNI configuration directory; the flat config goes to "+cniwire.FlatConfigRel+" inside it")
	flat := fs.String("flat-config", "", "flat configuration: JSON, or the path of a file holding it (not written when empty)")
	if code, stop := parse(fs, args, "argument", stderr); stop {
		return code
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	src := *source
	if src == "" {
		exe, err := os.Executable()
		if err != nil {
			log.Error("finding this executable to locate the shim; pass --source", "err", err)
			return 1
		}
		src = filepath.Join(filepath.Dir(exe), cniinstall.ShimName)
	}
	flatConfig, err := cniinstall.ReadFlatConfigArg(*flat)
	if err != nil {
		log.Error("reading the flat config", "err", err)
		return 1
	}
	_, err = cniinstall.Install(cniinstall.Options{
		Source:     src,
		CNIBinDir:  *binDir,
		CNIConfDir: *confDir,
		FlatConfig: flatConfig,
		Log:        log,
	})
	if err != nil {
		log.Error("install failed", "err", err)
		return 1
	}
	return 0
}
