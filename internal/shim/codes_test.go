package shim

import (
	"testing"

	"github.com/tenure-ipam/tenure/internal/agent"
)

// TestShimCodesAreTheAgents: each code the shim answers with is the one
// internal/agent's errors.go names for that meaning.
func TestShimCodesAreTheAgents(t *testing.T) {
	for _, c := range []struct {
		name        string
		shim, agent uint
	}{
		{"invalid environment variables", codeInvalidEnvironmentVariables, agent.CodeInvalidEnvironmentVariables},
		{"I/O failure", codeIOFailure, agent.CodeIOFailure},
		{"decoding failure", codeDecodingFailure, agent.CodeDecodingFailure},
		{"invalid network config", codeInvalidNetworkConfig, agent.CodeInvalidNetworkConfig},
		{"invalid netns", codeInvalidNetNS, agent.CodeInvalidNetNS},
		{"try again later", codeTryAgainLater, agent.CodeTryAgainLater},
		{"plugin not available", codePluginNotAvailable, agent.CodePluginNotAvailable},
	} {
		if c.shim != c.agent {
			t.Errorf("%s: the shim answers %d, internal/agent names %d", c.name, c.shim, c.agent)
		}
	}
}
