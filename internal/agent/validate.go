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
		return types.NewError(types.ErrInvalidEnvironmentVariables, fmt.Sprintf("unknown CNI_COMMAND: %v", req.Command), "")
	}
	// One decode for both: create.DecodeVersion's rule, "" is 0.1.0.
	var conf struct {
		Name       string `json:"name"`
		CNIVersion string `json:"cniVersion"`
	}
	if err := json.Unmarshal(req.StdinData, &conf); err != nil {
		return types.NewError(types.ErrDecodingFailure, fmt.Sprintf("error unmarshall network config: %v", err), "")
	}
	if conf.Name == "" {
		return types.NewError(types.ErrInvalidNetworkConfig, "missing network name", "")
	}
	if err := utils.ValidateNetworkName(conf.Name); err != nil {
		return err
	}
	configVersion := conf.CNIVersion
	if configVersion == "" {
		configVersion = "0.1.0"
	}
	if minimum != "" {
		ok, err := version.GreaterThanOrEqualTo(configVersion, minimum)
		if err != nil {
			return types.NewError(types.ErrDecodingFailure, err.Error(), "")
		}
		if !ok {
			return types.NewError(types.ErrIncompatibleCNIVersion, "config version does not allow "+req.Command, "")
		}
	}
	if verErr := (&version.Reconciler{}).Check(configVersion, Versions); verErr != nil {
		return types.NewError(types.ErrIncompatibleCNIVersion, "incompatible CNI versions", verErr.Details())
	}
	return nil
}
