package agent

import (
	"encoding/json"
	"fmt"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/utils"
	"github.com/containernetworking/cni/pkg/version"

	"github.com/tenure-ipam/tenure/internal/cniwire"
)

// Versions is what tenure speaks; the shim prints the same for VERSION.
var Versions = version.PluginSupports("0.3.1", "0.4.0", "1.0.0", "1.1.0")

// validateCall checks what libcni's skel checks of a call's configuration
// before it runs the plugin, with skel's codes and messages: the shim checks
// the environment and leaves the configuration, which needs a JSON parser,
// to the agent.
func validateCall(req *cniwire.Request) *types.Error {
	minimum := ""
	switch req.Command {
	case "ADD", "DEL":
	case "CHECK":
		minimum = "0.4.0"
	case "GC", "STATUS":
		minimum = "1.1.0"
	default:
		return types.NewError(CodeInvalidEnvironmentVariables, fmt.Sprintf("unknown CNI_COMMAND: %v", req.Command), "")
	}
	h := readHead(req.StdinData)
	if h.bad != nil {
		return h.bad
	}
	if minimum != "" {
		ok, err := version.GreaterThanOrEqualTo(h.version, minimum)
		if err != nil {
			return types.NewError(CodeDecodingFailure, err.Error(), "")
		}
		if !ok {
			return types.NewError(CodeIncompatibleCNIVersion, "config version does not allow "+req.Command, "")
		}
	}
	return h.incompatible
}

// netconfHead is what validateCall finds of a configuration whatever the
// command: its name refused (bad), or its version and, when no version
// tenure speaks, the error that says so (incompatible). The checks of a
// command's minimum version come between the two, as in skel.
type netconfHead struct {
	bad          *types.Error
	version      string
	incompatible *types.Error
}

func readHead(stdin []byte) netconfHead {
	// One decode for both: create.DecodeVersion's rule, "" is 0.1.0.
	var conf struct {
		Name       string `json:"name"`
		CNIVersion string `json:"cniVersion"`
	}
	if err := json.Unmarshal(stdin, &conf); err != nil {
		return netconfHead{bad: types.NewError(CodeDecodingFailure, fmt.Sprintf("error unmarshall network config: %v", err), "")}
	}
	if conf.Name == "" {
		return netconfHead{bad: types.NewError(CodeInvalidNetworkConfig, "missing network name", "")}
	}
	if err := utils.ValidateNetworkName(conf.Name); err != nil {
		return netconfHead{bad: err}
	}
	h := netconfHead{version: conf.CNIVersion}
	if h.version == "" {
		h.version = "0.1.0"
	}
	if verErr := (&version.Reconciler{}).Check(h.version, Versions); verErr != nil {
		h.incompatible = types.NewError(CodeIncompatibleCNIVersion, "incompatible CNI versions", verErr.Details())
	}
	return h
}
