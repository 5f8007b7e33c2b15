package image

import "path/filepath"

// MultusThickBinaries are the programs MultusThick takes from the build
// directory (hack/build-node.sh), each with the name it has in Multus'
// thick image, under /usr/src/multus-cni/bin: install_multus copies
// multus-shim and passthru from there.
var MultusThickBinaries = map[string]string{
	"multus-daemon":  "multus-daemon",
	"multus-shim":    "multus-shim",
	"install_multus": "install_multus",
	"passthru-cni":   "passthru",
}

// MultusThick is an image with Multus' thick plugin at the paths of
// Multus' own thick image, and nothing else (the binaries are static).
// multus-daemon refuses to run unless os/user finds it is root: without
// cgo or /etc/passwd, that reads USER and HOME.
func MultusThick(binDir string) Spec {
	var layer Layer
	for built, name := range MultusThickBinaries {
		layer = append(layer, File{Path: "/usr/src/multus-cni/bin/" + name, Source: filepath.Join(binDir, built), Mode: 0o755})
	}
	return Spec{
		Layers:     []Layer{layer},
		Env:        []string{"USER=root", "HOME=/root"},
		Entrypoint: []string{"/usr/src/multus-cni/bin/multus-daemon"},
	}
}
