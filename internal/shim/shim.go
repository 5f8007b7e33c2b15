// Package shim implements the CNI commands of the `tenure` binary by
// forwarding them to the node agent.
package shim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"

	"github.com/tenure-ipam/tenure/internal/cniwire"
)

// DefaultFlatConfig is read when the IPAM config names no configuration_path,
// as whereabouts reads /etc/cni/net.d/whereabouts.d/whereabouts.conf.
var DefaultFlatConfig = "/etc/cni/net.d/tenure.d/tenure.conf"

// Timeout bounds one call. Runtimes give a sandbox a few minutes in total;
// an agent that holds a call longer than this is as good as absent.
var Timeout = 90 * time.Second

// CNI error codes the spec assigns to an unreachable agent.
const (
	codeTryAgainLater      = 11
	codePluginNotAvailable = 50
)

// Add forwards ADD.
func Add(args *skel.CmdArgs) error { return forward("ADD", args, true) }

// Del forwards DEL.
func Del(args *skel.CmdArgs) error { return forward("DEL", args, false) }

// Check forwards CHECK.
func Check(args *skel.CmdArgs) error { return forward("CHECK", args, false) }

// GC forwards GC.
func GC(args *skel.CmdArgs) error { return forward("GC", args, false) }

// Status forwards STATUS; an unreachable agent is "plugin not available".
func Status(args *skel.CmdArgs) error { return forward("STATUS", args, false) }

type ipamKeys struct {
	IPAM struct {
		AgentSocket       string `json:"agent_socket"`
		ConfigurationPath string `json:"configuration_path"`
	} `json:"ipam"`
}

// flatAgentSocket is the one key the shim itself reads from the flat file.
type flatAgentSocket struct {
	AgentSocket string `json:"agent_socket"`
}

func forward(cmd string, args *skel.CmdArgs, printResult bool) error {
	var keys ipamKeys
	if err := json.Unmarshal(args.StdinData, &keys); err != nil {
		return types.NewError(types.ErrDecodingFailure, "decoding network configuration", err.Error())
	}
	req := &cniwire.Request{
		Command: cmd, ContainerID: args.ContainerID, Netns: args.Netns, IfName: args.IfName,
		Args: args.Args, Path: args.Path, StdinData: args.StdinData,
	}
	flatPath := keys.IPAM.ConfigurationPath
	explicit := flatPath != ""
	if !explicit {
		flatPath = DefaultFlatConfig
	}
	data, err := os.ReadFile(flatPath)
	switch {
	case err == nil:
		req.FlatConfig, req.FlatConfigPath = data, flatPath
	case explicit || !errors.Is(err, os.ErrNotExist):
		return types.NewError(types.ErrInvalidNetworkConfig,
			fmt.Sprintf("ipam.configuration_path: %s: cannot read", flatPath), err.Error())
	}
	socket := keys.IPAM.AgentSocket
	if socket == "" && req.FlatConfig != nil {
		var f flatAgentSocket
		_ = json.Unmarshal(req.FlatConfig, &f) // the agent reports a bad file with the key that is wrong
		socket = f.AgentSocket
	}
	if socket == "" {
		socket = cniwire.DefaultSocket
	}
	if !filepath.IsAbs(socket) {
		return types.NewError(types.ErrInvalidNetworkConfig,
			fmt.Sprintf("ipam.agent_socket: %q: must be an absolute path", socket), "")
	}

	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	resp, err := cniwire.Client{Socket: socket}.Do(ctx, req)
	if err != nil {
		code := uint(codeTryAgainLater)
		if cmd == "STATUS" {
			code = codePluginNotAvailable
		}
		return types.NewError(code, "tenure node agent is not reachable", err.Error())
	}
	if resp.Error != nil {
		return resp.Error
	}
	if printResult && len(resp.Result) > 0 {
		if _, err := os.Stdout.Write(resp.Result); err != nil {
			return types.NewError(types.ErrIOFailure, "writing result", err.Error())
		}
	}
	return nil
}
