// Command tenure is the CNI IPAM plugin the container runtime executes. It is
// a shim: it forwards the call to the node agent over a unix socket and
// prints the agent's answer, so it holds no credentials and no state.
package main

import (
	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/version"

	"github.com/tenure-ipam/tenure/internal/shim"
)

func main() {
	skel.PluginMainFuncs(skel.CNIFuncs{
		Add:    shim.Add,
		Del:    shim.Del,
		Check:  shim.Check,
		GC:     shim.GC,
		Status: shim.Status,
	}, version.PluginSupports("0.3.1", "0.4.0", "1.0.0", "1.1.0"), "tenure: cluster-wide IPAM through the Kubernetes API")
}
